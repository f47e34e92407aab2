#include "record_sorter.h"

#include <gtest/gtest.h>
#include <linux/perf_event.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>
#include <random>
#include <vector>

namespace mmap3 {
namespace {

// Records are 16 bytes: a header and the u64 "time" payload, so the tests
// can see which record came out.
std::vector<uint8_t> Rec(uint64_t tag) {
  std::vector<uint8_t> r(16, 0);
  perf_event_header h{1, 0, 16};
  std::memcpy(r.data(), &h, 8);
  std::memcpy(r.data() + 8, &tag, 8);
  return r;
}

uint64_t Tag(std::span<const uint8_t> r) {
  uint64_t t;
  std::memcpy(&t, r.data() + 8, 8);
  return t;
}

TEST(RecordSorterTest, MergesBuffersByTimestamp) {
  RecordSorter s;
  std::vector<uint64_t> out;
  auto sink = [&](std::span<const uint8_t> r) { out.push_back(Tag(r)); };
  // Round 1: CPU 0 then CPU 1.
  for (uint64_t t : {10, 30, 50}) s.Push(t, Rec(t));
  for (uint64_t t : {20, 40, 60}) s.Push(t, Rec(t));
  EXPECT_EQ(s.FinishRound(sink), 0u);  // nothing is safe after the first round
  // Round 2: CPU 0 wrote 55 while we were reading CPU 1 in round 1.
  for (uint64_t t : {55, 70}) s.Push(t, Rec(t));
  s.Push(65, Rec(65));
  s.FinishRound(sink);  // releases up to round 1's max (60)
  EXPECT_EQ(out, (std::vector<uint64_t>{10, 20, 30, 40, 50, 55, 60}));
  s.Flush(sink);
  EXPECT_EQ(out, (std::vector<uint64_t>{10, 20, 30, 40, 50, 55, 60, 65, 70}));
  EXPECT_EQ(s.pending(), 0u);
  EXPECT_EQ(s.late(), 0u);
}

TEST(RecordSorterTest, TiesKeepPushOrder) {
  RecordSorter s;
  std::vector<uint64_t> out;
  s.Push(5, Rec(1));
  s.Push(5, Rec(2));
  s.Push(3, Rec(0));
  s.Push(5, Rec(3));
  s.Flush([&](std::span<const uint8_t> r) { out.push_back(Tag(r)); });
  EXPECT_EQ(out, (std::vector<uint64_t>{0, 1, 2, 3}));
}

TEST(RecordSorterTest, RecordsWithoutTimeFollowTheirPredecessor) {
  RecordSorter s;
  std::vector<uint64_t> out;
  s.Push(100, Rec(1));
  s.Push(std::nullopt, Rec(2));  // e.g. a tool record: stays after 100
  s.Push(50, Rec(0));
  s.Flush([&](std::span<const uint8_t> r) { out.push_back(Tag(r)); });
  EXPECT_EQ(out, (std::vector<uint64_t>{0, 1, 2}));
}

TEST(RecordSorterTest, CountsRecordsOlderThanWhatWasReleased) {
  RecordSorter s;
  auto sink = [](std::span<const uint8_t>) {};
  s.Push(100, Rec(1));
  s.FinishRound(sink);
  s.Push(200, Rec(2));
  s.FinishRound(sink);  // releases 100
  s.Push(50, Rec(3));   // too late: the guarantee was broken by the producer
  EXPECT_EQ(s.late(), 1u);
}

// A release of late records alone does not make later ones look in time:
// 60, pushed after 100 went, is late although the last release was of 50
// only (helper-48's case).
TEST(RecordSorterTest, LateRecordsReleasedAloneDoNotLowerWhatCountsAsLate) {
  RecordSorter s;
  std::vector<uint64_t> out;
  auto sink = [&](std::span<const uint8_t> r) { out.push_back(Tag(r)); };
  s.Push(100, Rec(1));
  s.FinishRound(sink);
  s.FinishRound(sink);  // releases 100
  s.Push(50, Rec(2));   // late
  EXPECT_EQ(s.FinishRound(sink), 1u);  // releases 50 alone
  s.Push(60, Rec(3));   // late too: 100 went before it
  EXPECT_EQ(s.late(), 2u);
  s.Flush(sink);
  EXPECT_EQ(out, (std::vector<uint64_t>{1, 2, 3}));
}

TEST(RecordSorterTest, KeepsRecordBytesIntactAcrossCompaction) {
  RecordSorter s;
  std::vector<uint64_t> out;
  auto sink = [&](std::span<const uint8_t> r) {
    ASSERT_EQ(r.size(), 16u);
    out.push_back(Tag(r));
  };
  for (uint64_t t = 0; t < 1000; ++t) s.Push(t, Rec(t));
  s.FinishRound(sink);
  for (uint64_t t = 1000; t < 1500; ++t) s.Push(t, Rec(t));
  s.FinishRound(sink);  // releases 0..999, compacts 1000..1499
  s.Flush(sink);
  ASSERT_EQ(out.size(), 1500u);
  for (uint64_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], i);
}

TEST(RecordSorterTest, ViewsAndCopiesMixAcrossCompaction) {
  // Views point at bytes the caller keeps (a mapped file); copies are the
  // sorter's.  Interleaved, across rounds and compactions, every record
  // comes out whole, in time order, and views are not copied.
  std::vector<std::vector<uint8_t>> kept;
  for (uint64_t t = 0; t < 600; ++t) kept.push_back(Rec(t * 2 + 1));
  RecordSorter s;
  std::vector<uint64_t> out;
  std::vector<const uint8_t*> where;
  auto sink = [&](std::span<const uint8_t> r) {
    ASSERT_EQ(r.size(), 16u);
    out.push_back(Tag(r));
    where.push_back(r.data());
  };
  for (uint64_t round = 0; round < 3; ++round) {
    for (uint64_t i = round * 200; i < (round + 1) * 200; ++i) {
      s.Push(i * 2, Rec(i * 2));                 // even tags: copies
      s.PushView(i * 2 + 1, kept[i]);            // odd tags: views
    }
    s.FinishRound(sink);
  }
  s.Flush(sink);
  ASSERT_EQ(out.size(), 1200u);
  for (uint64_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i], i);
    if (i % 2 == 1) {
      EXPECT_EQ(where[i], kept[i / 2].data()) << "view " << i << " was copied";
    }
  }
}


