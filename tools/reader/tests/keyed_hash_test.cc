#include "keyed_hash.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

#include "profile.h"

namespace mmap3 {
namespace {

template <typename Map>
size_t LargestBucket(const Map& m) {
  size_t largest = 0;
  for (size_t b = 0; b < m.bucket_count(); ++b) largest = std::max(largest, m.bucket_size(b));
  return largest;
}

// The keys a crafted capture would choose: multiples of the bucket count
// the table will have.  With std::hash (the integer itself) they all share
// one bucket; keyed, the largest bucket holds a handful.  (For 10,000 keys
// in about as many buckets, one of 16 or more has a chance near 1e-9.)
TEST(KeyedHashTest, KeysThatAreMultiplesOfTheBucketCountSpread) {
  constexpr uint32_t kKeys = 10'000;
  std::unordered_map<uint32_t, int> plain;
  plain.reserve(kKeys);
  const uint32_t buckets = static_cast<uint32_t>(plain.bucket_count());
  ASSERT_LT(uint64_t{kKeys} * buckets, uint64_t{1} << 32);
  KeyedMap<uint32_t, int> keyed;
  keyed.reserve(kKeys);
  ASSERT_EQ(keyed.bucket_count(), buckets);
  for (uint32_t i = 1; i <= kKeys; ++i) {
    plain.emplace(i * buckets, 0);
    keyed.emplace(i * buckets, 0);
  }
  ASSERT_EQ(plain.bucket_count(), buckets);
  ASSERT_EQ(keyed.bucket_count(), buckets);
  EXPECT_EQ(LargestBucket(plain), kKeys);  // the attack is real
  EXPECT_LT(LargestBucket(keyed), 16u);
}

// Pairs of an object and an offset (the symbolizer's cache), offsets
// multiples of the bucket count.
TEST(KeyedHashTest, PairsSpread) {
  constexpr uint64_t kKeys = 10'000;
  KeyedMap<std::pair<const void*, uint64_t>, int> keyed;
  keyed.reserve(kKeys);
  const uint64_t buckets = keyed.bucket_count();
  int object = 0;
  for (uint64_t i = 1; i <= kKeys; ++i)
    keyed.emplace(std::pair<const void*, uint64_t>(&object, i * buckets), 0);
  ASSERT_EQ(keyed.bucket_count(), buckets);
  EXPECT_LT(LargestBucket(keyed), 16u);
}

TEST(KeyedHashTest, EqualKeysHashEquallyAndLengthCounts) {
  const KeyedHash h;
  EXPECT_EQ(h(uint64_t{42}), h(uint64_t{42}));
  EXPECT_EQ(h(std::string("libc.so.6")), h(std::string_view("libc.so.6")));
  const std::string with_zero("ab\0", 3);
  EXPECT_NE(h(std::string("ab")), h(with_zero));
  EXPECT_NE(h(std::string("")), h(std::string(1, '\0')));
}

// What a capture fills is keyed: the table of sample ids a report is given.
static_assert(std::is_same_v<decltype(ProfileOptions{}.event_of_id)::hasher, KeyedHash>);

}  // namespace
}  // namespace mmap3
