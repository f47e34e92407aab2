#include "proc_maps.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

#include "elf_file.h"
#include "files.h"

namespace mmap3 {
namespace {

bool ParseHex(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

std::string_view NextField(std::string_view& line) {
  size_t b = line.find_first_not_of(' ');
  if (b == std::string_view::npos) {
    line = {};
    return {};
  }
  line.remove_prefix(b);
  size_t e = line.find(' ');
  std::string_view f = line.substr(0, e);
  line.remove_prefix(e == std::string_view::npos ? line.size() : e);
  return f;
}

std::vector<pid_t> ListNumericDir(const std::string& path) {
  std::vector<pid_t> out;
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    char* end;
    long v = std::strtol(e->d_name, &end, 10);
    if (*end == '\0' && v > 0) out.push_back(static_cast<pid_t>(v));
  }
  closedir(d);
  return out;
}

}  // namespace

std::vector<ProcMapping> ParseProcMaps(std::string_view text) {
  std::vector<ProcMapping> out;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    // start-end perms offset maj:min inode [path]
    std::string_view range = NextField(line), perms = NextField(line), off = NextField(line),
                     dev = NextField(line), ino = NextField(line);
    size_t dash = range.find('-'), colon = dev.find(':');
    ProcMapping m;
    uint64_t maj, min;
    if (dash == std::string_view::npos || colon == std::string_view::npos || perms.size() < 4 ||
        !ParseHex(range.substr(0, dash), &m.start) || !ParseHex(range.substr(dash + 1), &m.end) ||
        !ParseHex(off, &m.pgoff) || !ParseHex(dev.substr(0, colon), &maj) ||
        !ParseHex(dev.substr(colon + 1), &min))
      continue;
    auto r = std::from_chars(ino.data(), ino.data() + ino.size(), m.ino);
    if (r.ec != std::errc()) continue;
    m.maj = static_cast<uint32_t>(maj);
    m.min = static_cast<uint32_t>(min);
    m.readable = perms[0] == 'r';
    m.writable = perms[1] == 'w';
    m.executable = perms[2] == 'x';
    m.shared = perms[3] == 's';
    size_t b = line.find_first_not_of(' ');
    if (b != std::string_view::npos) m.path = std::string(line.substr(b));
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::string> ReadSmallFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + path);
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      Status s = ErrnoStatus("read " + path);
      close(fd);
      return s;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

Result<std::vector<ProcMapping>> ReadProcMaps(pid_t pid) {
  auto text = ReadSmallFile(fmt::format("/proc/{}/maps", pid));
  if (!text.ok()) return text.status();
  return ParseProcMaps(*text);
}

std::string MapFilesPath(pid_t pid, uint64_t start, uint64_t end) {
  return fmt::format("/proc/{}/map_files/{:x}-{:x}", pid, start, end);
}

Result<UniqueFd> OpenMappedFile(pid_t pid, uint64_t start, uint64_t end) {
  std::string path = MapFilesPath(pid, start, end);
  return OpenRegularFile(path);  // a mapping can be of a device file
}

Result<BuildId> ReadMappedBuildId(pid_t pid, uint64_t start, uint64_t end) {
  auto fd = OpenMappedFile(pid, start, end);
  if (!fd.ok()) return fd.status();
  return ReadBuildIdFromFd(fd->get(), MapFilesPath(pid, start, end));
}

Result<UniqueFd> ReadVdsoImage(pid_t pid, uint64_t start, uint64_t end) {
  if (end <= start || end - start > (1u << 20)) return Status::Failure("implausible [vdso] size");
  const std::string mem_path = fmt::format("/proc/{}/mem", pid);
  UniqueFd mem(open(mem_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!mem.valid()) return ErrnoStatus("open " + mem_path);
  std::vector<uint8_t> image(end - start);
  size_t done = 0;
  while (done < image.size()) {
    ssize_t n = pread(mem.get(), image.data() + done, image.size() - done,
                      static_cast<off_t>(start + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return n < 0 ? ErrnoStatus("read " + mem_path) : Status::Failure(mem_path + ": short read");
    done += static_cast<size_t>(n);
  }
  UniqueFd fd(memfd_create("vdso", MFD_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("memfd_create");
  if (Status s = WriteAll(fd.get(), image.data(), image.size(), 0, "[vdso] image"); !s.ok())
    return s;
  return fd;
}

Result<UniqueFd> OwnVdsoImage() {
  auto maps = ReadProcMaps(getpid());
  if (!maps.ok()) return maps.status();
  const auto vdso = std::find_if(maps->begin(), maps->end(),
                                 [](const ProcMapping& m) { return m.path == "[vdso]"; });
  if (vdso == maps->end()) return Status::Failure("this process has no [vdso] mapping");
  return ReadVdsoImage(getpid(), vdso->start, vdso->end);
}

bool ProcessExists(pid_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

bool HasNoMappings(pid_t pid) {
  const std::string path = fmt::format("/proc/{}/maps", pid);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char c;
  ssize_t n;
  do {
    n = read(fd, &c, 1);  // one byte: the kernel formats only the first line
  } while (n < 0 && errno == EINTR);
  close(fd);
  return n == 0;
}

bool IsThreadOf(pid_t pid, pid_t tid) {
  return access(fmt::format("/proc/{}/task/{}", pid, tid).c_str(), F_OK) == 0;
}

std::optional<pid_t> ParseTgid(std::string_view status) {
  constexpr std::string_view kField = "\nTgid:";
  size_t at = status.rfind("Tgid:", 0) == 0 ? 0 : status.find(kField);
  if (at == std::string_view::npos) return std::nullopt;
  at = status.find(':', at) + 1;
  while (at < status.size() && (status[at] == ' ' || status[at] == '\t')) ++at;
  pid_t v = 0;
  auto [end, ec] = std::from_chars(status.data() + at, status.data() + status.size(), v);
  if (ec != std::errc() || v <= 0) return std::nullopt;
  return v;
}

std::optional<pid_t> ReadTgid(pid_t tid) {
  auto text = ReadSmallFile(fmt::format("/proc/{}/status", tid));
  if (!text.ok()) return std::nullopt;
  return ParseTgid(*text);
}

std::optional<std::pair<uint32_t, uint32_t>> ParseUids(std::string_view status) {
  constexpr std::string_view kField = "\nUid:";
  size_t at = status.rfind("Uid:", 0) == 0 ? 0 : status.find(kField);
  if (at == std::string_view::npos) return std::nullopt;
  at = status.find(':', at) + 1;
  uint32_t ids[2];
  for (uint32_t& id : ids) {
    while (at < status.size() && (status[at] == ' ' || status[at] == '\t')) ++at;
    auto [end, ec] = std::from_chars(status.data() + at, status.data() + status.size(), id);
    if (ec != std::errc()) return std::nullopt;
    at = static_cast<size_t>(end - status.data());
  }
  return std::make_pair(ids[0], ids[1]);
}

std::optional<std::pair<uint32_t, uint32_t>> ReadUids(pid_t pid) {
  auto text = ReadSmallFile(fmt::format("/proc/{}/status", pid));
  if (!text.ok()) return std::nullopt;
  return ParseUids(*text);
}

std::vector<pid_t> ListProcesses() { return ListNumericDir("/proc"); }

std::vector<pid_t> ListThreads(pid_t pid) { return ListNumericDir(fmt::format("/proc/{}/task", pid)); }

std::string ReadComm(pid_t pid, pid_t tid) {
  auto text = ReadSmallFile(fmt::format("/proc/{}/task/{}/comm", pid, tid));
  if (!text.ok()) return {};
  std::string s = std::move(*text);
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

}  // namespace mmap3