// Against an oracle: records pushed in runs of any length (one per buffer
// and round, and random ones: 1 to 9 runs a round, times with many ties),
// released in rounds and at the end.  Every record comes out once, in
// (time, push order), and each round releases exactly those up to the
// previous round's largest time.  With a callback that takes batches, the
// same records in the same order, at most 64 at a time.
void ReleasesExactlyWhatAStableSortWould(bool batches, int max_runs = 9) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    RecordSorter s;
    struct Pushed {
      uint64_t time, tag;
    };
    std::vector<Pushed> pending;
    std::vector<uint64_t> out, want;
    auto one = [&](std::span<const uint8_t> r) { out.push_back(Tag(r)); };
    auto many = [&](std::span<const std::span<const uint8_t>> batch) {
      EXPECT_GE(batch.size(), 1u);
      EXPECT_LE(batch.size(), 64u);
      for (std::span<const uint8_t> r : batch) {
        EXPECT_EQ(r.size(), 16u);
        out.push_back(Tag(r));
      }
    };
    auto finish_round = [&] { return batches ? s.FinishRound(many) : s.FinishRound(one); };
    uint64_t tag = 0, previous_max = 0, round_max = 0, base = 0;
    const int rounds = 1 + static_cast<int>(rng() % 6);
    for (int round = 0; round < rounds; ++round) {
      const int runs = 1 + static_cast<int>(rng() % max_runs);
      for (int run = 0; run < runs; ++run) {
        uint64_t t = base + rng() % 50;
        // Now and then a long run: rounds of more than one batch.
        const int n = static_cast<int>(rng() % (run == 0 && rng() % 4 == 0 ? 90 : 12));
        for (int i = 0; i < n; ++i) {
          t += rng() % 3;  // in order within a run, ties included
          s.Push(t, Rec(tag));
          pending.push_back({t, tag++});
          round_max = std::max(round_max, t);
        }
      }
      base += 30;
      // What the round may release: up to the previous round's maximum.
      std::stable_sort(pending.begin(), pending.end(),
                       [](const Pushed& a, const Pushed& b) { return a.time < b.time; });
      size_t k = 0;
      while (k < pending.size() && pending[k].time <= previous_max) want.push_back(pending[k++].tag);
      pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(k));
      EXPECT_EQ(finish_round(), k);
      previous_max = round_max;
      ASSERT_EQ(out, want) << "trial " << trial << " round " << round;
    }
    for (const Pushed& p : pending) want.push_back(p.tag);
    if (batches)
      s.Flush(many);
    else
      s.Flush(one);
    ASSERT_EQ(out, want) << "trial " << trial;
    EXPECT_EQ(s.pending(), 0u);
  }
}

