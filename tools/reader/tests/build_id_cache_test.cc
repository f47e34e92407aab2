#include "build_id_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "elf_file.h"
#include "fixtures.h"

namespace mmap3 {
namespace {

namespace fs = std::filesystem;
using testing::Id;
using testing::kIdV1;
using testing::kIdV2;
using testing::TempDir;

UniqueFd OpenRead(const std::string& path) {
  return UniqueFd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Appends `bytes` of padding: a bigger image, same build-id.
void Grow(const std::string& path, size_t bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out << std::string(bytes, 'z');
}

// Every regular file under `dir`, without following symlinks.
std::set<std::string> RegularFilesUnder(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) out.insert(it->path().string());
  }
  return out;
}

// A file outside the cache that must never be written, and a directory
// outside it in which nothing may appear.
class Victim {
 public:
  explicit Victim(const TempDir& outside)
      : dir_(outside.path() + "/victim-dir"), file_(outside.path() + "/victim") {
    fs::create_directories(dir_);
    testing::WriteFile(file_, "precious");
    // A fixed time in the past, so that any write shows.
    const timespec times[2] = {{1000000000, 0}, {1000000000, 0}};
    utimensat(AT_FDCWD, file_.c_str(), times, 0);
    utimensat(AT_FDCWD, dir_.c_str(), times, 0);
  }
  const std::string& file() const { return file_; }
  const std::string& dir() const { return dir_; }

  // Empty if untouched, else what changed.
  std::string Changes() const {
    std::string out;
    if (ReadAll(file_) != "precious") out += "the victim's contents changed; ";
    struct stat st;
    if (stat(file_.c_str(), &st) != 0 || st.st_mtim.tv_sec != 1000000000)
      out += "the victim's mtime changed; ";
    if (stat(dir_.c_str(), &st) != 0 || st.st_mtim.tv_sec != 1000000000)
      out += "the outside directory was written; ";
    if (!fs::is_empty(dir_)) out += "files appeared in the outside directory; ";
    return out;
  }

 private:
  std::string dir_, file_;
};

class BuildIdCacheTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    lib_ = dir_.File("libx.so");
    ASSERT_TRUE(testing::BuildSharedLibrary(lib_, "x_fn", kIdV1));
  }
  // The cache under test, with O_TMPFILE or (the fallback) unique names.
  std::unique_ptr<BuildIdCache> Cache(const std::string& dir,
                                      BuildIdCache::Limits limits = BuildIdCache::Limits()) {
    auto c = std::make_unique<BuildIdCache>(dir, limits);
    c->set_use_tmpfile(GetParam());
    return c;
  }
  std::string Entry(const std::string& cache) const {
    return BuildIdCache::ElfPath(cache, lib_, Id(kIdV1));
  }
  // Whether `cache` holds a complete, verified copy of lib_ under its id,
  // reachable through its .build-id link.
  bool HoldsCopy(const std::string& cache) const {
    const std::string entry = Entry(cache);
    if (fs::is_symlink(entry) || ReadAll(entry) != ReadAll(lib_)) return false;
    const std::string via_link = BuildIdCache::LinkPath(cache, Id(kIdV1)) + "/elf";
    return ReadAll(via_link) == ReadAll(lib_);
  }

  TempDir dir_;
  std::string lib_;
};

INSTANTIATE_TEST_SUITE_P(TmpfileAndNamedTemporaries, BuildIdCacheTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "O_TMPFILE" : "UniqueNames";
                         });

TEST_P(BuildIdCacheTest, InsertUsesPerfLayout) {
  TempDir cache;
  auto c = Cache(cache.path());
  UniqueFd fd = OpenRead(lib_);
  ASSERT_TRUE(c->Insert(Id(kIdV1), lib_, fd.get()).ok());
  EXPECT_EQ(c->stats().copied, 1u);
  const std::string elf = BuildIdCache::ElfPath(cache.path(), lib_, Id(kIdV1));
  EXPECT_EQ(elf, cache.path() + lib_ + "/" + kIdV1 + "/elf");
  const std::string link = BuildIdCache::LinkPath(cache.path(), Id(kIdV1));
  EXPECT_EQ(link, cache.path() + "/.build-id/11/" + std::string(kIdV1).substr(2));
  EXPECT_TRUE(fs::is_symlink(link));
  // Relative link to the build-id directory, as perf makes it.
  EXPECT_EQ(fs::read_symlink(link).string(), "../.." + lib_ + "/" + kIdV1);
  auto copy = ElfFile::Open(link + "/elf");
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ(copy->build_id(), Id(kIdV1));
  EXPECT_TRUE(HoldsCopy(cache.path()));
  // Nothing else is left in the entry's directory (no temporary file).
  EXPECT_EQ(RegularFilesUnder(cache.path()), std::set<std::string>{elf});
  // A second insert finds it.
  ASSERT_TRUE(c->Insert(Id(kIdV1), lib_, fd.get()).ok());
  EXPECT_EQ(c->stats().present, 1u);
  EXPECT_EQ(c->stats().copied, 1u);
}

