#include "build_id_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <liburing.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "elf_file.h"

namespace mmap3 {
namespace {

// d_path() appends this to the names of unlinked files.
constexpr std::string_view kDeletedSuffix = " (deleted)";
constexpr const char* kLinkDir = ".build-id";
// Directories in a stored <path>; real ones have a few dozen at most.
constexpr size_t kMaxComponents = 64;
// How deep a walk of the cache (measuring its size) goes: what we store is
// at most kMaxComponents + 2 deep.  Each level holds a descriptor.
constexpr int kMaxWalkDepth = kMaxComponents + 8;

std::string HumanSize(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  double v = static_cast<double>(bytes);
  size_t unit = 0;
  while (v >= 1024 && unit + 1 < std::size(kUnits)) {
    v /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", v, kUnits[unit]);
}

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) {
    if (!out.empty()) out += '/';
    out += n;
  }
  return out;
}

// The directories under which `recorded` (a mapping's file name) is
// stored, or why it cannot be stored.  The kernel gives canonical absolute
// paths, but the bytes are the user's: nothing may lead out of the cache or
// into its .build-id directory.
Result<std::vector<std::string>> CacheComponents(const std::string& recorded) {
  std::string_view p = recorded;
  if (p.size() > kDeletedSuffix.size() && p.substr(p.size() - kDeletedSuffix.size()) == kDeletedSuffix)
    p.remove_suffix(kDeletedSuffix.size());
  auto refuse = [&](std::string_view why) {
    return Status::Failure(fmt::format("'{}': {}", PrintableName(recorded), why));
  };
  if (p.size() > BuildIdCache::kMaxPathLength)
    return refuse(fmt::format("longer than {} bytes", BuildIdCache::kMaxPathLength));
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= p.size()) {
    size_t slash = p.find('/', pos);
    if (slash == std::string_view::npos) slash = p.size();
    const std::string_view name = p.substr(pos, slash - pos);
    pos = slash + 1;
    if (name.empty() || name == ".") continue;
    if (name == "..") return refuse("a '..' component");
    if (name.find('\0') != std::string_view::npos) return refuse("a NUL byte");
    if (name.size() > NAME_MAX) return refuse(fmt::format("a name longer than {} bytes", NAME_MAX));
    out.emplace_back(name);
  }
  if (out.empty()) return refuse("no file name");
  if (out.size() > kMaxComponents) return refuse(fmt::format("over {} directories", kMaxComponents));
  if (out[0] == kLinkDir) return refuse(fmt::format("it would be stored inside {}", kLinkDir));
  return out;
}

// The file's name under <path>/<build-id>/: perf calls the vDSO's "vdso".
std::string CacheFileName(const std::string& path) { return path == "[vdso]" ? "vdso" : "elf"; }

bool ValidFileName(const std::string& name) {
  return !name.empty() && name.size() <= NAME_MAX && name[0] != '.' &&
         name.find('/') == std::string::npos && name.find('\0') == std::string::npos;
}

bool IsNoSpace(const Status& s) { return s.error_number() == ENOSPC || s.error_number() == EDQUOT; }

// Unique is enough when RandomWord() cannot draw: O_EXCL does the rest.
std::string RandomSuffix() { return fmt::format("{:016x}", RandomWord()); }

