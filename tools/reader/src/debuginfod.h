// Files by build-id from debuginfod servers, for report: the client side of
// "no local file has this build-id".
//
// Contract.  DebuginfodFetcher::Fetch() asks the servers (DEBUGINFOD_URLS,
// through libdebuginfod) for the executable or the debuginfo of one
// build-id and returns the path of a file whose own build-id is that one,
// or nothing.  What a server sends is believed only if its build-id, read
// from the descriptor it came in, is the one asked for; a file that says
// another is refused (and removed from libdebuginfod's own cache, so that
// the next report asks again instead of being handed it from there).  An
// accepted file is copied into the reader's build-id cache with the cache's
// own checks (BuildIdCache::Insert: the copy's build-id read back before it
// is given a name) and the cached copy is returned; where it cannot be kept
// there, libdebuginfod's copy is.
//
// Cost.  Off when DEBUGINFOD_URLS is unset or blank.  Each transfer is
// libdebuginfod's (DEBUGINFOD_TIMEOUT and its other variables); all the
// transfers of one fetcher (one report) together get `budget`, enforced
// through libdebuginfod's progress callback, which it calls while it
// connects and transfers.  The first failure that is not "no server has
// it" (refused, unreachable, timed out, a server error, the budget spent)
// is one warning, and no build-id is asked for after it: a dead server
// costs one timeout per report, not one per build-id.
//
// Threads: one thread (report's).  Not copyable.
#ifndef MMAP3_READER_DEBUGINFOD_H_
#define MMAP3_READER_DEBUGINFOD_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "build_id.h"
#include "build_id_cache.h"
#include "files.h"

namespace mmap3 {

enum class DebuginfodKind { kExecutable, kDebuginfo };
const char* DebuginfodKindName(DebuginfodKind kind);  // "executable", "debuginfo"

// One question to the servers.  The real one is libdebuginfod; the tests'
// are fakes.
class DebuginfodTransport {
 public:
  using Clock = std::chrono::steady_clock;
  struct Answer {
    int error = 0;     // 0: found; ENOENT: no server has it; else why it failed
    bool cancelled = false;  // given up at the deadline
    UniqueFd fd;       // the file, when found
    std::string path;  // where the transport keeps it (libdebuginfod's cache), or ""
    std::string url;   // the server that answered or failed, when known
  };
  virtual ~DebuginfodTransport() = default;
  // Gives up (cancelled) at `deadline`.
  virtual Answer Find(DebuginfodKind kind, const BuildId& id, Clock::time_point deadline) = 0;
};

// libdebuginfod's client (one debuginfod_client for the transport's life).
std::unique_ptr<DebuginfodTransport> MakeLibDebuginfodTransport();

struct DebuginfodOptions {
  std::string urls;  // DEBUGINFOD_URLS as set; blank: off
  // All transfers of one report together.
  std::chrono::milliseconds budget{std::chrono::seconds(30)};
  std::string cache_dir;  // the reader's build-id cache; "" keeps nothing there
  // A one-line warning (no prefix, no newline).  May be empty.
  std::function<void(const std::string&)> on_warning;
  // Tests: the time.
  std::function<DebuginfodTransport::Clock::time_point()> now;
};

class DebuginfodFetcher {
 public:
  struct Stats {
    uint64_t found = 0;      // files accepted
    uint64_t not_found = 0;  // no server had it
    uint64_t refused = 0;    // a file with another build-id (or not ELF)
    uint64_t failed = 0;     // transfers that failed (at most one: then off)
    uint64_t skipped = 0;    // not asked: off after a failure or the budget
  };

  // `transport` may be null when the options turn it off.
  DebuginfodFetcher(DebuginfodOptions options, std::unique_ptr<DebuginfodTransport> transport);
  DebuginfodFetcher(const DebuginfodFetcher&) = delete;
  DebuginfodFetcher& operator=(const DebuginfodFetcher&) = delete;

  // True if DEBUGINFOD_URLS names a server (whether or not it answers).
  bool enabled() const { return enabled_; }
  // A file with `id` (see above); `recorded_path` is where the DSO was
  // mapped, under which the cache keeps the copy.  Each (kind, id) is asked
  // at most once.
  std::optional<std::string> Fetch(DebuginfodKind kind, const BuildId& id,
                                   const std::string& recorded_path);
  const Stats& stats() const { return stats_; }
  // True once a server failed (anything but "no server has it": refused,
  // unreachable, timed out, the budget spent) or sent a file with another
  // build-id.  Each was one warning; report and script then exit 1.
  bool failed() const { return off_ || stats_.refused > 0; }

 private:
  void Warn(const std::string& message);
  void GiveUp(const std::string& why);
  std::optional<std::string> Keep(DebuginfodKind kind, const BuildId& id,
                                  const std::string& recorded_path,
                                  DebuginfodTransport::Answer& answer);

  DebuginfodOptions options_;
  std::unique_ptr<DebuginfodTransport> transport_;
  bool enabled_ = false;
  bool off_ = false;  // after a failure or once the budget is spent
  std::optional<DebuginfodTransport::Clock::time_point> deadline_;  // from the first question
  bool warned_refusal_ = false;
  bool warned_cache_ = false;
  std::unique_ptr<BuildIdCache> cache_;
  std::set<std::pair<int, BuildId>> asked_;
  Stats stats_;
};

// DEBUGINFOD_URLS names a server: some non-blank text.
bool DebuginfodUrlsSet(const std::string& urls);

}  // namespace mmap3

#endif  // MMAP3_READER_DEBUGINFOD_H_
