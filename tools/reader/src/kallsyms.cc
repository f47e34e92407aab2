#include "kallsyms.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace mmap3 {
namespace {

constexpr std::string_view kMarkers[] = {"_text", "_stext", "_etext"};

void SortByAddress(std::vector<ElfSymbol>* symbols) {
  // Stable: symbols at one address keep the order kallsyms lists them in,
  // so two parses of one file give one table.
  std::stable_sort(symbols->begin(), symbols->end(),
                   [](const ElfSymbol& a, const ElfSymbol& b) { return a.addr < b.addr; });
}

}  // namespace

bool IsKallsymsText(char type) { return type == 't' || type == 'T' || type == 'w' || type == 'W'; }

void ForEachKallsymsLine(std::string_view text,
                         const std::function<void(const KallsymsLine&)>& fn) {
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    const size_t sp = line.find(' ');
    // "<addr> <type> <name>": at least one name character after "X ".
    if (sp == 0 || sp == std::string_view::npos || line.size() < sp + 4 || line[sp + 2] != ' ')
      continue;
    KallsymsLine out;
    const std::string_view addr = line.substr(0, sp);
    auto [end, ec] = std::from_chars(addr.data(), addr.data() + addr.size(), out.addr, 16);
    if (ec != std::errc() || end != addr.data() + addr.size()) continue;
    out.type = line[sp + 1];
    std::string_view rest = line.substr(sp + 3);
    const size_t tab = rest.find('\t');
    out.name = rest.substr(0, tab);
    if (tab != std::string_view::npos) {
      std::string_view owner = rest.substr(tab + 1);
      if (owner.size() < 3 || owner.front() != '[' || owner.back() != ']') continue;
      out.owner = owner.substr(1, owner.size() - 2);
    }
    if (out.name.empty() || out.name.find(' ') != std::string_view::npos) continue;
    fn(out);
  }
}

std::optional<uint64_t> Kallsyms::Marker(std::string_view name) const {
  auto it = markers.find(name);
  if (it == markers.end()) return std::nullopt;
  return it->second;
}

Kallsyms ParseKallsyms(std::string_view text) {
  Kallsyms k;
  ForEachKallsymsLine(text, [&](const KallsymsLine& l) {
    if (l.addr != 0) k.hidden = false;
    if (l.owner.empty() &&
        std::find(std::begin(kMarkers), std::end(kMarkers), l.name) != std::end(kMarkers))
      k.markers.emplace(std::string(l.name), l.addr);  // the first one listed
    if (!IsKallsymsText(l.type)) return;
    ElfSymbol s{l.addr, 0, std::string(l.name)};
    if (l.owner.empty()) {
      k.kernel.push_back(std::move(s));
    } else {
      auto it = k.owners.find(l.owner);
      if (it == k.owners.end()) it = k.owners.emplace(std::string(l.owner), std::vector<ElfSymbol>{}).first;
      it->second.push_back(std::move(s));
    }
  });
  SortByAddress(&k.kernel);
  for (auto& [owner, symbols] : k.owners) SortByAddress(&symbols);
  const auto text_start = k.Marker("_text"), text_end = k.Marker("_etext");
  k.complete = !k.hidden && text.ends_with('\n') && text_start && text_end &&
               *text_start < *text_end;
  return k;
}

bool SameKernelImage(const Kallsyms& a, const Kallsyms& b) {
  const auto a_text = a.Marker("_text"), b_text = b.Marker("_text");
  if (!a_text || !b_text || a.kernel.size() != b.kernel.size()) return false;
  for (size_t i = 0; i < a.kernel.size(); ++i) {
    // Unsigned differences: symbols below _text compare as well.
    if (a.kernel[i].name != b.kernel[i].name ||
        a.kernel[i].addr - *a_text != b.kernel[i].addr - *b_text)
      return false;
  }
  return true;
}

