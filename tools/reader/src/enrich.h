// The enrichment stage of a capture, between the rings and the consumer.
//
// It hands on every record the rings give it, and
//   - fills in build-ids the kernel did not give: an MMAP2 (or MMAP3)
//     record of a file without one gets the id read through the mapping
//     (map_files) or, for [vdso], from the image, while the mapping still
//     exists; the record handed on is rewritten to carry it (WithBuildId),
//     and the source is noted in the overrides;
//   - synthesizes what existed before the events were enabled: the kernel
//     image and its modules (as perf does, first), and the processes of -a
//     and -p read from /proc, timed by startup_stamps.h;
//   - feeds the build-id cache (CacheFeed) with every file that a record
//     hands on names with a build-id, and with the kernel's kallsyms and
//     modules' symbols;
//   - takes the JIT maps (/tmp/perf-PID.map, perf_map.h) of the processes
//     with mappings such a map may name: from the first such mapping on,
//     again when the file changed (PollPerfMaps, on the capture's tick),
//     when the process exits (its main thread's EXIT record) and at the end
//     for those still running (FinishPerfMaps).  The last read wins, so a
//     map deleted before the process exits is kept as it was last seen.
//     A pid that two processes with JIT code used during the capture has
//     no map: the capture holds one map per pid, which would name one
//     process's code with the other's names.
// Records are otherwise handed on unchanged and in the order they came.
//
// Contract: one thread.  The span passed to the next sink is valid during
// the call only.  /proc and the clocks are read through a LiveSystem.
#ifndef MMAP3_READER_ENRICH_H_
#define MMAP3_READER_ENRICH_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "address_space.h"
#include "bpf_progs.h"
#include "build_id_cache.h"
#include "cache_feed.h"
#include "capture_mode.h"
#include "capture_sink.h"
#include "kallsyms.h"
#include "live_system.h"
#include "mapped_build_ids.h"
#include "perf_map.h"
#include "record.h"
#include "report.h"
#include "startup_stamps.h"

namespace mmap3 {

struct EnrichOptions {
  CaptureMode mode = CaptureMode::kMmap2;
  SampleFormat format;
  // The events carry CLOCK_MONOTONIC times, which LiveSystem::MonotonicNs()
  // reads: synthesized records can be timed (see startup_stamps.h).
  bool monotonic_clock = false;
  // The side-band events' ids: a LOST record of one of them lost task and
  // mapping records, not just samples.
  std::vector<uint64_t> sideband_ids;
  BuildIdCache* cache = nullptr;  // optional
  // Where the JIT maps go; null: none are taken.
  PerfMaps* perf_maps = nullptr;
  // Where the descriptions of BPF programs go; null: none are read.
  BpfPrograms* bpf_programs = nullptr;
};

struct EnrichStats {
  uint64_t samples = 0;
  uint64_t mmaps = 0;            // handed on, from the kernel and synthesized
  uint64_t lost_records = 0;     // sum of PERF_RECORD_LOST
  uint64_t filled_build_ids = 0; // build-ids read by us via map_files or the vDSO
  uint64_t fill_failures = 0;    // unreadable (process gone, no permission)
  // MMAP2 records that said "build-id" to an event that did not ask for one
  // (see Enricher::OnRecord): read, and handed on, as the inode layout.
  uint64_t stray_build_id_bits = 0;
  // KSYMBOL and BPF_EVENT records longer than their contents (see
  // SampleIdOffset()): handed on without the bytes after their trailer.
  uint64_t oversized_sideband = 0;
  uint64_t synthesized = 0;
  uint64_t perf_map_reads = 0;   // JIT maps read (every version of each)
  uint64_t bpf_programs_read = 0;      // described while loaded
  uint64_t bpf_programs_not_read = 0;  // gone first, or not allowed
  uint64_t module_loads = 0;           // reported by the kernel (MMAP3 ABI 2)
  uint64_t module_symbols_read = 0;    // ... of which the symbols were read while loaded
  std::optional<StartupStats> startup;  // after SynthesizeProcesses()
  std::vector<KernelModuleMapping> changed_kernel_modules;  // CheckKernelModules()
};

// What the synthesis of existing processes needs of the transport: reading
// /proc takes long, and the buffers must keep being drained meanwhile.
class RingSource {
 public:
  virtual ~RingSource() = default;
  // Hands every record the rings hold to the enricher's OnRecord(), ending
  // no round; the number of records.
  virtual size_t Drain() = 0;
  // True if a side-band buffer is so full that a record may be lost.
  virtual bool SidebandNearlyFull() = 0;
  // Side-band records the kernel says it lost so far; nullopt if it cannot
  // say (read_format LOST, Linux 6.0+).
  virtual std::optional<uint64_t> SidebandLost() = 0;
};

class Enricher final : public CaptureSink {
 public:
  // `system` and `next` outlive the Enricher; build-ids filled in are noted
  // in `overrides`, which does too.
  Enricher(EnrichOptions options, LiveSystem& system, SourceOverrides& overrides,
           CaptureSink& next);

