#include "files.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cerrno>
#include <chrono>

#include <fmt/format.h>

namespace mmap3 {
namespace {

const char* KindOf(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return "not a regular file";
  }
}

// O_PATH opens nothing: no device driver's open(), no FIFO rendezvous.
// Only once fstat() says it is a regular file is it opened for reading,
// through the descriptor, so the file checked is the file read.
Result<UniqueFd> ReopenIfRegular(UniqueFd pfd, const std::string& shown) {
  struct stat st;
  if (fstat(pfd.get(), &st) != 0) return ErrnoStatus("stat " + shown);
  if (!S_ISREG(st.st_mode))
    return Status::Failure(shown + ": " + KindOf(st.st_mode) + ", not a regular file");
  const std::string self = "/proc/self/fd/" + std::to_string(pfd.get());
  UniqueFd fd(open(self.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + shown);
  return fd;
}

}  // namespace

void UniqueFd::Reset(int fd) {
  // close() releases the descriptor even when it fails (Linux), so it is
  // never retried: the number may already belong to another thread's file.
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

Status UniqueFd::Close(const std::string& what) {
  if (fd_ < 0) return {};
  const int fd = Release();
  if (close(fd) != 0) return ErrnoStatus("close " + what);
  return {};
}

Result<UniqueFd> OpenRegularFile(const std::string& path) {
  UniqueFd pfd(open(path.c_str(), O_PATH | O_CLOEXEC));
  if (!pfd.valid()) return ErrnoStatus("open " + path);
  return ReopenIfRegular(std::move(pfd), path);
}

Result<UniqueFd> OpenRegularFileAt(int dir, const std::string& name, const std::string& shown) {
  // With O_PATH, O_NOFOLLOW opens a symlink itself instead of failing, so
  // fstat() sees it and it is refused like any other non-regular file.
  UniqueFd pfd(openat(dir, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!pfd.valid()) return ErrnoStatus("open " + shown);
  return ReopenIfRegular(std::move(pfd), shown);
}

std::string PrintableName(std::string_view name) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(name.size());
  for (unsigned char c : name) {
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string PrintableUtf8(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  auto escape = [&](unsigned char c) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 0xf];
  };
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) {
        escape(c);
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // The length a lead byte announces, and the smallest code point that
    // needs it (anything below is overlong).
    size_t len = 0;
    uint32_t cp = 0, min = 0;
    if ((c & 0xe0) == 0xc0) {
      len = 2, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    }
    bool ok = len != 0 && i + len <= text.size();
    for (size_t k = 1; ok && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xc0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    ok = ok && cp >= min && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff) &&
         !(cp >= 0x80 && cp <= 0x9f) && cp != 0xfffe && cp != 0xffff;
    if (!ok) {
      escape(c);  // this byte alone; the next starts afresh
      ++i;
      continue;
    }
    out.append(text.substr(i, len));
    i += len;
  }
  return out;
}

Status WriteAll(int fd, const void* data, size_t size, uint64_t offset, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    ssize_t n = pwrite(fd, p, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write " + path);
    }
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return {};
}

Status WriteToFd(int fd, std::string_view data, const std::string& what) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write " + what);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

namespace {
bool IsTrustedStat(const struct stat& st) {
  return (st.st_uid == 0 || st.st_uid == geteuid()) && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}
}  // namespace

bool IsTrustedFd(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && IsTrustedStat(st);
}

bool IsTrustedFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && IsTrustedStat(st);
}

std::string HiddenName(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  // Short enough for any base name that fits in NAME_MAX itself.
  return fmt::format(".{}.{:016x}", base.substr(0, 200), RandomWord());
}

