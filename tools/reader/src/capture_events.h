// The events of a capture and their ring buffers: the transport.
//
// Events, per CPU (per task and CPU with inheritance for -p and a command,
// whose buffers are shared per CPU through PERF_EVENT_IOC_SET_OUTPUT):
//   - the sampling events (cpu-clock unless others are asked for), all on
//     one buffer per CPU, woken per quarter buffer (watermark);
//   - a side-band dummy event carrying COMM/FORK/EXIT/MMAP*, woken per
//     record, so mappings are handled while they still exist, and KSYMBOL
//     and BPF_EVENT (BPF programs);
//   - for -p, -t and a command, a CPU-wide dummy event per CPU for KSYMBOL
//     and BPF_EVENT alone, into that CPU's side-band buffer: a per-task
//     event gets them only when the profiled task itself is running as a
//     program comes or goes, and programs mostly go from RCU callbacks, in
//     whatever task they interrupted (perf record opens such an event too).
//     Without the privilege for it, BPF programs are not followed.
// All use the same sample_type (with IDENTIFIER, which says which event a
// sample is of), so one SampleFormat parses every record.
//
// -C samples only on the CPUs given, but the side-band event is on every
// online CPU: a process sampled on CPU 0 may have mapped its files on CPU 1.
// -t samples only the threads given (not inherited by the threads they
// create, as perf's -t), but their processes' mappings come from a
// side-band event on every thread of those processes, as with -p: a
// library that another thread maps is still seen.  The events use CLOCK_MONOTONIC (where the kernel
// has use_clockid), so that records synthesized from /proc can be timed.
//
// Contract: Drain() only moves bytes: every record the buffers hold goes to
// the sink unchanged, in per-buffer order; the span is valid during the
// call only.  Descriptors and mappings are owned here (PerfEventFd); the
// descriptors handed out by buffer_fd() and task_fd() are borrowed.
#ifndef MMAP3_READER_CAPTURE_EVENTS_H_
#define MMAP3_READER_CAPTURE_EVENTS_H_

#include <linux/perf_event.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "capture_mode.h"
#include "perf_event_fd.h"
#include "record.h"
#include "record_controls.h"
#include "result.h"

namespace mmap3 {

class CaptureSink;

struct EventOptions {
  // Whose events: every task (system-wide), each thread of `pids` that
  // exists now and its children to come (-p), the threads `tids` alone
  // (-t; `pids` are their processes, whose mappings are followed), or the
  // child `pids[0]`, held before exec (enable_on_exec).
  enum class Scope { kSystemWide, kPids, kThreads, kCommand };
  Scope scope = Scope::kCommand;
  std::vector<pid_t> pids;
  std::vector<pid_t> tids;
  // kSystemWide: the CPUs sampled (-C); empty: every online CPU.  Each
  // must be online.
  std::vector<int> cpus;
  // The sampling events; empty: cpu-clock.
  std::vector<EventSpec> events;
  CaptureMode mode = CaptureMode::kMmap2;
  uint64_t frequency = 4000;
  uint64_t period = 0;  // -c: a fixed period instead of the frequency
  bool callchains = false;
  size_t data_pages = 256;  // per CPU buffer, power of two
};

class CaptureEvents {
 public:
  // Opens the events, disabled, with their buffers mapped.  Falls back
  // without read_format LOST (before 6.0), without use_clockid (before
  // 4.1), and to user-space-only sampling (perf_event_paranoid 2).  Never
  // to another event: an event the machine cannot count (no PMU for it, as
  // in most virtual machines) is an error that names it.
  static Result<CaptureEvents> Open(const EventOptions& options);

  // The sampling events, in the order asked for, and the side-band event
  // (task and mapping records).
  const std::vector<EventSpec>& events() const { return events_spec_; }
  const std::vector<perf_event_attr>& attrs() const { return attrs_; }
  const perf_event_attr& sideband_attr() const { return sideband_attr_; }
  SampleFormat format() const;
  // The ids of sampling event `event` (PERF_EVENT_IOC_ID), one per CPU and
  // task, or of the side-band event.
  std::vector<uint64_t> ids(size_t event) const;
  std::vector<uint64_t> sideband_ids() const;
  // -p, -t, a command: the CPU-wide events that carry KSYMBOL and BPF_EVENT
  // records (see OpenAll), their attr and ids (none: system-wide, or they
  // could not be opened).
  const perf_event_attr& bpf_sideband_attr() const { return bpf_sideband_attr_; }
  std::vector<uint64_t> bpf_sideband_ids() const;
  // Why BPF programs' coming and going is not followed ("" when it is).
  const std::string& bpf_untracked() const { return bpf_untracked_; }
  // True if the events carry CLOCK_MONOTONIC times.
  bool monotonic_clock() const;
  // True if the events count their lost records (read_format LOST).
  bool counts_lost() const { return read_lost_; }

  Status EnableAll();
  void DisableAll();

  // Hands every record the buffers hold to `sink` (OnRecord only; no round
  // ends here).  The number of records.
  size_t Drain(CaptureSink& sink);
  // True if a side-band buffer is so full that a record may have been lost
  // since it was last drained.
  bool SidebandNearlyFull();
  // Records lost by the kernel (read_format LOST) over all events, or the
  // side-band events only; 0 without counts_lost().
  uint64_t LostRecords(bool sideband_only) const;

  // The mapped buffers, for polling (descriptors borrowed).
  size_t buffer_count() const { return buffers_.size(); }
  int buffer_fd(size_t i) const { return events_[buffers_[i]].fd(); }
  // -p, -t: one event per target task (all of a task's events hang up
  // together when it and the children it inherited to are gone).
  size_t task_count() const { return task_events_.size(); }
  int task_fd(size_t i) const { return events_[task_events_[i]].fd(); }

  uint64_t records() const { return records_; }   // drained so far
  uint64_t bad_size() const;   // ring-buffer records with impossible sizes
  uint64_t straddled() const;  // records copied across the end of a buffer

 private:
  CaptureEvents() = default;
  Status OpenAll(const EventOptions& options);
  // The ids of the events of one kind (an index into attrs_, kSideband or
  // kBpfSideband).
  std::vector<uint64_t> IdsOf(int kind) const;

  std::vector<EventSpec> events_spec_;
  std::vector<perf_event_attr> attrs_;  // parallel to events_spec_
  perf_event_attr sideband_attr_{};
  perf_event_attr bpf_sideband_attr_{};
  std::string bpf_untracked_;
  bool read_lost_ = false;
  std::vector<PerfEventFd> events_;  // all events
  static constexpr int kSideband = -1;
  static constexpr int kBpfSideband = -2;
  // parallel to events_: index into attrs_, kSideband or kBpfSideband
  std::vector<int> event_of_;
  std::vector<size_t> buffers_;      // indexes into events_ of mapped ones
  std::vector<size_t> task_events_;  // indexes into events_
  uint64_t records_ = 0;
};

// The error for a sampling event perf_event_open refused: one line naming
// the event and why, when the reason is the machine's (ENOENT: no PMU
// counts it; EOPNOTSUPP: it cannot be sampled), else the system call's
// error with the event's name in its context.
Status EventOpenError(const EventSpec& event, const Status& open_error);

// Online CPUs from /sys/devices/system/cpu/online.
std::vector<int> OnlineCpus();
// "0-3,5": a sorted list as the kernel prints it.
std::string CpuListText(const std::vector<int>& cpus);
// Parses a CPU list like "0-3,5,7-8".
std::vector<int> ParseCpuList(std::string_view text);

}  // namespace mmap3

#endif  // MMAP3_READER_CAPTURE_EVENTS_H_
