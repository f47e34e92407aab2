#include "address_space.h"

#include <algorithm>

namespace mmap3 {

const char* BuildIdSourceName(BuildIdSource source) {
  switch (source) {
    case BuildIdSource::kNone: return "none";
    case BuildIdSource::kMmap3: return "mmap3";
    case BuildIdSource::kMmap2: return "mmap2";
    case BuildIdSource::kMapFiles: return "map_files";
    case BuildIdSource::kPerfHeader: return "perf_header_unverified";
    case BuildIdSource::kKernelNotes: return "kernel_notes";
    case BuildIdSource::kVdso: return "vdso";
    case BuildIdSource::kPerfMap: return "perf-map";
    case BuildIdSource::kBpf: return "bpf";
  }
  return "?";
}

const char* SymbolStatusName(SymbolStatus status) {
  switch (status) {
    case SymbolStatus::kFound: return "found";
    case SymbolStatus::kNoSymbol: return "no_symbol";
    case SymbolStatus::kNoFile: return "no_file";
    case SymbolStatus::kNoBuildId: return "no_build_id";
    case SymbolStatus::kNoMapping: return "no_mapping";
    case SymbolStatus::kGuest: return "guest";
    case SymbolStatus::kHypervisor: return "hypervisor";
    case SymbolStatus::kNoPerfMap: return "no_perf_map";
    case SymbolStatus::kNoPerfMapEntry: return "no_perf_map_entry";
    case SymbolStatus::kPerfMapAmbiguous: return "perf_map_ambiguous";
  }
  return "?";
}

const char* SymbolSourceName(SymbolSource source) {
  switch (source) {
    case SymbolSource::kNone: return "none";
    case SymbolSource::kBuildIdCache: return "build_id_cache";
    case SymbolSource::kDebugDir: return "debug_dir";
    case SymbolSource::kRecordedPath: return "recorded_path";
    case SymbolSource::kDebuginfod: return "debuginfod";
    case SymbolSource::kOwnPathOnly: return "own_path_only";
  }
  return "?";
}

void AddressSpace::Insert(Mapping m) {
  if (m.end <= m.start) return;
  Erase(m.start, m.end);
  uint64_t start = m.start;
  by_start_.emplace(start, std::move(m));
}

void AddressSpace::Erase(uint64_t start, uint64_t end) {
  if (end <= start) return;
  Mapping m;
  m.start = start;
  m.end = end;
  index_valid_ = false;
  // First candidate: the mapping starting at or before m.start may reach in.
  auto it = by_start_.upper_bound(m.start);
  if (it != by_start_.begin()) --it;
  std::vector<Mapping> keep;
  while (it != by_start_.end() && it->second.start < m.end) {
    const Mapping& old = it->second;
    if (old.end <= m.start) {
      ++it;
      continue;
    }
    if (old.start < m.start) {
      Mapping left = old;
      left.end = m.start;
      keep.push_back(left);
    }
    if (old.end > m.end) {
      Mapping right = old;
      right.start = m.end;
      right.pgoff = old.pgoff + (m.end - old.start);
      keep.push_back(right);
    }
    it = by_start_.erase(it);
  }
  for (Mapping& k : keep) by_start_.emplace(k.start, std::move(k));
}

void AddressSpace::BuildIndex() const {
  index_.clear();
  index_.reserve(by_start_.size());
  for (const auto& [start, m] : by_start_) {
    const MappedObject* o = m.object.get();
    const bool jit = o != nullptr && o->jit_pid >= 0;
    index_.push_back({m.start, m.end, m.pgoff, o, &m, jit ? 0 : m.pgoff - m.start,
                      o != nullptr ? o->number : 0,
                      o != nullptr && o->source == BuildIdSource::kBpf});
  }
  index_valid_ = true;
}

const Mapping* AddressSpace::Find(uint64_t addr) const {
  const Range* r = FindRange(Ranges(), addr);
  return r != nullptr ? r->mapping : nullptr;
}

std::vector<Mapping> AddressSpace::Mappings() const {
  std::vector<Mapping> out;
  out.reserve(by_start_.size());
  for (const auto& [start, m] : by_start_) out.push_back(m);
  return out;
}

}  // namespace mmap3
