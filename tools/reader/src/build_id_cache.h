// A build-id cache in perf's layout, filled off the record path.
//
//   <dir>/<path>/<build-id hex>/<name>       the copied file: "elf", "vdso"
//                                            for the vDSO (whose <path> is
//                                            "[vdso]"), or the name given to
//                                            InsertContents() ("kallsyms")
//   <dir>/.build-id/<xx>/<rest> -> ../../<path>/<build-id hex>
//                                            (xx: first two hex digits)
// which is what `perf buildid-cache` and `perf report` use.
//
// Safety.  The cache may be shared with other users and `record` runs as
// root, so nothing in it is trusted:
//  * <dir> is opened as given, following symlinks (the user named it);
//    below it nothing is followed.  Every directory is opened relative to its
//    parent with O_NOFOLLOW (created with mkdirat if missing); a symlink
//    where a directory belongs is refused with an error naming it.  A
//    symlink (or anything else) where an entry's file or its .build-id link
//    belongs is replaced by renameat, which does not follow it.
//  * <path> comes from a mapping's file name, which users control.  Empty
//    and "." components are dropped; "..", NUL bytes, a first component
//    ".build-id", names over NAME_MAX and paths over kMaxPathLength are
//    refused.
//  * A copy goes to a file no one else can name (O_TMPFILE, or a unique name
//    created with O_EXCL|O_NOFOLLOW), is checked (as many bytes as the
//    source had before and after; the build-id read from the copy's
//    descriptor), fsynced, and only then published (linkat, or renameat over
//    an entry that failed the checks).  An entry is therefore only ever a
//    complete, verified file.  One already present is trusted only if it
//    passes the same checks and only we or root could have written it
//    (owned by us or root, not writable by group or others); otherwise it is
//    replaced.  The .build-id link is made under a unique name and renamed
//    into place.
//  * Copies keep the source's read permissions (a file only its owner could
//    read stays readable by the cache's owner only).
//
// Limits.  A file over `max_file_bytes` is skipped and counted.  The cache
// is measured (sum of file sizes) at the first copy; a copy that would take
// it over `max_bytes` stops all copying, as does a full filesystem (ENOSPC,
// EDQUOT).  Either is reported once, when it happens, through on_warning;
// the capture goes on.  Another process filling the same cache meanwhile is
// not counted.
//
// Threads.  Add() is cheap and thread-safe: it queues the copy for the
// worker threads, which do the file I/O with io_uring.  A build-id is queued
// at most once per cache object.  Insert() and InsertContents() do the work
// synchronously and may run on any number of threads, and in any number of
// processes sharing one directory.  Stop() finishes queued copies and joins
// the workers.
#ifndef MMAP3_READER_BUILD_ID_CACHE_H_
#define MMAP3_READER_BUILD_ID_CACHE_H_

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "build_id.h"
#include "files.h"
#include "result.h"

namespace mmap3 {

class BuildIdCache {
 public:
  static constexpr uint64_t kNoLimit = UINT64_MAX;
  // `-a` copies every DSO mapped anywhere; a desktop maps 1-2 GB of them.
  static constexpr uint64_t kDefaultMaxBytes = uint64_t{2} << 30;
  // libLLVM is 110 MB, a browser binary 150-250 MB.
  static constexpr uint64_t kDefaultMaxFileBytes = uint64_t{512} << 20;
  // Longest <path> stored: leaves room for <dir>, the id and the file name
  // in a PATH_MAX path and in the .build-id link's target.
  static constexpr size_t kMaxPathLength = 3072;

  struct Limits {
    uint64_t max_bytes = kDefaultMaxBytes;
    uint64_t max_file_bytes = kDefaultMaxFileBytes;
  };

  struct Stats {
    uint64_t copied = 0;
    uint64_t present = 0;    // already in the cache, complete and verified
    uint64_t mismatch = 0;   // the source changed before or while it was copied
    uint64_t failed = 0;     // other errors (I/O, permissions)
    uint64_t unchecked = 0;  // its notes are more than the reader reads: its id cannot be checked
    uint64_t refused = 0;    // unsafe: a symlink in the cache, or a path that cannot be stored
    uint64_t too_large = 0;  // over Limits::max_file_bytes
    uint64_t skipped = 0;    // not copied: copying had stopped (limit reached, filesystem full)
  };

  // Judges a candidate entry: a read-only descriptor (borrowed) of a regular
  // file of `size` bytes; ok if it is complete and right for the id.
  using Verifier = std::function<Status(int fd, uint64_t size)>;

  explicit BuildIdCache(std::string dir);  // with the default Limits
  BuildIdCache(std::string dir, Limits limits);
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
  // Called with a one-line message (no prefix, no newline) when copying
  // stops for good (limit, full filesystem) and the first time something
  // unsafe is refused; on whichever thread found it, never under a lock.
  // Set before Start().
  void set_on_warning(std::function<void(const std::string&)> on_warning) {
    on_warning_ = std::move(on_warning);
  }
  // Tests: called after a copy is verified, before it is published.
  void set_before_publish(std::function<void(const BuildId&)> hook) {
    before_publish_ = std::move(hook);
  }
  // Tests: use unique temporary names even where O_TMPFILE works.
  void set_use_tmpfile(bool use) { use_tmpfile_ = use; }

  void Start();
  // Queues a copy of the ELF image `fd` (closed once copied, or at once if
  // the id is already queued).
  void Add(const BuildId& id, const std::string& path, UniqueFd fd,
           Priority priority = Priority::kLive);
  // Queues InsertContents(id, path, file_name, contents, mode,
  // accept_existing); the verifier is called on a worker thread.
  void AddContents(const BuildId& id, const std::string& path, const std::string& file_name,
                   std::string contents, mode_t mode, Priority priority = Priority::kLive,
                   Verifier accept_existing = nullptr);
  void Stop();
  Stats stats() const;
  // Whether Add() or AddContents() has been called for `id` (queued or done).
  bool Seen(const BuildId& id) const;
  const std::string& dir() const { return dir_; }

