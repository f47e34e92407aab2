#include "ring_buffer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace mmap3 {
namespace {

constexpr size_t kPage = 4096;

// A fake perf mmap: one control page followed by a data area, in a
// std::vector.  The test plays the kernel: it writes records at data_head.
class FakeRing {
 public:
  explicit FakeRing(size_t data_size, bool set_data_offset = true)
      : data_size_(data_size), mem_((kPage + data_size) / 8, 0) {
    if (set_data_offset) {
      meta()->data_offset = kPage;
      meta()->data_size = data_size;
    }
  }
  perf_event_mmap_page* meta() { return reinterpret_cast<perf_event_mmap_page*>(mem_.data()); }
  uint8_t* data() { return reinterpret_cast<uint8_t*>(mem_.data()) + kPage; }
  void* base() { return mem_.data(); }

  // Writes a record of `size` bytes whose payload bytes are `fill`, wrapping
  // around the end like the kernel does.
  void Produce(uint32_t type, uint16_t size, uint8_t fill) {
    std::vector<uint8_t> rec(size, fill);
    perf_event_header h{type, 0, size};
    std::memcpy(rec.data(), &h, sizeof(h));
    ProduceRaw(rec);
  }
  void ProduceRaw(const std::vector<uint8_t>& rec) {
    uint64_t head = meta()->data_head;
    for (size_t i = 0; i < rec.size(); ++i) data()[(head + i) % data_size_] = rec[i];
    meta()->data_head = head + rec.size();
  }
  uint64_t tail() { return meta()->data_tail; }

 private:
  size_t data_size_;
  std::vector<uint64_t> mem_;
};

struct Seen {
  uint32_t type;
  std::vector<uint8_t> bytes;
};

std::vector<Seen> DrainAll(RingBuffer& ring) {
  std::vector<Seen> out;
  ring.Drain([&](std::span<const uint8_t> rec) {
    perf_event_header h;
    std::memcpy(&h, rec.data(), sizeof(h));
    out.push_back({h.type, std::vector<uint8_t>(rec.begin(), rec.end())});
  });
  return out;
}

TEST(RingBufferTest, EmptyBufferDeliversNothing) {
  FakeRing fake(4096);
  RingBuffer ring(fake.base(), kPage, 4096);
  EXPECT_EQ(ring.Available(), 0u);
  EXPECT_TRUE(DrainAll(ring).empty());
  EXPECT_EQ(fake.tail(), 0u);
}

TEST(RingBufferTest, DeliversRecordsInOrderAndReleasesSpace) {
  FakeRing fake(4096);
  RingBuffer ring(fake.base(), kPage, 4096);
  fake.Produce(1, 16, 0xaa);
  fake.Produce(2, 24, 0xbb);
  fake.Produce(3, 8, 0);
  EXPECT_EQ(ring.Available(), 48u);
  auto seen = DrainAll(ring);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].type, 1u);
  EXPECT_EQ(seen[1].type, 2u);
  EXPECT_EQ(seen[1].bytes.size(), 24u);
  EXPECT_EQ(seen[1].bytes[23], 0xbb);
  EXPECT_EQ(seen[2].type, 3u);
  EXPECT_EQ(fake.tail(), 48u);
  EXPECT_EQ(ring.Available(), 0u);
  EXPECT_EQ(ring.stats().records, 3u);
  EXPECT_EQ(ring.stats().straddled, 0u);
}

TEST(RingBufferTest, FullBufferIsDrainedCompletely) {
  FakeRing fake(1024);
  RingBuffer ring(fake.base(), kPage, 1024);
  for (int i = 0; i < 16; ++i) fake.Produce(static_cast<uint32_t>(i + 1), 64, static_cast<uint8_t>(i));
  EXPECT_EQ(ring.Available(), 1024u);  // head - tail == size: completely full
  auto seen = DrainAll(ring);
  ASSERT_EQ(seen.size(), 16u);
  EXPECT_EQ(seen[15].type, 16u);
  EXPECT_EQ(fake.tail(), 1024u);
  // The kernel can now wrap around; records keep flowing.
  fake.Produce(99, 32, 1);
  seen = DrainAll(ring);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].type, 99u);
}

TEST(RingBufferTest, RecordStraddlingTheEndIsCopiedWhole) {
  FakeRing fake(256);
  RingBuffer ring(fake.base(), kPage, 256);
  fake.Produce(1, 232, 0x11);  // leaves 24 bytes before the end
  EXPECT_EQ(DrainAll(ring).size(), 1u);
  // 64 bytes from offset 232: 24 at the end, 40 at the start.
  std::vector<uint8_t> rec(64);
  perf_event_header h{7, 0, 64};
  std::memcpy(rec.data(), &h, sizeof(h));
  for (size_t i = sizeof(h); i < rec.size(); ++i) rec[i] = static_cast<uint8_t>(i);
  fake.ProduceRaw(rec);
  auto seen = DrainAll(ring);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].bytes, rec);
  EXPECT_EQ(ring.stats().straddled, 1u);
  EXPECT_EQ(fake.tail(), 296u);
}

TEST(RingBufferTest, ImpossibleSizeIsCountedAndSkipped) {
  FakeRing fake(1024);
  RingBuffer ring(fake.base(), kPage, 1024);
  fake.Produce(1, 16, 0);
  // A header claiming 4 bytes (smaller than itself) cannot be framed.
  std::vector<uint8_t> bad(16, 0);
  perf_event_header h{2, 0, 4};
  std::memcpy(bad.data(), &h, sizeof(h));
  fake.ProduceRaw(bad);
  fake.Produce(3, 16, 0);
  auto seen = DrainAll(ring);
  ASSERT_EQ(seen.size(), 1u);  // the one before the bad record
  EXPECT_EQ(ring.stats().bad_size, 1u);
  EXPECT_EQ(ring.stats().dropped_bytes, 32u);
  EXPECT_EQ(fake.tail(), 48u);  // everything up to head was released
  // The stream resynchronizes at the new head.
  fake.Produce(4, 16, 0);
  seen = DrainAll(ring);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].type, 4u);
}

TEST(RingBufferTest, SizeBeyondAvailableDataIsCounted) {
  FakeRing fake(1024);
  RingBuffer ring(fake.base(), kPage, 1024);
  std::vector<uint8_t> rec(16, 0);
  perf_event_header h{1, 0, 512};  // claims more than was published
  std::memcpy(rec.data(), &h, sizeof(h));
  fake.ProduceRaw(rec);
  EXPECT_TRUE(DrainAll(ring).empty());
  EXPECT_EQ(ring.stats().bad_size, 1u);
  // Misaligned sizes are impossible too.
  fake.Produce(1, 12, 0);
  EXPECT_TRUE(DrainAll(ring).empty());
  EXPECT_EQ(ring.stats().bad_size, 2u);
}

TEST(RingBufferTest, OldKernelsWithoutDataOffsetUseThePageSize) {
  FakeRing fake(512, /*set_data_offset=*/false);
  RingBuffer ring(fake.base(), kPage, 512);
  fake.Produce(5, 16, 0x5a);
  auto seen = DrainAll(ring);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].bytes[8], 0x5a);
}

}  // namespace
}  // namespace mmap3
