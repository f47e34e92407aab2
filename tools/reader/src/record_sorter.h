// Orders records from several ring buffers by timestamp.
//
// Each buffer is in time order on its own; across buffers it is not.  We use
// perf's "finished round" rule: after a pass over all buffers (a round), every
// record with a timestamp up to the largest timestamp seen in the *previous*
// round can be released, because anything still in a kernel buffer was written
// after that previous round ended.
//
// Contract: Push() copies the record (ring buffers are reused as soon as the
// tail moves); PushView() keeps only a view, for bytes that outlive the
// sorter (a mapped perf.data file).  Callbacks get spans valid only during
// the call; a callback that takes a span of records gets them in batches
// (up to 64, in order).  Records without a timestamp are given
// the time of the latest record pushed before them (so they keep their place
// relative to their own buffer).  Ties keep push order.
//
// Cost: each buffer's records arrive in order, so pushes form runs (a new
// one starts wherever a time goes down); a release merges the runs pairwise,
// O(n log runs), which is linear for the few runs a round has, instead of
// sorting its records.  Released entries are not moved out one round at a
// time: the pending ones begin at head_, and the merge writes them to the
// front of its output anyway; without a merge they are moved down only
// when the released prefix is as long as the rest (amortized, at most one
// move a record).  Copied bytes are compacted the same way, when storage
// has doubled since it last was.
#ifndef MMAP3_READER_RECORD_SORTER_H_
#define MMAP3_READER_RECORD_SORTER_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

namespace mmap3 {

class RecordSorter {
 public:
  void Push(std::optional<uint64_t> time, std::span<const uint8_t> record);
  void PushView(std::optional<uint64_t> time, std::span<const uint8_t> record) {
    entries_.push_back(
        MakeEntry(time, record.size(), reinterpret_cast<uintptr_t>(record.data()), true));
  }

  // Ends a round: releases records up to the previous round's maximum.
  template <typename Fn>
  size_t FinishRound(Fn&& fn) {
    size_t n = Release(previous_round_max_, fn);
    previous_round_max_ = round_max_;
    return n;
  }
  // Releases everything (end of input).
  template <typename Fn>
  size_t Flush(Fn&& fn) {
    return Release(UINT64_MAX, fn);
  }

  size_t pending() const { return entries_.size() - head_; }
  // The lowest address a pending view points at (null if none): what the
  // sorter still needs of the bytes it was given views of.
  const uint8_t* LowestView() const;
  // Records pushed with a timestamp lower than one already released: the
  // ordering guarantee was violated for them (they are still delivered).
  uint64_t late() const { return late_; }

 private:
  // No sequence number: runs are merged in push order by a stable merge,
  // which keeps ties in push order.
  struct Entry {
    uint64_t time;
    uintptr_t where;  // offset into storage_ in u64 units, or a pointer (view)
    uint32_t size;    // bytes (a record is at most 64 KiB)
    bool view;
    const uint8_t* Data(const uint64_t* storage) const {
      return view ? reinterpret_cast<const uint8_t*>(where)
                  : reinterpret_cast<const uint8_t*>(storage + where);
    }
  };
  static_assert(sizeof(Entry) == 24);

  // Inline: it is most of a push, once per record.
  Entry MakeEntry(std::optional<uint64_t> time, size_t size, uintptr_t where, bool view) {
    const uint64_t t = time.value_or(last_time_);
    if (time) last_time_ = t;
    if (t < released_max_) ++late_;
    if (t > round_max_) round_max_ = t;
    // A time lower than the last one pushed starts a new run.
    // (entries_ is empty when nothing is pending: Drop() clears it.)
    if (entries_.empty() || entries_.back().time > t) runs_.push_back(entries_.size());
    return Entry{t, where, static_cast<uint32_t>(size), view};
  }

  template <typename Fn>
  size_t Release(uint64_t limit, Fn& fn);
  void Sort();
  // Stable merge of two sorted runs into out (which overlaps neither).
  static void Merge(const Entry* a, const Entry* a_end, const Entry* b, const Entry* b_end,
                    Entry* out);
  void Drop(size_t released);
  void CompactEntries();
  void CompactStorage();

  // entries_[head_, end) are pending; those before head_ were released.
  std::vector<Entry> entries_;
  size_t head_ = 0;
  std::vector<Entry> merged_;      // Sort()'s output, kept for its capacity
  // Copied records: the first storage_used_ words of storage_ (u64 keeps
  // records 8-byte aligned); the rest is room to grow into.
  std::vector<uint64_t> storage_;
  size_t storage_used_ = 0;
  std::vector<uint64_t> spare_;  // reused by CompactStorage(), keeps its size
  size_t storage_kept_ = 0;      // storage_used_ after the last compaction
  // Where each run of entries_ in order begins (the first is head_); one
  // run (or none) is sorted.
  std::vector<size_t> runs_, merged_runs_;
  uint64_t last_time_ = 0;
  uint64_t round_max_ = 0;
  uint64_t previous_round_max_ = 0;
  // The time of the last record released; 0 before the first release,
  // which no time is below: nothing is late then.
  uint64_t released_max_ = 0;
  uint64_t late_ = 0;
};

template <typename Fn>
size_t RecordSorter::Release(uint64_t limit, Fn& fn) {
  Sort();
  // One sorted run is pending: what goes is a prefix of it, found once, so
  // the loops below test neither the limit nor the end per record.
  const Entry* const first = entries_.data() + head_;
  const Entry* const end = entries_.data() + entries_.size();
  const Entry* const last =
      std::upper_bound(first, end, limit, [](uint64_t l, const Entry& e) { return l < e.time; });
  const size_t n = static_cast<size_t>(last - first);
  if (n == 0) return 0;
  released_max_ = last[-1].time;
  const uint64_t* const storage = storage_.data();
  if constexpr (std::is_invocable_v<Fn&, std::span<const std::span<const uint8_t>>>) {
    // In batches, in order: every record released stays where it is until
    // Drop() below.
    constexpr size_t kBatch = 64;
    std::span<const uint8_t> batch[kBatch];
    for (const Entry* e = first; e != last;) {
      const size_t k = std::min(kBatch, static_cast<size_t>(last - e));
      for (size_t i = 0; i < k; ++i, ++e) batch[i] = std::span<const uint8_t>(e->Data(storage), e->size);
      fn(std::span<const std::span<const uint8_t>>(batch, k));
    }
  } else {
    for (const Entry* e = first; e != last; ++e) fn(std::span<const uint8_t>(e->Data(storage), e->size));
  }
  Drop(n);
  return n;
}

}  // namespace mmap3

#endif  // MMAP3_READER_RECORD_SORTER_H_
