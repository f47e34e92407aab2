#include "build_id.h"

#include <gtest/gtest.h>

#include <unordered_set>

namespace mmap3 {
namespace {

TEST(BuildIdTest, HexRoundTrip) {
  auto id = BuildId::FromHex("0123456789abcdefABCDEF0123456789abcdef01");
  ASSERT_TRUE(id);
  EXPECT_EQ(id->size(), 20u);
  EXPECT_EQ(id->Hex(), "0123456789abcdefabcdef0123456789abcdef01");
  EXPECT_EQ(id->ShortHex(), "0123456789ab");
}

TEST(BuildIdTest, RejectsBadHex) {
  EXPECT_FALSE(BuildId::FromHex("abc"));    // odd length
  EXPECT_FALSE(BuildId::FromHex("zz"));     // not hex
  EXPECT_FALSE(BuildId::FromHex(std::string(42, 'a')));  // 21 bytes
  ASSERT_TRUE(BuildId::FromHex(""));
  EXPECT_TRUE(BuildId::FromHex("")->empty());
}

TEST(BuildIdTest, SizeIsPartOfIdentity) {
  // A 16-byte md5 id is not the 20-byte id that starts with it.
  uint8_t bytes[20] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 0, 0, 0, 0};
  BuildId md5(bytes, 16), sha1(bytes, 20);
  EXPECT_NE(md5, sha1);
  EXPECT_EQ(md5, BuildId(bytes, 16));
  EXPECT_TRUE(md5 < sha1 || sha1 < md5);
}

TEST(BuildIdTest, LongIdsAreTruncatedLikeTheKernel) {
  uint8_t bytes[32];
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<uint8_t>(i);
  BuildId id(bytes, 32);
  EXPECT_EQ(id.size(), BuildId::kMaxSize);
  EXPECT_EQ(id, BuildId(bytes, 20));
}

TEST(BuildIdTest, HashSpreadsShortIds) {
  std::unordered_set<size_t> hashes;
  for (uint8_t i = 0; i < 100; ++i) hashes.insert(BuildId(&i, 1).Hash());
  EXPECT_EQ(hashes.size(), 100u);
}

}  // namespace
}  // namespace mmap3
