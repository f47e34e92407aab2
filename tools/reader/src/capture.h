// Live capture: opens the events, drains the ring buffers with io_uring, and
// hands every record (in per-buffer order, one "round" per pass over all
// buffers) to a sink.
//
// Events, per CPU (per task and CPU with inheritance for -p and a command,
// whose buffers are shared per CPU through PERF_EVENT_IOC_SET_OUTPUT):
//   - a cpu-clock sampling event, woken per quarter buffer (watermark);
//   - a side-band dummy event carrying COMM/FORK/EXIT/MMAP*, woken per
//     record, so mappings are handled while they still exist.
// Both use the same sample_type (with IDENTIFIER), so one SampleFormat
// parses every record.
//
// The mode (capture_mode.h) is detected at Create() and never guessed.
// Where the kernel gave no build-id, the capture reads it from
// /proc/PID/map_files/<range> while the mapping exists and rewrites the MMAP2
// (or MMAP3) record to carry it, noting the source in overrides().  Processes
// that exist when capture starts (-a, -p) get synthesized COMM and MMAP2
// records built the same way, timed by startup_stamps.h; the events use
// CLOCK_MONOTONIC for that.
//
// Contract: Run() returns after a stop signal (SIGINT/SIGTERM), the end of
// the duration, or the exit of the command, and only once every buffer has
// been drained after the events were disabled.  The sink is called from the
// thread that runs Run(); spans passed to it are valid during the call only.
#ifndef MMAP3_READER_CAPTURE_H_
#define MMAP3_READER_CAPTURE_H_

#include <linux/perf_event.h>
#include <sys/signalfd.h>
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "address_space.h"
#include "build_id_cache.h"
#include "capture_mode.h"
#include "child_process.h"
#include "control.h"
#include "inode_build_ids.h"
#include "kallsyms.h"
#include "perf_event_fd.h"
#include "record.h"
#include "report.h"
#include "result.h"
#include "startup_stamps.h"

namespace mmap3 {

struct CaptureOptions {
  enum class Target { kSystemWide, kPids, kCommand };
  Target target = Target::kCommand;
  std::vector<pid_t> pids;
  // kCommand: the command to profile.  kSystemWide: optional; the capture
  // lasts until it exits.
  std::vector<std::string> command;
  uint64_t frequency = 4000;
  bool callchains = false;
  double duration_seconds = 0;  // 0: until stopped or the command exits
  size_t data_pages = 256;      // per CPU buffer, power of two
  // Upper bound for the mode (tests and comparisons): kMmap2 forbids the
  // build-id bit, kMmap2BuildId forbids MMAP3.  Detection still applies.
  CaptureMode max_mode = CaptureMode::kMmap3;
  bool require_mmap3 = false;  // fail instead of falling back (--mode mmap3)
  std::string mmap3_cap_path;  // "" means PERF_MMAP3_CAP_PATH
  BuildIdCache* cache = nullptr;  // optional
  // perf record's --control: "fifo:CTL[,ACK]" or "fd:CTL[,ACK]" ("" for
  // none).  See control.h.
  std::string control;
};

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
  uint64_t synthesized = 0;
  uint64_t control_unknown = 0;  // --control lines that were no command we know
  std::optional<StartupStats> startup;  // -a and -p only
  // Modules recorded at the start whose range held other code by the end
  // (see ModulesOverlaid): their samples cannot be attributed.
  std::vector<KernelModuleMapping> changed_kernel_modules;
  double elapsed_seconds = 0;
};

class CaptureSink {
 public:
  virtual ~CaptureSink() = default;
  virtual void OnRecord(Bytes record) = 0;
  virtual void OnRoundEnd() = 0;
  // Called about four times a second.
  virtual void OnTick(const CaptureStats& stats) { (void)stats; }
};

class Capture {
 public:
  static Result<std::unique_ptr<Capture>> Create(const CaptureOptions& options);
  ~Capture();

  Status Run(CaptureSink& sink);

