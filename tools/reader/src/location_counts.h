// Sample counts and summed periods per location (comm, object, offset): the
// aggregation behind every flat report row, updated once per sample.
//
// An open-addressing table (linear probing, power-of-two capacity, at most
// three quarters full, in huge pages: see huge_array.h), because a profile
// has up to millions of distinct locations and a node-based map costs an
// allocation and several cache misses per new one.  A slot is 32 bytes,
// so that it never straddles two cache lines: a lookup that finds its
// location at home touches one line.  For that, objects are 32-bit numbers
// the caller gives them (the Profile's MappedObject::number); 0 is a valid
// key (the Profile's: an address in no mapping, offset = the ip).
//
// The hash is keyed by two random words drawn for each table: offsets,
// comms and unattributed addresses come from the capture, and a crafted
// capture must not be able to choose keys that all fall into one probe
// run (with fixed constants it could: see Hash()).  Nothing read from the
// table depends on where a location sits in it (ForEach()'s order is
// documented as none), so the seed changes no output.
#ifndef MMAP3_READER_LOCATION_COUNTS_H_
#define MMAP3_READER_LOCATION_COUNTS_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "files.h"
#include "huge_array.h"
#include "mum.h"

namespace mmap3 {

class LocationCounts {
 public:
  LocationCounts() : seed_{RandomWord(), RandomWord(), RandomWord() | 1} {}
  // With Hash()'s key given: for tests that check how the hash spreads
  // keys over many keys, each the same in every run.  The words must be
  // random: with {0, 0, 1}, every small product is slot 0.
  explicit LocationCounts(const std::array<uint64_t, 3>& seed)
      : seed_{seed[0], seed[1], seed[2] | 1} {}

  // One sample at a location.  Inline: it is on every flat sample's path.
  [[gnu::always_inline]] void Add(uint32_t comm, uint32_t object, uint64_t offset,
                                  uint64_t period = 1) {
    const uint64_t who = Who(comm, object), hash = Hash(who, offset);
    // Its slot is asked for now, the batch's earlier ones before it: by the
    // time the batch is counted, most have come.
    __builtin_prefetch(slots_.data() + Home(hash), 1);
    pending_[pending_size_++] = Pending{who, offset, period, hash};
    if (pending_size_ == kBatch) Drain();
  }

  // A sample for AddMany(): its comm and object (Key()), offset and period.
  struct Sample {
    uint64_t who;
    uint64_t offset;
    uint64_t period;
  };
  static uint64_t Key(uint32_t comm, uint32_t object) { return Who(comm, object); }
  // Add() of each of `samples`, in order.  A caller with a batch of
  // samples fills an array of its own and hands it over: the table is
  // then out of its loop (whose stores are to its own array), and this
  // one hashes the chunk, asks for every slot, then counts.  On the flat
  // replay (Intel Xeon, family 6 model 207) that was 42.5 against 39.1 M
  // records/s for an Add() per sample, best of 8 alternating runs.
  void AddMany(std::span<const Sample> samples);

  // Add() at once, returning the location's id: dense, stable, valid for
  // Count() (batched adds before it are counted first, so locations are
  // placed in the order they were added, as with Add()).
  uint32_t AddNow(uint32_t comm, uint32_t object, uint64_t offset, uint64_t period = 1) {
    Drain();
    if ((size_ + 1) * 4 > slots_.size() * 3) Grow(size_ + 1);
    const uint64_t who = Who(comm, object);
    Slot& s = Find(slots_.data(), slots_.size() - 1, Home(Hash(who, offset)), who, offset);
    if (s.count == 0) Place(s, who, offset);
    ++s.count;
    s.period += period;
    return ids_[&s - slots_.data()];
  }
  // Counts at the location `id` (from AddNow): no hash, no probe; batched
  // as Add() is.
  void Count(uint32_t id, uint64_t n, uint64_t period) {
    pending_ids_[pending_ids_size_++] = PendingId{id, n, period};
    if (pending_ids_size_ == kBatch) Drain();
  }

  size_t size() const {
    Drain();
    return size_;
  }