// A file whose notes are more than the reader reads (1 MiB in all) has a
// build-id that cannot be checked: not cached, and counted as such, not as
// a file that changed (helper-60's review: "1 changed" for a file no one
// had touched).
// Also where another id follows the block left unread (helper-62's
// review): the kernel's id may be the first note of that block.
TEST_P(BuildIdCacheTest, FileWhoseIdCannotBeCheckedIsNotCachedNorCalledChanged) {
  const BuildId later = Id(kIdV2);
  for (const BuildId* after : {static_cast<const BuildId*>(nullptr), &later}) {
    SCOPED_TRACE(after != nullptr ? "another id after it" : "no other id");
    TempDir cache;
    const std::string heavy = dir_.File("libnotes.so");
    ASSERT_TRUE(testing::WriteSparseNotesElf(heavy, 1, (uint64_t{1} << 20) + 1, after));
    auto c = Cache(cache.path());
    UniqueFd fd = OpenRead(heavy);
    Status s = c->Insert(Id(kIdV1), heavy, fd.get());
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.ToString().find("build-id is not known"), std::string::npos) << s.ToString();
    EXPECT_EQ(s.ToString().find("changed"), std::string::npos) << s.ToString();
    EXPECT_EQ(c->stats().unchecked, 1u);
    EXPECT_EQ(c->stats().mismatch, 0u);
    struct stat st;
    EXPECT_NE(lstat(BuildIdCache::LinkPath(cache.path(), Id(kIdV1)).c_str(), &st), 0);
    EXPECT_EQ(RegularFilesUnder(cache.path()), std::set<std::string>{});
  }
}

TEST_P(BuildIdCacheTest, RefusesContentsThatNoLongerMatch) {
  // The file was rewritten in place (v2) before the worker copied it, but the
  // mapping said v1: nothing may be cached under v1.
  TempDir cache;
  const std::string v2 = dir_.File("libv2.so");
  ASSERT_TRUE(testing::BuildSharedLibrary(v2, "x_fn", kIdV2));
  auto c = Cache(cache.path());
  UniqueFd fd = OpenRead(v2);
  Status s = c->Insert(Id(kIdV1), v2, fd.get());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("changed before it could be cached"), std::string::npos)
      << s.ToString();
  EXPECT_EQ(c->stats().mismatch, 1u);
  struct stat st;
  EXPECT_NE(lstat(BuildIdCache::LinkPath(cache.path(), Id(kIdV1)).c_str(), &st), 0);
  EXPECT_EQ(RegularFilesUnder(cache.path()), std::set<std::string>{});
}

