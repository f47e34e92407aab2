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
// one starts wherever a time goes down).  A release cuts each run at the
// limit (a binary search: a run is in order) and merges only the cut-off
// prefixes.  Two are merged straight into the callback's batches: a record
// is compared once, when it goes, and not copied.  More are first merged
// two by two (O(n log runs)) until two are left.  What is not released
// stays where it is, as the rest of its run, and is not merged again until
// it goes.  Under the finished-round rule a round releases every record of
// the round before, so the runs cut are the last two rounds' and each run
// is cut at most twice.  Released entries are holes until they are twice
// as many as the pending ones; then the pending ones are moved down
// (amortized, at most half a move a record).  Copied bytes are compacted
// the same way, when storage has doubled since it last was.
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

  size_t pending() const { return entries_.size() - released_; }
  // The lowest address a pending view points at (null if none): what the
  // sorter still needs of the bytes it was given views of.
  const uint8_t* LowestView() const;
  // Records pushed with a timestamp lower than one already released: the
  // ordering guarantee was violated for them (they are still delivered).
  uint64_t late() const { return late_; }
  // What the sorter holds, for the tests of its bounds: entries (released
  // ones not yet compacted away among them), runs, and bytes of copies.
  // After a release the entries are at most three times the pending ones,
  // and the runs at most those pushed into since the release before, plus
  // one; copies' bytes at most twice those pending at the last compaction,
  // 32 KiB, and what was pushed since.
  size_t held_entries() const { return entries_.size(); }
  size_t held_runs() const { return runs_.size(); }
  size_t held_bytes() const { return storage_used_ * 8; }

 private:
  // No sequence number: of equal times, the earlier run's record goes
  // first, and runs are in push order (also in entries_): ties keep push
  // order.
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
  // The pending part of a run: entries_[pos, end).  The last run is the
  // one pushes extend: its end is entries_.size(), and `end` holds that
  // only once a release has set it (RunEnd()).
  struct Run {
    size_t pos, end;
  };
  // A run's records being released: [at, end).
  struct Cursor {
    const Entry* at;
    const Entry* end;
  };

  // Inline: it is most of a push, once per record.
  Entry MakeEntry(std::optional<uint64_t> time, size_t size, uintptr_t where, bool view) {
    const uint64_t t = time.value_or(last_time_);
    if (time) last_time_ = t;
    if (t < released_max_) ++late_;
    if (t > round_max_) round_max_ = t;
    // A time lower than the last one pushed starts a new run.  (entries_
    // and runs_ are empty when nothing is pending: Drop() clears them.)
    if (entries_.empty() || entries_.back().time > t) StartRun();
    return Entry{t, where, static_cast<uint32_t>(size), view};
  }
  void StartRun() {
    if (!runs_.empty()) runs_.back().end = entries_.size();
    runs_.push_back(Run{entries_.size(), entries_.size()});
  }
  size_t RunEnd(size_t i) const { return i + 1 == runs_.size() ? entries_.size() : runs_[i].end; }
  // fn(entry) for each pending entry, in push order (Self: const or not).
  template <typename Self, typename Fn>
  static void ForEachPending(Self& self, Fn&& fn) {
    for (size_t r = 0; r < self.runs_.size(); ++r)
      for (size_t i = self.runs_[r].pos, end = self.RunEnd(r); i < end; ++i) fn(self.entries_[i]);
  }

  template <typename Fn>
  size_t Release(uint64_t limit, Fn& fn);
  // Cuts every run at `limit`: the cursors of what goes (in run order), and
  // how many records that is.
  size_t Cut(uint64_t limit);
  // Merges the cursors two by two (in order: stable) into scratch_ (or,
  // when every pending record goes, every other pass into entries_), until
  // two are left.  (A heap of cursors compares log2(runs) times a record
  // with branches that data at random mispredicts: measured slower than
  // these passes from four runs on.)
  void MergeDown();
  // Stable merge of two sorted runs into out (which overlaps neither).
  static Entry* Merge(const Entry* a, const Entry* a_end, const Entry* b, const Entry* b_end,
                      Entry* out);
  void Drop(size_t released);
  void CompactEntries();
  void CompactStorage();

  // The runs' records in push order, released ones among them (holes).
  std::vector<Entry> entries_;
  size_t released_ = 0;  // holes in entries_
  std::vector<Run> runs_;
  std::vector<Cursor> cursors_;  // Cut()'s output, kept for its capacity
  std::vector<Entry> scratch_[2];  // MergeDown()'s, kept for their capacity
  // Copied records: the first storage_used_ words of storage_ (u64 keeps
  // records 8-byte aligned); the rest is room to grow into.
  std::vector<uint64_t> storage_;
  size_t storage_used_ = 0;
  std::vector<uint64_t> spare_;  // reused by CompactStorage(), keeps its size
  size_t storage_kept_ = 0;      // storage_used_ after the last compaction
  uint64_t last_time_ = 0;
  uint64_t round_max_ = 0;
  uint64_t previous_round_max_ = 0;
  // The highest time released; 0 before the first release, which no time
  // is below: nothing is late then.
  uint64_t released_max_ = 0;
  uint64_t late_ = 0;
};

