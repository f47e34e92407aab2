// Sample counts and summed periods per distinct call stack (task, frames):
// the aggregation behind folded stacks (report -g) and --children totals.
//
// Each distinct stack is stored once, its frames in one shared array, and
// named by a dense id; a sample costs a hash of its frames and, on a hit,
// one comparison with the stored stack, and allocates nothing once the
// stack has been seen (a std::map keyed by a vector of frames allocated a
// key per sample and walked a tree of them: about 1.5 M samples/s at depth
// 16).  The table is open addressing (linear probing, power-of-two
// capacity, at most half full) of 32-bit ids; each stack keeps its full
// hash, so most probes that are not the stack end without touching frames.
//
// The hash is keyed by random words drawn for each table.  Frames come
// from the capture: with a fixed hash (it was FxHash's multiply per word,
// which a known word can undo), a crafted capture could give thousands of
// stacks one full hash, and each new one would be compared with all
// before it.  Nothing read from the table depends on the key: ids are
// handed out in order of first appearance.
//
// Objects are compared by pointer (they are interned by the Profile, which
// outlives the table); a null object is a valid frame (an address in no
// mapping).  Frames compare in order: the same frames in another order are
// another stack.  An empty stack is a stack.
#ifndef MMAP3_READER_STACK_COUNTS_H_
#define MMAP3_READER_STACK_COUNTS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "files.h"

namespace mmap3 {

struct MappedObject;

class StackCounts {
 public:
  using Frame = std::pair<const MappedObject*, uint64_t>;  // object, offset
  using HashFn = uint64_t (*)(uint32_t task, std::span<const Frame> frames);

  // `hash` replaces the keyed hash (tests use a constant one so that
  // every stack shares one bucket); null: Hash().
  explicit StackCounts(HashFn hash = nullptr)
      : hash_(hash), key_{RandomWord(), RandomWord(), RandomWord(), RandomWord()} {}
  // Hash() under the key given: for tests that check how it spreads
  // stacks over many keys, each the same in every run.  The words must be
  // random: all zero, every small product is 0.
  explicit StackCounts(const std::array<uint64_t, 4>& key)
      : hash_(nullptr), key_{key[0], key[1], key[2], key[3]} {}

  // Counts one sample of `period` on (task, frames); returns the stack's
  // id (dense, in order of first appearance).  `frames` is copied only the
  // first time the stack is seen.
  uint32_t Add(uint32_t task, std::span<const Frame> frames, uint64_t period) {
    const uint64_t h = hash_ != nullptr ? hash_(task, frames) : Hash(task, frames);
    if ((stacks_.size() + 1) * 2 > slots_.size()) Grow();
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      uint32_t& slot = slots_[i];
      if (slot == 0) {
        slot = static_cast<uint32_t>(stacks_.size()) + 1;
        stacks_.push_back(Stack{h, frames_.size(), frames.size(), task});
        sums_.push_back(Sums{1, period});
        frames_.insert(frames_.end(), frames.begin(), frames.end());
        return slot - 1;
      }
      Stack& s = stacks_[slot - 1];
      if (s.hash == h && s.task == task && Equal(s, frames)) {
        Count(slot - 1, 1, period);
        return slot - 1;
      }
    }
  }

  // Counts `samples` more samples whose periods add up to `period` on the
  // stack `id` (from Add).
  void Count(uint32_t id, uint64_t samples, uint64_t period) {
    sums_[id].samples += samples;
    sums_[id].period += period;
  }

  size_t size() const { return stacks_.size(); }
  uint32_t task(uint32_t id) const { return stacks_[id].task; }
  std::span<const Frame> frames(uint32_t id) const {
    return {frames_.data() + stacks_[id].begin, stacks_[id].size};
  }
  uint64_t samples(uint32_t id) const { return sums_[id].samples; }
  uint64_t period(uint32_t id) const { return sums_[id].period; }

  // Every id, ordered by (task, frames compared element by element, a
  // prefix first): the order a std::map keyed by (task, vector of frames)
  // hands them out, so that whatever depends on the order of a walk over
  // the stacks is as it was with such a map.
  std::vector<uint32_t> Sorted() const;

  // How far the stacks sit from the slots their hashes name, summed (0
  // when no two shared a slot): how well the hash spreads them, for tests.
  uint64_t Displacement() const;