TEST_P(BuildIdCacheTest, CopiesKeepTheSourcesReadPermissions) {
  // A library only its owner may read must not become world-readable in
  // the cache.
  TempDir cache;
  ASSERT_EQ(chmod(lib_.c_str(), 0600), 0);
  auto c = Cache(cache.path());
  UniqueFd fd = OpenRead(lib_);
  ASSERT_TRUE(c->Insert(Id(kIdV1), lib_, fd.get()).ok());
  struct stat st;
  ASSERT_EQ(stat(Entry(cache.path()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0400u);
}

TEST_P(BuildIdCacheTest, PathsThatWouldLeaveTheCacheAreRefused) {
  // A mapping's file name is the user's: whatever it holds, nothing may be
  // created outside <dir>, nor inside its .build-id directory.
  TempDir top;
  const std::string cache = top.File("cache");
  const std::string long_name(NAME_MAX + 1, 'n');
  std::string long_path;
  while (long_path.size() <= BuildIdCache::kMaxPathLength) long_path += "/dir";
  std::string deep_path;
  for (int i = 0; i < 65; ++i) deep_path += "/d";
  const std::vector<std::string> paths = {
      "/tmp/../../escaped/x", "/a/b/../../../escaped/x", "../escaped/x", "/x/..",
      "/x/../../escaped", "..", "/", "", "/.build-id/11/" + std::string(kIdV1).substr(2),
      std::string("/a\0/../../escaped", 17), "/" + long_name, long_path, deep_path};
  auto c = Cache(cache);
  std::string refusals;
  for (const std::string& path : paths) {
    UniqueFd fd = OpenRead(lib_);
    Status s = c->Insert(Id(kIdV1), path, fd.get());
    EXPECT_FALSE(s.ok()) << "cached '" << path << "'";
    EXPECT_EQ(BuildIdCache::ElfPath(cache, path, Id(kIdV1)), "") << path;
    refusals += s.ToString() + "\n";
  }
  EXPECT_EQ(c->stats().refused, paths.size()) << refusals;
  EXPECT_NE(refusals.find("'/tmp/../../escaped/x': a '..' component; not cached"),
            std::string::npos)
      << refusals;
  EXPECT_NE(refusals.find("\\x00"), std::string::npos) << "NUL shown escaped: " << refusals;

  // Empty and "." components are only dropped.
  UniqueFd fd = OpenRead(lib_);
  const std::string messy = "//" + lib_.substr(1) + "/./";
  ASSERT_TRUE(c->Insert(Id(kIdV1), messy, fd.get()).ok());
  EXPECT_EQ(BuildIdCache::ElfPath(cache, messy, Id(kIdV1)), Entry(cache));
  EXPECT_TRUE(HoldsCopy(cache));

  // Nothing but the cache appeared next to it, and nothing but that one
  // entry in it.
  std::set<std::string> in_top;
  for (const auto& e : fs::directory_iterator(top.path())) in_top.insert(e.path().string());
  EXPECT_EQ(in_top, std::set<std::string>{cache});
  EXPECT_EQ(RegularFilesUnder(top.path()), std::set<std::string>{Entry(cache)});
  EXPECT_FALSE(fs::exists(cache + "/.build-id/11/" + std::string(kIdV1).substr(2) + "/" + kIdV1));
}

// Where a symlink may be planted in a shared cache before `record` runs.
enum class Plant { kOldTempName, kEntryFile, kEntryDir, kPathDir, kLinkDir, kLinkSubdir, kLink };

TEST_P(BuildIdCacheTest, PlantedSymlinksAreNeverFollowed) {
  for (Plant plant : {Plant::kOldTempName, Plant::kEntryFile, Plant::kEntryDir, Plant::kPathDir,
                      Plant::kLinkDir, Plant::kLinkSubdir, Plant::kLink}) {
    SCOPED_TRACE(static_cast<int>(plant));
    TempDir cache, outside;
    Victim victim(outside);
    const std::string entry_dir = fs::path(Entry(cache.path())).parent_path().string();
    const std::string link = BuildIdCache::LinkPath(cache.path(), Id(kIdV1));
    auto plant_link = [](const std::string& target, const std::string& at) {
      fs::create_directories(fs::path(at).parent_path());
      ASSERT_EQ(symlink(target.c_str(), at.c_str()), 0) << at;
    };
    switch (plant) {
      case Plant::kOldTempName: plant_link(victim.file(), entry_dir + "/elf.tmp"); break;
      case Plant::kEntryFile: plant_link(victim.file(), entry_dir + "/elf"); break;
      case Plant::kEntryDir: plant_link(victim.dir(), entry_dir); break;
      case Plant::kPathDir:  // the first directory of the recorded path
        plant_link(victim.dir(), cache.path() + "/" + lib_.substr(1, lib_.find('/', 1) - 1));
        break;
      case Plant::kLinkDir: plant_link(victim.dir(), cache.path() + "/.build-id"); break;
      case Plant::kLinkSubdir: plant_link(victim.dir(), fs::path(link).parent_path()); break;
      case Plant::kLink: plant_link(victim.file(), link); break;
    }
    std::vector<std::string> warnings;
    auto c = Cache(cache.path());
    c->set_on_warning([&](const std::string& w) { warnings.push_back(w); });
    UniqueFd fd = OpenRead(lib_);
    Status s = c->Insert(Id(kIdV1), lib_, fd.get());
    EXPECT_EQ(victim.Changes(), "");
    const bool refusal = plant == Plant::kEntryDir || plant == Plant::kPathDir ||
                         plant == Plant::kLinkDir || plant == Plant::kLinkSubdir;
    if (refusal) {
      // A directory of ours is a symlink: refused, with the path named.
      EXPECT_FALSE(s.ok());
      EXPECT_EQ(c->stats().refused, 1u);
      EXPECT_NE(s.ToString().find("a symbolic link inside the build-id cache; not followed"),
                std::string::npos)
          << s.ToString();
      EXPECT_NE(s.ToString().find(cache.path() + "/"), std::string::npos) << s.ToString();
      ASSERT_EQ(warnings.size(), 1u);
      EXPECT_NE(warnings[0].find(s.ToString()), std::string::npos) << warnings[0];
    } else {
      // A file or link of ours is a symlink: replaced (rename does not
      // follow it), and the entry is complete.
      EXPECT_TRUE(s.ok()) << s.ToString();
      EXPECT_TRUE(HoldsCopy(cache.path()));
      EXPECT_TRUE(warnings.empty());
    }
    // Inserting again changes nothing outside either.
    fd = OpenRead(lib_);
    (void)c->Insert(Id(kIdV1), lib_, fd.get());
    EXPECT_EQ(victim.Changes(), "");
  }
}

TEST_P(BuildIdCacheTest, ExistingEntriesAreTrustedOnlyIfCompleteAndOurs) {
  const std::string image = ReadAll(lib_);
  struct Case {
    const char* name;
    std::string contents;
    mode_t mode;
    uid_t owner;
    bool trusted;
  };
  const uid_t me = geteuid();
  const std::vector<Case> cases = {
      {"zero header", std::string(image.size(), '\0'), 0444, me, false},
      {"cut short", image.substr(0, image.size() / 2), 0444, me, false},
      {"longer", image + "tail", 0444, me, false},
      {"writable by others", image, 0666, me, false},
      {"owned by another user", image, 0444, 65534, false},
      {"complete", image, 0444, me, true},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    TempDir cache;
    const std::string entry = Entry(cache.path());
    fs::create_directories(fs::path(entry).parent_path());
    testing::WriteFile(entry, k.contents);
    ASSERT_EQ(chmod(entry.c_str(), k.mode), 0);
    if (k.owner != me && chown(entry.c_str(), k.owner, static_cast<gid_t>(-1)) != 0)
      GTEST_SKIP() << "cannot give a file to another user here";
    auto c = Cache(cache.path());
    UniqueFd fd = OpenRead(lib_);
    ASSERT_TRUE(c->Insert(Id(kIdV1), lib_, fd.get()).ok());
    EXPECT_EQ(c->stats().present, k.trusted ? 1u : 0u);
    EXPECT_EQ(c->stats().copied, k.trusted ? 0u : 1u);
    EXPECT_TRUE(HoldsCopy(cache.path()));
  }
}

TEST_P(BuildIdCacheTest, ALinkToAnotherPlaceIsRepointed) {
  TempDir cache;
  const std::string link = BuildIdCache::LinkPath(cache.path(), Id(kIdV1));
  fs::create_directories(fs::path(link).parent_path());
  ASSERT_EQ(symlink("../../elsewhere", link.c_str()), 0);
  auto c = Cache(cache.path());
  UniqueFd fd = OpenRead(lib_);
  ASSERT_TRUE(c->Insert(Id(kIdV1), lib_, fd.get()).ok());
  EXPECT_EQ(fs::read_symlink(link).string(), "../.." + lib_ + "/" + kIdV1);
  EXPECT_TRUE(HoldsCopy(cache.path()));
  // Nothing but the link is left in its directory (no temporary link).
  EXPECT_EQ(std::distance(fs::directory_iterator(fs::path(link).parent_path()),
                          fs::directory_iterator()),
            1);
}

// Waits (bounded) for `done`; false on timeout.
bool WaitFor(std::mutex& mu, std::condition_variable& cv, const std::function<bool()>& done) {
  std::unique_lock lock(mu);
  return cv.wait_for(lock, std::chrono::seconds(60), done);
}

TEST_P(BuildIdCacheTest, TwoWritersOfOneIdDoNotDisturbEachOther) {
  // Recorder A has its copy ready when recorder B, sharing the cache, copies
  // and publishes the same id; then A publishes.  Both succeed, neither
  // reports a change, and the entry is B's complete copy.
  TempDir cache;
  Grow(lib_, 3 << 20);
  auto a = Cache(cache.path());
  auto b = Cache(cache.path());
  std::mutex mu;
  std::condition_variable cv;
  bool a_ready = false, b_done = false;
  a->set_before_publish([&](const BuildId&) {
    std::unique_lock lock(mu);
    a_ready = true;
    cv.notify_all();
    cv.wait_for(lock, std::chrono::seconds(60), [&] { return b_done; });
  });
  Status a_status;
  std::thread ta([&] {
    UniqueFd fd = OpenRead(lib_);
    a_status = a->Insert(Id(kIdV1), lib_, fd.get());
  });
  EXPECT_TRUE(WaitFor(mu, cv, [&] { return a_ready; })) << "A never got its copy ready";
  UniqueFd fd = OpenRead(lib_);
  Status b_status = b->Insert(Id(kIdV1), lib_, fd.get());
  {
    std::lock_guard lock(mu);
    b_done = true;
    cv.notify_all();
  }
  ta.join();
  EXPECT_TRUE(a_status.ok()) << a_status.ToString();
  EXPECT_TRUE(b_status.ok()) << b_status.ToString();
  EXPECT_EQ(b->stats().copied, 1u);
  EXPECT_EQ(a->stats().present, 1u);  // B's copy was as good as its own
  EXPECT_EQ(a->stats().mismatch + b->stats().mismatch, 0u);
  EXPECT_TRUE(HoldsCopy(cache.path()));
  EXPECT_EQ(RegularFilesUnder(cache.path()), std::set<std::string>{Entry(cache.path())});
}

TEST_P(BuildIdCacheTest, ConcurrentWritersNeverPublishATruncatedCopy) {
  // No ordering imposed: whatever the interleaving, every insert succeeds,
  // none reports a change, and the entry is the whole file.
  Grow(lib_, 4 << 20);
  for (int round = 0; round < 10; ++round) {
    TempDir cache;
    auto a = Cache(cache.path());
    auto b = Cache(cache.path());
    Status sa, sb;
    std::thread ta([&] {
      UniqueFd fd = OpenRead(lib_);
      sa = a->Insert(Id(kIdV1), lib_, fd.get());
    });
    std::thread tb([&] {
      UniqueFd fd = OpenRead(lib_);
      sb = b->Insert(Id(kIdV1), lib_, fd.get());
    });
    ta.join();
    tb.join();
    ASSERT_TRUE(sa.ok()) << sa.ToString();
    ASSERT_TRUE(sb.ok()) << sb.ToString();
    EXPECT_EQ(a->stats().mismatch + b->stats().mismatch, 0u);
    EXPECT_EQ(a->stats().copied + b->stats().copied + a->stats().present + b->stats().present, 2u);
    ASSERT_TRUE(HoldsCopy(cache.path())) << "round " << round;
  }
}

TEST_P(BuildIdCacheTest, ConcurrentProcessesShareACache) {
  // The same with two processes, as two recorders are.
  Grow(lib_, 4 << 20);
  TempDir cache;
  std::vector<pid_t> children;
  for (int i = 0; i < 2; ++i) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto c = Cache(cache.path());
      UniqueFd fd = OpenRead(lib_);
      const bool ok = c->Insert(Id(kIdV1), lib_, fd.get()).ok() && c->stats().mismatch == 0;
      _exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  EXPECT_TRUE(HoldsCopy(cache.path()));
}

TEST_P(BuildIdCacheTest, FilesOverThePerFileLimitAreSkippedAndCounted) {
  TempDir cache;
  BuildIdCache::Limits limits;
  limits.max_file_bytes = fs::file_size(lib_) - 1;
  auto c = Cache(cache.path(), limits);
  std::vector<std::string> warnings;
  c->set_on_warning([&](const std::string& w) { warnings.push_back(w); });
  UniqueFd fd = OpenRead(lib_);
  Status s = c->Insert(Id(kIdV1), lib_, fd.get());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("--buildid-cache-max-file"), std::string::npos) << s.ToString();
  EXPECT_EQ(c->stats().too_large, 1u);
  EXPECT_EQ(RegularFilesUnder(cache.path()), std::set<std::string>{});
  EXPECT_TRUE(warnings.empty());
  // Smaller ones are still copied.
  ASSERT_TRUE(c->InsertContents(Id(kIdV2), "/small", "kallsyms", "small", 0444).ok());
  EXPECT_EQ(c->stats().copied, 1u);
}

TEST_P(BuildIdCacheTest, ReachingTheCacheLimitStopsCopyingAndSaysSoOnce) {
  TempDir cache;
  const uint64_t lib_size = fs::file_size(lib_);
  // What an earlier run left: half the limit.
  testing::WriteFile(cache.File("earlier"), std::string(lib_size, 'e'));
  BuildIdCache::Limits limits;
  limits.max_bytes = 2 * lib_size + lib_size / 2;
  auto c = Cache(cache.path(), limits);
  std::vector<std::string> warnings;
  c->set_on_warning([&](const std::string& w) { warnings.push_back(w); });
  UniqueFd fd = OpenRead(lib_);
  ASSERT_TRUE(c->Insert(Id(kIdV1), lib_, fd.get()).ok());  // 2 of 2.5
  EXPECT_TRUE(warnings.empty());
  const std::string other = dir_.File("liby.so");
  ASSERT_TRUE(testing::BuildSharedLibrary(other, "y_fn", kIdV2));
  fd = OpenRead(other);
  Status s = c->Insert(Id(kIdV2), other, fd.get());  // would be 3 of 2.5
  EXPECT_FALSE(s.ok());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("--buildid-cache-max"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find(cache.path()), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("no more files are copied"), std::string::npos) << warnings[0];
  // From now on nothing is copied, however small, and nothing more is said.
  ASSERT_FALSE(c->InsertContents(Id("4444"), "/tiny", "kallsyms", "t", 0444).ok());
  EXPECT_EQ(warnings.size(), 1u);
  EXPECT_EQ(c->stats().copied, 1u);
  EXPECT_EQ(c->stats().skipped, 2u);
  // What is there stays usable.
  fd = OpenRead(lib_);
  ASSERT_TRUE(c->Insert(Id(kIdV1), lib_, fd.get()).ok());
  EXPECT_EQ(c->stats().present, 1u);
}

TEST_P(BuildIdCacheTest, InsertsFilesThatAreNotElf) {
  // The kernel's symbols, as perf keeps them: [kernel.kallsyms]/<id>/kallsyms.
  TempDir cache;
  const std::string text = "ffffffff81000000 T _stext\nffffffff81000010 T other\n";
  auto c = Cache(cache.path());
  ASSERT_TRUE(c->InsertContents(Id(kIdV2), "[kernel.kallsyms]", "kallsyms", text, 0400).ok());
  const std::string file = cache.path() + "/[kernel.kallsyms]/" + kIdV2 + "/kallsyms";
  EXPECT_EQ(ReadAll(file), text);
  EXPECT_EQ(ReadAll(BuildIdCache::LinkPath(cache.path(), Id(kIdV2)) + "/kallsyms"), text);
  struct stat st;
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0400u);
  // The same bytes again: present.  Other bytes (another boot): replaced.
  ASSERT_TRUE(c->InsertContents(Id(kIdV2), "[kernel.kallsyms]", "kallsyms", text, 0400).ok());
  EXPECT_EQ(c->stats().present, 1u);
  const std::string moved = "ffffffff91000000 T _stext\n";
  ASSERT_TRUE(c->InsertContents(Id(kIdV2), "[kernel.kallsyms]", "kallsyms", moved, 0400).ok());
  EXPECT_EQ(ReadAll(file), moved);
  EXPECT_EQ(c->stats().copied, 2u);
  // A caller may accept what is there by its own rule.
  BuildIdCache::Verifier any = [](int, uint64_t size) {
    return size > 0 ? Status() : Status::Failure("empty");
  };
  ASSERT_TRUE(
      c->InsertContents(Id(kIdV2), "[kernel.kallsyms]", "kallsyms", text, 0400, any).ok());
  EXPECT_EQ(ReadAll(file), moved);
  EXPECT_EQ(c->stats().present, 2u);
  // File names stay inside the entry.
  EXPECT_FALSE(c->InsertContents(Id(kIdV2), "[kernel.kallsyms]", "../x", text, 0400).ok());
  EXPECT_FALSE(c->InsertContents(Id(kIdV2), "[kernel.kallsyms]", ".hidden", text, 0400).ok());
}

