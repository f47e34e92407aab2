#include "report_controls.h"

#include <algorithm>

namespace mmap3 {
namespace {

bool Contains(const std::vector<std::string>& list, std::string_view s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

std::string Join(const std::vector<std::string>& list) {
  std::string out;
  for (const std::string& s : list) out += (out.empty() ? "" : ",") + s;
  return out;
}

}  // namespace

const char* SortKeyName(SortKey key) {
  switch (key) {
    case SortKey::kComm: return "comm";
    case SortKey::kPid: return "pid";
    case SortKey::kTid: return "tid";
    case SortKey::kDso: return "dso";
    case SortKey::kSym: return "sym";
    case SortKey::kBuildId: return "build_id";
  }
  return "?";
}

bool ReportControls::Has(SortKey key) const {
  return std::find(sort.begin(), sort.end(), key) != sort.end();
}

std::string ReportControls::FilterText() const {
  std::string out;
  auto add = [&](const char* flag, const std::vector<std::string>& list) {
    if (list.empty()) return;
    out += (out.empty() ? "" : " ") + std::string(flag) + " " + Join(list);
  };
  add("--comms", comms);
  add("--dsos", dsos);
  add("--symbols", symbols);
  return out;
}

bool ReportControls::Matches(std::string_view comm, const MappedObject* object,
                             const std::string& symbol, SymbolStatus status) const {
  if (!comms.empty() && !Contains(comms, comm)) return false;
  if (!dsos.empty()) {
    if (object == nullptr) return false;
    const std::string& path = object->path;
    const size_t slash = path.rfind('/');
    const std::string_view base =
        slash == std::string::npos ? std::string_view(path) : std::string_view(path).substr(slash + 1);
    if (!Contains(dsos, path) && !Contains(dsos, base)) return false;
  }
  if (!symbols.empty() && (status != SymbolStatus::kFound || !Contains(symbols, symbol)))
    return false;
  return true;
}

std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    if (comma > pos) out.emplace_back(text.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

std::vector<SortKey> ParseSortKeys(std::string_view text, std::string* error) {
  static constexpr std::pair<std::string_view, SortKey> kNames[] = {
      {"comm", SortKey::kComm}, {"pid", SortKey::kPid},         {"tid", SortKey::kTid},
      {"dso", SortKey::kDso},   {"sym", SortKey::kSym},         {"symbol", SortKey::kSym},
      {"build_id", SortKey::kBuildId}, {"buildid", SortKey::kBuildId}};
  std::vector<SortKey> keys;
  for (const std::string& name : SplitList(text)) {
    const auto* it = std::find_if(std::begin(kNames), std::end(kNames),
                                  [&](const auto& n) { return n.first == name; });
    if (it == std::end(kNames)) {
      *error = "unknown --sort key '" + name + "' (known: comm, pid, tid, dso, sym, build_id)";
      return {};
    }
    if (std::find(keys.begin(), keys.end(), it->second) != keys.end()) {
      *error = "--sort key '" + name + "' given twice";
      return {};
    }
    keys.push_back(it->second);
  }
  if (keys.empty()) *error = "--sort needs at least one key (comm, pid, tid, dso, sym, build_id)";
  return keys;
}

}  // namespace mmap3
