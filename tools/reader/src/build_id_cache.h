// A build-id cache in perf's layout, filled off the record path.
//
//   <dir>/<path>/<build-id hex>/elf          the copied file ("vdso" for the
//                                            vDSO, whose <path> is "[vdso]")
//   <dir>/.build-id/<xx>/<rest> -> ../../<path>/<build-id hex>
//                                            (xx: first two hex digits)
// which is what `perf buildid-cache` and `perf report` use.
//
// Contract: Add() is cheap and thread-safe: it takes ownership of an open
// descriptor of the mapped file (opened through /proc/PID/map_files while the
// mapping exists, so the inode is pinned) and queues the copy for the worker
// threads, which do the file I/O with io_uring.  A build-id is queued at most
// once per cache object.  After copying, the worker re-reads the copy's
// build-id; if the file was rewritten in place meanwhile (same inode, other
// contents) the copy is discarded rather than cached under the wrong id.
// Stop() finishes queued copies and joins the worker.
#ifndef MMAP3_READER_BUILD_ID_CACHE_H_
#define MMAP3_READER_BUILD_ID_CACHE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "build_id.h"
#include "files.h"
#include "result.h"

namespace mmap3 {

class BuildIdCache {
 public:
  struct Stats {
    uint64_t copied = 0;
    uint64_t present = 0;   // already in the cache
    uint64_t mismatch = 0;  // contents changed before the copy was taken
    uint64_t failed = 0;
  };

  explicit BuildIdCache(std::string dir) : dir_(std::move(dir)) {}
  ~BuildIdCache() { Stop(); }
  BuildIdCache(const BuildIdCache&) = delete;
  BuildIdCache& operator=(const BuildIdCache&) = delete;

  // kLive: a mapping the kernel just reported; its file may be replaced or
  // rewritten soon.  kBackground: mappings of processes that existed before
  // the capture (synthesized from /proc), which can be many and large.  Each
  // has its own worker, so a live copy never waits behind background ones.
  enum class Priority { kLive, kBackground };

  // Called on a worker thread after each job (serialized).  Set before
  // Start().
  void set_on_done(std::function<void(const BuildId&)> on_done) { on_done_ = std::move(on_done); }

  void Start();
  // `fd` is closed once copied, or at once if the id is already queued.
  void Add(const BuildId& id, const std::string& path, UniqueFd fd,
           Priority priority = Priority::kLive);
  void Stop();
  Stats stats() const;
  // Whether Add() has been called for `id` (queued or done).
  bool Seen(const BuildId& id) const;

  // Layout helpers (exposed for tests and the symbol search).
  static std::string ElfPath(const std::string& dir, const std::string& path, const BuildId& id);
  static std::string LinkPath(const std::string& dir, const BuildId& id);
  // Synchronous copy of one file into the cache (what the worker runs);
  // `fd` is borrowed.
  static Status Insert(const std::string& dir, const BuildId& id, const std::string& path, int fd,
                       Stats* stats);

 private:
  struct Job {
    BuildId id;
    std::string path;
    UniqueFd fd;
  };
  void Run(std::deque<Job>* queue);

  std::string dir_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> live_;
  std::deque<Job> background_;
  std::set<BuildId> seen_;
  bool stopping_ = false;
  bool started_ = false;
  Stats stats_;
  std::function<void(const BuildId&)> on_done_;
  std::thread live_worker_;
  std::thread background_worker_;
};

// "~/.debug" expanded from $HOME (or "/root/.debug" without HOME).
std::string DefaultBuildIdCacheDir();

}  // namespace mmap3

#endif  // MMAP3_READER_BUILD_ID_CACHE_H_