// What record does with the kernel's symbols: queued, judged by the caller's
// rule on the worker.  An entry the rule accepts stays as it is (same
// inode); one it refuses is replaced.
TEST_P(BuildIdCacheTest, QueuedContentsKeepWhatTheVerifierAccepts) {
  TempDir cache;
  const std::string file = BuildIdCache::KallsymsPath(cache.path(), Id(kIdV2));
  {
    auto c = Cache(cache.path());
    ASSERT_TRUE(c->InsertContents(Id(kIdV2), "[kernel.kallsyms]", "kallsyms", "complete\n", 0400)
                    .ok());
  }
  struct stat before;
  ASSERT_EQ(stat(file.c_str(), &before), 0);
  std::atomic<int> judged = 0;
  auto complete = [&judged](int fd, uint64_t size) {
    ++judged;
    char last = 0;
    if (size == 0 || pread(fd, &last, 1, static_cast<off_t>(size - 1)) != 1 || last != '\n')
      return Status::Failure("cut short");
    return Status();
  };
  {
    auto c = Cache(cache.path());
    c->Start();
    c->AddContents(Id(kIdV2), "[kernel.kallsyms]", "kallsyms", "another boot\n", 0400,
                   BuildIdCache::Priority::kBackground, complete);
    c->Stop();  // the queued job is done
    EXPECT_EQ(judged, 1);
    EXPECT_EQ(c->stats().present, 1u);
    EXPECT_EQ(c->stats().copied, 0u);
  }
  struct stat after;
  ASSERT_EQ(stat(file.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(ReadAll(file), "complete\n");

  // A truncated entry (no final newline) is replaced, owner-only.
  {
    auto c = Cache(cache.path());
    ASSERT_TRUE(c->InsertContents(Id(kIdV2), "[kernel.kallsyms]", "kallsyms", "compl", 0400).ok());
  }
  {
    auto c = Cache(cache.path());
    c->Start();
    c->AddContents(Id(kIdV2), "[kernel.kallsyms]", "kallsyms", "another boot\n", 0400,
                   BuildIdCache::Priority::kBackground, complete);
    c->Stop();
    EXPECT_EQ(c->stats().copied, 1u);
  }
  EXPECT_EQ(ReadAll(file), "another boot\n");
  ASSERT_EQ(stat(file.c_str(), &after), 0);
  EXPECT_EQ(after.st_mode & 07777, 0400u);
}

// A tmpfs of `bytes` at `dir`, unmounted by the destructor.
class SmallFilesystem {
 public:
  SmallFilesystem(const std::string& dir, size_t bytes) : dir_(dir) {
    const std::string options = "size=" + std::to_string(bytes) + ",mode=0755";
    mounted_ = mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) == 0;
    error_ = mounted_ ? 0 : errno;
  }
  ~SmallFilesystem() {
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  std::string error() const { return std::strerror(error_); }

 private:
  std::string dir_;
  bool mounted_ = false;
  int error_ = 0;
};

TEST_P(BuildIdCacheTest, AFullFilesystemStopsCopyingAtOnceAndLeavesNoPartialFile) {
  TempDir mnt;
  SmallFilesystem small(mnt.path(), 256 << 10);
  if (!small.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here: " << small.error();
  Grow(lib_, 1 << 20);  // four times what the filesystem holds
  const std::string cache = mnt.File("cache");
  auto c = Cache(cache);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> warnings;
  c->set_on_warning([&](const std::string& w) {
    std::lock_guard lock(mu);
    warnings.push_back(w);
    cv.notify_all();
  });
  c->Start();
  c->Add(Id(kIdV1), lib_, OpenRead(lib_));
  // Said while the capture runs, not at its end (Stop()).
  ASSERT_TRUE(WaitFor(mu, cv, [&] { return !warnings.empty(); }))
      << "no warning while the cache was running";
  {
    std::lock_guard lock(mu);
    EXPECT_NE(warnings[0].find(cache), std::string::npos) << warnings[0];
    EXPECT_NE(warnings[0].find(std::strerror(ENOSPC)), std::string::npos) << warnings[0];
  }
  // Copying has stopped: a file that would fit is not copied either.
  const std::string small_lib = dir_.File("libsmall.so");
  ASSERT_TRUE(testing::BuildSharedLibrary(small_lib, "s_fn", kIdV2));
  c->Add(Id(kIdV2), small_lib, OpenRead(small_lib));
  c->Stop();
  EXPECT_EQ(warnings.size(), 1u);
  EXPECT_EQ(c->stats().copied, 0u);
  EXPECT_EQ(c->stats().skipped, 2u);
  // Nothing was published, partial or otherwise, and no temporary remains.
  EXPECT_EQ(RegularFilesUnder(cache), std::set<std::string>{});
  struct stat st;
  EXPECT_NE(lstat(BuildIdCache::LinkPath(cache, Id(kIdV1)).c_str(), &st), 0);
}

TEST(BuildIdCacheWorkerTest, CopiesADeletedFileThroughItsDescriptor) {
  TempDir dir, cache;
  const std::string lib = dir.File("libgone.so");
  ASSERT_TRUE(testing::BuildSharedLibrary(lib, "gone_fn", kIdV1));
  BuildIdCache c(cache.path());
  c.Start();
  UniqueFd fd = OpenRead(lib);
  ASSERT_TRUE(fd.valid());
  fs::remove(lib);  // the descriptor keeps the inode alive
  c.Add(Id(kIdV1), lib + " (deleted)", std::move(fd));
  c.Add(Id(kIdV1), lib, OpenRead("/dev/null"));  // duplicate: dropped
  EXPECT_TRUE(c.Seen(Id(kIdV1)));
  c.Stop();
  EXPECT_EQ(c.stats().copied, 1u);
  EXPECT_EQ(c.stats().failed, 0u);
  // " (deleted)" is not part of the cached name.
  EXPECT_TRUE(fs::exists(cache.path() + lib + "/" + kIdV1 + "/elf"));
}

TEST(BuildIdCacheWorkerTest, LiveCopiesDoNotWaitBehindBackgroundOnes) {
  TempDir dir, cache;
  const std::string background = dir.File("libbackground.so");
  const std::string live = dir.File("liblive.so");
  ASSERT_TRUE(testing::BuildSharedLibrary(background, "bg_fn", kIdV1));
  ASSERT_TRUE(testing::BuildSharedLibrary(live, "live_fn", kIdV2));
  BuildIdCache c(cache.path());
  // The background copy holds its worker until the live one has finished:
  // with one shared worker the live copy would never run, and the wait
  // below would time out.
  std::mutex mu;
  std::condition_variable cv;
  bool live_done = false;
  c.set_on_done([&](const BuildId& id) {
    std::lock_guard lock(mu);
    if (id == Id(kIdV2)) live_done = true;
    cv.notify_all();
  });
  c.set_before_publish([&](const BuildId& id) {
    if (id != Id(kIdV1)) return;
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(60), [&] { return live_done; });
  });
  c.Add(Id(kIdV1), background, OpenRead(background), BuildIdCache::Priority::kBackground);
  c.Start();
  c.Add(Id(kIdV2), live, OpenRead(live), BuildIdCache::Priority::kLive);
  EXPECT_TRUE(WaitFor(mu, cv, [&] { return live_done; })) << "the live copy waited";
  c.Stop();
  EXPECT_EQ(c.stats().copied, 2u);
  EXPECT_TRUE(fs::exists(BuildIdCache::ElfPath(cache.path(), live, Id(kIdV2))));
}

class BuildIdCacheMaintenanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lib_ = dir_.File("libx.so");
    other_ = dir_.File("liby.so");
    ASSERT_TRUE(testing::BuildSharedLibrary(lib_, "x_fn", kIdV1));
    ASSERT_TRUE(testing::BuildSharedLibrary(other_, "y_fn", kIdV2));
  }
  // Two versions of lib_ (v1, then v3 at the same path) and other_.
  void Fill(const std::string& cache) {
    BuildIdCache c(cache);
    UniqueFd fd = OpenRead(lib_);
    ASSERT_TRUE(c.Insert(Id(kIdV1), lib_, fd.get()).ok());
    const std::string v3 = dir_.File("v3.so");
    ASSERT_TRUE(testing::BuildSharedLibrary(v3, "x_fn", testing::kIdV3));
    fd = OpenRead(v3);
    ASSERT_TRUE(c.Insert(Id(testing::kIdV3), lib_, fd.get()).ok());
    fd = OpenRead(other_);
    ASSERT_TRUE(c.Insert(Id(kIdV2), other_, fd.get()).ok());
    ASSERT_TRUE(c.InsertContents(Id("abcd"), "[kernel.kallsyms]", "kallsyms", "syms", 0400).ok());
  }

  TempDir dir_;
  std::string lib_, other_;
};