template <typename Fn>
size_t RecordSorter::Release(uint64_t limit, Fn& fn) {
  const size_t n = Cut(limit);
  if (n == 0) return 0;
  const uint64_t* const storage = storage_.data();
  constexpr bool kBatches = std::is_invocable_v<Fn&, std::span<const std::span<const uint8_t>>>;
  // In batches, in order: every record released stays where it is until
  // Drop() below.
  constexpr size_t kBatch = 64;
  std::span<const uint8_t> batch[kBatches ? kBatch : 1];
  size_t k = 0;
  // The callback out of line, the per-record part inline: GCC kept a
  // lambda holding both out of line in report's instantiation, a call per
  // record (36 instructions a record more than the sorter before).
  auto flush = [&]() __attribute__((noinline)) {
    if constexpr (kBatches) fn(std::span<const std::span<const uint8_t>>(batch, k));
    k = 0;
  };
  auto emit = [&](const Entry* e) __attribute__((always_inline)) {
    const std::span<const uint8_t> record(e->Data(storage), e->size);
    if constexpr (kBatches) {
      batch[k++] = record;
      if (k == kBatch) flush();
    } else {
      fn(record);
    }
  };
  uint64_t last = 0;
  for (const Cursor& c : cursors_) last = std::max(last, c.end[-1].time);
  // More than two runs: merged pairwise into scratch until two are left.
  if (cursors_.size() > 2) MergeDown();
  if (cursors_.size() == 1) {
    for (const Entry* e = cursors_[0].at; e != cursors_[0].end; ++e) emit(e);
  } else {
    // Of equal times, a's (the earlier run's) first.
    const Entry* a = cursors_[0].at;
    const Entry* b = cursors_[1].at;
    const Entry* const a_end = cursors_[0].end;
    const Entry* const b_end = cursors_[1].end;
    // A branch, not a select: the select chains each step's loads to the
    // step before (about 8 cycles a record), while buffers drained in turn
    // interleave in patterns the predictor learns.
    while (a != a_end && b != b_end) {
      if (b->time < a->time)
        emit(b++);
      else
        emit(a++);
    }
    for (; a != a_end; ++a) emit(a);
    for (; b != b_end; ++b) emit(b);
  }
  if constexpr (kBatches) {
    if (k != 0) flush();
  }
  // The highest time released so far: a release of late records alone
  // (all below it) must not lower it.
  released_max_ = std::max(released_max_, last);
  Drop(n);
  return n;
}

}  // namespace mmap3

#endif  // MMAP3_READER_RECORD_SORTER_H_