 private:
  struct Stack {
    uint64_t hash;
    size_t begin, size;  // in frames_
    uint32_t task;
  };
  // A stack's counts, apart from it: a sample counted by its id (a chain
  // memo's hit) touches 16 bytes in an array a quarter the size.
  struct Sums {
    uint64_t samples, period;
  };

  bool Equal(const Stack& s, std::span<const Frame> frames) const {
    if (s.size != frames.size()) return false;
    const Frame* stored = frames_.data() + s.begin;
    for (size_t i = 0; i < s.size; ++i)
      if (stored[i] != frames[i]) return false;
    return true;
  }

  void Grow();
  // The stack's hash under this table's key_.
  uint64_t Hash(uint32_t task, std::span<const Frame> frames) const;

  HashFn hash_;  // null: Hash()
  uint64_t key_[4];
  std::vector<uint32_t> slots_;  // stack id + 1; 0 is empty
  std::vector<Stack> stacks_;    // by id
  std::vector<Sums> sums_;       // by id
  std::vector<Frame> frames_;    // every stack's frames, one after another
};

// ChainMemo's key compare, inline in its lookup.
namespace memo_internal {

inline uint64_t Word(const uint8_t* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

// The n bytes at a and b (n a multiple of 8) xor-ed into d: a difference
// anywhere leaves a bit set.  16 bytes at a time where SSE2 is (x86-64
// always has it), the last 16 overlapping the chunk before them when n is
// not a multiple of 16, so that no word is left to a loop of its own;
// without a branch per word and without a call into memcmp, whose dispatch
// costs more than these short keys.
#if defined(__SSE2__)
using Diff = __m128i;
inline Diff NoDiff() { return _mm_setzero_si128(); }
inline Diff AddDiff(Diff d, const uint8_t* a, const uint8_t* b, size_t n) {
  auto x = [&](size_t at) {
    return _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + at)),
                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + at)));
  };
  if (n == 0) return d;
  if (n < 16)  // one word
    return _mm_or_si128(d, _mm_cvtsi64_si128(static_cast<long long>(Word(a) ^ Word(b))));
  d = _mm_or_si128(d, x(n - 16));
  size_t i = 0;
  for (; i + 64 <= n; i += 64)
    d = _mm_or_si128(d, _mm_or_si128(_mm_or_si128(x(i), x(i + 16)), _mm_or_si128(x(i + 32), x(i + 48))));
  for (; i + 16 <= n; i += 16) d = _mm_or_si128(d, x(i));
  return d;
}
inline bool IsNoDiff(Diff d) {
  return _mm_movemask_epi8(_mm_cmpeq_epi8(d, _mm_setzero_si128())) == 0xffff;
}
#else
using Diff = uint64_t;
inline Diff NoDiff() { return 0; }
inline Diff AddDiff(Diff d, const uint8_t* a, const uint8_t* b, size_t n) {
  for (size_t i = 0; i < n; i += 8) d |= Word(a + i) ^ Word(b + i);
  return d;
}
inline bool IsNoDiff(Diff d) { return d == 0; }
#endif

// Whether stored words are the head then the tail.
inline bool SameWords(const uint64_t* stored, std::span<const uint64_t> head,
                      std::span<const uint8_t> tail) {
  const auto* w = reinterpret_cast<const uint8_t*>(stored);
  const size_t head_bytes = head.size() * 8;
  Diff d = AddDiff(NoDiff(), w, reinterpret_cast<const uint8_t*>(head.data()), head_bytes);
  return IsNoDiff(AddDiff(d, w + head_bytes, tail.data(), tail.size() / 8 * 8));
}

}  // namespace memo_internal

// A memo from a sample's raw call chain (its words as recorded, with what
// else its resolution depends on: the caller's to choose) to what it
// resolved to: the ids of its stacks and where its leaf was, so that a
// chain seen before is not resolved frame by frame again.  Entries are
// valid in one epoch: the caller starts a new one whenever what the words
// resolve to may have changed (a mapping, a process); an entry of an older
// epoch is found but reported stale, and refilled in place.
//
// A hit's counts can be left in its entry (Accumulate), whose first line the
// lookup has just read, instead of going to three tables elsewhere in
// memory; Settle() and SettleAll() hand them on, to the ids they were
// counted under, before those change or anything reads the tables.
//
// A hit costs a hash of the key and, most of the time, two places in
// memory: its slot, which holds part of the hash, so that a probe past
// another key rarely leaves the slot array; and its entry, whose header and
// words lie together in one array.
class ChainMemo {
 public:
  struct Ids {
    uint32_t stack = 0, chain = 0;
    // Where the sample's own ip resolved, and the id of its flat count's
    // location (the caller's).
    const MappedObject* leaf_object = nullptr;
    uint64_t leaf_offset = 0;
    uint32_t location = 0;
  };
  // An entry, named by where it starts in the memo's words.
  using Entry = uint32_t;
  using HashFn = uint64_t (*)(std::span<const uint64_t> head, std::span<const uint8_t> tail);
  static constexpr Entry kFull = UINT32_MAX;

