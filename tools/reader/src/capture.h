// Live capture: opens the events, drains the ring buffers with io_uring, and
// hands every record, through the enrichment stage, to a sink (in per-buffer
// order, one "round" per pass over all buffers).
//
//   CaptureEvents (capture_events.h)  the events and their rings: bytes only
//   Enricher (enrich.h)               build-ids the kernel did not give,
//                                     records of what existed at the start,
//                                     the build-id cache
//   CaptureSink (capture_sink.h)      the caller's: ordering, attribution,
//                                     output
// The mode (capture_mode.h) is detected at Create() and never guessed; the
// command (child_process.h) is started before the events are opened and
// released into exec once everything is ready; --control (control.h) is
// read from then on.
//
// Contract: Run() returns after a stop signal (SIGINT/SIGTERM), the end of
// the duration, the exit of the command, or a sink that has Failed(), and
// only once every buffer has been drained after the events were disabled
// (into a failed sink, which drops what it cannot take).  The sink is called from the
// thread that runs Run(); spans passed to it are valid during the call only.
#ifndef MMAP3_READER_CAPTURE_H_
#define MMAP3_READER_CAPTURE_H_

#include <linux/perf_event.h>
#include <sys/signalfd.h>
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "address_space.h"
#include "build_id_cache.h"
#include "capture_events.h"
#include "capture_mode.h"
#include "capture_sink.h"
#include "child_process.h"
#include "control.h"
#include "live_system.h"
#include "bpf_progs.h"
#include "perf_map.h"
#include "record.h"
#include "result.h"

namespace mmap3 {

class Enricher;

struct CaptureOptions {
  // -a (or -C), -p, -t, or a command.
  enum class Target { kSystemWide, kPids, kThreads, kCommand };
  Target target = Target::kCommand;
  std::vector<pid_t> pids;
  std::vector<pid_t> tids;  // kThreads: the threads sampled
  std::vector<int> cpus;    // kSystemWide: the CPUs sampled (-C); empty: all
  std::vector<EventSpec> events;  // empty: cpu-clock
  // kCommand: the command to profile.  kSystemWide: optional; the capture
  // lasts until it exits.
  std::vector<std::string> command;
  uint64_t frequency = 4000;
  uint64_t period = 0;  // -c: a sample every `period` events instead of -F
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

class Capture {
 public:
  static Result<std::unique_ptr<Capture>> Create(const CaptureOptions& options);
  ~Capture();

  Status Run(CaptureSink& sink);

  CaptureMode mode() const { return mode_.mode; }
  // The sampling events and the side-band event (task and mapping
  // records).  All use the same sample_type, so format() parses records of
  // any; a sample's id says which event it is of (event_ids()).
  const std::vector<EventSpec>& events() const { return events_->events(); }
  const std::vector<perf_event_attr>& attrs() const { return events_->attrs(); }
  const perf_event_attr& sideband_attr() const { return events_->sideband_attr(); }
  SampleFormat format() const { return events_->format(); }
  std::vector<uint64_t> event_ids(size_t event) const { return events_->ids(event); }
  std::vector<uint64_t> sideband_ids() const { return events_->sideband_ids(); }
  const perf_event_attr& bpf_sideband_attr() const { return events_->bpf_sideband_attr(); }
  std::vector<uint64_t> bpf_sideband_ids() const { return events_->bpf_sideband_ids(); }
  // Why BPF programs are not followed in this capture ("" when they are).
  const std::string& bpf_untracked() const { return events_->bpf_untracked(); }
  // Where the capture found build-ids itself (map_files, the vDSO).  Filled
  // during Run(); the object lives as long as the Capture.
  const SourceOverrides& overrides() const { return overrides_; }
  // The JIT maps taken (see enrich.h), complete once Run() has returned.
  const PerfMaps& perf_maps() const { return perf_maps_; }
  // The BPF programs seen, read while they were loaded (bpf_progs.h).
  const BpfPrograms& bpf_programs() const { return bpf_programs_; }
  const CaptureStats& stats() const { return stats_; }
  // Exit status of the command (as from waitpid), or -1.
  int command_status() const { return child_.status(); }
  // True if the command's exit ended the capture (not -d, a signal to us,
  // or an error first).
  bool command_ended_capture() const { return command_ended_capture_; }
  // Why MMAP3 was not used (empty if it was).
  const std::string& mode_reason() const { return mode_.reason; }

 private:
  explicit Capture(CaptureOptions options) : options_(std::move(options)) {}
  Status Setup();
  // The counters of the stages, gathered into stats_.
  void CollectStats(const Enricher& enricher);

  CaptureOptions options_;
  ModeDecision mode_;
  ControlChannel control_;
  ChildProcess child_;
  std::optional<CaptureEvents> events_;
  ProcLiveSystem system_;
  bool command_ended_capture_ = false;
  SourceOverrides overrides_;
  PerfMaps perf_maps_;
  BpfPrograms bpf_programs_;
  CaptureStats stats_;
  // Target of the signalfd read kept in flight on the ring; it lives as long
  // as the Capture so a read completing during ring teardown stays harmless.
  std::unique_ptr<signalfd_siginfo> siginfo_ = std::make_unique<signalfd_siginfo>();
  // Target of the control read in flight, for the same reason.
  std::unique_ptr<std::array<char, 256>> control_buf_ = std::make_unique<std::array<char, 256>>();
};

}  // namespace mmap3

#endif  // MMAP3_READER_CAPTURE_H_
