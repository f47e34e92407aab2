// Issue 12: "no per-sample allocation anywhere on the hot path".  Samples
// of locations and chains seen before, pushed into the sorter (as views, as
// report does, or copied, as a live capture does), released in rounds from
// two interleaved buffers and counted by the profile, flat and with chains,
// allocate nothing once the tables have grown to the profile's size.
//
// Allocations are counted by replacing the global operator new for this
// test binary.  Not under ASan, whose allocator owns operator new: a
// replacement there would pair its nothrow new with our delete.
#include <gtest/gtest.h>
#include <linux/perf_event.h>

#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#include "fixtures.h"
#include "profile.h"
#include "record.h"
#include "record_sorter.h"
#include "record_writer.h"

namespace {
thread_local uint64_t g_allocations = 0;
}  // namespace

#if !defined(__SANITIZE_ADDRESS__)
void* operator new(std::size_t n) {
  ++g_allocations;
  if (void* p = std::malloc(n != 0 ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
#endif

namespace mmap3 {
namespace {

const SampleFormat kFormat{PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU |
                               PERF_SAMPLE_PERIOD | PERF_SAMPLE_CALLCHAIN,
                           0, true};
constexpr uint64_t kBase = 0x7f0000000000;
constexpr uint32_t kPid = 7;

using testing::Sid;

// A round's samples: 64 leaf addresses, 32 distinct chains of depth 8, two
// threads; times are filled in per round.
std::vector<std::vector<uint8_t>> Samples(size_t n) {
  std::vector<std::vector<uint8_t>> out;
  for (size_t i = 0; i < n; ++i) {
    SampleRecord s;
    s.misc = PERF_RECORD_MISC_USER;
    s.pid = kPid;
    s.tid = kPid + static_cast<uint32_t>(i % 2);
    s.ip = kBase + 0x100 + (i % 64) * 0x40;
    s.period = 1000;
    std::vector<uint64_t> chain{static_cast<uint64_t>(PERF_CONTEXT_USER), s.ip};
    for (uint64_t d = 1; d < 8; ++d) chain.push_back(kBase + 0x4000 + ((i % 32) * 8 + d) * 0x10);
    out.push_back(EncodeSample(s, chain, kFormat));
  }
  return out;
}

void SetTime(std::vector<uint8_t>& record, uint64_t time) {
  const SampleLayout layout(kFormat);
  std::memcpy(record.data() + layout.time, &time, sizeof(time));
}

TEST(HotPathTest, SamplesSeenBeforeAllocateNothingInTheSorterOrTheProfile) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "allocations are counted by replacing operator new, which ASan owns";
#endif
  constexpr size_t kRound = 512, kRounds = 8;
  for (int variant = 0; variant < 8; ++variant) {
    const bool chains = variant & 1, copy = variant & 2, epochs = variant & 4;
    SCOPED_TRACE(::testing::Message() << "chains " << chains << ", copied " << copy
                                      << ", a new epoch each round " << epochs);
    ProfileOptions o;
    o.callchains = chains;
    Profile p(o);
    p.SetFormat(kFormat);
    CommRecord c;
    c.pid = c.tid = kPid;
    c.comm = "app";
    c.exec = true;
    c.sample_id = Sid(kPid, 1);
    p.Process(EncodeComm(c, kFormat));
    MmapRecord m;
    m.format = MmapFormat::kMmap2BuildId;
    m.misc = PERF_RECORD_MISC_USER;
    m.pid = m.tid = kPid;
    m.start = kBase;
    m.len = 0x10000;
    m.build_id = testing::Id(testing::kIdV1);
    m.filename = "/usr/lib/libapp.so";
    m.sample_id = Sid(kPid, 2);
    p.Process(EncodeMmap(m, kFormat));

    // Two sets of records, a round's each: a round's records are still
    // pending (views into them) until the next round ends.
    std::vector<std::vector<uint8_t>> sets[2] = {Samples(kRound), Samples(kRound)};
    RecordSorter sorter;
    uint64_t processed = 0;
    auto process = [&](std::span<const Bytes> batch) {
      processed += batch.size();
      p.ProcessBatch(batch);
    };
    uint64_t time = 10;
    size_t rounds = 0;
    uint64_t excluded = 0;
    // Two buffers a round, each in order: the even records, then the odd
    // ones, their times interleaved.
    auto round = [&] {
      std::vector<std::vector<uint8_t>>& records = sets[rounds++ % 2];
      for (size_t i = 0; i < kRound; ++i) SetTime(records[i], time + i);
      for (size_t first : {size_t{0}, size_t{1}}) {
        for (size_t i = first; i < kRound; i += 2) {
          if (copy)
            sorter.Push(time + i, records[i]);
          else
            sorter.PushView(time + i, records[i]);
        }
      }
      time += kRound;
      sorter.FinishRound(process);
      if (epochs) {
        // Another task's record: every chain is resolved again after it
        // (what that record itself allocates is not the samples').
        const uint64_t before_record = g_allocations;
        CommRecord other;
        other.pid = other.tid = kPid + 100;
        other.comm = "other";
        other.sample_id = Sid(other.pid, time);
        p.Process(EncodeComm(other, kFormat));
        excluded += g_allocations - before_record;
      }
    };
    for (size_t r = 0; r < kRounds; ++r) round();  // the tables grow here
    const uint64_t warm = processed;
    excluded = 0;
    const uint64_t before = g_allocations;
    for (size_t r = 0; r < kRounds; ++r) round();
    const uint64_t allocations = g_allocations - before - excluded;
    EXPECT_EQ(allocations, 0u) << "for " << processed - warm << " samples";
    EXPECT_GT(processed - warm, (kRounds - 1) * kRound);  // it did count samples
    EXPECT_EQ(p.unattributed(), 0u);
  }
}

// The counting itself: a vector that grows is seen.
TEST(HotPathTest, TheCounterSeesAnAllocation) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "allocations are counted by replacing operator new, which ASan owns";
#endif
  const uint64_t before = g_allocations;
  std::vector<uint64_t> v;
  v.push_back(1);
  EXPECT_GE(g_allocations - before, 1u);
}

}  // namespace
}  // namespace mmap3