Result<UniqueFd> OpenOutputInPlace(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return UniqueFd();
  if (S_ISLNK(st.st_mode)) {
    // The reader's own descriptors, which only its caller can have set up:
    // duplicated, not opened again, so that the output goes on where the
    // caller's descriptor is (after what a shell script wrote before it,
    // at the end of a file opened to append), as with `-o -`.
    int own = -1;
    if (path == "/dev/stdout") own = 1;
    if (path == "/dev/stderr") own = 2;
    for (std::string_view dir : {"/dev/fd/", "/proc/self/fd/"}) {
      if (!path.starts_with(dir)) continue;
      const std::string_view n = std::string_view(path).substr(dir.size());
      int v = 0;
      auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
      if (ec == std::errc() && end == n.data() + n.size() && !n.empty()) own = v;
    }
    if (own < 0) return UniqueFd();
    UniqueFd fd(fcntl(own, F_DUPFD_CLOEXEC, 3));
    if (!fd.valid()) return ErrnoStatus("duplicate the descriptor of " + path);
    return fd;
  }
  if (st.st_uid != 0 && st.st_uid != geteuid())
    return Status::Failure(fmt::format(
        "{} is {} owned by uid {}: not writing the output into another user's {} (remove it, "
        "or write the output elsewhere)",
        path, KindOf(st.st_mode), st.st_uid, S_ISFIFO(st.st_mode) ? "FIFO" : "file"));
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + path);
  struct stat opened;
  if (fstat(fd.get(), &opened) != 0) return ErrnoStatus("fstat " + path);
  if (opened.st_dev != st.st_dev || opened.st_ino != st.st_ino)
    return Status::Failure(path + " was replaced while it was opened: not writing to it");
  return fd;
}

Status ReplaceFile(const std::string& path, std::string_view data) {
  Result<UniqueFd> in_place = OpenOutputInPlace(path);
  if (!in_place.ok()) return in_place.status();
  if (in_place->valid()) {
    UniqueFd fd = std::move(*in_place);
    if (isatty(fd.get()))
      return Status::Failure(path + " is a terminal: not writing binary data to it");
    if (Status s = WriteToFd(fd.get(), data, path); !s.ok()) return s;
    return fd.Close(path);
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  UniqueFd dirfd(open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dirfd.valid()) return ErrnoStatus("open the directory of " + path);
  UniqueFd fd;
  std::string temp;
  for (unsigned attempt = 0; !fd.valid() && attempt < 64; ++attempt) {
    temp = HiddenName(path);
    fd.Reset(openat(dirfd.get(), temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    0666));
    if (!fd.valid() && errno != EEXIST) return ErrnoStatus("create a file beside " + path);
  }
  if (!fd.valid()) return Status::Failure("no unused temporary name beside " + path);
  Status s = WriteToFd(fd.get(), data, path);
  if (s.ok() && fsync(fd.get()) != 0) s = ErrnoStatus("fsync " + path);
  if (s.ok()) s = fd.Close(path);
  if (s.ok() && renameat(dirfd.get(), temp.c_str(), dirfd.get(), base.c_str()) != 0)
    s = ErrnoStatus("rename the finished file to " + path);
  if (!s.ok()) unlinkat(dirfd.get(), temp.c_str(), 0);
  return s;
}

Result<std::string> ReadAllFd(int fd, uint64_t max_bytes, const std::string& path) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = pread(fd, buf, sizeof(buf), static_cast<off_t>(out.size()));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read " + path);
    }
    if (n == 0) return out;
    if (static_cast<uint64_t>(n) > max_bytes - out.size())
      return Status::Failure(path + ": larger than " + std::to_string(max_bytes) + " bytes");
    out.append(buf, static_cast<size_t>(n));
  }
}

uint64_t RandomWord() {
  uint64_t r = 0;
  if (getrandom(&r, sizeof(r), 0) != static_cast<ssize_t>(sizeof(r))) {
    static std::atomic<uint64_t> counter{0};
    r = (static_cast<uint64_t>(getpid()) << 32) ^ counter.fetch_add(1) ^
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  return r;
}

}  // namespace mmap3
