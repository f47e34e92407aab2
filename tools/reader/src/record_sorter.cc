#include "record_sorter.h"

#include <algorithm>
#include <cstring>

namespace mmap3 {

void RecordSorter::Push(std::optional<uint64_t> time, std::span<const uint8_t> record) {
  const size_t offset = storage_.size();
  entries_.push_back(MakeEntry(time, record.size(), offset, false));
  storage_.resize(offset + (record.size() + 7) / 8);
  std::memcpy(storage_.data() + offset, record.data(), record.size());
}

const uint8_t* RecordSorter::LowestView() const {
  const uint8_t* low = nullptr;
  for (const Entry& e : entries_) {
    if (!e.view) continue;
    const auto* p = reinterpret_cast<const uint8_t*>(e.where);
    if (low == nullptr || p < low) low = p;
  }
  return low;
}

void RecordSorter::Sort() {
  if (runs_.size() <= 1) return;
  auto less = [](const Entry& a, const Entry& b) { return a.time < b.time; };
  // Bottom-up: merge runs two by two into merged_, until one is left.
  // std::merge is stable (of equal times, the first run's come first), and
  // runs are merged in push order: ties keep push order.
  merged_.resize(entries_.size());
  while (runs_.size() > 1) {
    merged_runs_.clear();
    const size_t n = runs_.size();
    for (size_t i = 0; i < n; i += 2) {
      const size_t begin = runs_[i];
      const size_t mid = i + 1 < n ? runs_[i + 1] : entries_.size();
      const size_t end = i + 2 < n ? runs_[i + 2] : entries_.size();
      std::merge(entries_.begin() + static_cast<std::ptrdiff_t>(begin),
                 entries_.begin() + static_cast<std::ptrdiff_t>(mid),
                 entries_.begin() + static_cast<std::ptrdiff_t>(mid),
                 entries_.begin() + static_cast<std::ptrdiff_t>(end),
                 merged_.begin() + static_cast<std::ptrdiff_t>(begin), less);
      merged_runs_.push_back(begin);
    }
    entries_.swap(merged_);
    runs_.swap(merged_runs_);
  }
}

void RecordSorter::Compact(size_t released) {
  if (released == 0) return;
  if (released == entries_.size()) {
    entries_.clear();
    storage_.clear();
    runs_.clear();
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
  runs_.assign(1, 0);  // Release() only runs after Sort(): one run is left
}

}  // namespace mmap3