// Opens <root>/<names[0]>/.../<names[count-1]> one directory at a time with
// O_NOFOLLOW, so that no symlink below the root is ever followed, creating
// the missing ones when `create`.  A symlink is refused (*refused = true);
// `root_path` names the root in messages.
Result<UniqueFd> OpenDirs(int root, const std::string& root_path,
                          const std::vector<std::string>& names, size_t count, bool create,
                          bool* refused) {
  *refused = false;
  UniqueFd current(dup(root));  // the caller keeps the root
  if (!current.valid()) return ErrnoStatus("dup");
  std::string shown = root_path;
  constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  for (size_t i = 0; i < count; ++i) {
    const char* name = names[i].c_str();
    shown += "/" + PrintableName(names[i]);
    UniqueFd next(openat(current.get(), name, kFlags));
    if (!next.valid() && errno == ENOENT && create) {
      // EEXIST: another writer made it meanwhile; the open below checks
      // what it made.
      if (mkdirat(current.get(), name, 0755) != 0 && errno != EEXIST)
        return ErrnoStatus("mkdir " + shown);
      next.Reset(openat(current.get(), name, kFlags));
    }
    if (!next.valid()) {
      const int error = errno;
      struct stat st;
      if ((error == ELOOP || error == ENOTDIR) &&
          fstatat(current.get(), name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
        *refused = true;
        return Status::Failure(shown +
                               ": a symbolic link inside the build-id cache; not followed");
      }
      return Status::FromErrno(error, "open " + shown);
    }
    current = std::move(next);
  }
  return current;
}

std::optional<std::string> ReadLinkAt(int dir, const std::string& name) {
  char buf[PATH_MAX];
  ssize_t n = readlinkat(dir, name.c_str(), buf, sizeof(buf));
  if (n < 0 || static_cast<size_t>(n) >= sizeof(buf)) return std::nullopt;
  return std::string(buf, static_cast<size_t>(n));
}

// A file being written, before it has its name.
struct TempFile {
  UniqueFd fd;
  int dir = -1;      // borrowed
  std::string name;  // "" for an O_TMPFILE (no name at all)

  TempFile() = default;
  TempFile(TempFile&& other) noexcept
      : fd(std::move(other.fd)), dir(other.dir), name(std::exchange(other.name, {})) {}
  TempFile& operator=(TempFile&&) = delete;
  ~TempFile() {
    if (!name.empty()) unlinkat(dir, name.c_str(), 0);  // never published
  }
};

// A file in `dir` that no one else can open by name: O_TMPFILE, or, on a
// filesystem without it, a fresh random name created with O_EXCL (which
// also refuses a symlink planted under that name).
Result<TempFile> CreateTemp(int dir, const std::string& shown_dir, const std::string& base,
                            mode_t mode, bool use_tmpfile) {
  TempFile t;
  t.dir = dir;
  if (use_tmpfile) {
    t.fd.Reset(openat(dir, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, mode));
    if (t.fd.valid()) return t;
    // EOPNOTSUPP: this filesystem has none; EISDIR: a kernel before 3.11.
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
      return ErrnoStatus("create a temporary file in " + shown_dir);
  }
  for (int attempt = 0; attempt < 64; ++attempt) {
    std::string name = "." + base + ".tmp." + RandomSuffix();
    t.fd.Reset(openat(dir, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
    if (t.fd.valid()) {
      t.name = std::move(name);
      return t;
    }
    if (errno != EEXIST) return ErrnoStatus("create " + shown_dir + "/" + name);
  }
  return Status::Failure("no unused temporary name in " + shown_dir);
}

// Gives an O_TMPFILE a fresh name in its directory (for a rename).
Status NameTemp(TempFile& t, const std::string& base, const std::string& shown_dir) {
  const std::string self = "/proc/self/fd/" + std::to_string(t.fd.get());
  for (int attempt = 0; attempt < 64; ++attempt) {
    std::string name = "." + base + ".tmp." + RandomSuffix();
    if (linkat(AT_FDCWD, self.c_str(), t.dir, name.c_str(), AT_SYMLINK_FOLLOW) == 0) {
      t.name = std::move(name);
      return {};
    }
    if (errno != EEXIST) return ErrnoStatus("link a temporary file into " + shown_dir);
  }
  return Status::Failure("no unused temporary name in " + shown_dir);
}

// Publishes the verified file `t` as `name` in its directory.  linkat never
// replaces, so a complete copy another writer published first is kept
// (*kept = true) if `accept` takes it; anything else under the name (a
// truncated or foreign file, a symlink) is replaced by renameat, which
// neither follows nor writes through it.
Status Publish(TempFile& t, const std::string& name, const std::string& shown_dir,
               const std::function<bool(int dir)>& accept, bool* kept) {
  *kept = false;
  const std::string shown = shown_dir + "/" + name;
  int rc;
  if (t.name.empty()) {
    const std::string self = "/proc/self/fd/" + std::to_string(t.fd.get());
    rc = linkat(AT_FDCWD, self.c_str(), t.dir, name.c_str(), AT_SYMLINK_FOLLOW);
  } else {
    rc = linkat(t.dir, t.name.c_str(), t.dir, name.c_str(), 0);
  }
  if (rc == 0) return {};  // a named temporary goes with the TempFile
  // EPERM, EOPNOTSUPP: no hard links on this filesystem; rename instead.
  if (errno != EEXIST && (t.name.empty() || (errno != EPERM && errno != EOPNOTSUPP)))
    return ErrnoStatus("link " + shown);
  if (errno == EEXIST && accept(t.dir)) {
    *kept = true;
    return {};
  }
  if (t.name.empty()) {
    if (Status s = NameTemp(t, name, shown_dir); !s.ok()) return s;
  }
  if (renameat(t.dir, t.name.c_str(), t.dir, name.c_str()) != 0) return ErrnoStatus("rename onto " + shown);
  t.name.clear();
  return {};
}

// Makes .build-id/<xx>/<rest> a link to ../../<components>/<hex>.  A link
// that points elsewhere (another path with this id, or a planted one) or
// anything else under that name is replaced atomically.
Status EnsureLink(int root, const std::string& root_path, const std::vector<std::string>& components,
                  const std::string& hex, bool* refused) {
  const std::string target = "../../" + Join(components) + "/" + hex;
  const std::vector<std::string> names = {kLinkDir, hex.substr(0, 2)};
  auto dir = OpenDirs(root, root_path, names, names.size(), /*create=*/true, refused);
  if (!dir.ok()) return dir.status();
  const std::string name = hex.substr(2);
  const std::string shown = root_path + "/" + kLinkDir + "/" + hex.substr(0, 2) + "/" + name;
  if (ReadLinkAt(dir->get(), name) == target) return {};
  if (symlinkat(target.c_str(), dir->get(), name.c_str()) == 0) return {};
  if (errno != EEXIST) return ErrnoStatus("symlink " + shown);
  for (int attempt = 0; attempt < 64; ++attempt) {
    const std::string tmp = ".link.tmp." + RandomSuffix();
    if (symlinkat(target.c_str(), dir->get(), tmp.c_str()) != 0) {
      if (errno == EEXIST) continue;
      return ErrnoStatus("symlink " + shown);
    }
    if (renameat(dir->get(), tmp.c_str(), dir->get(), name.c_str()) != 0) {
      Status s = ErrnoStatus("rename onto " + shown);
      unlinkat(dir->get(), tmp.c_str(), 0);
      return s;
    }
    return {};
  }
  return Status::Failure("no unused temporary name in " + shown);
}

// Copies `in` to `out` with io_uring, one read and one write in flight, in
// 1 MiB chunks (DSOs are small enough that a deeper pipeline buys nothing,
// and the worker is off the record path).  Reads at most `expected` + 1
// bytes: a source that grew is a mismatch, not a reason to copy on.
Result<uint64_t> CopyWithUring(int in, int out, uint64_t expected, const std::string& out_shown) {
  io_uring ring;
  int rc = io_uring_queue_init(4, &ring, 0);
  if (rc < 0) return Status::FromErrno(-rc, "io_uring_queue_init");
  std::vector<char> buf(1 << 20);
  uint64_t offset = 0;
  Status status;
  while (offset <= expected) {
    const uint64_t want = std::min<uint64_t>(buf.size(), expected + 1 - offset);
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_read(sqe, in, buf.data(), static_cast<unsigned>(want), offset);
    io_uring_submit(&ring);
    io_uring_cqe* cqe;
    rc = io_uring_wait_cqe(&ring, &cqe);
    if (rc < 0) {
      status = Status::FromErrno(-rc, "io_uring_wait_cqe");
      break;
    }
    int n = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    if (n == -EINTR || n == -EAGAIN) continue;
    if (n < 0) {
      status = Status::FromErrno(-n, "read the mapped file");
      break;
    }
    if (n == 0) break;
    int written = 0;
    while (written < n) {
      sqe = io_uring_get_sqe(&ring);
      io_uring_prep_write(sqe, out, buf.data() + written, static_cast<unsigned>(n - written),
                          offset + static_cast<uint64_t>(written));
      io_uring_submit(&ring);
      rc = io_uring_wait_cqe(&ring, &cqe);
      if (rc < 0) {
        status = Status::FromErrno(-rc, "io_uring_wait_cqe");
        break;
      }
      int w = cqe->res;
      io_uring_cqe_seen(&ring, cqe);
      if (w == -EINTR || w == -EAGAIN) continue;
      if (w <= 0) {
        status = Status::FromErrno(w < 0 ? -w : EIO, "write " + out_shown);
        break;
      }
      written += w;
    }
    if (!status.ok()) break;
    offset += static_cast<uint64_t>(n);
  }
  io_uring_queue_exit(&ring);
  if (!status.ok()) return status;
  return offset;
}

// Whether bytes [0, contents.size()) of `fd` are `contents`.
Status CompareContents(int fd, std::string_view contents, const std::string& shown) {
  std::vector<char> buf(1 << 16);
  uint64_t offset = 0;
  while (offset < contents.size()) {
    const size_t want = std::min<uint64_t>(buf.size(), contents.size() - offset);
    ssize_t n = pread(fd, buf.data(), want, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read " + shown);
    if (n == 0) return Status::Failure(shown + ": shorter than what was written");
    if (std::memcmp(buf.data(), contents.data() + offset, static_cast<size_t>(n)) != 0)
      return Status::Failure(shown + ": reads back different from what was written");
    offset += static_cast<uint64_t>(n);
  }
  return {};
}

// Sum of the sizes of the regular files under `dir`, not following
// symlinks.  Unreadable parts count as empty: this only sets the limit.
uint64_t MeasureTree(int dir, int depth) {
  if (depth > kMaxWalkDepth) return 0;
  UniqueFd own(dup(dir));
  if (!own.valid()) return 0;
  DIR* d = fdopendir(own.get());
  if (d == nullptr) return 0;
  (void)own.Release();  // closedir() closes it
  uint64_t total = 0;
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISREG(st.st_mode)) {
      total += static_cast<uint64_t>(st.st_size);
    } else if (S_ISDIR(st.st_mode)) {
      UniqueFd sub(openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (sub.valid()) total += MeasureTree(sub.get(), depth + 1);
    }
  }
  closedir(d);
  return total;
}

}  // namespace

std::string DefaultBuildIdCacheDir() {
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr && *home != '\0' ? home : "/root") + "/.debug";
}

std::string BuildIdCache::ElfPath(const std::string& dir, const std::string& path,
                                  const BuildId& id) {
  auto components = CacheComponents(path);
  if (!components.ok()) return "";
  return dir + "/" + Join(*components) + "/" + id.Hex() + "/" + CacheFileName(path);
}

std::string BuildIdCache::KallsymsPath(const std::string& dir, const BuildId& id) {
  return dir + "/[kernel.kallsyms]/" + id.Hex() + "/kallsyms";
}

std::string BuildIdCache::ModuleSymbolsPath(const std::string& dir, const std::string& module,
                                            const BuildId& id) {
  return dir + "/[" + module + "]/" + id.Hex() + "/symbols";
}

Result<UniqueFd> BuildIdCache::OpenEntry(const std::string& dir, const std::string& path,
                                         const BuildId& id, const std::string& file_name) {
  if (!ValidFileName(file_name))
    return Status::Failure("'" + PrintableName(file_name) + "': not a cache file name");
  auto components = CacheComponents(path);
  if (!components.ok()) return components.status();
  UniqueFd root(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return ErrnoStatus("open the build-id cache directory " + dir);
  std::vector<std::string> entry = std::move(*components);
  entry.push_back(id.Hex());
  // The file carries no build-id: it is the one stored for `id` only if no
  // one else could have renamed it (or a directory above it) into place,
  // i.e. could have written to any directory below <dir>.  (<dir> itself is
  // the user's choice; a shared cache is world-writable.)
  UniqueFd entry_dir(dup(root.get()));
  if (!entry_dir.valid()) return ErrnoStatus("dup");
  std::string shown_dir = dir;
  for (const std::string& name : entry) {
    bool refused = false;
    auto next = OpenDirs(entry_dir.get(), shown_dir, {name}, 1, /*create=*/false, &refused);
    if (!next.ok()) return next.status();
    shown_dir += "/" + PrintableName(name);
    struct stat st;
    if (fstat(next->get(), &st) != 0) return ErrnoStatus("stat " + shown_dir);
    const bool others_write = (st.st_uid != geteuid() && st.st_uid != 0) ||
                              (st.st_mode & S_IWOTH) != 0 ||
                              ((st.st_mode & S_IWGRP) != 0 && st.st_gid != getegid());
    if (others_write)
      return Status::Failure(shown_dir +
                             ": a directory others could write to (entries could be renamed "
                             "into it); not used");
    entry_dir = std::move(*next);
  }
  const std::string shown = dir + "/" + PrintableName(Join(entry)) + "/" + file_name;
  auto fd = OpenRegularFileAt(entry_dir.get(), file_name, shown);
  if (!fd.ok()) return fd.status();
  struct stat st;
  if (fstat(fd->get(), &st) != 0) return ErrnoStatus("stat " + shown);
  if ((st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & 0022) != 0)
    return Status::Failure(shown + ": writable by someone other than us or root; not used");
  return fd;
}

std::string BuildIdCache::LinkPath(const std::string& dir, const BuildId& id) {
  std::string hex = id.Hex();
  return dir + "/" + kLinkDir + "/" + hex.substr(0, 2) + "/" + hex.substr(2);
}

struct BuildIdCache::Request {
  BuildId id;
  std::string path;
  std::string file_name;
  bool elf = true;            // source_fd is an ELF image (borrowed), else
  int source_fd = -1;
  std::string_view contents;  // the bytes to store
  mode_t mode = 0444;         // for contents
  const Verifier* accept_existing = nullptr;
};

BuildIdCache::BuildIdCache(std::string dir) : BuildIdCache(std::move(dir), Limits()) {}

BuildIdCache::BuildIdCache(std::string dir, Limits limits)
    : dir_(std::move(dir)), limits_(limits) {}

Status BuildIdCache::Insert(const BuildId& id, const std::string& path, int fd,
                            const std::string& file_name) {
  Request r;
  r.id = id;
  r.path = path;
  r.file_name = file_name.empty() ? CacheFileName(path) : file_name;
  r.source_fd = fd;
  return InsertEntry(r);
}

Status BuildIdCache::InsertContents(const BuildId& id, const std::string& path,
                                    const std::string& file_name, std::string_view contents,
                                    mode_t mode, const Verifier& accept_existing) {
  Request r;
  r.id = id;
  r.path = path;
  r.file_name = file_name;
  r.elf = false;
  r.contents = contents;
  r.mode = mode;
  r.accept_existing = accept_existing ? &accept_existing : nullptr;
  return InsertEntry(r);
}

Result<int> BuildIdCache::Root() {
  std::call_once(root_once_, [this] {
    // The root is the user's choice: created and opened as given, symlinks
    // included.  Nothing below it is followed.
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) {
      root_ = Status::FromErrno(ec.value(), "create the build-id cache directory " + dir_);
      return;
    }
    UniqueFd fd(open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid()) {
      root_ = ErrnoStatus("open the build-id cache directory " + dir_);
      return;
    }
    root_ = std::move(fd);
  });
  if (!root_.ok()) return root_.status();
  return root_->get();
}

BuildIdCache::Outcome BuildIdCache::Reserve(const Request& r, uint64_t size, Status* status) {
  // Measured once, at the first copy (not at startup: a large cache takes a
  // while to walk, and runs where nothing is copied need not pay for it).
  std::call_once(measure_once_, [this] {
    auto root = Root();
    const uint64_t measured = root.ok() ? MeasureTree(*root, 0) : 0;
    std::lock_guard lock(mu_);
    used_bytes_ += measured;
  });
  std::lock_guard lock(mu_);
  if (!stopped_.empty()) {
    *status = Status::Failure("not copied: " + stopped_);
    return Outcome::kSkipped;
  }
  if (size > limits_.max_file_bytes) {
    *status = Status::Failure(fmt::format(
        "'{}' ({}) is over the per-file limit of {} (--buildid-cache-max-file); not cached",
        PrintableName(r.path), HumanSize(size), HumanSize(limits_.max_file_bytes)));
    return Outcome::kTooLarge;
  }
  if (used_bytes_ > limits_.max_bytes || size > limits_.max_bytes - used_bytes_) {
    stopped_ = fmt::format("the build-id cache {} ({}) would grow past its limit of {} "
                           "(--buildid-cache-max) with '{}' ({})",
                           dir_, HumanSize(used_bytes_), HumanSize(limits_.max_bytes),
                           PrintableName(r.path), HumanSize(size));
    *status = Status::Failure(stopped_);
    return Outcome::kNoSpace;
  }
  used_bytes_ += size;
  return Outcome::kCopied;
}

void BuildIdCache::Release(uint64_t size) {
  std::lock_guard lock(mu_);
  used_bytes_ -= std::min(used_bytes_, size);
}

BuildIdCache::Outcome BuildIdCache::DoInsert(const Request& r, Status* status) {
  auto fail = [&](Outcome outcome, Status s) {
    *status = std::move(s);
    return outcome;
  };
  auto failed = [&](Status s) {
    return fail(IsNoSpace(s) ? Outcome::kNoSpace : Outcome::kFailed, std::move(s));
  };
  if (r.id.size() < 2)  // the link's name is the id's hex after its first byte
    return fail(Outcome::kFailed, Status::Failure(fmt::format(
                                      "'{}': a build-id of {} byte(s) cannot be cached",
                                      PrintableName(r.path), r.id.size())));
  if (!ValidFileName(r.file_name))
    return fail(Outcome::kRefused,
                Status::Failure("'" + PrintableName(r.file_name) + "': not a cache file name"));
  auto components = CacheComponents(r.path);
  if (!components.ok())
    return fail(Outcome::kRefused, Status::Failure(components.status().context() + "; not cached"));
  auto root = Root();
  if (!root.ok()) return failed(root.status());

  const std::string hex = r.id.Hex();
  std::vector<std::string> entry = *components;
  entry.push_back(hex);
  const std::string entry_shown = dir_ + "/" + PrintableName(Join(entry));
  const std::string file_shown = entry_shown + "/" + r.file_name;

  // What a complete entry must be: the source's size, taken now, and its
  // build-id (an ELF image) or the very bytes (contents).
  uint64_t size;
  mode_t mode;
  Verifier verify;
  // The copy's notes are more than the reader reads: its build-id cannot be
  // checked, which says nothing of whether the file changed.
  bool notes_unread = false;
  if (r.elf) {
    struct stat st;
    if (fstat(r.source_fd, &st) != 0) return failed(ErrnoStatus("stat " + PrintableName(r.path)));
    if (!S_ISREG(st.st_mode))
      return fail(Outcome::kFailed, Status::Failure(PrintableName(r.path) + ": not a regular file"));
    size = static_cast<uint64_t>(st.st_size);
    // The copy may be read as its source could be, by the cache's owner:
    // a file only its owner could read does not become world-readable.
    mode = (st.st_mode & 0444) | 0400;
    verify = [&, size](int fd, uint64_t got) -> Status {
      if (got != size)
        return Status::Failure(fmt::format("{}: {} bytes, the source has {}", file_shown, got, size));
      auto id = ReadBuildIdFromFd(fd, file_shown, &notes_unread);
      if (!id.ok()) return id.status();
      if (*id != r.id)
        return Status::Failure(fmt::format("{}: build-id {}, not {}", file_shown,
                                           id->empty() ? "none" : id->Hex(), hex));
      return {};
    };
  } else {
    size = r.contents.size();
    mode = r.mode;
    verify = [&, size](int fd, uint64_t got) -> Status {
      if (got != size)
        return Status::Failure(fmt::format("{}: {} bytes, not {}", file_shown, got, size));
      return CompareContents(fd, r.contents, file_shown);
    };
  }
  // An entry already there is trusted only if no one else could have put
  // it there or changed it (ours or root's, writable by its owner alone),
  // and it passes the checks.  Anything else is replaced.
  const uid_t euid = geteuid();
  auto accept = [&](int dir) {
    auto fd = OpenRegularFileAt(dir, r.file_name, file_shown);
    struct stat st;
    if (!fd.ok() || fstat(fd->get(), &st) != 0) return false;
    if ((st.st_uid != euid && st.st_uid != 0) || (st.st_mode & 0022) != 0) return false;
    const Verifier& check = r.accept_existing != nullptr ? *r.accept_existing : verify;
    return check(fd->get(), static_cast<uint64_t>(st.st_size)).ok();
  };
  bool refused = false;
  auto link = [&](Outcome done) {
    Status s = EnsureLink(*root, dir_, *components, hex, &refused);
    if (s.ok()) return done;
    return refused ? fail(Outcome::kRefused, std::move(s)) : failed(std::move(s));
  };

  {
    auto dir = OpenDirs(*root, dir_, entry, entry.size(), /*create=*/false, &refused);
    if (dir.ok() && accept(dir->get())) return link(Outcome::kPresent);
    if (!dir.ok() && refused) return fail(Outcome::kRefused, dir.status());
    if (!dir.ok() && dir.status().error_number() != ENOENT) return failed(dir.status());
  }

  if (Outcome o = Reserve(r, size, status); o != Outcome::kCopied) return o;
  struct Reservation {
    BuildIdCache* cache;
    uint64_t size;
    ~Reservation() {
      if (size != 0) cache->Release(size);
    }
  } reservation{this, size};

  auto dir = OpenDirs(*root, dir_, entry, entry.size(), /*create=*/true, &refused);
  if (!dir.ok()) return refused ? fail(Outcome::kRefused, dir.status()) : failed(dir.status());
  auto tmp = CreateTemp(dir->get(), entry_shown, r.file_name, mode, use_tmpfile_);
  if (!tmp.ok()) return failed(tmp.status());
  const std::string tmp_shown = file_shown + " (temporary)";
  if (r.elf) {
    auto copied = CopyWithUring(r.source_fd, tmp->fd.get(), size, tmp_shown);
    if (!copied.ok()) return failed(copied.status());
    // The descriptor pins the inode, not its contents: a file truncated,
    // extended or rewritten since it was mapped must not be cached as
    // this id.  Its size before, during and after the copy must agree.
    struct stat after;
    if (fstat(r.source_fd, &after) != 0) return failed(ErrnoStatus("stat " + PrintableName(r.path)));
    if (*copied != size || static_cast<uint64_t>(after.st_size) != size)
      return fail(Outcome::kMismatch,
                  Status::Failure(fmt::format("'{}' changed while it was cached ({} bytes "
                                              "before, {} copied, {} after)",
                                              PrintableName(r.path), size, *copied, after.st_size)));
  } else if (Status s = WriteAll(tmp->fd.get(), r.contents.data(), r.contents.size(), 0, tmp_shown);
             !s.ok()) {
    return failed(s);
  }
  if (fsync(tmp->fd.get()) != 0) return failed(ErrnoStatus("fsync " + tmp_shown));
  struct stat written;
  if (fstat(tmp->fd.get(), &written) != 0) return failed(ErrnoStatus("stat " + tmp_shown));
  // Read back from the descriptor: the path could name another file by now.
  if (Status s = verify(tmp->fd.get(), static_cast<uint64_t>(written.st_size)); !s.ok()) {
    if (!r.elf) return fail(Outcome::kFailed, std::move(s));  // our own bytes read back wrong
    if (notes_unread)
      return fail(Outcome::kUnchecked, Status::Failure(fmt::format(
                                           "'{}' not cached: {}", PrintableName(r.path),
                                           s.ToString())));
    return fail(Outcome::kMismatch,
                Status::Failure(fmt::format("'{}' changed before it could be cached ({})",
                                            PrintableName(r.path), s.ToString())));
  }
  if (before_publish_) before_publish_(r.id);
  bool kept = false;
  if (Status s = Publish(*tmp, r.file_name, entry_shown, accept, &kept); !s.ok()) return failed(s);
  if (kept) return link(Outcome::kPresent);  // another writer was first: its copy is as good
  reservation.size = 0;
  return link(Outcome::kCopied);
}

Status BuildIdCache::InsertEntry(const Request& r) {
  Status status;
  const Outcome outcome = DoInsert(r, &status);
  std::string warning;
  {
    std::lock_guard lock(mu_);
    switch (outcome) {
      case Outcome::kCopied: ++stats_.copied; break;
      case Outcome::kPresent: ++stats_.present; break;
      case Outcome::kMismatch: ++stats_.mismatch; break;
      case Outcome::kUnchecked: ++stats_.unchecked; break;
      case Outcome::kFailed: ++stats_.failed; break;
      case Outcome::kTooLarge: ++stats_.too_large; break;
      case Outcome::kSkipped: ++stats_.skipped; break;
      case Outcome::kRefused:
        ++stats_.refused;
        if (!warned_refusal_) {
          warned_refusal_ = true;
          warning = "build-id cache: " + status.ToString() +
                    " (further refusals are only counted)";
        }
        break;
      case Outcome::kNoSpace:
        // The first to find the cache full or the filesystem out of space
        // stops all copying and says so, now rather than at the end.
        ++stats_.skipped;
        if (stopped_.empty()) {
          stopped_ = fmt::format("the build-id cache {} is out of space: {}", dir_,
                                 status.ToString());
        }
        if (!warned_stop_) {
          warned_stop_ = true;
          warning = stopped_ + "; no more files are copied into it during this capture";
        }
        break;
    }
  }
  if (!warning.empty() && on_warning_) on_warning_(warning);
  return status;
}

void BuildIdCache::Start() {
  std::lock_guard lock(mu_);
  if (started_) return;
  started_ = true;
  // The worker must never take process-directed signals: the capture waits
  // for SIGINT/SIGTERM/SIGCHLD on a signalfd, which only sees signals that
  // stay pending, i.e. blocked in every thread.  A thread inherits the mask
  // of its creator, so block everything around the creation.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  live_worker_ = std::thread([this] { Run(&live_); });
  background_worker_ = std::thread([this] { Run(&background_); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void BuildIdCache::Enqueue(Job job, Priority priority) {
  std::lock_guard lock(mu_);
  if (stopping_ || !seen_.insert(job.id).second) return;  // job.fd is closed here
  (priority == Priority::kLive ? live_ : background_).push_back(std::move(job));
  cv_.notify_all();  // two workers wait on one condition
}

void BuildIdCache::Add(const BuildId& id, const std::string& path, UniqueFd fd,
                       Priority priority) {
  Job job;
  job.id = id;
  job.path = path;
  job.fd = std::move(fd);
  Enqueue(std::move(job), priority);
}

void BuildIdCache::AddContents(const BuildId& id, const std::string& path,
                               const std::string& file_name, std::string contents, mode_t mode,
                               Priority priority, Verifier accept_existing) {
  Job job;
  job.id = id;
  job.path = path;
  job.file_name = file_name;
  job.contents = std::move(contents);
  job.mode = mode;
  job.accept_existing = std::move(accept_existing);
  Enqueue(std::move(job), priority);
}

bool BuildIdCache::Seen(const BuildId& id) const {
  std::lock_guard lock(mu_);
  return seen_.count(id) != 0;
}

void BuildIdCache::Run(std::deque<Job>* queue) {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue->empty(); });
      if (queue->empty()) return;  // stopping, and nothing left to copy
      job = std::move(queue->front());
      queue->pop_front();
    }
    // Failures are counted (and the serious ones reported) by InsertEntry.
    if (job.file_name.empty()) {
      (void)Insert(job.id, job.path, job.fd.get());
      job.fd.Reset();
    } else {
      (void)InsertContents(job.id, job.path, job.file_name, job.contents, job.mode,
                           job.accept_existing);
    }
    std::lock_guard lock(mu_);
    if (on_done_) on_done_(job.id);
  }
}

