#include "capture.h"

#include <liburing.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include <fmt/format.h>

#include "enrich.h"
#include "proc_maps.h"

namespace mmap3 {
namespace {

constexpr uint64_t kTagSignal = ~uint64_t{0};
constexpr uint64_t kTagTick = ~uint64_t{0} - 1;
constexpr uint64_t kTagDuration = ~uint64_t{0} - 2;
constexpr uint64_t kTagControl = ~uint64_t{0} - 3;
constexpr uint64_t kTagControlPoll = ~uint64_t{0} - 4;
constexpr uint64_t kTagHup = uint64_t{1} << 62;  // | index of a task event: task gone
constexpr long kTickNanos = 250'000'000;

// The transport as the synthesis of existing processes sees it: the
// capture's rings, drained into the enricher.
class EventRings final : public RingSource {
 public:
  EventRings(CaptureEvents& events, CaptureSink& to) : events_(events), to_(to) {}
  size_t Drain() override { return events_.Drain(to_); }
  bool SidebandNearlyFull() override { return events_.SidebandNearlyFull(); }
  std::optional<uint64_t> SidebandLost() override {
    if (!events_.counts_lost()) return std::nullopt;
    return events_.LostRecords(/*sideband_only=*/true);
  }

 private:
  CaptureEvents& events_;
  CaptureSink& to_;
};

// An io_uring instance, torn down with its owner.
class Uring {
 public:
  Uring() = default;
  Uring(const Uring&) = delete;
  Uring& operator=(const Uring&) = delete;
  ~Uring() {
    if (live_) io_uring_queue_exit(&ring_);
  }
  // CLAMP: a ring larger than the kernel allows is made the largest it does.
  Status Init(unsigned entries) {
    const int rc = io_uring_queue_init(entries, &ring_, IORING_SETUP_CLAMP);
    if (rc < 0) return Status::FromErrno(-rc, "io_uring_queue_init");
    live_ = true;
    return {};
  }
  io_uring* get() { return &ring_; }

 private:
  io_uring ring_{};
  bool live_ = false;
};

// The signal mask as it was, restored with the owner's end.
class SignalMaskGuard {
 public:
  explicit SignalMaskGuard(const sigset_t& old) : old_(old) {}
  SignalMaskGuard(const SignalMaskGuard&) = delete;
  SignalMaskGuard& operator=(const SignalMaskGuard&) = delete;
  ~SignalMaskGuard() { sigprocmask(SIG_SETMASK, &old_, nullptr); }