// Records of a few words or a few hundred: a header, then the tag in every word, so a
// record whose bytes moved wrong (or only partly) is seen.
std::vector<uint8_t> Long(uint64_t tag, size_t words) {
  std::vector<uint8_t> r(words * 8, 0);
  perf_event_header h{1, 0, static_cast<uint16_t>(words * 8)};
  std::memcpy(r.data(), &h, 8);
  for (size_t i = 1; i < words; ++i) std::memcpy(r.data() + i * 8, &tag, 8);
  return r;
}

bool Whole(std::span<const uint8_t> r) {
  if (r.size() < 16 || r.size() % 8 != 0 || r.size() > 0xffff) return false;
  perf_event_header h;
  std::memcpy(&h, r.data(), 8);
  if (h.size != r.size()) return false;
  for (size_t i = 2; i < r.size() / 8; ++i)
    if (std::memcmp(r.data() + 8, r.data() + i * 8, 8) != 0) return false;
  return true;
}

// Many rounds, copies and views mixed, against an oracle kept beside the
// sorter: released entries stay behind the pending ones (a head index)
// until a merge or a compaction moves them, and copied bytes are compacted
// now and then.  Some rounds are one run (in order: no merge, the released
// prefix grows), some many; some records have no time.  Every round
// releases what a stable sort would, whole and at their own address for
// views; pending(), late() and LowestView() (the lowest pending view, never
// a released one) agree with the oracle after every round.
void ManyRoundsAgainstAStableSort(bool batches) {
  std::mt19937_64 rng(batches ? 23 : 17);
  std::deque<std::vector<uint8_t>> kept;  // views' bytes; a deque never moves them
  RecordSorter s;
  struct Pushed {
    uint64_t time, tag;
    const uint8_t* view;  // null for a copy
  };
  std::vector<Pushed> pending;
  std::vector<uint64_t> out;
  std::vector<const uint8_t*> where;
  auto one = [&](std::span<const uint8_t> r) {
    EXPECT_TRUE(Whole(r));
    out.push_back(Tag(r));
    where.push_back(r.data());
  };
  auto many = [&](std::span<const std::span<const uint8_t>> batch) {
    EXPECT_GE(batch.size(), 1u);
    EXPECT_LE(batch.size(), 64u);
    for (std::span<const uint8_t> r : batch) one(r);
  };
  uint64_t tag = 0, previous_max = 0, round_max = 0, base = 1000, last_time = 0, released_max = 0,
           late = 0;
  bool released_any = false;
  size_t starts = 0;  // runs pushed into since the last release, at most
  for (int round = 0; round < 400; ++round) {
    const bool in_order = rng() % 3 == 0;
    const int runs = in_order ? 1 : 1 + static_cast<int>(rng() % 6);
    uint64_t t = base;
    for (int run = 0; run < runs; ++run) {
      if (!in_order) t = base + rng() % 40;
      const int n = static_cast<int>(rng() % (rng() % 8 == 0 ? 150 : 30));
      for (int i = 0; i < n; ++i) {
        t += rng() % 3;
        std::optional<uint64_t> time = t;
        if (rng() % 16 == 0) time = std::nullopt;  // takes the time pushed last
        // Now and then one earlier than what was released: late.
        if (rng() % 64 == 0 && base > 100) time = base - 100;
        const uint64_t effective = time.value_or(last_time);
        if (i == 0 || effective < last_time) ++starts;
        if (time) last_time = *time;
        if (released_any && effective < released_max) ++late;
        // Now and then a long one: copied bytes outgrow the compaction's
        // slack and are moved while other records are pending.
        std::vector<uint8_t> rec = Long(tag, rng() % 16 == 0 ? 100 + rng() % 400 : 2 + rng() % 8);
        const uint8_t* view = nullptr;
        if (rng() % 2 == 0) {
          kept.push_back(std::move(rec));
          view = kept.back().data();
          s.PushView(time, kept.back());
        } else {
          s.Push(time, rec);
        }
        pending.push_back({effective, tag++, view});
        round_max = std::max(round_max, effective);
      }
    }
    base += 50;
    std::stable_sort(pending.begin(), pending.end(),
                     [](const Pushed& a, const Pushed& b) { return a.time < b.time; });
    size_t k = 0;
    const size_t before = out.size();
    while (k < pending.size() && pending[k].time <= previous_max) ++k;
    EXPECT_EQ(batches ? s.FinishRound(many) : s.FinishRound(one), k);
    ASSERT_EQ(out.size(), before + k) << "round " << round;
    for (size_t i = 0; i < k; ++i) {
      ASSERT_EQ(out[before + i], pending[i].tag) << "round " << round;
      if (pending[i].view != nullptr) {
        ASSERT_EQ(where[before + i], pending[i].view) << "round " << round << ": a view was copied";
      }
    }
    if (k > 0) {
      released_max = std::max(released_max, pending[k - 1].time);
      released_any = true;
    }
    pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(k));
    previous_max = round_max;
    ASSERT_EQ(s.pending(), pending.size()) << "round " << round;
    // Released entries and emptied runs do not pile up.
    ASSERT_LE(s.held_entries(), 3 * s.pending()) << "round " << round;
    ASSERT_LE(s.held_runs(), starts + 1) << "round " << round;
    starts = 0;
    ASSERT_EQ(s.late(), late) << "round " << round;
    const uint8_t* low = nullptr;
    for (const Pushed& p : pending)
      if (p.view != nullptr && (low == nullptr || p.view < low)) low = p.view;
    ASSERT_EQ(s.LowestView(), low) << "round " << round;
  }
  const size_t before = out.size();
  if (batches)
    s.Flush(many);
  else
    s.Flush(one);
  ASSERT_EQ(out.size(), before + pending.size());
  for (size_t i = 0; i < pending.size(); ++i) ASSERT_EQ(out[before + i], pending[i].tag);
  EXPECT_EQ(s.pending(), 0u);
  EXPECT_EQ(s.LowestView(), nullptr);
}