void BuildIdCache::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (live_worker_.joinable()) live_worker_.join();
  if (background_worker_.joinable()) background_worker_.join();
  std::lock_guard lock(mu_);
  live_.clear();  // never started: their descriptors close here
  background_.clear();
}

BuildIdCache::Stats BuildIdCache::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

// Maintenance: list and purge.  Everything below the root is opened with
// O_NOFOLLOW relative to its parent and removed with unlinkat, so a symlink
// planted anywhere in the cache is removed itself, never what it points to.
namespace {

constexpr const char* kEntryFiles[] = {"elf", "vdso", "kallsyms", "debug"};
// Deeper trees are not ours (we store at most kMaxComponents + 2 levels);
// each level holds a descriptor.
constexpr int kMaxPurgeDepth = 256;

Result<UniqueFd> OpenExistingRoot(const std::string& dir) {
  UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open the build-id cache directory " + dir);
  return fd;
}

bool IsLowerHex(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// The names in directory `dir` (borrowed), without "." and "..".
Result<std::vector<std::string>> ListNames(int dir, const std::string& shown) {
  UniqueFd own(dup(dir));
  if (!own.valid()) return ErrnoStatus("dup");
  DIR* d = fdopendir(own.get());
  if (d == nullptr) return ErrnoStatus("read " + shown);
  (void)own.Release();  // closedir() closes it
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
      names.emplace_back(e->d_name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// The file an entry directory holds: its name and size, if any.
std::optional<std::pair<std::string, uint64_t>> EntryFile(int entry_dir) {
  for (const char* name : kEntryFiles) {
    struct stat st;
    if (fstatat(entry_dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
      return std::make_pair(std::string(name), static_cast<uint64_t>(st.st_size));
  }
  return std::nullopt;
}

// Removes `name` in `parent` and, if it is a directory, everything in it.
Status RemoveTree(int parent, const std::string& name, const std::string& shown, int depth,
                  PurgeResult* result) {
  struct stat st;
  if (fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return errno == ENOENT ? Status() : ErrnoStatus("stat " + shown);
  if (S_ISDIR(st.st_mode)) {
    if (depth > kMaxPurgeDepth)
      return Status::Failure(shown + ": nested more than " + std::to_string(kMaxPurgeDepth) +
                             " directories deep; not removed");
    UniqueFd dir(openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (dir.valid()) {
      auto names = ListNames(dir.get(), shown);
      if (!names.ok()) return names.status();
      for (const std::string& child : *names) {
        Status s = RemoveTree(dir.get(), child, shown + "/" + PrintableName(child), depth + 1, result);
        if (!s.ok()) return s;
      }
      if (unlinkat(parent, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
        return ErrnoStatus("remove " + shown);
      return {};
    }
    if (errno != ELOOP && errno != ENOTDIR) return ErrnoStatus("open " + shown);
    // Replaced by a symlink or a file since the fstatat: remove that.
  }
  if (unlinkat(parent, name.c_str(), 0) != 0 && errno != ENOENT)
    return ErrnoStatus("remove " + shown);
  if (S_ISREG(st.st_mode)) {
    ++result->files;
    result->bytes += static_cast<uint64_t>(st.st_size);
  }
  return {};
}

}  // namespace

Result<CacheListing> ListBuildIdCache(const std::string& dir) {
  auto root = OpenExistingRoot(dir);
  if (!root.ok()) return root.status();
  CacheListing out;
  bool refused = false;
  const std::vector<std::string> link_dir = {kLinkDir};
  auto links = OpenDirs(root->get(), dir, link_dir, 1, /*create=*/false, &refused);
  if (!links.ok()) {
    if (links.status().error_number() == ENOENT) return out;  // an empty cache
    return links.status();
  }
  auto subdirs = ListNames(links->get(), dir + "/" + kLinkDir);
  if (!subdirs.ok()) return subdirs.status();
  for (const std::string& xx : *subdirs) {
    const std::vector<std::string> one = {xx};
    auto sub = OpenDirs(links->get(), dir + "/" + kLinkDir, one, 1, false, &refused);
    if (xx.size() != 2 || !IsLowerHex(xx) || !sub.ok()) {
      ++out.foreign_links;
      continue;
    }
    auto names = ListNames(sub->get(), dir + "/" + kLinkDir + "/" + xx);
    if (!names.ok()) return names.status();
    for (const std::string& rest : *names) {
      if (rest[0] == '.') continue;  // a temporary link of a writer
      const std::string hex = xx + rest;
      const std::optional<std::string> target = ReadLinkAt(sub->get(), rest);
      // Ours: ../../<path>/<hex>, with a path that we could have stored.
      const std::string prefix = "../../", suffix = "/" + hex;
      if (!IsLowerHex(rest) || !target || target->size() <= prefix.size() + suffix.size() ||
          target->compare(0, prefix.size(), prefix) != 0 ||
          target->compare(target->size() - suffix.size(), suffix.size(), suffix) != 0) {
        ++out.foreign_links;
        continue;
      }
      const std::string stored =
          target->substr(prefix.size(), target->size() - prefix.size() - suffix.size());
      auto components = CacheComponents("/" + stored);
      if (!components.ok() || Join(*components) != stored) {
        ++out.foreign_links;
        continue;
      }
      CacheEntry e;
      e.build_id = hex;
      e.path = (stored[0] == '[' ? "" : "/") + stored;
      std::vector<std::string> entry = *components;
      entry.push_back(hex);
      if (auto d = OpenDirs(root->get(), dir, entry, entry.size(), false, &refused); d.ok()) {
        if (auto file = EntryFile(d->get())) {
          e.file_name = file->first;
          e.size = file->second;
        }
      }
      out.bytes += e.size;
      out.entries.push_back(std::move(e));
    }
  }
  std::sort(out.entries.begin(), out.entries.end(), [](const CacheEntry& a, const CacheEntry& b) {
    return std::tie(a.path, a.build_id) < std::tie(b.path, b.build_id);
  });
  return out;
}

Result<PurgeResult> PurgeBuildIdCache(const std::string& dir, const std::string& path) {
  auto components = CacheComponents(path);
  if (!components.ok()) return components.status();
  auto root = OpenExistingRoot(dir);
  if (!root.ok()) return root.status();
  PurgeResult result;
  bool refused = false;
  const std::vector<std::string>& names = *components;
  const std::string shown = dir + "/" + PrintableName(Join(names));
  auto path_dir = OpenDirs(root->get(), dir, names, names.size(), /*create=*/false, &refused);
  if (!path_dir.ok()) {
    if (path_dir.status().error_number() == ENOENT) return result;  // nothing cached
    return path_dir.status();
  }
  auto children = ListNames(path_dir->get(), shown);
  if (!children.ok()) return children.status();
  for (const std::string& hex : *children) {
    // An entry is a <build-id hex> directory holding a cached file; other
    // names are deeper paths (purged by their own path).
    if (hex.size() < 4 || hex.size() % 2 != 0 || !IsLowerHex(hex)) continue;
    const std::vector<std::string> one = {hex};
    auto entry = OpenDirs(path_dir->get(), shown, one, 1, false, &refused);
    if (!entry.ok() || !EntryFile(entry->get())) continue;
    // Its .build-id link, if it leads here (another path may have the id).
    const std::vector<std::string> link_dir = {kLinkDir, hex.substr(0, 2)};
    if (auto links = OpenDirs(root->get(), dir, link_dir, 2, false, &refused); links.ok()) {
      const std::string rest = hex.substr(2);
      if (ReadLinkAt(links->get(), rest) == "../../" + Join(names) + "/" + hex &&
          unlinkat(links->get(), rest.c_str(), 0) != 0 && errno != ENOENT)
        return ErrnoStatus("remove " + dir + "/" + kLinkDir + "/" + hex.substr(0, 2) + "/" + rest);
    }
    if (Status s = RemoveTree(path_dir->get(), hex, shown + "/" + hex, 0, &result); !s.ok())
      return s;
    ++result.entries;
  }
  // The path's directories, deepest first, as long as they are empty.
  path_dir->Reset();
  for (size_t n = names.size(); n > 0; --n) {
    auto parent = OpenDirs(root->get(), dir, names, n - 1, false, &refused);
    if (!parent.ok() || unlinkat(parent->get(), names[n - 1].c_str(), AT_REMOVEDIR) != 0) break;
  }
  return result;
}

Result<PurgeResult> PurgeAllBuildIdCache(const std::string& dir) {
  auto root = OpenExistingRoot(dir);
  if (!root.ok()) return root.status();
  struct stat st;
  if (fstatat(root->get(), kLinkDir, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
    return Status::Failure(dir + ": no " + kLinkDir +
                           " directory in it, so not a build-id cache; nothing removed");
  auto listing = ListBuildIdCache(dir);
  PurgeResult result;
  result.entries = listing.ok() ? listing->entries.size() : 0;
  auto names = ListNames(root->get(), dir);
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    if (Status s = RemoveTree(root->get(), name, dir + "/" + PrintableName(name), 0, &result); !s.ok())
      return s;
  }
  return result;
}

}  // namespace mmap3