 private:
  sigset_t old_;
};

}  // namespace

Result<std::unique_ptr<Capture>> Capture::Create(const CaptureOptions& options) {
  std::unique_ptr<Capture> c(new Capture(options));
  if (Status s = c->Setup(); !s.ok()) return s;
  return c;
}

Capture::~Capture() = default;

Status Capture::Setup() {
  if ((options_.data_pages & (options_.data_pages - 1)) != 0 || options_.data_pages == 0)
    return Status::Failure("buffer size must be a power of two pages");
  if (options_.target == CaptureOptions::Target::kPids ||
      options_.target == CaptureOptions::Target::kThreads) {
    // As perf's -p: a thread id stands for its whole process.  Samples and
    // task records carry the process id, so that is what the synthesized
    // records and the process model must use.  -t samples its threads
    // alone, but their processes' mappings are read and followed.
    const bool threads = options_.target == CaptureOptions::Target::kThreads;
    std::vector<pid_t> tgids;
    for (pid_t pid : threads ? options_.tids : options_.pids) {
      if (!ProcessExists(pid))
        return Status::FromErrno(ESRCH, fmt::format("{} {}", threads ? "thread" : "process", pid));
      const pid_t tgid = ReadTgid(pid).value_or(pid);
      if (std::find(tgids.begin(), tgids.end(), tgid) == tgids.end()) tgids.push_back(tgid);
    }
    options_.pids = std::move(tgids);
  }
  auto mode = DetectCaptureMode(options_.max_mode, options_.require_mmap3, options_.mmap3_cap_path);
  if (!mode.ok()) return mode.status();
  mode_ = std::move(*mode);
  auto control = ControlChannel::Open(options_.control);
  if (!control.ok()) return control.status();
  control_ = std::move(*control);
  // A command runs with kCommand, and also with -a, where it only sets how
  // long the system-wide capture lasts (as `perf record -a -- sleep 5`).
  if (!options_.command.empty()) {
    if (Status s = child_.Start(options_.command); !s.ok()) return s;
  }
  EventOptions eo;
  switch (options_.target) {
    case CaptureOptions::Target::kSystemWide:
      eo.scope = EventOptions::Scope::kSystemWide;
      eo.cpus = options_.cpus;
      break;
    case CaptureOptions::Target::kPids:
      eo.scope = EventOptions::Scope::kPids;
      eo.pids = options_.pids;
      break;
    case CaptureOptions::Target::kThreads:
      eo.scope = EventOptions::Scope::kThreads;
      eo.pids = options_.pids;
      eo.tids = options_.tids;
      break;
    case CaptureOptions::Target::kCommand:
      eo.scope = EventOptions::Scope::kCommand;
      eo.pids = {child_.pid()};
      break;
  }
  eo.mode = mode_.mode;
  eo.frequency = options_.frequency;
  eo.period = options_.period;
  eo.events = options_.events;
  eo.callchains = options_.callchains;
  eo.data_pages = options_.data_pages;
  auto events = CaptureEvents::Open(eo);
  if (!events.ok()) return events.status();
  events_.emplace(std::move(*events));
  return {};
}

void Capture::CollectStats(const Enricher& enricher) {
  const EnrichStats& e = enricher.stats();
  stats_.records = events_->records();
  stats_.bad_size = events_->bad_size();
  stats_.straddled = events_->straddled();
  stats_.samples = e.samples;
  stats_.mmaps = e.mmaps;
  stats_.lost_records = e.lost_records;
  stats_.filled_build_ids = e.filled_build_ids;
  stats_.fill_failures = e.fill_failures;
  stats_.stray_build_id_bits = e.stray_build_id_bits;
  stats_.oversized_sideband = e.oversized_sideband;
  stats_.synthesized = e.synthesized;
  stats_.startup = e.startup;
  stats_.changed_kernel_modules = e.changed_kernel_modules;
  stats_.module_loads = e.module_loads;
  stats_.module_symbols_read = e.module_symbols_read;
  stats_.control_unknown = control_.unknown();
}

Status Capture::Run(CaptureSink& sink) {
  // Signals arrive through a signalfd read on the ring, so Ctrl-C becomes an
  // ordinary completion and the loop can drain before returning.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGCHLD);
  sigset_t old_mask;
  if (sigprocmask(SIG_BLOCK, &mask, &old_mask) != 0) return ErrnoStatus("sigprocmask");
  SignalMaskGuard restore_mask(old_mask);
  UniqueFd sfd(signalfd(-1, &mask, SFD_CLOEXEC));
  if (!sfd.valid()) return ErrnoStatus("signalfd");

  CaptureEvents& events = *events_;
  const size_t buffers = events.buffer_count();
  // -p and -t end when every target has exited (as perf record's): an event
  // reports POLLHUP once its task and the children it inherited to are gone;
  // one event per task is watched.
  const bool watch_hup = options_.target == CaptureOptions::Target::kPids ||
                         options_.target == CaptureOptions::Target::kThreads;
  const size_t entries = buffers * 2 + 8 + (watch_hup ? events.task_count() : 0);
  // Torn down before the signalfd it reads is closed.  get_sqe() below
  // submits when the queue is full.
  Uring uring;
  if (Status s = uring.Init(static_cast<unsigned>(entries)); !s.ok()) return s;
  io_uring* ring = uring.get();

  auto get_sqe = [&] {
    io_uring_sqe* sqe = io_uring_get_sqe(ring);
    while (sqe == nullptr) {  // queue full: hand what is there to the kernel
      io_uring_submit(ring);
      sqe = io_uring_get_sqe(ring);
    }
    return sqe;
  };
  auto arm_poll = [&](size_t i) {
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_poll_add(sqe, events.buffer_fd(i), POLLIN);
    io_uring_sqe_set_data64(sqe, i);
  };
  signalfd_siginfo& siginfo = *siginfo_;
  auto arm_signal = [&] {
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_read(sqe, sfd.get(), &siginfo, sizeof(siginfo), 0);
    io_uring_sqe_set_data64(sqe, kTagSignal);
  };
  __kernel_timespec tick{0, kTickNanos};
  auto arm_tick = [&] {
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_timeout(sqe, &tick, 0, 0);
    io_uring_sqe_set_data64(sqe, kTagTick);
  };
  __kernel_timespec duration{};
  if (options_.duration_seconds > 0) {
    duration.tv_sec = static_cast<int64_t>(options_.duration_seconds);
    duration.tv_nsec = static_cast<int64_t>((options_.duration_seconds - duration.tv_sec) * 1e9);
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_timeout(sqe, &duration, 0, 0);
    io_uring_sqe_set_data64(sqe, kTagDuration);
  }
  for (size_t i = 0; i < buffers; ++i) arm_poll(i);
  std::vector<bool> hung_up(watch_hup ? events.task_count() : 0, false);
  size_t hangups = 0;
  for (size_t w = 0; w < hung_up.size(); ++w) {
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_poll_add(sqe, events.task_fd(w), POLLHUP);
    io_uring_sqe_set_data64(sqe, kTagHup | w);
  }
  arm_signal();
  arm_tick();
  std::array<char, 256>& control_buf = *control_buf_;
  auto arm_control = [&](bool poll_first) {
    io_uring_sqe* sqe = get_sqe();
    if (poll_first) {
      io_uring_prep_poll_add(sqe, control_.fd(), POLLIN);
      io_uring_sqe_set_data64(sqe, kTagControlPoll);
    } else {
      io_uring_prep_read(sqe, control_.fd(), control_buf.data(),
                         static_cast<unsigned>(control_buf.size()), -1);
      io_uring_sqe_set_data64(sqe, kTagControl);
    }
  };

  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };

  // The stages: rings -> enricher -> sink.
  EnrichOptions enrich_options;
  enrich_options.mode = mode_.mode;
  enrich_options.format = events.format();
  enrich_options.monotonic_clock = events.monotonic_clock();
  enrich_options.cache = options_.cache;
  enrich_options.perf_maps = &perf_maps_;
  enrich_options.bpf_programs = &bpf_programs_;
  if (options_.target != CaptureOptions::Target::kCommand)
    enrich_options.sideband_ids = events.sideband_ids();
  Enricher enricher(std::move(enrich_options), system_, overrides_, sink);
  // Hands every record the buffers hold on; with end_round, ends the round
  // (which lets the sink release what is ordered).
  auto drain_all = [&](bool end_round) {
    const size_t n = events.Drain(enricher);
    if (end_round) enricher.OnRoundEnd();
    return n;
  };

  // The kernel text does not move: read it (all of /proc/kallsyms, tens of
  // milliseconds) before the buffers start filling.
  enricher.SynthesizeKernel();
  // Enable before synthesizing processes: a mapping created in between is
  // then reported by the kernel too, rather than by neither.  Synthesized
  // records carry the time from which what was read holds (0 for most:
  // before anything the kernel wrote), see Enricher::SynthesizeProcesses().
  if (options_.target != CaptureOptions::Target::kCommand) {
    if (Status s = events.EnableAll(); !s.ok()) return s;
    EventRings rings(events, enricher);
    // The BPF programs loaded now, once the kernel reports their coming
    // and going: one unloaded after it was listed has its unload in the
    // capture; one loaded meanwhile is in both, read once.
    if (events.bpf_untracked().empty()) enricher.SynthesizeBpfPrograms();
    enricher.SynthesizeProcesses(options_.target == CaptureOptions::Target::kSystemWide
                                     ? ListProcesses()
                                     : options_.pids,
                                 rings);
  } else {
    // The command's events wait for its exec; the CPU-wide BPF side-band
    // events do not (see capture_events.h).
    if (events.bpf_untracked().empty()) enricher.SynthesizeBpfPrograms();
    enricher.OnRoundEnd();  // a command starts from exec: the kernel reports everything
  }
  // A sink that failed already (the records of the start could not be
  // written) ends the capture before the command runs.
  if (!options_.command.empty() && !sink.Failed()) {
    if (Status s = child_.Release(); !s.ok()) return s;
  }