TEST(RecordSorterTest, ManyRoundsOfViewsAndCopiesAgainstAStableSort) {
  ManyRoundsAgainstAStableSort(false);
}

TEST(RecordSorterTest, ManyRoundsInBatchesAgainstAStableSort) { ManyRoundsAgainstAStableSort(true); }

// Rounds that come in order are one run each: nothing is merged, and the
// released views stay in front of the pending ones for a while.
// LowestView() must not see them (report would keep pages it could give
// back, or worse, the test of a pending view would use a stale address).
TEST(RecordSorterTest, LowestViewIsThatOfAPendingRecord) {
  std::vector<std::vector<uint8_t>> kept;
  for (uint64_t t = 0; t < 30; ++t) kept.push_back(Rec(t));
  RecordSorter s;
  auto sink = [](std::span<const uint8_t>) {};
  for (uint64_t t = 0; t < 10; ++t) s.PushView(t + 1, kept[t]);
  EXPECT_EQ(s.FinishRound(sink), 0u);
  for (uint64_t t = 10; t < 20; ++t) s.PushView(t + 1, kept[t]);
  EXPECT_EQ(s.FinishRound(sink), 10u);  // releases kept[0..9], no merge (one run)
  const uint8_t* low = kept[10].data();
  for (uint64_t t = 11; t < 20; ++t) low = std::min(low, static_cast<const uint8_t*>(kept[t].data()));
  EXPECT_EQ(s.LowestView(), low);
  EXPECT_EQ(s.pending(), 10u);
  s.Push(21, Rec(20));  // a copy is no view
  s.Flush(sink);
  EXPECT_EQ(s.LowestView(), nullptr);
}