  // How far the locations sit from the slots their hashes name, summed
  // (0 when no two keys shared a slot): how well the hash spreads the
  // keys, for tests.
  uint64_t Displacement() const {
    Drain();
    const size_t mask = slots_.size() - 1;
    uint64_t total = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      if (s.count != 0) total += (i - Home(Hash(s.who, s.offset))) & mask;
    }
    return total;
  }

  // fn(comm, object, offset, count, period) for each location, in no
  // defined order.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    Drain();
    for (const Slot& s : slots_)
      if (s.count != 0)
        fn(static_cast<uint32_t>(s.who), static_cast<uint32_t>(s.who >> 32), s.offset, s.count,
           s.period);
  }

 private:
  // A location's comm and object in one word (Who()): one compare.
  static uint64_t Who(uint32_t comm, uint32_t object) {
    return static_cast<uint64_t>(object) << 32 | comm;
  }
  struct Slot {
    uint64_t who;
    uint64_t offset;
    uint64_t count;  // 0: an empty slot (a location is placed with its first sample)
    uint64_t period;
  };
  static_assert(sizeof(Slot) == 32, "a slot must not straddle two cache lines");
  struct Pending {  // one sample
    uint64_t who;
    uint64_t offset;
    uint64_t period;
    uint64_t hash;
  };
  // Adds are batched: each add prefetches its slot, and a batch's slots
  // are touched only once it is full, so their cache misses overlap
  // instead of following each other (the table outgrows the caches in a
  // long profile).
  static constexpr size_t kBatch = 32;

  // The offset multiplied by the object and comm, halves folded (Mum(),
  // mum.h), then by a random odd word; a location's slot is the top bits
  // of that (Home()).  With factors a capture could know, an offset equal
  // to the first would put every comm of its object in one slot; each is
  // xor-ed with a word of this table's random seed_.
  //
  // Mum() alone is not enough.  Its low bits, which a power-of-two table
  // indexed by, depend only on the factors' low bits and on a high half
  // that grows almost linearly with them: with about 4% of seeds, 3,000
  // comms x 16 neighbouring offsets sat up to 1,470 slots from home on
  // average (see the tests).  The top bits of a multiply by a random odd
  // word are a universal hash of distinct words (multiply-shift): any two
  // share a slot with probability at most 2 / slots.  It cost 1 instruction
  // a record on the flat replay, where a second 128-bit multiply over the
  // product's halves (wyhash's last step) cost 5.6 and 3-5% of its speed.
  // Keys are compared in full, so a collision costs a probe, never a wrong
  // count.
  uint64_t Hash(uint64_t who, uint64_t offset) const {
    return Mum(offset ^ seed_[0], who ^ seed_[1]) * seed_[2];
  }
  // The slot a hash names: its top log2(slots) bits.
  size_t Home(uint64_t hash) const { return hash >> shift_; }

  // The slot of (who, offset) in `slots` (mask + 1 of them), or the empty
  // one where it goes, from its Home().  The table is passed in, so that a
  // loop over a batch loads it once, not after every store to a slot.
  static Slot& Find(Slot* slots, size_t mask, size_t home, uint64_t who, uint64_t offset) {
    for (size_t i = home;; i = (i + 1) & mask) {
      Slot& s = slots[i];
      if (s.count == 0 || (s.offset == offset && s.who == who)) return s;
    }
  }

  // One sample counted at (who, offset), whose home slot is `home`.
  void CountAt(Slot* slots, size_t mask, size_t home, uint64_t who, uint64_t offset,
               uint64_t period) const {
    Slot& s = Find(slots, mask, home, who, offset);
    if (s.count == 0) Place(s, who, offset);
    ++s.count;
    s.period += period;
  }

  // Makes the empty slot `s` the next location's; its count is still 0.
  void Place(Slot& s, uint64_t who, uint64_t offset) const {
    s = Slot{who, offset, 0, 0};
    const auto at = static_cast<uint32_t>(&s - slots_.data());
    ids_[at] = static_cast<uint32_t>(size_++);
    slot_of_id_.push_back(at);
  }

  void Drain() const {
    for (size_t i = 0; i < pending_ids_size_; ++i)
      __builtin_prefetch(&slots_[slot_of_id_[pending_ids_[i].id]], 1);
    for (size_t i = 0; i < pending_ids_size_; ++i) {
      const PendingId& p = pending_ids_[i];
      Slot& s = slots_[slot_of_id_[p.id]];
      s.count += p.n;
      s.period += p.period;
    }
    pending_ids_size_ = 0;
    if ((size_ + pending_size_) * 4 > slots_.size() * 3) Grow(size_ + pending_size_);
    Slot* const slots = slots_.data();
    const size_t mask = slots_.size() - 1;
    const unsigned shift = shift_;  // as the table: loaded once (Home() would reload it)
    for (size_t i = 0; i < pending_size_; ++i) {
      const Pending& p = pending_[i];
      CountAt(slots, mask, p.hash >> shift, p.who, p.offset, p.period);
    }
    pending_size_ = 0;
  }

  // AddMany() of at most kMany samples.
  static constexpr size_t kMany = 64;
  void AddFew(const Sample* samples, size_t n);

  void Grow(size_t want) const {
    size_t capacity = slots_.empty() ? 1024 : slots_.size();
    while (want * 4 > capacity * 3) capacity *= 2;
    HugeArray<Slot> old(capacity);  // zero: every slot empty
    HugeArray<uint32_t> old_ids(capacity);
    old.swap(slots_);
    old_ids.swap(ids_);
    shift_ = static_cast<unsigned>(__builtin_clzll(capacity)) + 1;
    for (size_t i = 0; i < old.size(); ++i) {
      const Slot& s = old[i];
      if (s.count == 0) continue;
      Slot& to =
          Find(slots_.data(), slots_.size() - 1, Home(Hash(s.who, s.offset)), s.who, s.offset);
      to = s;
      const auto at = static_cast<uint32_t>(&to - slots_.data());
      ids_[at] = old_ids[i];
      slot_of_id_[old_ids[i]] = at;
    }
  }

  uint64_t seed_[3];  // Hash()'s key, drawn by the constructor; [2] is odd
  // Mutable: reading drains the pending batch first; the counts a reader
  // sees are always complete.
  // Never empty: Add() masks by its size.  Huge pages: see huge_array.h.
  mutable HugeArray<Slot> slots_ = HugeArray<Slot>(1024);
  // Each slot's location id, beside the slots rather than in them: read
  // only by AddNow() and Grow(), written when a location is placed.
  mutable HugeArray<uint32_t> ids_ = HugeArray<uint32_t>(1024);
  mutable size_t size_ = 0;
  mutable unsigned shift_ = 64 - 10;  // 64 - log2(slots_.size()): see Home()
  mutable Pending pending_[kBatch];
  mutable size_t pending_size_ = 0;
  struct PendingId {
    uint32_t id;
    uint64_t n, period;
  };
  mutable PendingId pending_ids_[kBatch];
  mutable size_t pending_ids_size_ = 0;
  mutable std::vector<uint32_t> slot_of_id_;  // where each location's slot is
};

inline void LocationCounts::AddMany(std::span<const Sample> samples) {
  for (size_t i = 0; i < samples.size(); i += kMany)
    AddFew(samples.data() + i, std::min(kMany, samples.size() - i));
}

// Every slot asked for first, then each counted, as Drain() does with a
// batch of Add(); the samples before these (pending_) are counted first, so
// that locations are placed in the order they were added.
inline void LocationCounts::AddFew(const Sample* samples, size_t n) {
  if (pending_size_ != 0 || pending_ids_size_ != 0) Drain();
  if ((size_ + n) * 4 > slots_.size() * 3) Grow(size_ + n);
  Slot* const slots = slots_.data();
  const size_t mask = slots_.size() - 1;
  size_t home[kMany];
  for (size_t i = 0; i < n; ++i) {
    home[i] = Home(Hash(samples[i].who, samples[i].offset));
    __builtin_prefetch(slots + home[i], 1);
  }
  for (size_t i = 0; i < n; ++i)
    CountAt(slots, mask, home[i], samples[i].who, samples[i].offset, samples[i].period);
}

}  // namespace mmap3

#endif  // MMAP3_READER_LOCATION_COUNTS_H_
