#include "stack_counts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "fixtures.h"

namespace mmap3 {
namespace {

using Frame = StackCounts::Frame;
using Key = std::pair<uint32_t, std::vector<Frame>>;
struct Sums {
  uint64_t samples = 0, period = 0;
  bool operator==(const Sums&) const = default;
};

const auto* const kA = reinterpret_cast<const MappedObject*>(0x1000);
const auto* const kB = reinterpret_cast<const MappedObject*>(0x2000);

// Every stack in the table, each once, by value.
std::map<Key, Sums> Collect(const StackCounts& counts) {
  std::map<Key, Sums> out;
  for (uint32_t id = 0; id < counts.size(); ++id) {
    const auto frames = counts.frames(id);
    Key key{counts.task(id), std::vector<Frame>(frames.begin(), frames.end())};
    EXPECT_TRUE(out.emplace(key, Sums{counts.samples(id), counts.period(id)}).second)
        << "stack listed twice (id " << id << ")";
  }
  return out;
}

// Every stack in one bucket with one full hash: only the comparison of
// frames can tell them apart.
uint64_t SameHash(uint32_t, std::span<const Frame>) { return 42; }

// The stacks a wrong comparison would merge: an order swapped, a prefix,
// a frame differing in its object only or its offset only, the empty
// stack, and the same frames in another task.
const std::vector<std::pair<uint32_t, std::vector<Frame>>>& Tricky() {
  static const std::vector<std::pair<uint32_t, std::vector<Frame>>> stacks = {
      {1, {{kA, 0x10}, {kB, 0x20}}},
      {1, {{kB, 0x20}, {kA, 0x10}}},  // the same frames, the other order
      {1, {{kA, 0x10}}},              // a prefix of the first
      {1, {{kA, 0x10}, {kB, 0x20}, {kB, 0x20}}},  // the first, one frame longer
      {1, {{kA, 0x10}, {kA, 0x20}}},  // the first, another object in the second frame
      {1, {{kA, 0x10}, {kB, 0x24}}},  // the first, another offset in the second frame
      {1, {{nullptr, 0x10}, {kB, 0x20}}},  // no object: an address in no mapping
      {1, {}},                        // the empty stack
      {2, {}},                        // the empty stack of another task
      {2, {{kA, 0x10}, {kB, 0x20}}},  // the first stack, another task
  };
  return stacks;
}

void CheckTricky(StackCounts& counts) {
  std::map<Key, Sums> want;
  // Twice over, with the sample's number as its period: each must find
  // its own stack the second time, not one of the others.
  uint64_t period = 1;
  for (int round = 0; round < 2; ++round) {
    for (const auto& [task, frames] : Tricky()) {
      const uint32_t id = counts.Add(task, frames, period);
      EXPECT_EQ(counts.task(id), task);
      EXPECT_TRUE(std::equal(frames.begin(), frames.end(), counts.frames(id).begin(),
                             counts.frames(id).end()))
          << "Add returned another stack's id";
      Sums& s = want[{task, frames}];
      ++s.samples;
      s.period += period++;
    }
  }
  EXPECT_EQ(counts.size(), Tricky().size());
  EXPECT_EQ(Collect(counts), want);
}

TEST(StackCounts, KeepsStacksThatShareABucketApart) {
  StackCounts counts(&SameHash);
  CheckTricky(counts);
}

TEST(StackCounts, KeepsStacksApartWithTheDefaultHash) {
  StackCounts counts;
  CheckTricky(counts);
}

TEST(StackCounts, ReturnsTheSameIdForTheSameStack) {
  StackCounts counts;
  const std::vector<Frame> stack = {{kA, 1}, {kA, 2}, {kB, 3}};
  const uint32_t id = counts.Add(7, stack, 10);
  const std::vector<Frame> copy = stack;  // equal frames at another address
  EXPECT_EQ(counts.Add(7, copy, 5), id);
  EXPECT_EQ(counts.samples(id), 2u);
  EXPECT_EQ(counts.period(id), 15u);
}

TEST(StackCounts, AgreesWithAMapThroughGrowth) {
  // Enough distinct stacks to grow the table several times (once with
  // every stack in one bucket chain, which is slow, so fewer), stacks that
  // differ in one frame or by a permutation, repeats.
  for (const bool same_hash : {false, true}) {
    SCOPED_TRACE(same_hash ? "one hash" : "default hash");
    std::mt19937_64 rng(11);
    StackCounts counts(same_hash ? &SameHash : nullptr);
    std::map<Key, Sums> want;
    const int samples = same_hash ? 3000 : 200000;
    for (int i = 0; i < samples; ++i) {
      const uint32_t task = static_cast<uint32_t>(rng() % 3);
      std::vector<Frame> frames(rng() % 5);
      for (Frame& f : frames)
        f = {reinterpret_cast<const MappedObject*>((rng() % 3) * 64), rng() % 8};
      const uint64_t period = 1 + rng() % 1000;
      counts.Add(task, frames, period);
      Sums& s = want[{task, frames}];
      ++s.samples;
      s.period += period;
    }
    EXPECT_EQ(counts.size(), want.size());
    EXPECT_EQ(Collect(counts), want);
  }
}

// Frames come from the capture.  With the hash this table had, fixed
// (FxHash's step, h = (rotl(h, 5) ^ word) * K, per word, then murmur3's
// finalizer), the last word of a stack can bring any state to any other:
// these 3,000 stacks of unattributed addresses (object null, a known word)
// all had one full hash, and each new one was compared with every one
// before it.  Keyed, they spread as any stacks do (at most half full,
// linear probing averages under one slot from home; 8 is far outside
// what chance gives).
TEST(StackCounts, ACaptureCannotChooseStacksThatShareOneHash) {
  constexpr uint64_t kK = 0x9e3779b97f4a7c15ull;
  auto step = [](uint64_t h, uint64_t word) { return (((h << 5) | (h >> 59)) ^ word) * kK; };
  uint64_t k_inverse = kK;  // Newton's iteration: each step doubles the bits that are right
  for (int i = 0; i < 6; ++i) k_inverse *= 2 - kK * k_inverse;
  ASSERT_EQ(kK * k_inverse, 1u);
  constexpr uint64_t kTarget = 0x5eed;  // the state every stack is brought to
  StackCounts counts;
  std::map<Key, Sums> want;
  for (uint64_t i = 0; i < 3000; ++i) {
    const uint64_t ip = 0x401000 + i * 4;
    uint64_t h = step(step(step(step(1, 2), 0), ip), 0);  // task 1, 2 frames, (null, ip), null
    const uint64_t last = ((h << 5) | (h >> 59)) ^ (kTarget * k_inverse);
    ASSERT_EQ(step(h, last), kTarget);
    const std::vector<Frame> frames = {{nullptr, ip}, {nullptr, last}};
    counts.Add(1, frames, 1);
    want[{1, frames}] = Sums{1, 1};
  }
  EXPECT_EQ(Collect(counts), want);
  EXPECT_LT(static_cast<double>(counts.Displacement()) / static_cast<double>(counts.size()), 8.0);
}

// The test above draws one random key per run; here 200 fixed keys, the
// same in every run, each under two sets of stacks that differ only in
// their last frame's offset (i << 12, as unattributed page addresses; i *
// 4).  10,000 stacks fill a table under a third; linear probing then
// averages about 0.2 slots from home.  Without the last multiply of
// Hash() by a key word alone, 1 key in 100 put such stacks up to 1,024
// slots from home, and this failed every time.
TEST(StackCounts, NoKeyOfTwoHundredLetsStacksWithNeighbouringLeavesShareAProbeRun) {
  std::mt19937_64 rng(20261130);
  testing::WorstSpread worst;
  for (int key = 0; key < 200; ++key) {
    const std::array<uint64_t, 4> words = {rng(), rng(), rng(), rng()};
    for (int set = 0; set < 2; ++set) {
      StackCounts counts(words);
      std::vector<Frame> frames = {{kA, 0x10}, {kB, 0x20}, {nullptr, 0}};
      for (uint64_t i = 0; i < 10000; ++i) {
        frames[2].second = set == 0 ? i << 12 : 0x401000 + i * 4;  // the leaf
        counts.Add(1, frames, 1);
      }
      ASSERT_EQ(counts.size(), 10000u);
      worst.Note(counts, key, set);
    }
  }
  EXPECT_LT(worst.mean, 1.0) << "key " << worst.key << ", set " << worst.set;
}

// Two tables of the same stacks, each keyed by its own random words: the
// same ids, counts and order.
TEST(StackCounts, TwoTablesOfTheSameStacksHoldTheSameIds) {
  std::mt19937_64 rng(5);
  StackCounts a, b;
  for (int i = 0; i < 20000; ++i) {
    std::vector<Frame> frames(1 + rng() % 4);
    for (Frame& f : frames) f = {rng() % 2 ? kA : kB, rng() % 64};
    const uint32_t task = static_cast<uint32_t>(rng() % 4);
    EXPECT_EQ(a.Add(task, frames, i), b.Add(task, frames, i));
  }
  EXPECT_EQ(Collect(a), Collect(b));
  EXPECT_EQ(a.Sorted(), b.Sorted());
}

TEST(StackCounts, SortedIsTheOrderOfAMapByTaskAndFrames) {
  StackCounts counts;
  std::map<Key, uint32_t> by_key;
  for (const auto& [task, frames] : Tricky()) by_key[{task, frames}] = counts.Add(task, frames, 1);
  std::vector<uint32_t> want;
  for (const auto& [key, id] : by_key) want.push_back(id);
  EXPECT_EQ(counts.Sorted(), want);
}


// The memo against a std::map of the same keys: every key finds its own
// entry and what was Set() on it, never another key's, across growth of
// the table and with keys that share prefixes, differ by a trailing zero
// word, or are empty; an entry is valid only in the epoch it was last
// looked up in.
void EachKeyFindsOnlyItsOwnIds(ChainMemo::HashFn hash,
                               size_t max_probes = ChainMemo::kMaxProbes) {
  ChainMemo memo(hash, max_probes);
  std::mt19937_64 rng(7);
  std::vector<std::vector<uint64_t>> keys;
  for (int i = 0; i < (hash == nullptr ? 3000 : 300); ++i) {
    // Up to 40 words: several of the compare's 64-byte blocks.
    std::vector<uint64_t> k(rng() % (i % 2 ? 20 : 41));
    for (auto& w : k) w = rng() % 4;  // few values: many shared prefixes
    keys.push_back(k);
  }
  keys.push_back({});
  keys.push_back({0});
  keys.push_back({0, 0});
  keys.push_back({1, 2, 3});
  keys.push_back({1, 2, 3, 0});
  std::map<std::vector<uint64_t>, uint32_t> want;  // key -> stack id set on it
  auto lookup = [&](const std::vector<uint64_t>& k, uint64_t epoch, bool* valid) {
    // The first words (up to three, as many as the key's length says) as
    // the head, the rest as the tail's bytes.
    const size_t head = std::min<size_t>(k.size(), k.size() % 4);
    std::vector<uint8_t> tail((k.size() - head) * 8);
    if (!tail.empty()) std::memcpy(tail.data(), k.data() + head, tail.size());
    return memo.Lookup(std::span<const uint64_t>(k.data(), head), tail, epoch, valid);
  };
  for (uint64_t epoch = 1; epoch <= 3; ++epoch) {
    for (const auto& k : keys) {
      bool valid = true;
      const ChainMemo::Entry e = lookup(k, epoch, &valid);
      ASSERT_NE(e, ChainMemo::kFull);
      auto it = want.find(k);
      if (it != want.end() && epoch == 1) {
        // Seen before in this epoch: valid, with its own ids.
        EXPECT_TRUE(valid);
        EXPECT_EQ(memo.Get(e).stack, it->second);
        continue;
      }
      if (it != want.end()) {
        // First time in a later epoch: found, but stale until refilled.
        if (!valid) {
          EXPECT_EQ(memo.Get(e).stack, it->second) << "kept until refilled";
          ChainMemo::Ids ids = memo.Get(e);
          ids.stack = it->second = static_cast<uint32_t>(rng());
          memo.Set(e, ids);
        } else {
          EXPECT_EQ(memo.Get(e).stack, it->second);
        }
        continue;
      }
      EXPECT_FALSE(valid) << "a new key";
      ChainMemo::Ids ids;
      ids.stack = static_cast<uint32_t>(rng());
      ids.leaf_object = kA;
      ids.leaf_offset = k.size();
      memo.Set(e, ids);
      want[k] = ids.stack;
    }
  }
  EXPECT_EQ(memo.size(), want.size());
  for (const auto& [k, stack] : want) {
    bool valid = false;
    const ChainMemo::Entry e = lookup(k, 3, &valid);
    EXPECT_TRUE(valid);
    EXPECT_EQ(memo.Get(e).stack, stack);
    EXPECT_EQ(memo.Get(e).leaf_object, kA);
    EXPECT_EQ(memo.Get(e).leaf_offset, k.size());
  }
  // The same words split otherwise are another key.
  const uint64_t head[] = {1, 2};
  const uint64_t three = 3;
  std::vector<uint8_t> tail(8);
  std::memcpy(tail.data(), &three, 8);
  bool valid = true;
  memo.Lookup(head, tail, 3, &valid);
  EXPECT_FALSE(valid);
  EXPECT_EQ(memo.size(), want.size() + 1);
}

TEST(ChainMemo, EachKeyFindsOnlyItsOwnIdsAndEpochsExpire) { EachKeyFindsOnlyItsOwnIds(nullptr); }

TEST(ChainMemo, EachKeyFindsOnlyItsOwnIdsWithThePortableHash) {
  EachKeyFindsOnlyItsOwnIds(ChainMemo::PortableHash());
}

// Keys of one hash that differ from a stored key in one word only, at each
// place a key of up to 40 words has (head or tail, every position of the
// compare's blocks): each is its own entry.
TEST(ChainMemo, AKeyDifferingInAnyOneWordIsAnotherKey) {
  for (size_t words = 1; words <= 40; ++words) {
    ChainMemo memo([](std::span<const uint64_t>, std::span<const uint8_t>) { return uint64_t{7}; },
                   SIZE_MAX);
    const size_t head = words % 4 < words ? words % 4 : words;
    std::vector<uint64_t> key(words);
    for (size_t i = 0; i < words; ++i) key[i] = 0x7f0000001000ull + i * 0x10;
    auto lookup = [&](const std::vector<uint64_t>& k, bool* valid) {
      std::vector<uint8_t> tail((k.size() - head) * 8);
      if (!tail.empty()) std::memcpy(tail.data(), k.data() + head, tail.size());
      return memo.Lookup(std::span<const uint64_t>(k.data(), head), tail, 1, valid);
    };
    bool valid = true;
    const ChainMemo::Entry original = lookup(key, &valid);
    ASSERT_FALSE(valid);
    memo.Set(original, ChainMemo::Ids{1, 0, nullptr, 0});
    for (size_t i = 0; i < words; ++i) {
      for (uint64_t bit : {uint64_t{1}, uint64_t{1} << 63}) {
        std::vector<uint64_t> other = key;
        other[i] ^= bit;
        valid = true;
        const ChainMemo::Entry e = lookup(other, &valid);
        EXPECT_FALSE(valid) << words << " words, word " << i << " differs";
        EXPECT_NE(e, original) << words << " words, word " << i << " differs";
        memo.Set(e, ChainMemo::Ids{2, 0, nullptr, 0});
      }
    }
    valid = false;
    EXPECT_EQ(lookup(key, &valid), original);
    EXPECT_TRUE(valid);
    EXPECT_EQ(memo.Get(original).stack, 1u);
  }
}

// Hashes whose high half (the slot's tag) is 0, the tag of an empty slot:
// each new key, whose slot is empty, is inserted and not taken for the
// entry of an empty slot; through growth each is then found with its ids.
TEST(ChainMemo, AKeyWhoseTagIsThatOfAnEmptySlotIsNew) {
  ChainMemo memo([](std::span<const uint64_t>, std::span<const uint8_t> tail) {
    uint64_t w;
    std::memcpy(&w, tail.data(), 8);
    return w;  // below 2^32: tag 0
  });
  constexpr uint64_t kKeys = 5000;
  auto lookup = [&](uint64_t key, bool* valid) {
    const uint64_t words[2] = {key, ~key};
    return memo.Lookup(
        {}, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(words), sizeof(words)), 1,
        valid);
  };
  std::vector<ChainMemo::Entry> entries;
  for (uint64_t k = 1; k <= kKeys; ++k) {
    bool valid = true;
    const ChainMemo::Entry e = lookup(k, &valid);
    ASSERT_NE(e, ChainMemo::kFull) << k;
    ASSERT_FALSE(valid) << "key " << k << " found before it was inserted";
    memo.Set(e, ChainMemo::Ids{static_cast<uint32_t>(k), 0, nullptr, 0});
    entries.push_back(e);
  }
  EXPECT_EQ(memo.size(), kKeys);
  for (uint64_t k = 1; k <= kKeys; ++k) {
    bool valid = false;
    EXPECT_EQ(lookup(k, &valid), entries[k - 1]) << k;
    EXPECT_TRUE(valid) << k;
    EXPECT_EQ(memo.Get(entries[k - 1]).stack, k);
  }
}

// Every key in one bucket with one tag: only the words tell them apart.
TEST(ChainMemo, KeysWithOneHashAreToldApartByTheirWords) {
  EachKeyFindsOnlyItsOwnIds(
      [](std::span<const uint64_t>, std::span<const uint8_t>) { return uint64_t{42}; }, SIZE_MAX);
}

// Looks up each key (as tail words, no head) once in `memo`: how many got
// an entry, and checks that those are found again, valid, with their ids.
size_t MemoizedOf(ChainMemo& memo, const std::vector<std::vector<uint64_t>>& keys) {
  auto lookup = [&](const std::vector<uint64_t>& k, bool* valid) {
    std::vector<uint8_t> tail(k.size() * 8);
    std::memcpy(tail.data(), k.data(), tail.size());
    return memo.Lookup({}, tail, 1, valid);
  };
  std::map<size_t, ChainMemo::Entry> entries;
  for (size_t i = 0; i < keys.size(); ++i) {
    bool valid = true;
    const ChainMemo::Entry e = lookup(keys[i], &valid);
    EXPECT_FALSE(valid) << "key " << i << " is new";
    if (e == ChainMemo::kFull) continue;
    memo.Set(e, ChainMemo::Ids{static_cast<uint32_t>(i), 0, nullptr, 0});
    entries[i] = e;
  }
  for (const auto& [i, e] : entries) {
    bool valid = false;
    EXPECT_EQ(lookup(keys[i], &valid), e);
    EXPECT_TRUE(valid);
    EXPECT_EQ(memo.Get(e).stack, i);
  }
  EXPECT_EQ(memo.size(), entries.size());
  return entries.size();
}

// Keys that share one hash: past kMaxProbes of them, a lookup gives up
// (kFull: the caller resolves the chain) instead of comparing the key with
// every one before it, and nothing is inserted that a later lookup would
// have to pass.
TEST(ChainMemo, KeysThatShareOneHashPastTheProbeLimitAreNotMemoized) {
  ChainMemo memo([](std::span<const uint64_t>, std::span<const uint8_t>) { return uint64_t{42}; });
  std::vector<std::vector<uint64_t>> keys;
  for (uint64_t i = 0; i < 1000; ++i) keys.push_back({0x7f0000001000ull, i, 0x7f0000002000ull});
  EXPECT_EQ(MemoizedOf(memo, keys), ChainMemo::kMaxProbes);
}

// The memo's own hash (CRC32C where the CPU has it) is linear: every word
// has 2^32 values x such that crc32c(0, x) = 0, and changing a key's word
// by one leaves its hash as it was.  So a capture can give a thousand
// chains one hash.  The probe limit is what bounds a lookup then.
TEST(ChainMemo, ChainsCraftedToShareTheCrcHashAreNotComparedWithEachOther) {
  const std::vector<uint64_t> kernel = testing::Crc32cKernel(0, 63);
  if (kernel.empty()) GTEST_SKIP() << "no CRC32C: the memo hashes otherwise";
  ASSERT_GE(kernel.size(), 10u);
  std::vector<std::vector<uint64_t>> keys;
  for (uint64_t i = 0; i < 1000; ++i) {
    uint64_t x = 0;
    for (size_t j = 0; j < 10; ++j)
      if (i >> j & 1) x ^= kernel[j];
    keys.push_back({0x7f0000001000ull, 0x7f0000001234ull ^ x, 0x7f0000002000ull});
  }
  const std::span<const uint8_t> first(reinterpret_cast<const uint8_t*>(keys[0].data()), 24);
  for (const auto& k : keys) {
    ASSERT_EQ(ChainMemo::Hash({}, std::span<const uint8_t>(
                                      reinterpret_cast<const uint8_t*>(k.data()), 24)),
              ChainMemo::Hash({}, first))
        << "the crafted keys are meant to share the memo's hash";
  }
  ChainMemo memo;
  EXPECT_EQ(MemoizedOf(memo, keys), ChainMemo::kMaxProbes);
}

// Hits counted in their entries (Accumulate) are handed on once each, to
// the ids the entry had when they were counted: Settle() of one entry
// before its ids change, SettleAll() of every entry, and nothing twice.
// Checked against a model of what each (ids) should have been given.
TEST(ChainMemo, AccumulatedHitsAreSettledOnceOnTheirOwnIds) {
  ChainMemo memo;
  std::mt19937_64 rng(3);
  std::vector<std::vector<uint64_t>> keys(50);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = {i, rng() % 3, rng()};
  std::vector<ChainMemo::Entry> entries;
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> want, got;  // stack id -> samples, period
  auto settled = [&](const ChainMemo::Ids& ids, uint64_t samples, uint64_t period) {
    got[ids.stack].first += samples;
    got[ids.stack].second += period;
  };
  uint32_t next_stack = 1;
  std::vector<uint32_t> stack_of(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    bool valid = true;
    entries.push_back(memo.Lookup(keys[i], {}, 1, &valid));
    ASSERT_FALSE(valid);
    ChainMemo::Ids ids;
    ids.stack = stack_of[i] = next_stack++;
    memo.Set(entries[i], ids);
  }
  // Nothing accumulated: nothing to settle.
  memo.SettleAll(settled);
  EXPECT_TRUE(got.empty());
  for (int round = 0; round < 2000; ++round) {
    const size_t i = rng() % keys.size();
    const uint64_t r = rng() % 100;
    if (r < 80) {
      const uint64_t period = 1 + rng() % 1000;
      memo.Accumulate(entries[i], period);
      want[stack_of[i]].first += 1;
      want[stack_of[i]].second += period;
    } else if (r < 95) {
      // Filled in again with other ids: what it kept goes to the old ones.
      memo.Settle(entries[i], settled);
      ChainMemo::Ids ids = memo.Get(entries[i]);
      ids.stack = stack_of[i] = next_stack++;
      memo.Set(entries[i], ids);
    } else {
      memo.SettleAll(settled);
      EXPECT_EQ(got, want) << "round " << round;
    }
  }
  memo.SettleAll(settled);
  EXPECT_EQ(got, want);
  EXPECT_GT(want.size(), keys.size());  // ids were changed along the way
  memo.SettleAll(settled);              // again: nothing is left to hand on
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace mmap3
