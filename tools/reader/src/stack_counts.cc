#include "stack_counts.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#include "mum.h"

namespace mmap3 {

namespace {

// One multiply per word (FxHash's step), then murmur3's finalizer so that
// every input bit reaches the low bits a table indexes by.
inline uint64_t Step(uint64_t h, uint64_t word) {
  return (((h << 5) | (h >> 59)) ^ word) * 0x9e3779b97f4a7c15ull;
}

inline uint64_t Finish(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}

// Rebuilds an open-addressing index of 1-based ids into `items` (each with a
// .hash), at least twice as large as one more item needs.
template <typename Items>
void Reindex(std::vector<uint32_t>& slots, const Items& items) {
  size_t capacity = slots.empty() ? 1024 : slots.size() * 2;
  while ((items.size() + 1) * 2 > capacity) capacity *= 2;
  slots.assign(capacity, 0);
  const size_t mask = capacity - 1;
  for (uint32_t id = 0; id < items.size(); ++id) {
    size_t i = items[id].hash & mask;
    while (slots[i] != 0) i = (i + 1) & mask;
    slots[i] = id + 1;
  }
}

}  // namespace

// One multiply per frame: the state and offset against the object, each
// side xor-ed with a word of the key, so that no input a capture can
// choose makes a factor known (FxHash's step, (rotl(h, 5) ^ word) * K,
// can be undone: with K known, a word that brings any state to any other
// is one multiply by K's inverse away).  The length goes in first: a
// stack and its extension by an empty frame differ.
uint64_t StackCounts::Hash(uint32_t task, std::span<const Frame> frames) const {
  uint64_t h = Mum(key_[0] ^ task, key_[1] ^ frames.size());
  for (const Frame& f : frames)
    h = Mum(h ^ f.second ^ key_[2], reinterpret_cast<uintptr_t>(f.first) ^ key_[1]);
  // One more multiply, by a key word alone, per stack: the last frame's
  // Mum() leaves the low bits (the slot) to that frame's low bits and a
  // high half almost linear in it (mum.h), and with about 1% of keys,
  // 10,000 stacks that differed only in a last offset of i << 12 sat up
  // to 1,024 slots from home.
  return Mum(h ^ key_[3], key_[2] | 1);
}

void StackCounts::Grow() { Reindex(slots_, stacks_); }

uint64_t StackCounts::Displacement() const {
  const size_t mask = slots_.size() - 1;
  uint64_t total = 0;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i] != 0) total += (i - stacks_[slots_[i] - 1].hash) & mask;
  return total;
}

std::vector<uint32_t> StackCounts::Sorted() const {
  std::vector<uint32_t> ids(stacks_.size());
  for (uint32_t id = 0; id < ids.size(); ++id) ids[id] = id;
  std::sort(ids.begin(), ids.end(), [this](uint32_t a, uint32_t b) {
    if (stacks_[a].task != stacks_[b].task) return stacks_[a].task < stacks_[b].task;
    const std::span<const Frame> fa = frames(a), fb = frames(b);
    return std::lexicographical_compare(fa.begin(), fa.end(), fb.begin(), fb.end());
  });
  return ids;
}


namespace {

using memo_internal::Word;

// The head's few words one after the other, then the tail's in four
// independent lanes, so that the multiplies overlap instead of each
// waiting for the one before (a chain of 19 dependent steps cost more than
// the rest of a memo hit).
inline uint64_t HashWords(std::span<const uint64_t> head, std::span<const uint8_t> tail) {
  const size_t n = tail.size() / 8;
  uint64_t a = Step(Step(0, head.size()), n);
  for (uint64_t w : head) a = Step(a, w);
  uint64_t b = 0x243f6a8885a308d3ull, c = 0x13198a2e03707344ull, d = 0xa4093822299f31d0ull;
  const uint8_t* p = tail.data();
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a = Step(a, Word(p + i * 8));
    b = Step(b, Word(p + i * 8 + 8));
    c = Step(c, Word(p + i * 8 + 16));
    d = Step(d, Word(p + i * 8 + 24));
  }
  for (; i < n; ++i) a = Step(a, Word(p + i * 8));
  return Finish(Step(Step(Step(a, b), c), d));
}

}  // namespace