  // A lookup gives up after this many slots: see Lookup().
  static constexpr size_t kMaxProbes = 32;

  // `hash` replaces the hash function (tests use a constant one so that
  // every key shares one bucket and one tag, with a larger `max_probes`
  // to compare many such keys); null: Hash().
  explicit ChainMemo(HashFn hash = nullptr, size_t max_probes = kMaxProbes)
      : hash_(hash != nullptr ? hash : DefaultHash()), max_probes_(max_probes) {}

  // The entry for the key `head` followed by the words in `tail` (8 bytes
  // each, in memory order, not necessarily aligned), inserted if absent.
  // The head's length is part of the key.  *valid: it holds the ids of
  // `epoch`; otherwise (new or stale) the caller fills it in with Set(),
  // and it is then valid in `epoch`.  An entry stays valid until the next
  // Lookup.
  //
  // kFull (*valid false) when the key is not memoized and the caller
  // resolves the chain: a new key would not fit (the memo's words would
  // pass 2^32), or the key is not within max_probes slots of where its
  // hash points.
  //
  // The hash is not keyed: CRC32C is linear, so no key would stop a
  // capture from giving any number of chains one hash, and a keyed
  // multiply per word would cost as much again per sample.  The probes are
  // bounded instead.  A capture crafted so can make its chains go
  // unmemoized, each resolved frame by frame as without a memo, but cannot
  // make a lookup compare its key with every chain before it.  At most
  // half full, linear probing almost never takes an honest key that far
  // (37 keys of 8 M at load 1/2 in a simulation; none past 46 slots).
  Entry Lookup(std::span<const uint64_t> head, std::span<const uint8_t> tail, uint64_t epoch,
               bool* valid) {
    return Lookup(head, tail, HashOf(head, tail), epoch, valid);
  }
  // The same with the key's hash, HashOf(head, tail), already computed.
  // A key in the slot its hash points at (most hits) is found here,
  // inline; anything else (a probe further, an insertion, growth) out of
  // line, by LookupSlow(), which finds that key the same way first.
  [[gnu::always_inline]] Entry Lookup(std::span<const uint64_t> head,
                                      std::span<const uint8_t> tail, uint64_t hash,
                                      uint64_t epoch, bool* valid) {
    if (!slots_.empty()) {
      const Slot slot = slots_[hash & (slots_.size() - 1)];
      if (slot.entry != 0 && slot.tag == static_cast<uint32_t>(hash >> 32) &&
          Take(slot.entry - 1, head, tail, hash, Shape(head, tail), epoch, valid))
        return slot.entry - 1;
    }
    return LookupSlow(head, tail, hash, epoch, valid);
  }
  uint64_t HashOf(std::span<const uint64_t> head, std::span<const uint8_t> tail) const {
    return hash_(head, tail);
  }