std::vector<KernelModule> ParseKernelModules(
    std::string_view proc_modules, const Kallsyms& kallsyms,
    const std::map<std::string, uint64_t, std::less<>>& core_sizes) {
  struct Entry {
    std::string name;
    uint64_t start, size;
  };
  std::vector<Entry> entries;
  // "<name> <size> <refcount> <deps> <state> 0x<address>[ (taints)]"
  while (!proc_modules.empty()) {
    const size_t nl = proc_modules.find('\n');
    std::string_view line = proc_modules.substr(0, nl);
    proc_modules.remove_prefix(nl == std::string_view::npos ? proc_modules.size() : nl + 1);
    std::vector<std::string_view> fields;
    while (!line.empty() && fields.size() < 6) {
      const size_t sp = line.find(' ');
      if (sp != 0) fields.push_back(line.substr(0, sp));
      line.remove_prefix(sp == std::string_view::npos ? line.size() : sp + 1);
    }
    if (fields.size() < 6 || fields[4] != "Live" || !fields[5].starts_with("0x")) continue;
    Entry e{std::string(fields[0]), 0, 0};
    auto [s_end, s_ec] =
        std::from_chars(fields[1].data(), fields[1].data() + fields[1].size(), e.size, 10);
    auto [a_end, a_ec] =
        std::from_chars(fields[5].data() + 2, fields[5].data() + fields[5].size(), e.start, 16);
    if (s_ec != std::errc() || a_ec != std::errc() || e.start == 0 || e.size == 0 ||
        e.start + e.size < e.start)
      continue;  // hidden (kptr_restrict) or malformed
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.start < b.start; });

  // Every text symbol with its owner, to find where a module's code ends.
  struct Owned {
    uint64_t addr;
    const std::string* owner;  // nullptr: the kernel image
  };
  std::vector<Owned> all;
  for (const ElfSymbol& s : kallsyms.kernel) all.push_back({s.addr, nullptr});
  for (const auto& [owner, symbols] : kallsyms.owners)
    for (const ElfSymbol& s : symbols) all.push_back({s.addr, &owner});
  std::sort(all.begin(), all.end(), [](const Owned& a, const Owned& b) { return a.addr < b.addr; });

  std::vector<KernelModule> out;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    uint64_t end = e.start + e.size;
    if (auto core = core_sizes.find(e.name); core != core_sizes.end() && core->second != 0)
      end = std::min(end, e.start + std::min(core->second, e.size));
    if (i + 1 < entries.size()) end = std::min(end, entries[i + 1].start);
    auto it = std::upper_bound(all.begin(), all.end(), e.start,
                               [](uint64_t a, const Owned& o) { return a < o.addr; });
    for (; it != all.end() && it->addr < end; ++it) {
      if (it->owner == nullptr || *it->owner != e.name) {
        end = it->addr;
        break;
      }
    }
    if (end <= e.start) continue;
    KernelModule m;
    m.name = e.name;
    m.start = e.start;
    m.end = end;
    if (auto own = kallsyms.owners.find(e.name); own != kallsyms.owners.end()) {
      for (const ElfSymbol& s : own->second)
        if (s.addr >= m.start && s.addr < m.end) m.symbols.push_back({s.addr - m.start, 0, s.name});
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<size_t> ModulesOverlaid(const std::vector<KernelModule>& before,
                                    const std::vector<KernelModule>& after,
                                    const Kallsyms& after_kallsyms) {
  std::vector<size_t> out;
  for (size_t i = 0; i < before.size(); ++i) {
    const KernelModule& m = before[i];
    auto inside = [&m](uint64_t start, uint64_t end) { return start < m.end && m.start < end; };
    bool overlaid = false;
    for (const KernelModule& a : after) {
      if (!inside(a.start, a.end)) continue;
      if (a.name != m.name || a.start != m.start || a.build_id != m.build_id) overlaid = true;
    }
    // Code that is no module's: BPF programs, ftrace and kprobe pages.
    for (const auto& owned : after_kallsyms.owners) {
      // Named, not a structured binding: clang before 16 (Debian 12's 14,
      // which builds make fuzz) cannot capture those in a lambda.
      const std::string& owner = owned.first;
      const std::vector<ElfSymbol>& symbols = owned.second;
      if (overlaid) break;
      if (std::any_of(after.begin(), after.end(),
                      [&](const KernelModule& a) { return a.name == owner; }))
        continue;  // a module: its range was looked at above
      overlaid = std::any_of(symbols.begin(), symbols.end(),
                             [&](const ElfSymbol& s) { return inside(s.addr, s.addr + 1); });
    }
    if (overlaid) out.push_back(i);
  }
  return out;
}

std::string FormatModuleSymbols(const KernelModule& module) {
  std::string out;
  for (const ElfSymbol& s : module.symbols)
    out += fmt::format("{:016x} t {}\t[{}]\n", s.addr, s.name, module.name);
  return out;
}

std::vector<ElfSymbol> ParseModuleSymbols(std::string_view text, std::string_view name) {
  std::vector<ElfSymbol> out;
  ForEachKallsymsLine(text, [&](const KallsymsLine& l) {
    if (l.owner == name && IsKallsymsText(l.type)) out.push_back({l.addr, 0, std::string(l.name)});
  });
  SortByAddress(&out);
  return out;
}

}  // namespace mmap3