#if defined(__x86_64__)
namespace {

// The same key hashed with SSE4.2's CRC32C, one instruction a word, in
// three lanes (its latency is three cycles), where the CPU has it: about
// half of HashWords's instructions (callgrind, a 20-word key: 75 against
// 144).  The table only needs the keys spread; they are compared in full.
// (Not one template with HashWords: the lanes, the seeds and the target
// attribute all differ.)
__attribute__((target("sse4.2"))) uint64_t HashWordsCrc(std::span<const uint64_t> head,
                                                        std::span<const uint8_t> tail) {
  const size_t n = tail.size() / 8;
  uint64_t a = _mm_crc32_u64(0, uint64_t{head.size()} << 32 | n);
  uint64_t b = 0x243f6a88, c = 0x13198a2e;
  if (head.size() == 3) {
    // The memo's head (pid and task, space, ip): one word to each lane,
    // without a loop.
    a = _mm_crc32_u64(a, head[0]);
    b = _mm_crc32_u64(b, head[1]);
    c = _mm_crc32_u64(c, head[2]);
  } else {
    for (uint64_t w : head) a = _mm_crc32_u64(a, w);
  }
  const uint8_t* p = tail.data();
  size_t i = 0;
  for (; i + 3 <= n; i += 3) {
    a = _mm_crc32_u64(a, Word(p + i * 8));
    b = _mm_crc32_u64(b, Word(p + i * 8 + 8));
    c = _mm_crc32_u64(c, Word(p + i * 8 + 16));
  }
  for (; i < n; ++i) a = _mm_crc32_u64(a, Word(p + i * 8));
  // 96 bits of lanes into 64, every bit of each reaching the finalizer.
  return Finish((a | b << 32) ^ c * 0x9e3779b97f4a7c15ull);
}

}  // namespace
#endif

ChainMemo::HashFn ChainMemo::DefaultHash() {
#if defined(__x86_64__)
  static const HashFn chosen = __builtin_cpu_supports("sse4.2") ? &HashWordsCrc : &HashWords;
  return chosen;
#else
  return &HashWords;
#endif
}

ChainMemo::HashFn ChainMemo::PortableHash() { return &HashWords; }

ChainMemo::Entry ChainMemo::LookupSlow(std::span<const uint64_t> head,
                                       std::span<const uint8_t> tail, uint64_t h, uint64_t epoch,
                                       bool* valid) {
  const size_t size = head.size() + tail.size() / 8;
  const uint64_t shape = Shape(head, tail);
  const uint32_t tag = static_cast<uint32_t>(h >> 32);
  if ((count_ + 1) * 2 > slots_.size()) Grow();
  const size_t mask = slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    Slot& slot = slots_[i];
    if (slot.entry == 0) {
      const size_t at = words_.size();
      if (at + kHeader + size >= kFull) {
        *valid = false;
        return kFull;
      }
      words_.resize(at + kHeader + size);
      uint64_t* w = words_.data() + at;
      w[kHash] = h;
      w[kEpoch] = epoch;
      w[kSize] = shape;
      std::copy(head.begin(), head.end(), w + kHeader);
      // (An empty tail may have no data at all: memcpy must not see it.)
      if (!tail.empty()) std::memcpy(w + kHeader + head.size(), tail.data(), tail.size() / 8 * 8);
      slot = Slot{tag, static_cast<uint32_t>(at) + 1};
      ++count_;
      *valid = false;
      return static_cast<Entry>(at);
    }
    if (slot.tag == tag && Take(slot.entry - 1, head, tail, h, shape, epoch, valid))
      return slot.entry - 1;
    // Not here: the next slot, unless this was the last one a lookup
    // reads.  (How many were read is worked out here, off the path of a
    // key found at once: a counter kept in the loop cost a register that
    // every lookup then spilled.)
    if (((i - h) & mask) + 1 == max_probes_) {
      *valid = false;
      return kFull;
    }
  }
}

void ChainMemo::Grow() {
  size_t capacity = slots_.empty() ? 1024 : slots_.size() * 2;
  while ((count_ + 1) * 2 > capacity) capacity *= 2;
  slots_.assign(capacity, Slot{0, 0});
  const size_t mask = capacity - 1;
  for (size_t at = 0; at < words_.size(); at += kHeader + (words_[at + kSize] & 0xffffffffu)) {
    const uint64_t h = words_[at + kHash];
    size_t i = h & mask;
    while (slots_[i].entry != 0) i = (i + 1) & mask;
    slots_[i] = Slot{static_cast<uint32_t>(h >> 32), static_cast<uint32_t>(at) + 1};
  }
}

}  // namespace mmap3