  // Commands are taken from now on, so an acknowledged ping means that
  // everything above is done.
  if (control_.fd() >= 0) arm_control(false);

  bool stop = sink.Failed();
  Status status;
  while (!stop) {
    const int rc = io_uring_submit_and_wait(ring, 1);
    if (rc < 0 && rc != -EINTR) {
      status = Status::FromErrno(-rc, "io_uring_submit_and_wait");
      break;
    }
    io_uring_cqe* cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(ring, head, cqe) {
      ++seen;
      const uint64_t tag = io_uring_cqe_get_data64(cqe);
      if (tag == kTagSignal) {
        if (cqe->res == static_cast<int>(sizeof(siginfo))) {
          if (siginfo.ssi_signo == SIGCHLD) {
            child_.Reap(false);
            if (child_.exited()) stop = command_ended_capture_ = true;
          } else {
            stop = true;
          }
        }
        if (!stop) arm_signal();
      } else if (tag == kTagTick) {
        enricher.PollPerfMaps();
        enricher.PollModuleSymbols();
        stats_.elapsed_seconds = elapsed();
        CollectStats(enricher);
        sink.OnTick(stats_);
        arm_tick();
      } else if (tag == kTagDuration) {
        stop = true;
      } else if (tag == kTagControl) {
        // An inherited descriptor may be non-blocking (EAGAIN: wait for
        // input, then read); an end of file or an error ends commands.
        if (cqe->res > 0) {
          // Take what the kernel wrote before the command was sent first:
          // a ping's ack then also says that it has been read (and the
          // build-ids of mappings it names filled in, and the symbols of
          // the modules it loaded read, if they are loaded now).
          drain_all(/*end_round=*/true);
          enricher.PollModuleSymbols();
          if (control_.OnInput({control_buf.data(), static_cast<size_t>(cqe->res)})) stop = true;
          arm_control(false);
        } else if (cqe->res == -EAGAIN || cqe->res == -EINTR) {
          arm_control(cqe->res == -EAGAIN);
        }
      } else if (tag == kTagControlPoll) {
        if (cqe->res > 0) arm_control(false);
      } else if (tag & kTagHup) {
        const size_t w = tag & ~kTagHup;
        if (cqe->res > 0 && (cqe->res & (POLLHUP | POLLERR)) && w < hung_up.size() &&
            !hung_up[w]) {
          hung_up[w] = true;
          if (++hangups == hung_up.size()) stop = true;  // drained below, then after
        }
      } else if (tag < buffers) {
        ++stats_.wakeups;
        // POLLHUP: every task of a per-task event has exited; polling again
        // would complete immediately forever.  The buffer is still drained
        // on every pass until the end.
        if (cqe->res <= 0 || !(cqe->res & POLLHUP)) arm_poll(tag);
      }
    }
    io_uring_cq_advance(ring, seen);
    drain_all(/*end_round=*/true);
    if (sink.Failed()) stop = true;
  }

  // Stop producing, then take everything the kernel still holds.
  events.DisableAll();
  while (drain_all(/*end_round=*/true) != 0) {
  }
  enricher.PollModuleSymbols();
  enricher.CheckKernelModules();
  enricher.FinishPerfMaps();
  stats_.event_lost += events.LostRecords(/*sideband_only=*/false);  // side-band events lose records too
  stats_.elapsed_seconds = elapsed();
  CollectStats(enricher);
  // Stopped by a signal or the duration while the command runs: end it the
  // way a terminal would, and for good if it ignores that.
  child_.Stop();
  return status;
}

}  // namespace mmap3
