#include "stack_counts.h"

#include <algorithm>

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

uint64_t StackCounts::DefaultHash(uint32_t task, std::span<const Frame> frames) {
  // The length goes in first: a stack and its extension by zero words
  // differ.
  uint64_t h = Step(task, frames.size());
  for (const Frame& f : frames) {
    h = Step(h, reinterpret_cast<uintptr_t>(f.first));
    h = Step(h, f.second);
  }
  return Finish(h);
}

void StackCounts::Grow() { Reindex(slots_, stacks_); }

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


ChainMemo::Ids* ChainMemo::Lookup(std::span<const uint64_t> key, uint64_t epoch, bool* valid) {
  uint64_t h = Step(0, key.size());
  for (uint64_t w : key) h = Step(h, w);
  h = Finish(h);
  if ((entries_.size() + 1) * 2 > slots_.size()) Grow();
  const size_t mask = slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    uint32_t& slot = slots_[i];
    if (slot == 0) {
      slot = static_cast<uint32_t>(entries_.size()) + 1;
      entries_.push_back(Entry{h, epoch, words_.size(), key.size(), Ids{}});
      words_.insert(words_.end(), key.begin(), key.end());
      *valid = false;
      return &entries_.back().ids;
    }
    Entry& e = entries_[slot - 1];
    if (e.hash == h && e.size == key.size() &&
        std::equal(key.begin(), key.end(), words_.begin() + static_cast<ptrdiff_t>(e.begin))) {
      *valid = e.epoch == epoch;
      e.epoch = epoch;
      return &e.ids;
    }
  }
}

void ChainMemo::Grow() { Reindex(slots_, entries_); }

}  // namespace mmap3
