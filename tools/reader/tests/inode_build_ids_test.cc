#include "inode_build_ids.h"

#include <gtest/gtest.h>

#include "fixtures.h"

namespace mmap3 {
namespace {

using testing::Id;
using testing::kIdV1;

constexpr int64_t kSecond = 1'000'000'000;

timespec At(int64_t ns) { return {static_cast<time_t>(ns / kSecond), static_cast<long>(ns % kSecond)}; }

struct stat File(int64_t ctime_ns, off_t size = 4096, int64_t mtime_ns = -1) {
  struct stat st {};
  st.st_dev = 0x801;
  st.st_ino = 1234;
  st.st_size = size;
  st.st_ctim = At(ctime_ns);
  st.st_mtim = At(mtime_ns < 0 ? ctime_ns : mtime_ns);
  return st;
}

const int64_t kNow = 1'700'000'000 * kSecond;

TEST(InodeBuildIdsTest, AFileUnchangedForLongIsReadOnce) {
  InodeBuildIds ids;
  const struct stat st = File(kNow - 60 * kSecond);
  EXPECT_TRUE(ids.Store(st, st, At(kNow), Id(kIdV1)));
  ASSERT_TRUE(ids.Find(st).has_value());
  EXPECT_EQ(*ids.Find(st), Id(kIdV1));
}

TEST(InodeBuildIdsTest, ARewriteWithinOneTimerTickIsNotServedTheOldId) {
  // The file was written 1 ms before we read it; a rewrite in place right
  // after our read, in the same timer tick, gets the same ctime (and here
  // the same size and mtime): nothing in stat() tells the versions apart.
  InodeBuildIds ids;
  const struct stat v1 = File(kNow - 1'000'000);
  EXPECT_FALSE(ids.Store(v1, v1, At(kNow), Id(kIdV1)));
  const struct stat v2 = v1;  // the rewritten file's stat
  EXPECT_FALSE(ids.Find(v2).has_value());
  // Just inside the settling time: still not kept.
  const struct stat recent = File(kNow - InodeBuildIds::kSettleNs + 1);
  EXPECT_FALSE(ids.Store(recent, recent, At(kNow), Id(kIdV1)));
  // A ctime after our clock (a clock stepped back): not kept.
  const struct stat future = File(kNow + kSecond);
  EXPECT_FALSE(ids.Store(future, future, At(kNow), Id(kIdV1)));
  EXPECT_EQ(ids.size(), 0u);
}

TEST(InodeBuildIdsTest, AnotherSizeOrMtimeIsAnotherFile) {
  InodeBuildIds ids;
  const struct stat st = File(kNow - 60 * kSecond);
  ASSERT_TRUE(ids.Store(st, st, At(kNow), Id(kIdV1)));
  EXPECT_FALSE(ids.Find(File(kNow - 60 * kSecond, 8192)).has_value());
  EXPECT_FALSE(ids.Find(File(kNow - 60 * kSecond, 4096, kNow - 61 * kSecond)).has_value());
  struct stat other_dev = st;
  other_dev.st_dev = 0x802;
  EXPECT_FALSE(ids.Find(other_dev).has_value());
}

TEST(InodeBuildIdsTest, AFileChangedWhileItWasReadIsNotKept) {
  InodeBuildIds ids;
  const struct stat before = File(kNow - 60 * kSecond);
  const struct stat after = File(kNow - 60 * kSecond, 8192, kNow);
  EXPECT_FALSE(ids.Store(before, after, At(kNow), Id(kIdV1)));
  EXPECT_FALSE(ids.Find(before).has_value());
  EXPECT_FALSE(ids.Find(after).has_value());
}

}  // namespace
}  // namespace mmap3
