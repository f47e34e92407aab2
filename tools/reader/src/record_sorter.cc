#include "record_sorter.h"

#include <algorithm>
#include <cstring>

namespace mmap3 {

RecordSorter::Entry RecordSorter::MakeEntry(std::optional<uint64_t> time, size_t size,
                                            uintptr_t where, bool view) {
  uint64_t t = time.value_or(last_time_);
  if (time) last_time_ = t;
  if (released_any_ && t < released_max_) ++late_;
  if (t > round_max_) round_max_ = t;
  // Extend the sorted prefix while pushes arrive in order (the common case
  // for a single buffer), so Sort() has less to do.
  const bool in_order =
      sorted_prefix_ == entries_.size() && (entries_.empty() || entries_.back().time <= t);
  if (in_order) sorted_prefix_ = entries_.size() + 1;
  return Entry{t, seq_++, where, static_cast<uint32_t>(size), view};
}

void RecordSorter::Push(std::optional<uint64_t> time, std::span<const uint8_t> record) {
  const size_t offset = storage_.size();
  entries_.push_back(MakeEntry(time, record.size(), offset, false));
  storage_.resize(offset + (record.size() + 7) / 8);
  std::memcpy(storage_.data() + offset, record.data(), record.size());
}

void RecordSorter::PushView(std::optional<uint64_t> time, std::span<const uint8_t> record) {
  entries_.push_back(
      MakeEntry(time, record.size(), reinterpret_cast<uintptr_t>(record.data()), true));
}

void RecordSorter::Sort() {
  if (sorted_prefix_ == entries_.size()) return;
  auto less = [](const Entry& a, const Entry& b) {
    return a.time != b.time ? a.time < b.time : a.seq < b.seq;
  };
  // What was left from earlier rounds is already in order: sort only what
  // arrived since, then merge the two runs.
  auto mid = entries_.begin() + static_cast<std::ptrdiff_t>(sorted_prefix_);
  std::sort(mid, entries_.end(), less);
  std::inplace_merge(entries_.begin(), mid, entries_.end(), less);
  sorted_prefix_ = entries_.size();
}

void RecordSorter::Compact(size_t released) {
  if (released == 0) return;
  if (released == entries_.size()) {
    entries_.clear();
    storage_.clear();
    sorted_prefix_ = 0;
    return;
  }
  // Copy the survivors into the spare buffer (its capacity survives from
  // round to round, so steady state allocates nothing) and swap.
  spare_.clear();
  for (size_t i = released; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (e.view) continue;
    const size_t words = (e.size + 7) / 8;
    const size_t offset = spare_.size();
    spare_.insert(spare_.end(), storage_.begin() + static_cast<std::ptrdiff_t>(e.where),
                  storage_.begin() + static_cast<std::ptrdiff_t>(e.where + words));
    e.where = offset;
  }
  storage_.swap(spare_);
  entries_.erase(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(released));
  sorted_prefix_ = entries_.size();  // Release() only runs after Sort()
}

}  // namespace mmap3