// Between pushes, too: the open run's entries count from the push that
// made them (helper-48's mutant that read the run's end as of the last
// release passed every other test).
TEST(RecordSorterTest, LowestViewSeesViewsPushedSinceTheRelease) {
  std::vector<std::vector<uint8_t>> kept;
  for (uint64_t t = 0; t < 8; ++t) kept.push_back(Rec(t));
  const uint8_t* low = kept[0].data();
  for (const auto& k : kept) low = std::min(low, static_cast<const uint8_t*>(k.data()));
  const size_t lowest = static_cast<size_t>(
      std::find_if(kept.begin(), kept.end(), [&](const auto& k) { return k.data() == low; }) -
      kept.begin());
  RecordSorter s;
  auto sink = [](std::span<const uint8_t>) {};
  s.Push(1, Rec(100));
  s.FinishRound(sink);
  EXPECT_EQ(s.LowestView(), nullptr);
  // Views in order after the copy: they extend its (open) run.
  for (uint64_t t = 0; t < kept.size(); ++t) {
    s.PushView(2 + t, kept[t]);
    const uint8_t* want = kept[0].data();
    for (uint64_t u = 1; u <= t; ++u) want = std::min(want, static_cast<const uint8_t*>(kept[u].data()));
    ASSERT_EQ(s.LowestView(), want) << "after view " << t;
  }
  EXPECT_EQ(s.LowestView(), kept[lowest].data());
}

// A live capture always has records pending: in a steady state of rounds
// (64 copies of 64 bytes a round, each round releasing the one before),
// what the sorter holds stays bounded.
TEST(RecordSorterTest, HoldsABoundedAmountInASteadyState) {
  RecordSorter s;
  auto sink = [](std::span<const std::span<const uint8_t>>) {};
  std::vector<uint8_t> rec(64, 0);
  perf_event_header h{1, 0, 64};
  std::memcpy(rec.data(), &h, sizeof(h));
  uint64_t t = 1;  // every record of a round above the round before
  for (int round = 0; round < 2000; ++round) {
    for (int buffer = 0; buffer < 2; ++buffer)
      for (int i = 0; i < 32; ++i) s.Push(t + 2 * i + buffer, rec);
    t += 64;
    s.FinishRound(sink);
    ASSERT_EQ(s.pending(), 64u);
    ASSERT_LE(s.held_entries(), 3 * 64u) << "round " << round;
    ASSERT_LE(s.held_runs(), 3u) << "round " << round;
    ASSERT_LE(s.held_bytes(), 2 * 64 * 64u + 32 * 1024 + 64 * 64) << "round " << round;
  }
}

TEST(RecordSorterTest, ReleasesExactlyWhatAStableSortWould) { ReleasesExactlyWhatAStableSortWould(false); }

TEST(RecordSorterTest, ReleasesInBatchesExactlyWhatAStableSortWould) {
  ReleasesExactlyWhatAStableSortWould(true);
}

// A machine of many CPUs: up to 150 runs a round, merged two by two over
// several passes (odd counts among them) before the last two are merged
// into the batches.
TEST(RecordSorterTest, ReleasesManyRunsARoundExactlyWhatAStableSortWould) {
  ReleasesExactlyWhatAStableSortWould(true, 150);
}

}  // namespace
}  // namespace mmap3
