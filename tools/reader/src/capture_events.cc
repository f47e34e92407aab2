#include "capture_events.h"

#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <utility>

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
  return {attr_.sample_type, attr_.read_format, attr_.sample_id_all != 0};
}

std::vector<uint64_t> CaptureEvents::ids(bool sideband) const {
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < events_.size(); ++i) {
    if (is_sideband_[i] != sideband) continue;
    auto id = events_[i].Id();
    if (id.ok()) ids.push_back(*id);
  }
  return ids;
}

bool CaptureEvents::monotonic_clock() const {
  return attr_.use_clockid && attr_.clockid == CLOCK_MONOTONIC;
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
    if (is_sideband_[index] && ring->Available() + kMaxRecordSize >= ring->data_size())
      full = true;
  }
  return full;
}

uint64_t CaptureEvents::LostRecords(bool sideband_only) const {
  uint64_t lost = 0;
  if (!read_lost_) return 0;
  for (size_t i = 0; i < events_.size(); ++i) {
    if (sideband_only && !is_sideband_[i]) continue;
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

Status CaptureEvents::OpenAll(const EventOptions& options) {
  perf_event_attr& a = attr_;
  a = {};
  a.size = sizeof(a);
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_CPU_CLOCK;
  a.freq = 1;
  a.sample_freq = options.frequency;
  // IDENTIFIER: two events share the file, and perf finds a record's event
  // by the id at a fixed place.
  a.sample_type = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                  PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD |
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
  switch (options.mode) {
    case CaptureMode::kMmap3: perf_mmap3_attr_set(&sb); break;  // supersedes mmap/mmap2
    case CaptureMode::kMmap2BuildId: sb.mmap2 = 1; sb.build_id = 1; break;
    case CaptureMode::kMmap2: sb.mmap2 = 1; break;
  }

  std::vector<pid_t> tasks;
  if (options.scope == EventOptions::Scope::kSystemWide) {
    tasks.push_back(-1);
  } else if (options.scope == EventOptions::Scope::kCommand) {
    tasks.push_back(options.pids.at(0));
  } else {
    // inherit covers children created from now on; existing threads each
    // need their own events.
    for (pid_t pid : options.pids) {
      auto threads = ListThreads(pid);
      if (threads.empty()) threads.push_back(pid);
      tasks.insert(tasks.end(), threads.begin(), threads.end());
    }
  }

  const std::vector<int> cpus = OnlineCpus();
  // (cpu, sideband?) -> index of the event that owns that CPU's buffer
  std::map<std::pair<int, bool>, size_t> owner;
  bool first = true;
  for (pid_t task : tasks) {
    bool task_gone = false;
    const size_t task_first = events_.size();
    for (int cpu : cpus) {
      for (bool sideband : {false, true}) {
        perf_event_attr& attr = sideband ? sb : a;
        auto fd = PerfEventFd::Open(attr, task, cpu);
        if (!fd.ok() && first) {
          int e = fd.status().error_number();
          if (e == EINVAL && (attr.read_format & kFormatLost)) {
            a.read_format &= ~kFormatLost;  // kernel older than 6.0
            sb.read_format = a.read_format;
            fd = PerfEventFd::Open(attr, task, cpu);
            e = fd.ok() ? 0 : fd.status().error_number();
          }
          if (e == EINVAL && attr.use_clockid) {
            a.use_clockid = sb.use_clockid = 0;  // kernel older than 4.1
            a.clockid = sb.clockid = 0;
            fd = PerfEventFd::Open(attr, task, cpu);
            e = fd.ok() ? 0 : fd.status().error_number();
          }
          if (e == EACCES || e == EPERM) {
            // perf_event_paranoid 2 still allows user-space-only profiling.
            a.exclude_kernel = sb.exclude_kernel = 1;
            a.exclude_hv = sb.exclude_hv = 1;
            fd = PerfEventFd::Open(attr, task, cpu);
          }
        }
        if (!fd.ok()) {
          // A thread of -p may exit between listing and opening.
          if (options.scope == EventOptions::Scope::kPids &&
              fd.status().error_number() == ESRCH) {
            task_gone = true;
            break;
          }
          return fd.status();
        }
        first = false;
        auto it = owner.find({cpu, sideband});
        if (it == owner.end()) {
          size_t pages = sideband ? kSidebandPages : options.data_pages;
          if (Status s = fd->Map(pages); !s.ok()) return s;
          owner[{cpu, sideband}] = events_.size();
          buffers_.push_back(events_.size());
        } else if (Status s = fd->SetOutput(events_[it->second]); !s.ok()) {
          // One buffer per CPU and kind: per-thread events share it.
          return s;
        }
        is_sideband_.push_back(sideband);
        events_.push_back(std::move(*fd));
      }
      if (task_gone) break;
    }
    if (events_.size() > task_first) task_events_.push_back(task_first);
  }
  if (events_.empty()) return Status::FromErrno(ESRCH, "no task left to profile");
  read_lost_ = (a.read_format & kFormatLost) != 0;
  return {};
}

}  // namespace mmap3
