// What a live capture hands on: records, the ends of rounds, and its
// counters.
//
// A capture is a pipeline: the rings (CaptureEvents, bytes only) -> the
// enrichment stage (Enricher: build-ids the kernel did not give, records
// of what existed before the capture) -> the consumer's sink (ordering,
// attribution, output).  Each stage is a CaptureSink to the one before.
#ifndef MMAP3_READER_CAPTURE_SINK_H_
#define MMAP3_READER_CAPTURE_SINK_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "record.h"
#include "report.h"

namespace mmap3 {

struct CaptureStats {
  uint64_t records = 0;
  uint64_t samples = 0;
  uint64_t mmaps = 0;
  uint64_t lost_records = 0;     // sum of PERF_RECORD_LOST
  uint64_t event_lost = 0;       // read_format LOST, summed over events at the end
  uint64_t bad_size = 0;         // ring-buffer records with impossible sizes
  uint64_t straddled = 0;
  uint64_t wakeups = 0;
  uint64_t filled_build_ids = 0; // build-ids read by us via map_files
  uint64_t fill_failures = 0;    // map_files unreadable (process gone, no permission)
  // MMAP2 records with PERF_RECORD_MISC_MMAP_BUILD_ID set over the inode
  // layout, from an event that asked for no build-ids (EnrichStats).
  uint64_t stray_build_id_bits = 0;
  // KSYMBOL and BPF_EVENT records longer than their contents, cut to them
  // (EnrichStats).
  uint64_t oversized_sideband = 0;
  uint64_t synthesized = 0;
  uint64_t control_unknown = 0;  // --control lines that were no command we know
  uint64_t module_loads = 0;         // reported by the kernel (MMAP3 ABI version 2)
  uint64_t module_symbols_read = 0;  // ... whose symbols were read while loaded
  std::optional<StartupStats> startup;  // -a and -p only
  // Modules recorded at the start whose range held other code by the end
  // (see ModulesOverlaid): their samples cannot be attributed.
  std::vector<KernelModuleMapping> changed_kernel_modules;
  double elapsed_seconds = 0;
};

// Contract: called from one thread; a span passed to OnRecord() is valid
// during the call only.  Records come in per-buffer order, not in time
// order; OnRoundEnd() says that every record written by the kernel before
// the round began has been handed on (perf's FINISHED_ROUND).
class CaptureSink {
 public:
  virtual ~CaptureSink() = default;
  virtual void OnRecord(Bytes record) = 0;
  virtual void OnRoundEnd() = 0;
  // Called about four times a second.
  virtual void OnTick(const CaptureStats& stats) { (void)stats; }
  // True once the sink can take no more (its output cannot be written): the
  // capture then ends as on a stop signal, at the end of the pass over the
  // buffers in which it became true, and a command it started is stopped.
  virtual bool Failed() const { return false; }
};

}  // namespace mmap3

#endif  // MMAP3_READER_CAPTURE_SINK_H_