TEST_F(BuildIdCacheMaintenanceTest, ListsEveryEntryAndIgnoresForeignLinks) {
  TempDir cache, outside;
  Victim victim(outside);
  Fill(cache.path());
  // A link that is not ours, into the victim directory: counted, not followed.
  const std::string foreign = cache.path() + "/.build-id/ee/eeee";
  fs::create_directories(fs::path(foreign).parent_path());
  ASSERT_EQ(symlink(victim.dir().c_str(), foreign.c_str()), 0);
  auto listing = ListBuildIdCache(cache.path());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  ASSERT_EQ(listing->entries.size(), 4u);
  std::vector<std::string> seen;
  for (const CacheEntry& e : listing->entries)
    seen.push_back(e.path + " " + e.build_id + " " + e.file_name);
  EXPECT_EQ(seen, (std::vector<std::string>{
                      "/" + lib_.substr(1) + " " + kIdV1 + " elf",
                      "/" + lib_.substr(1) + " " + testing::kIdV3 + " elf",
                      other_ + " " + kIdV2 + " elf",
                      "[kernel.kallsyms] abcd kallsyms",
                  }));
  EXPECT_EQ(listing->entries[0].size, fs::file_size(lib_));
  EXPECT_EQ(listing->entries[3].size, 4u);
  EXPECT_EQ(listing->foreign_links, 1u);
  EXPECT_EQ(victim.Changes(), "");
  // An empty or absent cache lists nothing; an absent one is no error.
  TempDir empty;
  auto none = ListBuildIdCache(empty.path());
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->entries.empty());
}