  // A record from the rings.
  void OnRecord(Bytes record) override;
  void OnRoundEnd() override { next_.OnRoundEnd(); }

  // The kernel image (PERF_RECORD_MMAP "[kernel.kallsyms]_text" of pid -1,
  // pgoff at _text) and one record per module with its build-id; the
  // kallsyms snapshot and the modules' symbols go to the cache.  Nothing if
  // /proc/kallsyms hides addresses.
  void SynthesizeKernel();
  // The BPF programs loaded now: a KSYMBOL record per JITed function and a
  // BPF_EVENT load record each, as perf synthesizes them, each program read
  // (ReadBpfProgram) into options.bpf_programs.
  void SynthesizeBpfPrograms();
  // COMM and MMAP records of processes `pids` as /proc shows them, each
  // timed from when what was read is known to hold (0 for most), or left
  // out if it changed while it was read; then a round end.  The events
  // must be enabled: `rings` is drained meanwhile, ending no round, so
  // nothing is released before the synthesized records.
  void SynthesizeProcesses(const std::vector<pid_t>& pids, RingSource& rings);
  // At the end: the modules SynthesizeKernel() recorded whose range holds
  // other code now go to stats().changed_kernel_modules.
  void CheckKernelModules();
  // JIT maps (see above): the capture's tick reads again those that
  // changed; the end of the capture reads those of the processes that did
  // not exit.
  void PollPerfMaps();
  void FinishPerfMaps();
  // Modules loaded during the capture whose symbols could not be read yet
  // (the load is reported before the module's init runs and before its
  // notes are in sysfs): the tick and the end of the capture try again.
  void PollModuleSymbols();

  const EnrichStats& stats() const { return stats_; }

 private:
  struct PerfMapWatch {
    std::optional<PerfMapOwner> owner;  // read when the watch began
    std::optional<PerfMapStamp> stamp;  // of the version last read
    bool exited = false;
    // The pid was used by a second process, or a second program after an
    // exec, during the capture: never read again (see WatchPerfMap).
    bool reused = false;
  };
  // A mapping a JIT map may name: watch its process's map.
  // `mapped_at`: the mapping record's time, if it has one.
  void WatchPerfMap(uint32_t pid, std::optional<uint64_t> mapped_at = std::nullopt);
  void TakePerfMap(uint32_t pid, PerfMapWatch& watch, PerfMapTaken when);
  // The pid's map is not read again and names nothing; `reason` says why.
  void GiveUpPerfMap(uint32_t pid, PerfMapWatch& watch, std::string reason);

  // A MMAP2 or MMAP3 record: handed on with the build-id filled in where
  // the kernel gave none, its file fed to the cache.
  void OnMmap(Bytes record);
  // A module's load or unload the kernel reported (MMAP3 ABI version 2).
  void OnKernelModule(const MmapRecord& m);
  // A loaded module's symbols are in kallsyms only while it is loaded:
  // they are read as soon as it is (see ReadModuleSymbols) and kept by its
  // build-id.  True once read, or once they never can be.
  struct PendingModule {
    std::string path;  // "[name]"
    uint64_t start = 0;
    BuildId build_id;
  };
  bool ReadModuleSymbols(const PendingModule& m);
  // A BPF_EVENT record: a program loaded is read at once, while it exists.
  void OnBpfEvent(Bytes record);
  // Reads program `id` (with `tag`, if given) into options.bpf_programs,
  // or notes why it could not; the program, or null.
  const BpfProgram* ReadBpfProgramNow(uint32_t id, const BpfTag* tag);

  EnrichOptions options_;
  LiveSystem& system_;
  SourceOverrides& overrides_;
  CaptureSink& next_;
  MappedBuildIds ids_;
  CacheFeed cache_;
  EnrichStats stats_;
  // A record as handed on after a repair: its stray build-id bit cleared,
  // or the bytes after its trailer cut off.
  std::vector<uint8_t> rewritten_;
  // While existing processes are synthesized: the changes the kernel
  // reported, to time what was read (null otherwise).
  std::unique_ptr<StartupStamps> stamps_;
  // The modules synthesized at the start, and those whose load the kernel
  // reported, with their build-ids (no symbols): CheckKernelModules()
  // compares them with the modules loaded at the end.
  std::vector<KernelModule> start_modules_;
  std::vector<PendingModule> pending_modules_;
  std::map<uint32_t, PerfMapWatch> perf_map_watch_;
};

// The record `m` rewritten to carry `id`, which the reader found itself: an
// MMAP2 inode record becomes the build-id variant (same size: the union
// changes meaning), an MMAP3 record gets the id with status FOUND.  Other
// formats are returned unchanged.
std::vector<uint8_t> WithBuildId(MmapRecord m, const BuildId& id, const SampleFormat& format);

}  // namespace mmap3

#endif  // MMAP3_READER_ENRICH_H_
