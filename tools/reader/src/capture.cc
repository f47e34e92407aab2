#include "capture.h"

#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "elf_file.h"
#include "dso_store.h"
#include "files.h"
#include "kallsyms.h"
#include "linux/perf_event_mmap3.h"
#include "proc_maps.h"
#include "process_table.h"
#include "record_writer.h"
#include "startup_stamps.h"

namespace mmap3 {
namespace {

constexpr uint64_t kFormatLost = 1u << 4;  // PERF_FORMAT_LOST, Linux 6.0+
constexpr uint64_t kTagSignal = ~uint64_t{0};
constexpr uint64_t kTagTick = ~uint64_t{0} - 1;
constexpr uint64_t kTagDuration = ~uint64_t{0} - 2;
constexpr uint64_t kTagControl = ~uint64_t{0} - 3;
constexpr uint64_t kTagControlPoll = ~uint64_t{0} - 4;
constexpr uint64_t kTagHup = uint64_t{1} << 62;  // | index into task_events_: task gone
constexpr long kTickNanos = 250'000'000;
constexpr size_t kSidebandPages = 32;

size_t PageSize() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

bool IsSpecialPath(std::string_view path) {
  return path.empty() || path[0] == '[' || path.starts_with("//anon") ||
         path.starts_with("/dev/zero") || path.starts_with("/memfd:") ||
         path.starts_with("anon_inode:");
}

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

Result<std::unique_ptr<Capture>> Capture::Create(const CaptureOptions& options) {
  std::unique_ptr<Capture> c(new Capture(options));
  if (Status s = c->Setup(); !s.ok()) return s;
  return c;
}

Capture::~Capture() = default;

SampleFormat Capture::format() const {
  return {attr_.sample_type, attr_.read_format, attr_.sample_id_all != 0};
}

std::vector<uint64_t> Capture::event_ids(bool sideband) const {
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < events_.size(); ++i) {
    if (is_sideband_[i] != sideband) continue;
    auto id = events_[i].Id();
    if (id.ok()) ids.push_back(*id);
  }
  return ids;
}

Status Capture::Setup() {
  if ((options_.data_pages & (options_.data_pages - 1)) != 0 || options_.data_pages == 0)
    return Status::Failure("buffer size must be a power of two pages");
  if (options_.target == CaptureOptions::Target::kPids) {
    // As perf's -p: a thread id stands for its whole process.  Samples and
    // task records carry the process id, so that is what the synthesized
    // records and the process model must use.
    std::vector<pid_t> tgids;
    for (pid_t pid : options_.pids) {
      if (!ProcessExists(pid)) return Status::FromErrno(ESRCH, fmt::format("process {}", pid));
      const pid_t tgid = ReadTgid(pid).value_or(pid);
      if (std::find(tgids.begin(), tgids.end(), tgid) == tgids.end()) tgids.push_back(tgid);
    }
    options_.pids = std::move(tgids);
  }
  auto mode = DetectCaptureMode(options_.max_mode, options_.require_mmap3, options_.mmap3_cap_path);
  if (!mode.ok()) return mode.status();
  mode_ = mode->mode;
  mode_reason_ = std::move(mode->reason);
  auto control = ControlChannel::Open(options_.control);
  if (!control.ok()) return control.status();
  control_ = std::move(*control);
  // A command runs with kCommand, and also with -a, where it only sets how
  // long the system-wide capture lasts (as `perf record -a -- sleep 5`).
  if (!options_.command.empty()) {
    if (Status s = child_.Start(options_.command); !s.ok()) return s;
  }
  return OpenEvents();
}

Status Capture::OpenEvents() {
  perf_event_attr& a = attr_;
  a = {};
  a.size = sizeof(a);
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_CPU_CLOCK;
  a.freq = 1;
  a.sample_freq = options_.frequency;
  // IDENTIFIER: two events share the file, and perf finds a record's event
  // by the id at a fixed place.
  a.sample_type = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                  PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD |
                  (options_.callchains ? PERF_SAMPLE_CALLCHAIN : 0);
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
  a.wakeup_watermark = static_cast<uint32_t>(options_.data_pages * PageSize() / 4);
  const bool per_task = options_.target != CaptureOptions::Target::kSystemWide;
  if (per_task) a.inherit = 1;
  if (options_.target == CaptureOptions::Target::kCommand) a.enable_on_exec = 1;

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
  switch (mode_) {
    case CaptureMode::kMmap3: perf_mmap3_attr_set(&sb); break;  // supersedes mmap/mmap2
    case CaptureMode::kMmap2BuildId: sb.mmap2 = 1; sb.build_id = 1; break;
    case CaptureMode::kMmap2: sb.mmap2 = 1; break;
  }

  std::vector<pid_t> tasks;
  if (options_.target == CaptureOptions::Target::kSystemWide) {
    tasks.push_back(-1);
  } else if (options_.target == CaptureOptions::Target::kCommand) {
    tasks.push_back(child_.pid());
  } else {
    // inherit covers children created from now on; existing threads each
    // need their own events.
    for (pid_t pid : options_.pids) {
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
          if (options_.target == CaptureOptions::Target::kPids &&
              fd.status().error_number() == ESRCH) {
            task_gone = true;
            break;
          }
          return fd.status();
        }
        first = false;
        auto it = owner.find({cpu, sideband});
        if (it == owner.end()) {
          size_t pages = sideband ? kSidebandPages : options_.data_pages;
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

namespace {

// Opens the file mapped at `start`.  map_files names VMAs by their exact
// current range; if the VMA was split (mprotect of RELRO, say) or merged
// since the record, look up the one that now covers `start`.
Result<UniqueFd> OpenMapping(uint32_t pid, uint64_t start, uint64_t end) {
  auto fd = OpenMappedFile(static_cast<pid_t>(pid), start, end);
  if (fd.ok() || fd.status().error_number() != ENOENT) return fd;
  if (auto maps = ReadProcMaps(static_cast<pid_t>(pid)); maps.ok()) {
    for (const ProcMapping& m : *maps) {
      if (m.start <= start && start < m.end)
        return OpenMappedFile(static_cast<pid_t>(pid), m.start, m.end);
    }
  }
  return fd;
}

// Opens, through open(id), what /proc/<id> shows of process pid's address
// space (map_files, mem): /proc/PID, or, once its main thread has exited
// while others live on (a zombie leader: /proc/PID shows no mappings),
// /proc/TID of a live thread.  A thread's file is kept only if the thread
// is still listed under /proc/PID/task after the open, so a thread id
// reused by another process never gives that process's file.
template <typename Open>
Result<UniqueFd> OpenInProcess(uint32_t pid, Open open) {
  Result<UniqueFd> fd = open(pid);
  const auto p = static_cast<pid_t>(pid);
  if (fd.ok() || !HasNoMappings(p)) return fd;
  for (pid_t tid : ListThreads(p)) {
    if (tid == p) continue;
    Result<UniqueFd> by_thread = open(static_cast<uint32_t>(tid));
    if (!by_thread.ok()) continue;
    if (IsThreadOf(p, tid)) return by_thread;
  }
  return fd;
}

Result<UniqueFd> OpenProcessMapping(uint32_t pid, uint64_t start, uint64_t end) {
  return OpenInProcess(pid, [&](uint32_t id) { return OpenMapping(id, start, end); });
}

Result<UniqueFd> OpenProcessVdso(uint32_t pid, uint64_t start, uint64_t end) {
  return OpenInProcess(
      pid, [&](uint32_t id) { return ReadVdsoImage(static_cast<pid_t>(id), start, end); });
}

}  // namespace

BuildId Capture::VdsoBuildId(uint32_t pid, uint64_t start, uint64_t end, std::string* error) {
  auto fd = OpenProcessVdso(pid, start, end);
  if (!fd.ok()) {
    *error = fd.status().ToString();
    return {};
  }
  auto id = ReadBuildIdFromFd(fd->get(), "[vdso]");
  if (!id.ok()) {
    *error = id.status().ToString();
    return {};
  }
  if (id->empty()) *error = "[vdso] image has no build-id note";
  return *id;
}

BuildId Capture::MappedBuildId(uint32_t pid, uint64_t start, uint64_t end, std::string* error) {
  auto fd = OpenProcessMapping(pid, start, end);
  if (!fd.ok()) {
    *error = fd.status().ToString();
    return {};
  }
  // Reading the note adds about 70 us a file (libelf maps the file, then
  // the headers fault in) to the 40 us of opening the map_files entry and
  // fstat (measured on this project's 2-core host, libc, 20,000 times):
  // at the start of -a, with every process mapping the same libraries, the
  // cache saves most of that.  It serves an id only for a file that
  // provably has not changed since it was read (see InodeBuildIds).
  timespec read_start{};
  clock_gettime(CLOCK_REALTIME, &read_start);
  struct stat before, after;
  const bool have_stat = fstat(fd->get(), &before) == 0;
  if (have_stat) {
    if (auto cached = id_by_inode_.Find(before)) return *cached;
  }
  BuildId id;
  auto r = ReadBuildIdFromFd(fd->get(), MapFilesPath(static_cast<pid_t>(pid), start, end));
  if (r.ok()) {
    id = *r;
    if (have_stat && fstat(fd->get(), &after) == 0) id_by_inode_.Store(before, after, read_start, id);
  } else {
    *error = r.status().ToString();
  }
  return id;
}

void Capture::CacheFile(uint32_t pid, uint64_t start, uint64_t end, const BuildId& id,
                        std::string_view path, BuildIdCache::Priority priority) {
  if (options_.cache == nullptr || id.empty() || options_.cache->Seen(id)) return;
  if (path == "[vdso]") {
    // No file: the image comes from the process's memory.  The cache checks
    // the copy's build-id, so another image is never stored under this id.
    if (auto fd = OpenProcessVdso(pid, start, end); fd.ok())
      options_.cache->Add(id, "[vdso]", std::move(*fd), priority);
    return;
  }
  if (IsSpecialPath(path)) return;
  // Opening pins the inode; the copy itself happens on the cache's worker.
  auto fd = OpenProcessMapping(pid, start, end);
  if (!fd.ok()) {
    // The mapping is gone (a short-lived process).  The file at the path is
    // acceptable only if it still has this build-id: the id identifies the
    // contents, and the worker checks the copy again.
    auto path_fd = OpenRegularFile(std::string(path));
    if (!path_fd.ok()) return;
    auto path_id = ReadBuildIdFromFd(path_fd->get(), std::string(path));
    if (!path_id.ok() || *path_id != id) return;
    fd = std::move(path_fd);
  }
  options_.cache->Add(id, std::string(path), std::move(*fd), priority);
}

void Capture::HandleRecord(Bytes record, CaptureSink& sink) {
  ++stats_.records;
  perf_event_header h;
  if (!ReadHeader(record, &h)) return;
  if (stamps_ != nullptr &&
      (h.type == PERF_RECORD_COMM || h.type == PERF_RECORD_FORK || h.type == PERF_RECORD_MMAP ||
       h.type == PERF_RECORD_MMAP2 || h.type == kRecordMmap3 || h.type == PERF_RECORD_LOST)) {
    // While /proc is read: what changed, and when (see startup_stamps.h).
    Record r;
    if (DecodeRecord(record, format(), &r) == DecodeStatus::kOk) {
      const auto* lost = std::get_if<LostRecord>(&r);
      stamps_->Observe(r, lost != nullptr && std::find(sideband_ids_.begin(), sideband_ids_.end(),
                                                       lost->id) != sideband_ids_.end());
    }
  }
  if (h.type == PERF_RECORD_SAMPLE) {
    ++stats_.samples;
    sink.OnRecord(record);
    return;
  }
  if (h.type == PERF_RECORD_LOST) {
    Record r;
    if (DecodeRecord(record, format(), &r) == DecodeStatus::kOk)
      stats_.lost_records += std::get<LostRecord>(r).lost;
    sink.OnRecord(record);
    return;
  }
  if (h.type != PERF_RECORD_MMAP2 && h.type != kRecordMmap3) {
    sink.OnRecord(record);
    return;
  }
  ++stats_.mmaps;
  Record r;
  if (DecodeRecord(record, format(), &r) != DecodeStatus::kOk) {
    sink.OnRecord(record);  // counted as bad by the consumer
    return;
  }
  MmapRecord& m = std::get<MmapRecord>(r);
  // MMAP3 says why an id is missing.  NO_NOTE, NOT_ELF, NO_FILE and REFUSED
  // are final; UNAVAILABLE, IO_ERROR, MALFORMED and statuses newer than this
  // header are worth a second try through map_files.
  const uint8_t st = m.build_id_status;
  const bool final_status =
      m.format == MmapFormat::kMmap3 &&
      (st == PERF_MMAP3_BUILD_ID_NO_NOTE || st == PERF_MMAP3_BUILD_ID_NOT_ELF ||
       st == PERF_MMAP3_BUILD_ID_NO_FILE || st == PERF_MMAP3_BUILD_ID_REFUSED);
  BuildId id;
  BuildIdSource source;
  std::string error;
  if (m.filename == "[vdso]" && m.build_id.empty() && !final_status && m.pid != kKernelPid) {
    // MMAP2 has no build-id for the vDSO (it has no file); read its image.
    id = VdsoBuildId(m.pid, m.start, m.start + m.len, &error);
    source = BuildIdSource::kVdso;
  } else if (!m.build_id.empty() || final_status || IsSpecialPath(m.filename) ||
             m.pid == kKernelPid) {
    CacheFile(m.pid, m.start, m.start + m.len, m.build_id, m.filename);
    sink.OnRecord(record);
    return;
  } else {
    // The kernel gave none: read it from the mapped inode while it is mapped.
    id = MappedBuildId(m.pid, m.start, m.start + m.len, &error);
    source = BuildIdSource::kMapFiles;
  }
  if (id.empty()) {
    if (!error.empty()) ++stats_.fill_failures;
    sink.OnRecord(record);
    return;
  }
  ++stats_.filled_build_ids;
  overrides_.Add(m.pid, m.start, id, source);
  CacheFile(m.pid, m.start, m.start + m.len, id, m.filename);
  sink.OnRecord(WithBuildId(m, id, format()));
}

std::vector<uint8_t> WithBuildId(MmapRecord m, const BuildId& id, const SampleFormat& format) {
  if (m.format == MmapFormat::kMmap2) {
    // The inode identity is lost, as with a kernel-provided build-id; the
    // build-id is what attribution needs.
    m.format = MmapFormat::kMmap2BuildId;
    m.build_id = id;
  } else if (m.format == MmapFormat::kMmap3) {
    m.build_id = id;
    m.build_id_status = PERF_MMAP3_BUILD_ID_FOUND;
  }
  return EncodeMmap(m, format);
}

namespace {

std::string ModuleNotesPath(const std::string& module) {
  return "/sys/module/" + module + "/notes/.note.gnu.build-id";
}

// /sys/module/<name>/coresize of each module /proc/modules lists (see
// KernelModule: where a module's code can end).
std::map<std::string, uint64_t, std::less<>> ReadCoreSizes(std::string_view proc_modules) {
  std::map<std::string, uint64_t, std::less<>> out;
  while (!proc_modules.empty()) {
    const size_t nl = proc_modules.find('\n');
    const std::string_view line = proc_modules.substr(0, nl);
    proc_modules.remove_prefix(nl == std::string_view::npos ? proc_modules.size() : nl + 1);
    const std::string name(line.substr(0, line.find(' ')));
    if (name.empty() || name[0] == '.' || name.find('/') != std::string::npos) continue;
    auto text = ReadSmallFile("/sys/module/" + name + "/coresize");
    uint64_t size = 0;
    if (!text.ok() ||
        std::from_chars(text->data(), text->data() + text->size(), size).ec != std::errc())
      continue;
    out.emplace(name, size);
  }
  return out;
}

}  // namespace

void Capture::SynthesizeKernel(CaptureSink& sink) {
  // What perf writes first: the kernel text as a PERF_RECORD_MMAP of pid -1
  // named "[kernel.kallsyms]_text" whose pgoff is where _text is in this
  // boot, so that a report can relocate any kallsyms snapshot of this
  // kernel (KASLR); then one record per module, as perf --buildid-mmap
  // does, each with the loaded module's own build-id.
  auto text = ReadSmallFile("/proc/kallsyms");
  if (!text.ok()) return;
  // Shared with the cache's worker, which compares a stored snapshot to it.
  const auto kallsyms = std::make_shared<const Kallsyms>(ParseKallsyms(*text));
  const auto start = kallsyms->Marker("_text");
  if (kallsyms->hidden || !start) return;  // addresses hidden by kptr_restrict
  const auto end = kallsyms->Marker("_etext");
  MmapRecord m;
  m.format = MmapFormat::kMmap;
  m.misc = PERF_RECORD_MISC_KERNEL;
  m.pid = kKernelPid;
  m.tid = 0;
  m.start = *start;
  m.len = end && *end > *start ? *end - *start : ~uint64_t{0} - *start;
  m.pgoff = *start;
  m.filename = "[kernel.kallsyms]_text";
  m.sample_id.has_tid = m.sample_id.has_time = m.sample_id.has_cpu = true;
  m.sample_id.pid = kKernelPid;
  sink.OnRecord(EncodeMmap(m, format()));
  ++stats_.synthesized;

  // The snapshot goes with the capture: a report after a reboot (another
  // KASLR offset, other modules) cannot use the live one.  perf's place
  // and format; owner-only, since the addresses defeat KASLR.  Written by
  // the cache's background worker: 5 MB or more, not on the start path.
  const BuildId kernel_id = ReadKernelBuildId("/sys/kernel/notes");
  if (options_.cache != nullptr && !kernel_id.empty() && kallsyms->complete) {
    // Any whole snapshot of this image will do (reports relocate it), so
    // one already stored is kept rather than rewritten every run; one cut
    // short, of another image, or readable by others is replaced.
    BuildIdCache::Verifier keep = [kallsyms](int fd, uint64_t) -> Status {
      struct stat st;
      if (fstat(fd, &st) != 0) return ErrnoStatus("stat the stored kallsyms");
      if ((st.st_mode & 077) != 0) return Status::Failure("the stored kallsyms is not owner-only");
      auto stored = ReadAllFd(fd, kMaxKallsymsBytes, "the stored kallsyms");
      if (!stored.ok()) return stored.status();
      const Kallsyms k = ParseKallsyms(*stored);
      if (!k.complete) return Status::Failure("the stored kallsyms is not whole");
      if (!SameKernelImage(k, *kallsyms))
        return Status::Failure("the stored kallsyms lists another image");
      return {};
    };
    // Failures are counted in the cache's stats.
    options_.cache->AddContents(kernel_id, "[kernel.kallsyms]", "kallsyms", std::move(*text), 0400,
                                BuildIdCache::Priority::kBackground, std::move(keep));
  }

  auto modules = ReadSmallFile("/proc/modules");
  if (!modules.ok()) return;
  for (KernelModule& module : ParseKernelModules(*modules, *kallsyms, ReadCoreSizes(*modules))) {
    const BuildId id = ReadKernelBuildId(ModuleNotesPath(module.name));
    const std::string name = "[" + module.name + "]";
    MmapRecord mm = m;
    mm.format = id.empty() ? MmapFormat::kMmap : MmapFormat::kMmap2BuildId;
    mm.build_id = id;
    mm.start = module.start;
    mm.len = module.end - module.start;
    mm.pgoff = 0;
    mm.filename = name;
    sink.OnRecord(EncodeMmap(mm, format()));
    ++stats_.synthesized;
    // Symbols relative to the load address hold for this build of the
    // module in any boot, so they are keyed by its build-id: the same
    // bytes every time, kept if already stored.  Offsets reveal no address.
    if (options_.cache != nullptr && !id.empty() && !module.symbols.empty()) {
      options_.cache->AddContents(id, name, "symbols", FormatModuleSymbols(module), 0444,
                                  BuildIdCache::Priority::kBackground);
    }
    module.build_id = id;
    module.symbols.clear();
    start_modules_.push_back(std::move(module));
  }
}

void Capture::CheckKernelModules() {
  // The kernel reports no module loads or unloads, so the modules recorded
  // at the start are compared with those loaded now: a range that holds
  // other code now may have run it during the capture (ModulesOverlaid).
  if (start_modules_.empty()) return;
  std::vector<size_t> overlaid;
  auto text = ReadSmallFile("/proc/kallsyms");
  auto modules = ReadSmallFile("/proc/modules");
  const Kallsyms now = text.ok() ? ParseKallsyms(*text) : Kallsyms{};
  if (!modules.ok() || now.hidden) {
    // Nothing to compare with: none of them is vouched for.
    for (size_t i = 0; i < start_modules_.size(); ++i) overlaid.push_back(i);
  } else {
    std::vector<KernelModule> after = ParseKernelModules(*modules, now, ReadCoreSizes(*modules));
    for (KernelModule& a : after) a.build_id = ReadKernelBuildId(ModuleNotesPath(a.name));
    overlaid = ModulesOverlaid(start_modules_, after, now);
  }
  for (size_t i : overlaid) {
    stats_.changed_kernel_modules.push_back(
        {"[" + start_modules_[i].name + "]", start_modules_[i].start});
  }
}

namespace {

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

void Capture::SynthesizeExisting(CaptureSink& sink) {
  std::vector<pid_t> pids;
  if (options_.target == CaptureOptions::Target::kSystemWide) {
    pids = ListProcesses();
  } else if (options_.target == CaptureOptions::Target::kPids) {
    pids = options_.pids;
  } else {
    sink.OnRoundEnd();
    return;  // a command starts from exec: the kernel reports everything
  }
  const SampleFormat f = format();
  // The events are already enabled, and reading thousands of processes'
  // mappings takes seconds: keep taking records out of the buffers, but end
  // no round, so nothing is released before the synthesized records, whose
  // times are those from which what was read is known to hold (see
  // startup_stamps.h; 0 for most).
  const bool clock = attr_.use_clockid && attr_.clockid == CLOCK_MONOTONIC;
  stamps_ = std::make_unique<StartupStamps>(clock);
  sideband_ids_ = event_ids(/*sideband=*/true);
  auto now = [&] { return clock ? MonotonicNs() : 0; };
  StartupStats& startup = stats_.startup.emplace();
  const auto started = std::chrono::steady_clock::now();
  auto last_drain = started;
  // A side-band record can only have been lost if its buffer filled up
  // since it was last drained: only then is the loss count read (a read of
  // an event on another CPU costs an IPI).
  bool maybe_lost = false;
  auto drain = [&] {
    for (size_t index : buffers_) {
      if (is_sideband_[index] &&
          events_[index].ring()->Available() + kMaxRecordSize >= events_[index].ring()->data_size())
        maybe_lost = true;
    }
    startup.records_drained += DrainAll(sink, /*end_round=*/false);
    last_drain = std::chrono::steady_clock::now();
  };
  auto keep_draining = [&] {
    if (std::chrono::steady_clock::now() - last_drain >= std::chrono::milliseconds(20)) drain();
  };
  struct Pending {
    MmapRecord record;
    std::string path;
    BuildId id;
    BuildIdSource source;
  };
  for (pid_t pid : pids) {
    keep_draining();
    // Everything read of this process describes it between read_start and
    // read_end.
    const uint64_t read_start = now();
    auto maps = ReadProcMaps(pid);
    if (!maps.ok()) continue;  // exited meanwhile
    const std::vector<pid_t> threads = ListThreads(pid);
    // A kernel thread has no mappings, nor has a main thread that exited
    // before the others (a zombie leader): then a live thread shows them
    // (and OpenInProcess finds their files the same way).
    for (size_t i = 0; maps->empty() && i < threads.size(); ++i) {
      if (threads[i] == pid) continue;
      if (auto by_thread = ReadProcMaps(threads[i]); by_thread.ok()) maps = std::move(by_thread);
    }
    std::vector<std::string> comms;
    for (pid_t tid : threads) comms.push_back(ReadComm(pid, tid));
    const uint64_t read_end = now();
    if (!maps->empty()) ++startup.processes;

    // Build-ids, through map_files, which shows what is mapped when it is
    // opened: a remap after read_end would lend its file's id.
    std::vector<Pending> pending;
    for (const ProcMapping& pm : *maps) {
      keep_draining();  // a cold file's build-id can take a while to read
      const bool vdso = pm.path == "[vdso]";
      if (!pm.executable || (IsSpecialPath(pm.path) && !vdso)) continue;
      Pending& p = pending.emplace_back();
      p.path = pm.path;
      MmapRecord& m = p.record;
      m.format = MmapFormat::kMmap2;
      m.misc = PERF_RECORD_MISC_USER;
      m.pid = m.tid = static_cast<uint32_t>(pid);
      m.start = pm.start;
      m.len = pm.end - pm.start;
      m.pgoff = pm.pgoff;
      m.maj = pm.maj;
      m.min = pm.min;
      m.ino = pm.ino;
      m.prot = PROT_READ | PROT_EXEC;
      m.flags = pm.shared ? MAP_SHARED : MAP_PRIVATE;
      std::string error;
      p.id = vdso ? VdsoBuildId(m.pid, pm.start, pm.end, &error)
                  : MappedBuildId(m.pid, pm.start, pm.end, &error);
      p.source = vdso ? BuildIdSource::kVdso : BuildIdSource::kMapFiles;
      if (mode_ == CaptureMode::kMmap3) {
        // Keep both identities, as the kernel's MMAP3 records do.
        m.format = MmapFormat::kMmap3;
        m.build_id_status = p.id.empty() ? (error.empty() ? PERF_MMAP3_BUILD_ID_NO_NOTE
                                                          : PERF_MMAP3_BUILD_ID_UNAVAILABLE)
                                         : PERF_MMAP3_BUILD_ID_FOUND;
      }
      if (p.id.empty() && !error.empty()) ++stats_.fill_failures;
    }
    const uint64_t ids_read = now();

    // Take in every change the kernel has timestamped up to now, then decide.
    drain();
    if (maybe_lost) {
      uint64_t lost = 0;
      if (read_lost_) {
        for (size_t i = 0; i < events_.size(); ++i) {
          if (!is_sideband_[i]) continue;
          if (auto n = events_[i].LostSamples(); n.ok()) lost += *n;
        }
      }
      // Without read_format LOST (before 6.0) a full buffer may have lost.
      if (lost != 0 || !read_lost_) stamps_->NoteLoss();
      maybe_lost = false;
    }

    for (size_t i = 0; i < threads.size(); ++i) {
      const auto time = stamps_->CommTime(static_cast<uint32_t>(threads[i]), read_start, read_end);
      if (!time) {
        ++startup.changed_during_read;  // the kernel's COMM record has the name
        continue;
      }
      CommRecord c;
      c.pid = static_cast<uint32_t>(pid);
      c.tid = static_cast<uint32_t>(threads[i]);
      c.comm = comms[i];
      c.sample_id = {true, true, false, true, c.pid, c.tid, *time, 0, 0};
      sink.OnRecord(EncodeComm(c, f));
      ++stats_.synthesized;
    }
    for (Pending& p : pending) {
      MmapRecord& m = p.record;
      const auto time = stamps_->MappingTime(m.pid, m.start, m.start + m.len, read_start, read_end);
      if (!time) {
        ++startup.changed_during_read;  // the kernel's record describes it
        continue;
      }
      if (!p.id.empty() &&
          stamps_->ChangedBetween(m.pid, m.start, m.start + m.len, read_end, ids_read)) {
        // Remapped after the read, before map_files was opened: the id may
        // be the new file's.  The mapping read stays, without an id.
        p.id = BuildId();
        if (m.format == MmapFormat::kMmap3) m.build_id_status = PERF_MMAP3_BUILD_ID_UNAVAILABLE;
        ++stats_.fill_failures;
      }
      m.filename = p.path;
      m.sample_id = {true, true, false, true, m.pid, m.tid, *time, 0, 0};
      if (!p.id.empty()) {
        if (m.format == MmapFormat::kMmap2) m.format = MmapFormat::kMmap2BuildId;
        m.build_id = p.id;
        overrides_.Add(m.pid, m.start, p.id, p.source);
        CacheFile(m.pid, m.start, m.start + m.len, p.id, p.path, BuildIdCache::Priority::kBackground);
        ++stats_.filled_build_ids;
      }
      sink.OnRecord(EncodeMmap(m, f));
      ++stats_.synthesized;
      ++stats_.mmaps;
    }
  }
  stamps_.reset();
  startup.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  sink.OnRoundEnd();
}

size_t Capture::DrainAll(CaptureSink& sink, bool end_round) {
  size_t n = 0;
  for (size_t index : buffers_) {
    RingBuffer* ring = events_[index].ring();
    n += ring->Drain([&](Bytes record) { HandleRecord(record, sink); });
  }
  uint64_t bad = 0, straddled = 0;
  for (size_t index : buffers_) {
    bad += events_[index].ring()->stats().bad_size;
    straddled += events_[index].ring()->stats().straddled;
  }
  stats_.bad_size = bad;
  stats_.straddled = straddled;
  if (end_round) sink.OnRoundEnd();
  return n;
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
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC);
  if (sfd < 0) return ErrnoStatus("signalfd");

  io_uring ring;
  // -p ends when every target has exited (as perf record -p): an event
  // reports POLLHUP once its task and the children it inherited to are gone;
  // one event per task is watched.
  const bool watch_hup = options_.target == CaptureOptions::Target::kPids;
  const size_t entries = buffers_.size() * 2 + 8 + (watch_hup ? task_events_.size() : 0);
  // CLAMP: a ring larger than the kernel allows is made the largest it does;
  // get_sqe() below submits when the queue is full.
  int rc = io_uring_queue_init(static_cast<unsigned>(entries), &ring, IORING_SETUP_CLAMP);
  if (rc < 0) {
    close(sfd);
    return Status::FromErrno(-rc, "io_uring_queue_init");
  }
  auto cleanup = [&] {
    io_uring_queue_exit(&ring);
    close(sfd);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  };

  auto get_sqe = [&] {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    while (sqe == nullptr) {  // queue full: hand what is there to the kernel
      io_uring_submit(&ring);
      sqe = io_uring_get_sqe(&ring);
    }
    return sqe;
  };
  auto arm_poll = [&](size_t i) {
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_poll_add(sqe, events_[buffers_[i]].fd(), POLLIN);
    io_uring_sqe_set_data64(sqe, i);
  };
  signalfd_siginfo& siginfo = *siginfo_;
  auto arm_signal = [&] {
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_read(sqe, sfd, &siginfo, sizeof(siginfo), 0);
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
  for (size_t i = 0; i < buffers_.size(); ++i) arm_poll(i);
  std::vector<bool> hung_up(watch_hup ? task_events_.size() : 0, false);
  size_t hangups = 0;
  for (size_t w = 0; w < hung_up.size(); ++w) {
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_poll_add(sqe, events_[task_events_[w]].fd(), POLLHUP);
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

  // The kernel text does not move: read it (all of /proc/kallsyms, tens of
  // milliseconds) before the buffers start filling.
  SynthesizeKernel(sink);
  // Enable before synthesizing processes: a mapping created in between is
  // then reported by the kernel too, rather than by neither.  Synthesized
  // records carry the time from which what was read holds (0 for most:
  // before anything the kernel wrote), see SynthesizeExisting().
  if (options_.target != CaptureOptions::Target::kCommand) {
    for (PerfEventFd& e : events_) {
      if (Status s = e.Enable(); !s.ok()) {
        cleanup();
        return s;
      }
    }
  }
  SynthesizeExisting(sink);
  if (!options_.command.empty()) {
    if (Status s = child_.Release(); !s.ok()) {
      cleanup();
      return s;
    }
  }

  // Commands are taken from now on, so an acknowledged ping means that
  // everything above is done.
  if (control_.fd() >= 0) arm_control(false);

  bool stop = false;
  Status status;
  while (!stop) {
    rc = io_uring_submit_and_wait(&ring, 1);
    if (rc < 0 && rc != -EINTR) {
      status = Status::FromErrno(-rc, "io_uring_submit_and_wait");
      break;
    }
    io_uring_cqe* cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
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
        stats_.elapsed_seconds = elapsed();
        sink.OnTick(stats_);
        arm_tick();
      } else if (tag == kTagDuration) {
        stop = true;
      } else if (tag == kTagControl) {
        // An inherited descriptor may be non-blocking (EAGAIN: wait for
        // input, then read); an end of file or an error ends commands.
        if (cqe->res > 0) {
          if (control_.OnInput({control_buf.data(), static_cast<size_t>(cqe->res)})) stop = true;
          stats_.control_unknown = control_.unknown();
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
      } else if (tag < buffers_.size()) {
        ++stats_.wakeups;
        // POLLHUP: every task of a per-task event has exited; polling again
        // would complete immediately forever.  The buffer is still drained
        // on every pass until the end.
        if (cqe->res <= 0 || !(cqe->res & POLLHUP)) arm_poll(tag);
      }
    }
    io_uring_cq_advance(&ring, seen);
    DrainAll(sink);
  }

  // Stop producing, then take everything the kernel still holds.
  for (PerfEventFd& e : events_) (void)e.Disable();
  while (DrainAll(sink) != 0) {
  }
  CheckKernelModules();
  if (read_lost_) {
    for (const PerfEventFd& e : events_) {
      auto lost = e.LostSamples();  // side-band events lose records too
      if (lost.ok()) stats_.event_lost += *lost;
    }
  }
  stats_.elapsed_seconds = elapsed();
  // Stopped by a signal or the duration while the command runs: end it the
  // way a terminal would, and for good if it ignores that.
  child_.Stop();
  cleanup();
  return status;
}

}  // namespace mmap3