TEST_F(BuildIdCacheMaintenanceTest, PurgeRemovesEveryVersionOfOnePath) {
  TempDir cache;
  Fill(cache.path());
  auto purged = PurgeBuildIdCache(cache.path(), lib_);
  ASSERT_TRUE(purged.ok()) << purged.status().ToString();
  EXPECT_EQ(purged->entries, 2u);
  EXPECT_EQ(purged->files, 2u);
  struct stat st;
  EXPECT_NE(lstat(BuildIdCache::LinkPath(cache.path(), Id(kIdV1)).c_str(), &st), 0);
  EXPECT_NE(lstat(BuildIdCache::LinkPath(cache.path(), Id(testing::kIdV3)).c_str(), &st), 0);
  EXPECT_FALSE(fs::exists(cache.path() + lib_));  // its now empty directory too
  // The rest is untouched.
  auto listing = ListBuildIdCache(cache.path());
  ASSERT_TRUE(listing.ok());
  ASSERT_EQ(listing->entries.size(), 2u);
  EXPECT_EQ(listing->entries[0].path, other_);
  EXPECT_EQ(ReadAll(BuildIdCache::LinkPath(cache.path(), Id(kIdV2)) + "/elf"), ReadAll(other_));
  // Nothing cached for a path: nothing removed, no error.
  auto again = PurgeBuildIdCache(cache.path(), lib_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->entries, 0u);
  // A path that could not have been stored is an error.
  auto bad = PurgeBuildIdCache(cache.path(), "/tmp/../../etc");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("'..'"), std::string::npos) << bad.status().ToString();
}

