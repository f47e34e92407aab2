#include "startup_stamps.h"

#include <algorithm>

#include "process_table.h"

namespace mmap3 {
namespace {

constexpr uint64_t kAll = UINT64_MAX;

uint64_t TimeOf(const SampleId& id, uint64_t fallback) { return id.has_time ? id.time : fallback; }

}  // namespace

void StartupStamps::Observe(const Record& record, bool lost_is_sideband) {
  if (const auto* c = std::get_if<CommRecord>(&record)) {
    const uint64_t t = TimeOf(c->sample_id, 0);
    names_[c->tid].push_back({t, 0, kAll});
    // exec replaces the whole image.
    if (c->exec) spaces_[c->pid].push_back({t, 0, kAll});
  } else if (const auto* k = std::get_if<TaskRecord>(&record)) {
    if (k->exit) return;  // a pid reused afterwards shows up as a FORK
    const uint64_t t = TimeOf(k->sample_id, k->time);
    names_[k->tid].push_back({t, 0, kAll});
    // A new process (not a thread): whatever had this pid before is gone.
    if (k->pid != k->ppid) spaces_[k->pid].push_back({t, 0, kAll});
  } else if (const auto* m = std::get_if<MmapRecord>(&record)) {
    if (m->pid == kKernelPid) return;
    const uint64_t end = m->start + m->len < m->start ? kAll : m->start + m->len;
    spaces_[m->pid].push_back({TimeOf(m->sample_id, 0), m->start, end});
  } else if (const auto* l = std::get_if<LostRecord>(&record)) {
    if (!l->samples && lost_is_sideband) lost_ = true;
  }
}

std::optional<uint64_t> StartupStamps::Decide(const std::vector<Change>* changes, uint64_t start,
                                              uint64_t end, uint64_t read_start,
                                              uint64_t read_end) const {
  // Without a clock nothing relates a change to the read: any change means
  // the read may show something other than what held before it.
  const uint64_t before = read_start > kMarginNs ? read_start - kMarginNs : 0;
  const uint64_t after = read_end + kMarginNs;
  uint64_t at = clock_ && lost_ ? read_start : 0;
  if (changes == nullptr) return at;
  for (const Change& c : *changes) {
    if (c.end <= start || c.start >= end) continue;
    if (!clock_) return std::nullopt;
    if (c.time > after) continue;  // later than the read: not in it, and after it in time order
    if (c.time >= before) return std::nullopt;
    at = std::max(at, c.time);
  }
  return at;
}

std::optional<uint64_t> StartupStamps::MappingTime(uint32_t pid, uint64_t start, uint64_t end,
                                                   uint64_t read_start, uint64_t read_end) const {
  auto it = spaces_.find(pid);
  return Decide(it == spaces_.end() ? nullptr : &it->second, start, end, read_start, read_end);
}

std::optional<uint64_t> StartupStamps::CommTime(uint32_t tid, uint64_t read_start,
                                                uint64_t read_end) const {
  auto it = names_.find(tid);
  return Decide(it == names_.end() ? nullptr : &it->second, 0, kAll, read_start, read_end);
}

bool StartupStamps::ChangedBetween(uint32_t pid, uint64_t start, uint64_t end, uint64_t from,
                                   uint64_t to) const {
  auto it = spaces_.find(pid);
  if (it == spaces_.end()) return false;
  const uint64_t lo = from > kMarginNs ? from - kMarginNs : 0;
  for (const Change& c : it->second) {
    if (c.end <= start || c.start >= end) continue;
    if (!clock_ || (c.time >= lo && c.time <= to + kMarginNs)) return true;
  }
  return false;
}

}  // namespace mmap3
