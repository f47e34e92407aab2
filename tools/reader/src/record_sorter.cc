#include "record_sorter.h"

#include <algorithm>
#include <cstring>

namespace mmap3 {

void RecordSorter::Push(std::optional<uint64_t> time, std::span<const uint8_t> record) {
  const size_t offset = storage_used_;
  const size_t words = (record.size() + 7) / 8;
  // storage_'s size only grows (doubling): a resize() per record would
  // zero the record's words before they are copied over, through a call.
  if (offset + words > storage_.size()) storage_.resize(std::max(2 * storage_.size(), offset + words));
  entries_.push_back(MakeEntry(time, record.size(), offset, false));
  std::memcpy(storage_.data() + offset, record.data(), record.size());
  storage_used_ = offset + words;
}

const uint8_t* RecordSorter::LowestView() const {
  const uint8_t* low = nullptr;
  for (size_t i = head_; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (!e.view) continue;
    const auto* p = reinterpret_cast<const uint8_t*>(e.where);
    if (low == nullptr || p < low) low = p;
  }
  return low;
}

void RecordSorter::Sort() {
  if (runs_.size() <= 1) return;
  // Bottom-up: merge runs two by two into merged_, until one is left.
  // Merge() is stable (of equal times, the first run's come first), and
  // runs are merged in push order: ties keep push order.  The first pass
  // writes to the front of merged_, which leaves the released entries
  // before head_ behind without moving them on their own.
  size_t shift = head_;
  const size_t size = entries_.size() - head_;
  while (runs_.size() > 1) {
    merged_.resize(size);
    merged_runs_.clear();
    const size_t n = runs_.size();
    for (size_t i = 0; i < n; i += 2) {
      const size_t begin = runs_[i];
      const size_t mid = i + 1 < n ? runs_[i + 1] : entries_.size();
      const size_t end = i + 2 < n ? runs_[i + 2] : entries_.size();
      const Entry* const in = entries_.data();
      Merge(in + begin, in + mid, in + mid, in + end, merged_.data() + (begin - shift));
      merged_runs_.push_back(begin - shift);
    }
    entries_.swap(merged_);
    runs_.swap(merged_runs_);
    shift = 0;
  }
  head_ = 0;
}

void RecordSorter::Merge(const Entry* a, const Entry* a_end, const Entry* b, const Entry* b_end,
                         Entry* out) {
  auto by_time = [](const Entry& x, const Entry& y) { return x.time < y.time; };
  // Two adjacent runs overlap in time only in part: what the last round
  // left and this round's first buffer come before most of the next
  // buffer's records.  The ends that need no comparing are copied in bulk
  // (about two instructions a record instead of ten); std::merge does the
  // middle.
  const Entry* b_tail = b_end;
  if (a != a_end && b != b_end) {
    // a's records up to b's first time come first (ties: a's first) ...
    const Entry* const a_head = std::upper_bound(a, a_end, *b, by_time);
    // ... and b's from a's last time on come last.
    b_tail = std::lower_bound(b, b_end, a_end[-1], by_time);
    out = std::copy(a, a_head, out);
    a = a_head;
  }
  out = std::merge(a, a_end, b, b_tail, out, by_time);
  std::copy(b_tail, b_end, out);
}

void RecordSorter::Drop(size_t released) {
  head_ += released;
  if (head_ == entries_.size()) {
    entries_.clear();
    storage_used_ = 0;
    runs_.clear();
    head_ = 0;
    storage_kept_ = 0;
    return;
  }
  runs_.assign(1, head_);  // Release() only runs after Sort(): one run is left
  // A merge moves the pending entries to the front anyway (Sort()); a
  // round without one (one buffer, or records that came in order) would
  // let the released prefix grow for good.  Moving the rest down once the
  // prefix is twice as long costs at most half a move per record released.
  if (head_ >= 2 * (entries_.size() - head_)) CompactEntries();
  // Copied records' bytes: pending ones are scattered among released ones
  // in storage_ (the merge reorders entries, not bytes).  Copying them out
  // once storage_ has doubled since the last time costs at most a copy per
  // byte pushed, amortized; the slack keeps small rounds from copying every
  // time.
  constexpr size_t kStorageSlack = 4096;  // u64 words, 32 KiB
  if (storage_used_ >= 2 * storage_kept_ + kStorageSlack) CompactStorage();
}

void RecordSorter::CompactEntries() {
  entries_.erase(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(head_));
  runs_.assign(1, 0);
  head_ = 0;
}

void RecordSorter::CompactStorage() {
  // Into the spare buffer (its size survives from one compaction to the
  // next, so steady state allocates nothing), then swap.
  if (spare_.size() < storage_used_) spare_.resize(storage_used_);
  size_t used = 0;
  for (size_t i = head_; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (e.view) continue;
    const size_t words = (e.size + 7) / 8;
    std::memcpy(spare_.data() + used, storage_.data() + e.where, words * 8);
    e.where = used;
    used += words;
  }
  storage_.swap(spare_);
  storage_used_ = storage_kept_ = used;
}

}  // namespace mmap3
