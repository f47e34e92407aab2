#include "huge_array.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

namespace mmap3 {
namespace {

struct Wide {
  uint64_t a, b, c;
  uint32_t d;
};

// Small and large arrays start zero in every byte, hold what is written to
// every element, and the large ones start on a 2 MiB boundary (what lets
// the kernel back them with huge pages).
TEST(HugeArray, ZeroFilledWritableAndAligned) {
  for (size_t n : {size_t{1}, size_t{1000}, size_t{87381}, size_t{100000}, size_t{300001}}) {
    HugeArray<Wide> a(n);
    ASSERT_EQ(a.size(), n);
    ASSERT_NE(a.data(), nullptr);
    for (const Wide& w : a) ASSERT_TRUE(w.a == 0 && w.b == 0 && w.c == 0 && w.d == 0) << n;
    for (size_t i = 0; i < n; ++i) a[i] = Wide{i, ~i, i * 3, static_cast<uint32_t>(i)};
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(a[i].a, i);
      ASSERT_EQ(a[i].b, ~i);
      ASSERT_EQ(a[i].c, i * 3);
    }
    if (n * sizeof(Wide) >= (size_t{2} << 20)) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % (size_t{2} << 20), 0u) << n;
    }
  }
}

// Moves and swaps hand over the memory without copying or freeing it
// twice (ASan and the mapping's own checks would catch a double unmap).
TEST(HugeArray, MovesAndSwapsHandOverTheMemory) {
  HugeArray<uint64_t> a(300000), b(10), empty;
  a[299999] = 7;
  b[9] = 9;
  uint64_t* const a_data = a.data();
  a.swap(b);
  EXPECT_EQ(a.size(), 10u);
  EXPECT_EQ(a[9], 9u);
  EXPECT_EQ(b.data(), a_data);
  EXPECT_EQ(b[299999], 7u);
  HugeArray<uint64_t> c(std::move(b));
  EXPECT_EQ(c.data(), a_data);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.data(), nullptr);
  empty = std::move(c);
  EXPECT_EQ(empty.size(), 300000u);
  EXPECT_EQ(empty[299999], 7u);
  EXPECT_TRUE(c.empty());
  EXPECT_TRUE(HugeArray<uint64_t>().empty());
}

}  // namespace
}  // namespace mmap3
