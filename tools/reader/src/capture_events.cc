#include "capture_events.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "capture_sink.h"
#include "linux/perf_event_mmap3.h"
#include "proc_maps.h"

namespace mmap3 {
namespace {

constexpr uint64_t kFormatLost = 1u << 4;  // PERF_FORMAT_LOST, Linux 6.0+
constexpr size_t kSidebandPages = 32;

size_t PageSize() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

}  // namespace

std::vector<int> ParseCpuList(std::string_view text) {
  std::vector<int> cpus;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view part = text.substr(0, comma);
    text.remove_prefix(comma == std::string_view::npos ? text.size() : comma + 1);
    while (!part.empty() && (part.back() == '\n' || part.back() == ' ')) part.remove_suffix(1);
    if (part.empty()) continue;
    size_t dash = part.find('-');
    int a = std::atoi(std::string(part.substr(0, dash)).c_str());
    int b = dash == std::string_view::npos ? a : std::atoi(std::string(part.substr(dash + 1)).c_str());
    for (int c = a; c <= b; ++c) cpus.push_back(c);
  }
  return cpus;
}

std::string CpuListText(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? std::to_string(cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<int> OnlineCpus() {
  auto text = ReadSmallFile("/sys/devices/system/cpu/online");
  if (text.ok()) {
    auto cpus = ParseCpuList(*text);
    if (!cpus.empty()) return cpus;
  }
  std::vector<int> cpus;
  for (long c = 0; c < sysconf(_SC_NPROCESSORS_ONLN); ++c) cpus.push_back(static_cast<int>(c));
  return cpus;
}

Result<CaptureEvents> CaptureEvents::Open(const EventOptions& options) {
  CaptureEvents events;
  if (Status s = events.OpenAll(options); !s.ok()) return s;
  return events;
}

SampleFormat CaptureEvents::format() const {
  return {sideband_attr_.sample_type, sideband_attr_.read_format, sideband_attr_.sample_id_all != 0};
}

std::vector<uint64_t> CaptureEvents::IdsOf(int kind) const {
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < events_.size(); ++i) {
    if (event_of_[i] != kind) continue;
    auto id = events_[i].Id();
    if (id.ok()) ids.push_back(*id);
  }
  return ids;
}

std::vector<uint64_t> CaptureEvents::ids(size_t event) const { return IdsOf(static_cast<int>(event)); }
std::vector<uint64_t> CaptureEvents::sideband_ids() const { return IdsOf(kSideband); }
std::vector<uint64_t> CaptureEvents::bpf_sideband_ids() const { return IdsOf(kBpfSideband); }

bool CaptureEvents::monotonic_clock() const {
  return sideband_attr_.use_clockid && sideband_attr_.clockid == CLOCK_MONOTONIC;
}

Status CaptureEvents::EnableAll() {
  for (PerfEventFd& e : events_) {
    if (Status s = e.Enable(); !s.ok()) return s;
  }
  return {};
}

void CaptureEvents::DisableAll() {
  for (PerfEventFd& e : events_) (void)e.Disable();
}

size_t CaptureEvents::Drain(CaptureSink& sink) {
  size_t n = 0;
  for (size_t index : buffers_) {
    n += events_[index].ring()->Drain([&](Bytes record) {
      ++records_;
      sink.OnRecord(record);
    });
  }
  return n;
}

bool CaptureEvents::SidebandNearlyFull() {
  bool full = false;
  for (size_t index : buffers_) {
    RingBuffer* ring = events_[index].ring();
    if (event_of_[index] < 0 && ring->Available() + kMaxRecordSize >= ring->data_size())
      full = true;
  }
  return full;
}

uint64_t CaptureEvents::LostRecords(bool sideband_only) const {
  uint64_t lost = 0;
  if (!read_lost_) return 0;
  for (size_t i = 0; i < events_.size(); ++i) {
    if (sideband_only && event_of_[i] >= 0) continue;
    if (auto n = events_[i].LostSamples(); n.ok()) lost += *n;
  }
  return lost;
}

uint64_t CaptureEvents::bad_size() const {
  uint64_t n = 0;
  for (size_t index : buffers_) n += events_[index].ring()->stats().bad_size;
  return n;
}

uint64_t CaptureEvents::straddled() const {
  uint64_t n = 0;
  for (size_t index : buffers_) n += events_[index].ring()->stats().straddled;
  return n;
}

// Nothing the user can change but the event: said so, in one line.
Status EventOpenError(const EventSpec& event, const Status& open_error) {
  const int e = open_error.error_number();
  if (e == ENOENT || e == EOPNOTSUPP) {
    const bool hardware = event.type == PERF_TYPE_HARDWARE;
    return Status::Failure(fmt::format(
        "event '{}' {} on this machine: perf_event_open says {} ({}): {}; software events "
        "(cpu-clock, task-clock, page-faults, ...) work everywhere",
        event.name, e == ENOENT ? "cannot be counted" : "cannot be sampled",
        e == ENOENT ? "ENOENT" : "EOPNOTSUPP", std::strerror(e),
        e == ENOENT ? (hardware ? "no performance monitoring unit here counts it (most virtual "
                                  "machines, QEMU TCG among them, have none)"
                                : "the kernel has no such event")
                    : "the PMU counts it but cannot interrupt on its overflow, which sampling "
                      "needs (as in some virtual machines)"));
  }
  if (open_error.context().rfind("perf_event_open", 0) == 0) {
    return Status::FromErrno(
        e, fmt::format("perf_event_open of event '{}'{}", event.name,
                       open_error.context().substr(std::strlen("perf_event_open"))));
  }
  return open_error;
}

Status CaptureEvents::OpenAll(const EventOptions& options) {
  events_spec_ = options.events.empty() ? std::vector<EventSpec>{DefaultEvent()} : options.events;
  const std::vector<int> online = OnlineCpus();
  std::vector<int> sample_cpus = online;
  if (options.scope == EventOptions::Scope::kSystemWide && !options.cpus.empty()) {
    for (int cpu : options.cpus) {
      if (std::find(online.begin(), online.end(), cpu) == online.end())
        return Status::Failure(fmt::format("-C: CPU {} is not online here (online: {})", cpu,
                                           CpuListText(online)));
    }
    sample_cpus = options.cpus;
  }

  perf_event_attr a{};
  a.size = sizeof(a);
  a.type = events_spec_[0].type;
  a.config = events_spec_[0].config;
  if (options.period != 0) {
    a.freq = 0;
    a.sample_period = options.period;
  } else {
    a.freq = 1;
    a.sample_freq = options.frequency;
  }
  // IDENTIFIER: several events share the file (and a buffer), and perf
  // finds a record's event by the id at a fixed place.
  // PERIOD only with -F, where the kernel varies it: with a fixed period
  // a software event that records PERF_SAMPLE_PERIOD is sampled on every
  // occurrence with period 1 (perf_swevent_event()), not every -c
  // occurrences; perf record -c leaves it out too, and the period is the
  // attr's.
  a.sample_type = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                  PERF_SAMPLE_CPU | (options.period == 0 ? PERF_SAMPLE_PERIOD : 0) |
                  (options.callchains ? PERF_SAMPLE_CALLCHAIN : 0);
  a.read_format = PERF_FORMAT_ID | kFormatLost;
  // CLOCK_MONOTONIC instead of the default perf clock (local_clock, which
  // userspace cannot read): records synthesized from /proc are stamped
  // with clock_gettime() at the moment /proc was read (see
  // startup_stamps.h).  NMI-safe (ktime_get_mono_fast_ns), as a sampling
  // event's clock must be; Linux 4.1+.  Every event gets it: one buffer
  // never mixes clocks (PERF_EVENT_IOC_SET_OUTPUT refuses that).
  a.use_clockid = 1;
  a.clockid = CLOCK_MONOTONIC;
  a.disabled = 1;
  a.sample_id_all = 1;
  a.exclude_guest = 1;
  // Batch wakeups: one per quarter buffer instead of one per sample; the
  // periodic tick drains quiet buffers anyway.
  a.watermark = 1;
  a.wakeup_watermark = static_cast<uint32_t>(options.data_pages * PageSize() / 4);
  const bool per_task = options.scope != EventOptions::Scope::kSystemWide;
  if (per_task) a.inherit = 1;
  if (options.scope == EventOptions::Scope::kCommand) a.enable_on_exec = 1;

  // The side-band event carries the task and mapping records on its own
  // buffer with a wakeup per record: a mapping must be seen while it still
  // exists, so /proc/PID/map_files can be read, even for a process that
  // lives a few milliseconds.  Samples never wait on it.
  perf_event_attr& sb = sideband_attr_;
  sb = a;
  sb.type = PERF_TYPE_SOFTWARE;
  sb.config = PERF_COUNT_SW_DUMMY;
  sb.freq = 0;
  sb.sample_period = 0;
  // wakeup_events counts only samples; a byte watermark of 1 is what wakes
  // us for every side-band record (a zero watermark means half the buffer).
  sb.watermark = 1;
  sb.wakeup_watermark = 1;
  sb.mmap = 1;
  sb.comm = 1;
  sb.comm_exec = 1;
  sb.task = 1;
  // BPF programs: their JITed functions as they come and go (KSYMBOL) and
  // their loads and unloads (BPF_EVENT, whose id lets the program be read
  // while it exists).  Both since Linux 5.1.  System-wide, on this event;
  // otherwise on CPU-wide events of their own (see the header), and not
  // here, where they would come twice.
  sb.ksymbol = sb.bpf_event = options.scope == EventOptions::Scope::kSystemWide;
  switch (options.mode) {
    case CaptureMode::kMmap3: perf_mmap3_attr_set(&sb); break;  // supersedes mmap/mmap2
    case CaptureMode::kMmap2BuildId: sb.mmap2 = 1; sb.build_id = 1; break;
    case CaptureMode::kMmap2: sb.mmap2 = 1; break;
  }
  // -t: the threads given, not the ones they start (perf's -t implies
  // --no-inherit).
  if (options.scope == EventOptions::Scope::kThreads) a.inherit = 0;
  attrs_.clear();
  for (const EventSpec& e : events_spec_) {
    attrs_.push_back(a);
    attrs_.back().type = e.type;
    attrs_.back().config = e.config;
  }
  // What the first open learns about the kernel applies to every event.
  auto for_all = [&](auto&& change) {
    for (perf_event_attr& attr : attrs_) change(attr);
    change(sb);
  };

  // Whose events, and which: the sampling events on `sample` tasks, the
  // side-band event on `sideband` ones.
  struct Task {
    pid_t pid;
    bool sample, sideband;
  };
  std::vector<Task> tasks;
  auto threads_of = [](pid_t pid) {
    auto threads = ListThreads(pid);
    if (threads.empty()) threads.push_back(pid);
    return threads;
  };
  switch (options.scope) {
    case EventOptions::Scope::kSystemWide: tasks.push_back({-1, true, true}); break;
    case EventOptions::Scope::kCommand: tasks.push_back({options.pids.at(0), true, true}); break;
    case EventOptions::Scope::kPids:
      // inherit covers children created from now on; existing threads each
      // need their own events.
      for (pid_t pid : options.pids)
        for (pid_t tid : threads_of(pid)) tasks.push_back({tid, true, true});
      break;
    case EventOptions::Scope::kThreads:
      for (pid_t tid : options.tids) tasks.push_back({tid, true, false});
      for (pid_t pid : options.pids)
        for (pid_t tid : threads_of(pid)) tasks.push_back({tid, false, true});
      break;
  }
  const bool may_vanish = options.scope == EventOptions::Scope::kPids ||
                          options.scope == EventOptions::Scope::kThreads;

  // (cpu, sideband?) -> index of the event that owns that CPU's buffer
  std::map<std::pair<int, bool>, size_t> owner;
  bool first = true;
  for (const Task& task : tasks) {
    bool task_gone = false;
    const size_t task_first = events_.size();
    for (int cpu : online) {
      const bool sampled_cpu =
          std::find(sample_cpus.begin(), sample_cpus.end(), cpu) != sample_cpus.end();
      // The sampling events, then the side-band one.
      for (int event = 0; event <= static_cast<int>(attrs_.size()); ++event) {
        const bool sideband = event == static_cast<int>(attrs_.size());
        if (sideband ? !task.sideband : !(task.sample && sampled_cpu)) continue;
        perf_event_attr& attr = sideband ? sb : attrs_[event];
        auto fd = PerfEventFd::Open(attr, task.pid, cpu);
        if (!fd.ok() && first) {
          int e = fd.status().error_number();
          if (e == EINVAL && (attr.read_format & kFormatLost)) {
            for_all([](perf_event_attr& x) { x.read_format &= ~kFormatLost; });  // before 6.0
            fd = PerfEventFd::Open(attr, task.pid, cpu);
            e = fd.ok() ? 0 : fd.status().error_number();
          }
          if (e == EINVAL && attr.use_clockid) {
            for_all([](perf_event_attr& x) { x.use_clockid = 0; x.clockid = 0; });  // before 4.1
            fd = PerfEventFd::Open(attr, task.pid, cpu);
            e = fd.ok() ? 0 : fd.status().error_number();
          }
          if (e == EACCES || e == EPERM) {
            // perf_event_paranoid 2 still allows user-space-only profiling.
            for_all([](perf_event_attr& x) { x.exclude_kernel = 1; x.exclude_hv = 1; });
            fd = PerfEventFd::Open(attr, task.pid, cpu);
          }
        }
        if (!fd.ok() && sideband && sb.ksymbol && fd.status().error_number() == EINVAL) {
          sb.ksymbol = sb.bpf_event = 0;  // before 5.1: no BPF program records
          fd = PerfEventFd::Open(attr, task.pid, cpu);
        }
        if (!fd.ok()) {
          // A thread of -p or -t may exit between listing and opening.
          if (may_vanish && fd.status().error_number() == ESRCH) {
            task_gone = true;
            break;
          }
          return sideband ? fd.status() : EventOpenError(events_spec_[event], fd.status());
        }
        first = false;
        auto it = owner.find({cpu, sideband});
        if (it == owner.end()) {
          size_t pages = sideband ? kSidebandPages : options.data_pages;
          if (Status s = fd->Map(pages); !s.ok()) return s;
          owner[{cpu, sideband}] = events_.size();
          buffers_.push_back(events_.size());
        } else if (Status s = fd->SetOutput(events_[it->second]); !s.ok()) {
          // One buffer per CPU and kind: every other event shares it.
          return s;
        }
        event_of_.push_back(sideband ? kSideband : event);
        events_.push_back(std::move(*fd));
      }
      if (task_gone) break;
    }
    // The tasks whose end ends the capture: -p's, and -t's sampled threads
    // (not the rest of their processes).
    const bool watched = options.scope == EventOptions::Scope::kThreads ? task.sample : true;
    if (events_.size() > task_first && watched) task_events_.push_back(task_first);
  }
  if (task_events_.empty() && may_vanish) return Status::FromErrno(ESRCH, "no task left to profile");
  if (events_.empty()) return Status::FromErrno(ESRCH, "no task left to profile");
  read_lost_ = (sb.read_format & kFormatLost) != 0;

  // BPF programs for -p, -t and a command (see the top of the header):
  // enabled from now on, whatever the task events wait for.
  if (options.scope == EventOptions::Scope::kSystemWide && !sb.ksymbol) {
    bpf_untracked_ = "the kernel has no KSYMBOL records (before Linux 5.1)";
  } else if (options.scope != EventOptions::Scope::kSystemWide) {
    perf_event_attr& b = bpf_sideband_attr_;
    b = sb;
    b.mmap = b.mmap2 = b.mmap_data = b.build_id = b.comm = b.comm_exec = b.task = 0;
    perf_mmap3_attr_clear(&b);
    b.ksymbol = b.bpf_event = 1;
    b.inherit = 0;
    b.enable_on_exec = 0;
    b.disabled = 0;
    std::vector<PerfEventFd> opened;
    for (int cpu : online) {
      auto fd = PerfEventFd::Open(b, -1, cpu);
      if (!fd.ok()) {
        const int e = fd.status().error_number();
        bpf_untracked_ =
            e == EACCES || e == EPERM
                ? "a per-task capture follows them only with a CPU-wide side-band event, which "
                  "needs CAP_PERFMON (or CAP_SYS_ADMIN, or kernel.perf_event_paranoid <= 0)"
            : e == EINVAL ? "the kernel has no KSYMBOL records (before Linux 5.1)"
                          : "a CPU-wide side-band event could not be opened: " + fd.status().ToString();
        opened.clear();
        break;
      }
      auto it = owner.find({cpu, true});
      Status s = it != owner.end() ? fd->SetOutput(events_[it->second]) : fd->Map(kSidebandPages);
      if (!s.ok()) return s;
      if (it == owner.end()) owner[{cpu, true}] = events_.size() + opened.size();
      opened.push_back(std::move(*fd));
    }
    for (PerfEventFd& fd : opened) {
      if (fd.ring() != nullptr) buffers_.push_back(events_.size());
      event_of_.push_back(kBpfSideband);
      events_.push_back(std::move(fd));
    }
  }
  return {};
}

}  // namespace mmap3
