// The record and report commands, minus the command line: main.cc parses
// flags into these options, runs them, and prints what they return.
#ifndef MMAP3_READER_COMMANDS_H_
#define MMAP3_READER_COMMANDS_H_

#include <chrono>
#include <functional>
#include <string>

#include "build_id_cache.h"
#include "capture.h"
#include "report.h"
#include "result.h"

namespace mmap3 {

struct RecordOptions {
  CaptureOptions capture;
  std::string output;          // perf.data to write; "" to report directly
  std::string cache_dir;       // build-id cache; "" disables it
  BuildIdCache::Limits cache_limits;
  bool callchains = false;     // keep stacks in the direct report
  std::function<void(const CaptureStats&)> on_status;  // live status, may be empty
  // The cache's warnings, when they happen (on a copy worker); may be empty.
  std::function<void(const std::string&)> on_cache_warning;
  // The first error writing `output`, when it happens (on the capture's
  // thread); RunRecord() still returns it when the capture ends, and the
  // output keeps what it had.  May be empty.
  std::function<void(const Status&)> on_output_error;
};

struct RecordResult {
  CaptureMode mode = CaptureMode::kMmap2;
  std::string mode_reason;
  CaptureStats stats;
  BuildIdCache::Stats cache;
  uint64_t bytes_written = 0;
  uint64_t records_written = 0;  // stats.records are those drained from the rings
  int command_status = -1;
  bool command_ended_capture = false;  // see Capture::command_ended_capture()
  // The JIT maps taken (perf_map.h), and the files refused.
  std::vector<PerfMapSummary> perf_maps;
  std::vector<PerfMapRefusal> perf_maps_refused;
  // BPF programs described while loaded, and those that could not be.
  size_t bpf_programs_read = 0, bpf_programs_not_read = 0;
  ReportModel report;  // filled when no output file was requested
  // Samples the capture attributed while it ran: all of them for a direct
  // report, none with an output file (they are only written).
  uint64_t samples_attributed = 0;
};

Result<RecordResult> RunRecord(const RecordOptions& options);

struct ReportOptions {
  std::string input = "perf.data";
  std::string cache_dir;  // where to look for cached copies ("" to skip)
  bool callchains = false;
  // Every sample's frames with addresses and mappings, call chains included
  // when the capture has them (ReportModel::frame_stacks: --format pprof).
  bool sample_frames = false;
  // The running kernel's build-id notes: kernel samples of a capture with
  // that id, made in this boot, may be symbolized from /proc/kallsyms (see
  // dso_store.h; "" never, nor from the running kernel's modules: a report
  // that must not depend on this host, as the fuzzers').
  std::string kernel_notes = "/sys/kernel/notes";
  // DEBUGINFOD_URLS: servers asked for build-ids no local file has (see
  // debuginfod.h); blank: none.  Their files are kept in cache_dir.
  std::string debuginfod_urls;
  std::chrono::milliseconds debuginfod_budget{std::chrono::seconds(30)};
  // One-line warnings while the report is made (a server that does not
  // answer); may be empty.
  std::function<void(const std::string&)> on_warning;
  // --sort, filters, --children, --percent-limit (report_controls.h).
  ReportControls controls;
  // Keep every sample for `script` (ReportModel::script).
  bool script = false;
};

Result<ReportModel> RunReport(const ReportOptions& options);

// What the samples of these events' periods count (the attrs of a capture;
// the sideband's dummy event is not one of them).
SampledEvent SampledEventOf(const std::vector<perf_event_attr>& attrs);

// inject: a copy of a capture that perf can read.  PERF_RECORD_MMAP3 (which
// perf does not know) becomes PERF_RECORD_MMAP2: the build-id variant when
// the kernel or the reader had a build-id, the inode variant otherwise.
// Every other record, the sample_id trailers, the build-id table and our
// metadata are copied unchanged; the mmap3 attr bit becomes mmap2+build_id.
struct InjectOptions {
  std::string input = "perf.data";
  std::string output;
};

struct InjectResult {
  uint64_t records = 0;          // records written
  uint64_t converted = 0;        // MMAP3 records rewritten as MMAP2
  uint64_t with_build_id = 0;    // ... of which carry a build-id
  uint64_t dropped = 0;          // undecodable MMAP3 records (perf could not read them either)
  uint64_t unloads = 0;          // module unloads, written as KSYMBOL unregister records
  uint64_t framing_errors = 0;   // 1 if the data section ends in an impossible size
};

Result<InjectResult> RunInject(const InjectOptions& options);

}  // namespace mmap3

#endif  // MMAP3_READER_COMMANDS_H_
