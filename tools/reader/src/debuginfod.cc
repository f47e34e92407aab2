#include "debuginfod.h"

#include <elfutils/debuginfod.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "elf_file.h"

namespace mmap3 {
namespace {

using Clock = DebuginfodTransport::Clock;

class LibDebuginfod : public DebuginfodTransport {
 public:
  LibDebuginfod() : client_(debuginfod_begin()) {
    if (client_ == nullptr) return;
    debuginfod_set_user_data(client_, this);
    // Ours replaces the one DEBUGINFOD_PROGRESS would install (which
    // prints to stderr): it is the one place a transfer can be cut short,
    // and libdebuginfod calls it while it connects as well as while data
    // arrives (at least once a second).
    debuginfod_set_progressfn(client_, &LibDebuginfod::Progress);
  }
  ~LibDebuginfod() override {
    if (client_ != nullptr) debuginfod_end(client_);
  }
  LibDebuginfod(const LibDebuginfod&) = delete;
  LibDebuginfod& operator=(const LibDebuginfod&) = delete;

  Answer Find(DebuginfodKind kind, const BuildId& id, Clock::time_point deadline) override {
    Answer a;
    if (client_ == nullptr) {
      a.error = ENOMEM;
      return a;
    }
    deadline_ = deadline;
    cancelled_ = false;
    char* path = nullptr;
    const int rc = kind == DebuginfodKind::kExecutable
                       ? debuginfod_find_executable(client_, id.data(),
                                                    static_cast<int>(id.size()), &path)
                       : debuginfod_find_debuginfo(client_, id.data(),
                                                   static_cast<int>(id.size()), &path);
    if (const char* url = debuginfod_get_url(client_)) a.url = url;
    if (rc >= 0) {
      a.fd = UniqueFd(rc);
      if (path != nullptr) a.path = path;
    } else {
      a.error = -rc;
      a.cancelled = cancelled_;
    }
    std::free(path);
    return a;
  }

 private:
  static int Progress(debuginfod_client* client, long, long) {
    auto* self = static_cast<LibDebuginfod*>(debuginfod_get_user_data(client));
    if (Clock::now() < self->deadline_) return 0;
    self->cancelled_ = true;
    return 1;
  }

  debuginfod_client* client_;
  Clock::time_point deadline_;
  bool cancelled_ = false;
};

std::string Seconds(std::chrono::milliseconds d) {
  return fmt::format("{:g} s", static_cast<double>(d.count()) / 1000.0);
}

}  // namespace

const char* DebuginfodKindName(DebuginfodKind kind) {
  return kind == DebuginfodKind::kExecutable ? "executable" : "debuginfo";
}

std::unique_ptr<DebuginfodTransport> MakeLibDebuginfodTransport() {
  return std::make_unique<LibDebuginfod>();
}

bool DebuginfodUrlsSet(const std::string& urls) {
  return urls.find_first_not_of(" \t\n") != std::string::npos;
}

DebuginfodFetcher::DebuginfodFetcher(DebuginfodOptions options,
                                     std::unique_ptr<DebuginfodTransport> transport)
    : options_(std::move(options)), transport_(std::move(transport)) {
  enabled_ = DebuginfodUrlsSet(options_.urls) && transport_ != nullptr;
  if (!options_.now) options_.now = [] { return Clock::now(); };
}

void DebuginfodFetcher::Warn(const std::string& message) {
  if (options_.on_warning) options_.on_warning(message);
}

void DebuginfodFetcher::GiveUp(const std::string& why) {
  off_ = true;
  Warn(why + "; no more build-ids are asked for in this report (exit status 1)");
}

std::optional<std::string> DebuginfodFetcher::Fetch(DebuginfodKind kind, const BuildId& id,
                                                    const std::string& recorded_path) {
  if (!enabled_ || id.empty()) return std::nullopt;
  if (!asked_.emplace(static_cast<int>(kind), id).second) return std::nullopt;
  if (off_) {
    ++stats_.skipped;
    return std::nullopt;
  }
  const auto now = options_.now();
  if (!deadline_) deadline_ = now + options_.budget;
  if (now >= *deadline_) {
    ++stats_.skipped;
    GiveUp(fmt::format("debuginfod: {} spent waiting for {}", Seconds(options_.budget),
                       options_.urls));
    return std::nullopt;
  }
  DebuginfodTransport::Answer answer = transport_->Find(kind, id, *deadline_);
  const std::string server = answer.url.empty() ? options_.urls : answer.url;
  if (answer.error == ENOENT && !answer.cancelled) {
    ++stats_.not_found;
    return std::nullopt;
  }
  if (answer.error != 0 || !answer.fd.valid()) {
    ++stats_.failed;
    if (answer.cancelled) {
      GiveUp(fmt::format("debuginfod: {} spent waiting for {} (asking for the {} of {})",
                         Seconds(options_.budget), server, DebuginfodKindName(kind), id.Hex()));
    } else {
      GiveUp(fmt::format("debuginfod: {}: {} (asking for the {} of {})", server,
                         answer.error != 0 ? std::strerror(answer.error) : "no file",
                         DebuginfodKindName(kind), id.Hex()));
    }
    return std::nullopt;
  }
  return Keep(kind, id, recorded_path, answer);
}

std::optional<std::string> DebuginfodFetcher::Keep(DebuginfodKind kind, const BuildId& id,
                                                   const std::string& recorded_path,
                                                   DebuginfodTransport::Answer& answer) {
  const std::string server = answer.url.empty() ? options_.urls : answer.url;
  const std::string shown = answer.path.empty() ? server : answer.path;
  // A server is believed about nothing: the file must say the id itself.
  auto got = ReadBuildIdFromFd(answer.fd.get(), shown);
  if (!got.ok() || *got != id) {
    ++stats_.refused;
    // libdebuginfod keeps what it was sent and would hand it out again
    // without asking: that copy goes, if its name still is this file.
    struct stat by_fd, by_name;
    if (!answer.path.empty() && fstat(answer.fd.get(), &by_fd) == 0 &&
        lstat(answer.path.c_str(), &by_name) == 0 && by_fd.st_dev == by_name.st_dev &&
        by_fd.st_ino == by_name.st_ino)
      unlink(answer.path.c_str());
    if (!warned_refusal_) {
      warned_refusal_ = true;
      Warn(fmt::format("debuginfod: {} sent {} as the {} of {}; not used (further refusals are "
                       "only counted; exit status 1)",
                       server,
                       !got.ok() ? "a file that is not ELF"
                       : got->empty() ? "a file without a build-id"
                                      : "a file with build-id " + got->Hex(),
                       DebuginfodKindName(kind), id.Hex()));
    }
    return std::nullopt;
  }
  ++stats_.found;
  if (!options_.cache_dir.empty()) {
    if (!cache_) cache_ = std::make_unique<BuildIdCache>(options_.cache_dir);
    const std::string name = kind == DebuginfodKind::kExecutable ? "" : "debug";
    const Status kept = cache_->Insert(id, recorded_path, answer.fd.get(), name);
    if (kept.ok()) {
      return BuildIdCache::LinkPath(options_.cache_dir, id) + "/" +
             (name.empty() ? (recorded_path == "[vdso]" ? "vdso" : "elf") : name);
    }
    if (!warned_cache_) {
      warned_cache_ = true;
      Warn(fmt::format("debuginfod: the {} of {} is not kept in the build-id cache: {}",
                       DebuginfodKindName(kind), id.Hex(), kept.ToString()));
    }
  }
  if (answer.path.empty()) return std::nullopt;
  return answer.path;  // read from libdebuginfod's cache; its build-id is checked again there
}

}  // namespace mmap3
