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
  ForEachPending(*this, [&](const Entry& e) {
    if (!e.view) return;
    const auto* p = reinterpret_cast<const uint8_t*>(e.where);
    if (low == nullptr || p < low) low = p;
  });
  return low;
}

size_t RecordSorter::Cut(uint64_t limit) {
  cursors_.clear();
  if (runs_.empty()) return 0;
  runs_.back().end = entries_.size();
  const Entry* const base = entries_.data();
  size_t n = 0;
  for (Run& r : runs_) {
    const Entry* const first = base + r.pos;
    const Entry* const end = base + r.end;
    // Most runs go whole (the round before's), most others not at all.
    const Entry* const cut =
        first == end || end[-1].time <= limit ? end
        : first->time > limit
            ? first
            : std::upper_bound(first, end, limit, [](uint64_t l, const Entry& e) { return l < e.time; });
    if (cut == first) continue;
    cursors_.push_back(Cursor{first, cut});
    n += static_cast<size_t>(cut - first);
    r.pos = static_cast<size_t>(cut - base);
  }
  return n;
}

void RecordSorter::MergeDown() {
  size_t n = 0;
  for (const Cursor& c : cursors_) n += static_cast<size_t>(c.end - c.at);
  // When every pending record goes (the flush of a capture without
  // rounds: all of it), the first pass reads all of entries_ out, and the
  // passes after it can use entries_ as their second buffer: one array
  // beside entries_ instead of two.  (Drop() then empties entries_.)
  const bool all = n == entries_.size() - released_;
  int to = 0;
  while (cursors_.size() > 2) {
    Entry* at;
    if (to == 1 && all) {
      at = entries_.data();
    } else {
      if (scratch_[to].size() < n) scratch_[to].resize(n);
      at = scratch_[to].data();
    }
    size_t kept = 0;
    for (size_t i = 0; i < cursors_.size(); i += 2) {
      Entry* const begin = at;
      if (i + 1 < cursors_.size())
        at = Merge(cursors_[i].at, cursors_[i].end, cursors_[i + 1].at, cursors_[i + 1].end, at);
      else
        at = std::copy(cursors_[i].at, cursors_[i].end, at);
      cursors_[kept++] = Cursor{begin, at};
    }
    cursors_.resize(kept);
    to ^= 1;
  }
}

RecordSorter::Entry* RecordSorter::Merge(const Entry* a, const Entry* a_end, const Entry* b,
                                         const Entry* b_end, Entry* out) {
  auto by_time = [](const Entry& x, const Entry& y) { return x.time < y.time; };
  // Two runs overlap in time only in part, often: the ends that need no
  // comparing are copied in bulk (about two instructions a record instead
  // of ten); std::merge does the middle.
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
  return std::copy(b_tail, b_end, out);
}

void RecordSorter::Drop(size_t released) {
  released_ += released;
  if (released_ == entries_.size()) {
    entries_.clear();
    released_ = 0;
    storage_used_ = 0;
    runs_.clear();
    storage_kept_ = 0;
    return;
  }
  // Runs with nothing pending go, but the last, which pushes extend.
  size_t kept = 0;
  for (size_t i = 0; i < runs_.size(); ++i)
    if (runs_[i].pos != runs_[i].end || i + 1 == runs_.size()) runs_[kept++] = runs_[i];
  runs_.resize(kept);
  if (released_ >= 2 * (entries_.size() - released_)) CompactEntries();
  // Copied records' bytes: pending ones are scattered among released ones
  // in storage_ (runs are released by merging, not in push order).  Copying
  // them out once storage_ has doubled since the last time costs at most a
  // copy per byte pushed, amortized; the slack keeps small rounds from
  // copying every time.
  constexpr size_t kStorageSlack = 4096;  // u64 words, 32 KiB
  if (storage_used_ >= 2 * storage_kept_ + kStorageSlack) CompactStorage();
}

void RecordSorter::CompactEntries() {
  // Runs lie in entries_ in order, so moving each down in turn overwrites
  // only holes and what was already moved.
  size_t to = 0;
  for (Run& r : runs_) {
    const size_t n = r.end - r.pos;
    std::memmove(entries_.data() + to, entries_.data() + r.pos, n * sizeof(Entry));
    r.pos = to;
    r.end = to += n;
  }
  entries_.resize(to);
  released_ = 0;
}

void RecordSorter::CompactStorage() {
  // Into the spare buffer (its size survives from one compaction to the
  // next, so steady state allocates nothing), then swap.
  if (spare_.size() < storage_used_) spare_.resize(storage_used_);
  size_t used = 0;
  ForEachPending(*this, [&](Entry& e) {
    if (e.view) return;
    const size_t words = (e.size + 7) / 8;
    std::memcpy(spare_.data() + used, storage_.data() + e.where, words * 8);
    e.where = used;
    used += words;
  });
  storage_.swap(spare_);
  storage_used_ = storage_kept_ = used;
}

}  // namespace mmap3
