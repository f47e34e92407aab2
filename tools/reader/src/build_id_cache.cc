#include "build_id_cache.h"

#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "elf_file.h"

namespace mmap3 {
namespace {

// d_path() appends this to the names of unlinked files.
constexpr std::string_view kDeletedSuffix = " (deleted)";

std::string CachePathComponent(const std::string& path) {
  std::string p = path;
  if (p.size() > kDeletedSuffix.size() &&
      p.compare(p.size() - kDeletedSuffix.size(), kDeletedSuffix.size(), kDeletedSuffix) == 0)
    p.resize(p.size() - kDeletedSuffix.size());
  while (!p.empty() && p.front() == '/') p.erase(p.begin());
  return p;
}

// The file's name under <path>/<build-id>/: perf calls the vDSO's "vdso".
std::string CacheFileName(const std::string& path) { return path == "[vdso]" ? "vdso" : "elf"; }

Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::FromErrno(ec.value(), "mkdir " + dir);
  return {};
}

// Copies `in` to a new file `out_path` with io_uring: one read and one write
// in flight at a time, 1 MiB chunks.  The file sizes involved (DSOs) make a
// deeper pipeline pointless, and the worker is off the record path anyway.
Status CopyWithUring(int in, const std::string& out_path) {
  int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) return ErrnoStatus("create " + out_path);
  io_uring ring;
  int rc = io_uring_queue_init(4, &ring, 0);
  if (rc < 0) {
    close(out);
    return Status::FromErrno(-rc, "io_uring_queue_init");
  }
  std::vector<char> buf(1 << 20);
  uint64_t offset = 0;
  Status status;
  for (;;) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_read(sqe, in, buf.data(), static_cast<unsigned>(buf.size()), offset);
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
      status = Status::FromErrno(-n, "read mapped file");
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
      if (w < 0) {
        status = Status::FromErrno(-w, "write " + out_path);
        break;
      }
      written += w;
    }
    if (!status.ok()) break;
    offset += static_cast<uint64_t>(n);
  }
  io_uring_queue_exit(&ring);
  if (close(out) != 0 && status.ok()) status = ErrnoStatus("close " + out_path);
  return status;
}

}  // namespace

std::string DefaultBuildIdCacheDir() {
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr && *home != '\0' ? home : "/root") + "/.debug";
}

std::string BuildIdCache::ElfPath(const std::string& dir, const std::string& path,
                                  const BuildId& id) {
  return dir + "/" + CachePathComponent(path) + "/" + id.Hex() + "/" + CacheFileName(path);
}

std::string BuildIdCache::LinkPath(const std::string& dir, const BuildId& id) {
  std::string hex = id.Hex();
  return dir + "/.build-id/" + hex.substr(0, 2) + "/" + hex.substr(2);
}

Status BuildIdCache::Insert(const std::string& dir, const BuildId& id, const std::string& path,
                            int fd, Stats* stats) {
  const std::string link = LinkPath(dir, id);
  struct stat st;
  if (lstat(link.c_str(), &st) == 0) {
    ++stats->present;
    return {};
  }
  const std::string component = CachePathComponent(path);
  if (component.empty() || id.empty()) {
    ++stats->failed;
    return Status::Failure("cannot cache '" + path + "'");
  }
  const std::string id_dir = dir + "/" + component + "/" + id.Hex();
  if (Status s = MakeDirs(id_dir); !s.ok()) {
    ++stats->failed;
    return s;
  }
  const std::string elf = id_dir + "/" + CacheFileName(path);
  const std::string tmp = elf + ".tmp";
  if (Status s = CopyWithUring(fd, tmp); !s.ok()) {
    unlink(tmp.c_str());
    ++stats->failed;
    return s;
  }
  // The inode is pinned but its contents are not: a rewrite in place between
  // mmap and now would put other bytes under this id.
  auto copied = ElfFile::Open(tmp);
  if (!copied.ok() || copied->build_id() != id) {
    unlink(tmp.c_str());
    ++stats->mismatch;
    return Status::Failure("'" + path + "' changed before it could be cached");
  }
  if (rename(tmp.c_str(), elf.c_str()) != 0) {
    ++stats->failed;
    return ErrnoStatus("rename " + tmp);
  }
  if (Status s = MakeDirs(link.substr(0, link.rfind('/'))); !s.ok()) {
    ++stats->failed;
    return s;
  }
  // Relative, as perf makes it, so the cache directory can be moved.
  const std::string target = "../../" + component + "/" + id.Hex();
  if (symlink(target.c_str(), link.c_str()) != 0 && errno != EEXIST) {
    ++stats->failed;
    return ErrnoStatus("symlink " + link);
  }
  ++stats->copied;
  return {};
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

void BuildIdCache::Add(const BuildId& id, const std::string& path, UniqueFd fd,
                       Priority priority) {
  std::lock_guard lock(mu_);
  if (stopping_ || !seen_.insert(id).second) return;  // fd is closed here
  (priority == Priority::kLive ? live_ : background_).push_back({id, path, std::move(fd)});
  cv_.notify_all();  // two workers wait on one condition
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
    Stats delta;
    (void)Insert(dir_, job.id, job.path, job.fd.get(), &delta);  // failures are counted
    job.fd.Reset();
    std::lock_guard lock(mu_);
    stats_.copied += delta.copied;
    stats_.present += delta.present;
    stats_.mismatch += delta.mismatch;
    stats_.failed += delta.failed;
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

}  // namespace mmap3
