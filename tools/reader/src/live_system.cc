#include "live_system.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>

#include <fmt/format.h>

namespace mmap3 {
namespace {

// Opens the file mapped at `start`.  map_files names VMAs by their exact
// current range; if the VMA was split (mprotect of RELRO, say) or merged
// since the record, look up the one that now covers `start`.
Result<UniqueFd> OpenCoveringMapping(uint32_t pid, uint64_t start, uint64_t end) {
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

}  // namespace

bool IsSpecialPath(std::string_view path) {
  return path.empty() || path[0] == '[' || path.starts_with("//anon") ||
         path.starts_with("/dev/zero") || path.starts_with("/memfd:") ||
         path.starts_with("anon_inode:");
}

Result<std::vector<ProcMapping>> ProcLiveSystem::Maps(pid_t pid) { return ReadProcMaps(pid); }

std::vector<pid_t> ProcLiveSystem::Threads(pid_t pid) { return ListThreads(pid); }

std::string ProcLiveSystem::Comm(pid_t pid, pid_t tid) { return ReadComm(pid, tid); }

Result<UniqueFd> ProcLiveSystem::OpenMapping(uint32_t pid, uint64_t start, uint64_t end) {
  return OpenInProcess(pid, [&](uint32_t id) { return OpenCoveringMapping(id, start, end); });
}

Result<UniqueFd> ProcLiveSystem::OpenVdso(uint32_t pid, uint64_t start, uint64_t end) {
  return OpenInProcess(
      pid, [&](uint32_t id) { return ReadVdsoImage(static_cast<pid_t>(id), start, end); });
}

Result<UniqueFd> ProcLiveSystem::OpenOwnVdso() { return OwnVdsoImage(); }

uint64_t ProcLiveSystem::MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

timespec ProcLiveSystem::RealTime() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts;
}

namespace {
// Whether this process's time namespace shifts CLOCK_MONOTONIC or
// CLOCK_BOOTTIME (unshare --time, a container restored by CRIU).  The
// events' times are the host's clock, and the start times /proc shows here
// are shifted: the two cannot be compared (helper-60's review: every JIT
// map refused inside such a namespace).
bool ClocksShifted() {
  static const bool shifted = [] {
    auto text = ReadSmallFile("/proc/self/timens_offsets");
    if (!text.ok()) return false;  // no time namespaces: no offsets
    for (std::string_view rest = *text; !rest.empty();) {
      const size_t nl = rest.find('\n');
      std::string_view line = rest.substr(0, nl);
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
      // "monotonic <secs> <nsecs>": any digit other than 0 is an offset.
      const size_t sp = line.find(' ');
      if (sp != std::string_view::npos &&
          line.substr(sp).find_first_not_of(" 0") != std::string_view::npos)
        return true;
    }
    return false;
  }();
  return shifted;
}
}  // namespace

std::optional<PerfMapOwner> ProcLiveSystem::ProcessOwner(pid_t pid) {
  auto uids = ReadUids(pid);
  if (!uids) return std::nullopt;
  PerfMapOwner owner{uids->first, uids->second, std::nullopt};
  // The start time (field 22 of /proc/PID/stat, clock ticks after boot) on
  // the real-time clock, which file times use: now, less the time since.
  auto stat = ReadSmallFile(fmt::format("/proc/{}/stat", pid));
  const long hz = sysconf(_SC_CLK_TCK);
  timespec boot{}, real{};
  if (stat.ok() && hz > 0 && clock_gettime(CLOCK_BOOTTIME, &boot) == 0 &&
      clock_gettime(CLOCK_REALTIME, &real) == 0) {
    const size_t paren = stat->rfind(')');  // the comm may hold anything
    std::string_view rest = paren == std::string::npos ? std::string_view()
                                                        : std::string_view(*stat).substr(paren + 1);
    // Fields 3.. follow the comm; the start time is field 22.
    for (int field = 3; field < 22 && !rest.empty(); ++field) {
      const size_t sp = rest.find(' ', 1);
      rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp);
    }
    uint64_t ticks = 0;
    if (!rest.empty()) {
      rest.remove_prefix(1);
      auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), ticks);
      if (ec == std::errc() && ticks / static_cast<uint64_t>(hz) <= static_cast<uint64_t>(boot.tv_sec)) {
        owner.started_sec = real.tv_sec - (boot.tv_sec - static_cast<int64_t>(ticks / hz)) - 1;
        // On the monotonic clock: boot time less the time suspended so far
        // (boot - monotonic now), which is at most what had passed
        // suspended by the start, so this is never later than the start.
        timespec mono{};
        if (!ClocksShifted() && clock_gettime(CLOCK_MONOTONIC, &mono) == 0) {
          auto ns = [](const timespec& t) {
            return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
          };
          const int64_t start_boot =
              static_cast<int64_t>(ticks / static_cast<uint64_t>(hz)) * 1'000'000'000 +
              static_cast<int64_t>(ticks % static_cast<uint64_t>(hz)) * 1'000'000'000 / hz;
          const int64_t start_mono = start_boot - (ns(boot) - ns(mono));
          if (start_mono >= 0) owner.started_ns = static_cast<uint64_t>(start_mono);
        }
      }
    }
  }
  return owner;
}

PerfMapRead ProcLiveSystem::ReadPerfMap(uint32_t pid, const std::optional<PerfMapOwner>& owner,
                                        const PerfMapStamp* unchanged_from) {
  // perf's place for them, whatever TMPDIR says.
  if (!tmp_.valid()) tmp_.Reset(open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!tmp_.valid()) {
    PerfMapRead r;
    r.outcome = PerfMapRead::Outcome::kFailed;
    r.reason = ErrnoStatus("open /tmp").ToString();
    return r;
  }
  const std::string name = PerfMapFileName(pid);
  return ReadPerfMapAt(tmp_.get(), name, "/tmp/" + name, owner, kPerfMapMaxBytes, unchanged_from);
}

}  // namespace mmap3