  CaptureMode mode() const { return mode_; }
  // The sampling event and the side-band event (task and mapping records).
  // Both use the same sample_type, so format() parses records of either.
  const perf_event_attr& attr() const { return attr_; }
  const perf_event_attr& sideband_attr() const { return sideband_attr_; }
  SampleFormat format() const;
  std::vector<uint64_t> event_ids(bool sideband) const;
  const SourceOverrides& overrides() const { return overrides_; }
  const CaptureStats& stats() const { return stats_; }
  // Exit status of the command (as from waitpid), or -1.
  int command_status() const { return child_.status(); }
  // True if the command's exit ended the capture (not -d, a signal to us,
  // or an error first).
  bool command_ended_capture() const { return command_ended_capture_; }
  // Why MMAP3 was not used (empty if it was).
  const std::string& mode_reason() const { return mode_reason_; }

 private:
  explicit Capture(CaptureOptions options) : options_(std::move(options)) {}
  Status Setup();
  Status OpenEvents();
  void SynthesizeKernel(CaptureSink& sink);
  // At the end: lists in stats_ the modules synthesized at the start whose
  // range holds other code now.
  void CheckKernelModules();
  void SynthesizeExisting(CaptureSink& sink);
  // Hands every record the buffers hold to the sink; with end_round, ends
  // the round (which lets the sink release what is ordered).
  size_t DrainAll(CaptureSink& sink, bool end_round = true);
  void HandleRecord(Bytes record, CaptureSink& sink);
  // Build-id of the file mapped at [start, end) in pid via map_files.
  BuildId MappedBuildId(uint32_t pid, uint64_t start, uint64_t end, std::string* error);
  // Build-id of the [vdso] image at [start, end) in pid; empty, with *error
  // set, if the image cannot be read or (unlike a file) has no note.
  BuildId VdsoBuildId(uint32_t pid, uint64_t start, uint64_t end, std::string* error);
  void CacheFile(uint32_t pid, uint64_t start, uint64_t end, const BuildId& id,
                 std::string_view path,
                 BuildIdCache::Priority priority = BuildIdCache::Priority::kLive);

  CaptureOptions options_;
  CaptureMode mode_ = CaptureMode::kMmap2;
  std::string mode_reason_;
  perf_event_attr attr_{};
  perf_event_attr sideband_attr_{};
  bool read_lost_ = false;
  std::vector<PerfEventFd> events_;     // all events
  std::vector<bool> is_sideband_;       // parallel to events_
  std::vector<size_t> buffers_;         // indexes into events_ of mapped ones
  // -p: one event per target task (all of a task's events hang up together
  // when it and the children it inherited to are gone).
  std::vector<size_t> task_events_;
  ControlChannel control_;  // --control
  ChildProcess child_;      // the command, if any
  bool command_ended_capture_ = false;
  SourceOverrides overrides_;
  CaptureStats stats_;
  // So that a library mapped by many processes is parsed once per version.
  InodeBuildIds id_by_inode_;
  // While existing processes are synthesized: the changes the kernel
  // reported, to time what was read (null otherwise).
  std::unique_ptr<StartupStamps> stamps_;
  std::vector<uint64_t> sideband_ids_;
  // The modules synthesized at the start, with their build-ids (no symbols).
  std::vector<KernelModule> start_modules_;
  // Target of the signalfd read kept in flight on the ring; it lives as long
  // as the Capture so a read completing during ring teardown stays harmless.
  std::unique_ptr<signalfd_siginfo> siginfo_ = std::make_unique<signalfd_siginfo>();
  // Target of the control read in flight, for the same reason.
  std::unique_ptr<std::array<char, 256>> control_buf_ = std::make_unique<std::array<char, 256>>();
};

// The record `m` rewritten to carry `id`, which the reader found itself: an
// MMAP2 inode record becomes the build-id variant (same size: the union
// changes meaning), an MMAP3 record gets the id with status FOUND.  Other
// formats are returned unchanged.
std::vector<uint8_t> WithBuildId(MmapRecord m, const BuildId& id, const SampleFormat& format);

// Online CPUs from /sys/devices/system/cpu/online.
std::vector<int> OnlineCpus();
// Parses a CPU list like "0-3,5,7-8".
std::vector<int> ParseCpuList(std::string_view text);

}  // namespace mmap3

#endif  // MMAP3_READER_CAPTURE_H_