TEST_F(BuildIdCacheMaintenanceTest, PurgingNeverFollowsPlantedSymlinks) {
  for (bool all : {false, true}) {
    SCOPED_TRACE(all ? "--purge-all" : "--purge");
    TempDir cache, outside;
    Victim victim(outside);
    testing::WriteFile(victim.dir() + "/keep", "keep");
    const timespec times[2] = {{1000000000, 0}, {1000000000, 0}};
    utimensat(AT_FDCWD, victim.dir().c_str(), times, 0);
    Fill(cache.path());
    // Inside an entry: a link to the victim file and one to the directory.
    const std::string entry = fs::path(BuildIdCache::ElfPath(cache.path(), lib_, Id(kIdV1)))
                                  .parent_path()
                                  .string();
    ASSERT_EQ(symlink(victim.file().c_str(), (entry + "/debug").c_str()), 0);
    ASSERT_EQ(symlink(victim.dir().c_str(), (entry + "/sub").c_str()), 0);
    // Where the other path's directory is, a link to the victim directory.
    const std::string other_dir = cache.path() + other_;
    fs::remove_all(other_dir);
    ASSERT_EQ(symlink(victim.dir().c_str(), other_dir.c_str()), 0);
    if (all) {
      auto purged = PurgeAllBuildIdCache(cache.path());
      ASSERT_TRUE(purged.ok()) << purged.status().ToString();
      EXPECT_TRUE(fs::is_empty(cache.path()));
    } else {
      auto purged = PurgeBuildIdCache(cache.path(), lib_);
      ASSERT_TRUE(purged.ok()) << purged.status().ToString();
      EXPECT_FALSE(fs::exists(entry));
      auto refused = PurgeBuildIdCache(cache.path(), other_);
      ASSERT_FALSE(refused.ok());
      EXPECT_NE(refused.status().ToString().find("a symbolic link inside the build-id cache"),
                std::string::npos)
          << refused.status().ToString();
    }
    EXPECT_EQ(ReadAll(victim.file()), "precious");
    EXPECT_EQ(ReadAll(victim.dir() + "/keep"), "keep");
    struct stat st;
    ASSERT_EQ(stat(victim.dir().c_str(), &st), 0);
    EXPECT_EQ(st.st_mtim.tv_sec, 1000000000) << "the outside directory was written";
  }
}

TEST_F(BuildIdCacheMaintenanceTest, PurgeAllRefusesADirectoryThatIsNotACache) {
  TempDir notcache;
  testing::WriteFile(notcache.File("thesis.tex"), "years of work");
  auto purged = PurgeAllBuildIdCache(notcache.path());
  ASSERT_FALSE(purged.ok());
  EXPECT_NE(purged.status().ToString().find("not a build-id cache; nothing removed"),
            std::string::npos)
      << purged.status().ToString();
  EXPECT_EQ(ReadAll(notcache.File("thesis.tex")), "years of work");
}

}  // namespace
}  // namespace mmap3