  // Hints that the key of `hash` will be looked up soon: a batch of lookups
  // first prefetches each key's slot, then (PrefetchEntry, once the slots
  // have come) the entry the slot names, so that their cache misses
  // overlap instead of following each other.  Neither changes anything.
  void PrefetchSlot(uint64_t hash) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[hash & (slots_.size() - 1)]);
  }
  void PrefetchEntry(uint64_t hash) const {
    if (slots_.empty()) return;
    const Slot& slot = slots_[hash & (slots_.size() - 1)];
    // Only the first probe's: most keys are found there.
    if (slot.entry == 0 || slot.tag != static_cast<uint32_t>(hash >> 32)) return;
    const char* w = reinterpret_cast<const char*>(words_.data() + (slot.entry - 1));
    // The header and a 16-deep chain's words: four cache lines.
    for (int line = 0; line < 4; ++line) __builtin_prefetch(w + line * 64);
  }
  // Get()'s leaf_object alone: a hit reads one word, not five (Get() was
  // kept out of line, 14 instructions a sample).
  const MappedObject* LeafObject(Entry e) const {
    return reinterpret_cast<const MappedObject*>(words_[e + kLeafObject]);
  }
  Ids Get(Entry e) const {
    Ids ids;
    ids.stack = static_cast<uint32_t>(words_[e + kStackChain]);
    ids.chain = static_cast<uint32_t>(words_[e + kStackChain] >> 32);
    ids.leaf_object = reinterpret_cast<const MappedObject*>(words_[e + kLeafObject]);
    ids.leaf_offset = words_[e + kLeafOffset];
    ids.location = static_cast<uint32_t>(words_[e + kLocation]);
    return ids;
  }
  void Set(Entry e, const Ids& ids) {
    words_[e + kStackChain] = uint64_t{ids.chain} << 32 | ids.stack;
    words_[e + kLeafObject] = reinterpret_cast<uintptr_t>(ids.leaf_object);
    words_[e + kLeafOffset] = ids.leaf_offset;
    words_[e + kLocation] = ids.location;
  }

  // One more sample of `period` on the entry's ids, kept in the entry.
  void Accumulate(Entry e, uint64_t period) {
    ++words_[e + kSamples];
    words_[e + kPeriod] += period;
    accumulated_ = true;
  }
  // fn(ids, samples, period) with what Accumulate() kept in the entry,
  // if anything, which is then zero: before Set() changes its ids.
  template <typename Fn>
  void Settle(Entry e, Fn&& fn) {
    if (words_[e + kSamples] == 0) return;
    fn(Get(e), words_[e + kSamples], words_[e + kPeriod]);
    words_[e + kSamples] = words_[e + kPeriod] = 0;
  }
  // Settle() of every entry: before the counts are read.
  template <typename Fn>
  void SettleAll(Fn&& fn) {
    if (!accumulated_) return;
    for (size_t at = 0; at < words_.size(); at += kHeader + (words_[at + kSize] & 0xffffffffu))
      Settle(static_cast<Entry>(at), fn);
    accumulated_ = false;
  }

  size_t size() const { return count_; }

  // The hash Lookup() uses by default (tests): CRC32C where the CPU has
  // it, else multiplies.
  static uint64_t Hash(std::span<const uint64_t> head, std::span<const uint8_t> tail) {
    return DefaultHash()(head, tail);
  }
  static HashFn DefaultHash();
  // The hash of CPUs without CRC32C (tests run the memo with it too).
  static HashFn PortableHash();

 private:
  // An entry's words: a header, then the key.
  // kSamples and kPeriod: what Accumulate() kept, not yet settled.
  enum : uint32_t {
    kHash,
    kEpoch,
    kSize,
    kStackChain,
    kLeafObject,
    kLeafOffset,
    kLocation,
    kSamples,
    kPeriod,
    kHeader
  };
  struct Slot {
    uint32_t tag;    // the hash's high half
    uint32_t entry;  // Entry + 1; 0 is empty
  };
  // The key's shape: its length in words and the head's (part of the key:
  // the same words split otherwise are another key).
  static uint64_t Shape(std::span<const uint64_t> head, std::span<const uint8_t> tail) {
    return uint64_t{head.size()} << 32 | (head.size() + tail.size() / 8);
  }
  Entry LookupSlow(std::span<const uint64_t> head, std::span<const uint8_t> tail, uint64_t hash,
                   uint64_t epoch, bool* valid);
  // Whether entry `e` holds the key (of `hash` and `shape`); if it does,
  // *valid says whether it was of `epoch`, which it now is.
  [[gnu::always_inline]] bool Take(Entry e, std::span<const uint64_t> head,
                                   std::span<const uint8_t> tail, uint64_t hash, uint64_t shape,
                                   uint64_t epoch, bool* valid) {
    uint64_t* w = words_.data() + e;
    if (w[kHash] != hash || w[kSize] != shape ||
        !memo_internal::SameWords(w + kHeader, head, tail))
      return false;
    *valid = w[kEpoch] == epoch;
    w[kEpoch] = epoch;
    return true;
  }
  void Grow();

  HashFn hash_;
  size_t max_probes_;
  std::vector<Slot> slots_;
  std::vector<uint64_t> words_;
  size_t count_ = 0;
  bool accumulated_ = false;  // since the last SettleAll()
};

}  // namespace mmap3

#endif  // MMAP3_READER_STACK_COUNTS_H_