  // Copies the ELF image `fd` (borrowed; a regular file) into the cache as
  // <path>/<id>/elf ("vdso" for "[vdso]"): what the workers run.  An entry
  // already there counts if it has the source's size and the id.
  // `file_name` ("debug": a separate debug file, perf's name for one) stores
  // it under another name, with the same checks.
  Status Insert(const BuildId& id, const std::string& path, int fd,
                const std::string& file_name = "");
  // Stores `contents` as <path>/<id>/<file_name> with permissions `mode`
  // (before the umask), for files that are not ELF images: e.g.
  // ("[kernel.kallsyms]", "kallsyms").  The copy must read back equal to
  // `contents`.  An entry already there is kept if `accept_existing` says so
  // (by default: if it holds exactly `contents`); otherwise it is replaced.
  Status InsertContents(const BuildId& id, const std::string& path, const std::string& file_name,
                        std::string_view contents, mode_t mode,
                        const Verifier& accept_existing = nullptr);

  // Layout helpers (tests, the symbol search).  ElfPath is "" for a path
  // that cannot be stored.
  static std::string ElfPath(const std::string& dir, const std::string& path, const BuildId& id);
  static std::string LinkPath(const std::string& dir, const BuildId& id);
  // Kernel symbols (see dso_store.h): <dir>/[kernel.kallsyms]/<id>/kallsyms,
  // a copy of /proc/kallsyms where perf keeps it; a module's symbols,
  // <dir>/[<module>]/<module's id>/symbols.  Stored with InsertContents().
  static std::string KallsymsPath(const std::string& dir, const BuildId& id);
  static std::string ModuleSymbolsPath(const std::string& dir, const std::string& module,
                                       const BuildId& id);
  // Opens <dir>/<path>/<id>/<file_name> for reading, for files whose
  // contents cannot be checked against the id (kernel symbols): nothing
  // below <dir> is followed, and only a regular file owned by us or root and
  // writable by its owner alone is opened (what InsertContents() keeps), in
  // directories below <dir> that are ours or root's and that no one else
  // can write to (who could would rename another id's file into place).
  static Result<UniqueFd> OpenEntry(const std::string& dir, const std::string& path,
                                    const BuildId& id, const std::string& file_name);

 private:
  struct Job {
    BuildId id;
    std::string path;
    UniqueFd fd;            // an ELF image (Add), or
    std::string file_name;  // with contents (AddContents)
    std::string contents;
    mode_t mode = 0;
    Verifier accept_existing;
  };
  struct Request;
  enum class Outcome { kCopied, kPresent, kMismatch, kUnchecked, kFailed, kRefused, kTooLarge,
                       kSkipped, kNoSpace };

  void Enqueue(Job job, Priority priority);
  void Run(std::deque<Job>* queue);
  Status InsertEntry(const Request& request);
  Outcome DoInsert(const Request& request, Status* status);
  Result<int> Root();
  // Reserves `size` bytes of the limits: kCopied if granted, else why not.
  Outcome Reserve(const Request& request, uint64_t size, Status* status);
  void Release(uint64_t size);

  const std::string dir_;
  const Limits limits_;
  bool use_tmpfile_ = true;
  std::function<void(const BuildId&)> before_publish_;

  std::once_flag root_once_;
  Result<UniqueFd> root_ = Status::Failure("not opened");
  std::once_flag measure_once_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> live_;
  std::deque<Job> background_;
  std::set<BuildId> seen_;
  bool stopping_ = false;
  bool started_ = false;
  Stats stats_;
  uint64_t used_bytes_ = 0;   // measured at the first copy, plus what was reserved since
  std::string stopped_;       // why copying stopped ("" while it goes on)
  bool warned_stop_ = false;
  bool warned_refusal_ = false;
  std::function<void(const BuildId&)> on_done_;
  std::function<void(const std::string&)> on_warning_;
  std::thread live_worker_;
  std::thread background_worker_;
};

// "~/.debug" expanded from $HOME (or "/root/.debug" without HOME).
std::string DefaultBuildIdCacheDir();

// Maintenance of a cache directory (the buildid-cache command).  None of
// them follows a symlink below `dir`.
struct CacheEntry {
  std::string build_id;   // hex, from the .build-id link's name
  std::string path;       // the recorded path ("/usr/lib/x.so", "[vdso]")
  std::string file_name;  // "elf", "vdso", "kallsyms", "debug"; "" if none is there
  uint64_t size = 0;
};
struct CacheListing {
  std::vector<CacheEntry> entries;  // sorted by path, then build-id
  uint64_t bytes = 0;
  uint64_t foreign_links = 0;  // .build-id entries that are not links into this cache
};
Result<CacheListing> ListBuildIdCache(const std::string& dir);

struct PurgeResult {
  uint64_t entries = 0;  // <path>/<build-id> directories removed
  uint64_t files = 0;
  uint64_t bytes = 0;
};
// Removes every cached version of `path` and the links to them.
Result<PurgeResult> PurgeBuildIdCache(const std::string& dir, const std::string& path);
// Removes everything inside `dir`, which must hold a .build-id directory
// (so a mistyped --buildid-dir does not empty some other directory).
Result<PurgeResult> PurgeAllBuildIdCache(const std::string& dir);

}  // namespace mmap3

#endif  // MMAP3_READER_BUILD_ID_CACHE_H_
