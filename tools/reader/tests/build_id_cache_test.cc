#include "build_id_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "elf_file.h"
#include "fixtures.h"

namespace mmap3 {
namespace {

using testing::Id;
using testing::kIdV1;
using testing::kIdV2;
using testing::TempDir;

int OpenRead(const std::string& path) { return open(path.c_str(), O_RDONLY | O_CLOEXEC); }

TEST(BuildIdCacheTest, InsertUsesPerfLayout) {
  TempDir dir, cache;
  const std::string lib = dir.File("libx.so");
  ASSERT_TRUE(testing::BuildSharedLibrary(lib, "x_fn", kIdV1));
  BuildIdCache::Stats stats;
  int fd = OpenRead(lib);
  ASSERT_TRUE(BuildIdCache::Insert(cache.path(), Id(kIdV1), lib, fd, &stats).ok());
  close(fd);
  EXPECT_EQ(stats.copied, 1u);
  const std::string elf = BuildIdCache::ElfPath(cache.path(), lib, Id(kIdV1));
  EXPECT_EQ(elf, cache.path() + lib + "/" + kIdV1 + "/elf");
  const std::string link = BuildIdCache::LinkPath(cache.path(), Id(kIdV1));
  EXPECT_EQ(link, cache.path() + "/.build-id/11/" + std::string(kIdV1).substr(2));
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  // Relative link to the build-id directory, as perf makes it.
  EXPECT_EQ(std::filesystem::read_symlink(link).string().rfind("../../", 0), 0u);
  auto copy = ElfFile::Open(link + "/elf");
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ(copy->build_id(), Id(kIdV1));
  // A second insert is a no-op.
  fd = OpenRead(lib);
  ASSERT_TRUE(BuildIdCache::Insert(cache.path(), Id(kIdV1), lib, fd, &stats).ok());
  close(fd);
  EXPECT_EQ(stats.present, 1u);
}

TEST(BuildIdCacheTest, RefusesContentsThatNoLongerMatch) {
  // The file was rewritten in place (v2) before the worker copied it, but the
  // mapping said v1: nothing may be cached under v1.
  TempDir dir, cache;
  const std::string lib = dir.File("libx.so");
  ASSERT_TRUE(testing::BuildSharedLibrary(lib, "x_fn", kIdV2));
  BuildIdCache::Stats stats;
  int fd = OpenRead(lib);
  EXPECT_FALSE(BuildIdCache::Insert(cache.path(), Id(kIdV1), lib, fd, &stats).ok());
  close(fd);
  EXPECT_EQ(stats.mismatch, 1u);
  struct stat st;
  EXPECT_NE(lstat(BuildIdCache::LinkPath(cache.path(), Id(kIdV1)).c_str(), &st), 0);
  EXPECT_FALSE(std::filesystem::exists(BuildIdCache::ElfPath(cache.path(), lib, Id(kIdV1))));
}

TEST(BuildIdCacheTest, WorkerCopiesADeletedFileThroughItsDescriptor) {
  TempDir dir, cache;
  const std::string lib = dir.File("libgone.so");
  ASSERT_TRUE(testing::BuildSharedLibrary(lib, "gone_fn", kIdV1));
  BuildIdCache c(cache.path());
  c.Start();
  int fd = OpenRead(lib);
  ASSERT_GE(fd, 0);
  std::filesystem::remove(lib);  // the descriptor keeps the inode alive
  c.Add(Id(kIdV1), lib + " (deleted)", UniqueFd(fd));
  c.Add(Id(kIdV1), lib, UniqueFd(OpenRead("/dev/null")));  // duplicate: dropped
  EXPECT_TRUE(c.Seen(Id(kIdV1)));
  c.Stop();
  EXPECT_EQ(c.stats().copied, 1u);
  EXPECT_EQ(c.stats().failed, 0u);
  // " (deleted)" is not part of the cached name.
  EXPECT_TRUE(std::filesystem::exists(cache.path() + lib + "/" + kIdV1 + "/elf"));
}

}  // namespace
}  // namespace mmap3

namespace mmap3 {
namespace {

TEST(BuildIdCacheTest, LiveCopiesDoNotWaitBehindBackgroundOnes) {
  TempDir dir, cache;
  const std::string live = dir.File("liblive.so");
  ASSERT_TRUE(testing::BuildSharedLibrary(live, "live_fn", kIdV2));
  BuildIdCache c(cache.path());
  // A background job that blocks until the live one has finished: with one
  // shared worker this would deadlock, so the test times out instead of
  // passing.
  std::mutex mu;
  std::condition_variable cv;
  bool live_done = false;
  c.set_on_done([&](const BuildId& id) {
    std::lock_guard lock(mu);
    if (id == Id(kIdV2)) live_done = true;
    cv.notify_all();
  });
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  // Background: a pipe whose reads block until we write after the live job.
  c.Add(Id(kIdV1), "/slow/background.so", UniqueFd(pipe_fds[0]),
        BuildIdCache::Priority::kBackground);
  c.Start();
  c.Add(Id(kIdV2), live, UniqueFd(OpenRead(live)), BuildIdCache::Priority::kLive);
  {
    std::unique_lock lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return live_done; }));
  }
  close(pipe_fds[1]);  // EOF: the background copy ends (and is refused: not ELF)
  c.Stop();
  EXPECT_EQ(c.stats().copied, 1u);
  EXPECT_EQ(c.stats().mismatch, 1u);
  EXPECT_TRUE(std::filesystem::exists(BuildIdCache::ElfPath(cache.path(), live, Id(kIdV2))));
}

}  // namespace
}  // namespace mmap3
