#include "dso_store.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

namespace mmap3 {

SymbolTable::SymbolTable(std::vector<ElfSymbol> symbols, std::vector<LoadSegment> loads,
                         bool absolute_addresses)
    : symbols_(std::move(symbols)), loads_(std::move(loads)), absolute_(absolute_addresses) {}

const ElfSymbol* SymbolTable::Find(uint64_t addr) const {
  auto it = std::upper_bound(symbols_.begin(), symbols_.end(), addr,
                             [](uint64_t a, const ElfSymbol& s) { return a < s.addr; });
  if (it == symbols_.begin()) return nullptr;
  const ElfSymbol& s = *std::prev(it);
  // Sized symbols must contain the address; zero-sized ones (assembly,
  // kallsyms) extend to the next symbol.
  if (s.size != 0 && addr - s.addr >= s.size) return nullptr;
  return &s;
}

std::optional<uint64_t> SymbolTable::OffsetToAddress(uint64_t offset) const {
  if (absolute_) return offset;
  for (const LoadSegment& s : loads_) {
    if (offset >= s.offset && offset - s.offset < s.filesz) return offset - s.offset + s.vaddr;
  }
  return std::nullopt;
}

Dso& DsoStore::Get(const BuildId& id, std::string_view path) {
  auto& slot = dsos_[id];
  if (!slot) {
    slot = std::make_unique<Dso>();
    slot->build_id = id;
  }
  if (!path.empty() &&
      std::find(slot->paths.begin(), slot->paths.end(), path) == slot->paths.end()) {
    slot->paths.emplace_back(path);
  }
  return *slot;
}

const SymbolTable* DsoStore::Symbols(Dso& dso) {
  if (dso.load_attempted) return dso.symbols.get();
  dso.load_attempted = true;
  if (dso.build_id.empty()) return nullptr;
  const std::string hex = dso.build_id.Hex();
  const std::string sub = hex.substr(0, 2) + "/" + hex.substr(2);
  // Separate debug files first (full .symtab), then copies of the image,
  // then the recorded paths.  Among matching files, one with .symtab wins;
  // a stripped image (.dynsym only) is kept as the fallback.
  std::vector<std::string> candidates;
  if (!search_.cache_dir.empty())
    candidates.push_back(search_.cache_dir + "/.build-id/" + sub + "/debug");
  if (!search_.debug_dir.empty())
    candidates.push_back(search_.debug_dir + "/.build-id/" + sub + ".debug");
  if (!search_.cache_dir.empty()) {
    candidates.push_back(search_.cache_dir + "/.build-id/" + sub + "/elf");  // perf >= 4.6 layout
    candidates.push_back(search_.cache_dir + "/.build-id/" + sub + "/vdso");  // perf's [vdso]
    candidates.push_back(search_.cache_dir + "/.build-id/" + sub);  // older: link to the file
  }
  if (search_.use_recorded_paths) {
    // In an order of their own, not the order they were recorded in (which
    // is the order a hash table handed out locations), so that the same
    // paths always give the same file.
    std::vector<std::string> paths = dso.paths;
    std::sort(paths.begin(), paths.end());
    for (const std::string& p : paths) {
      if (p.starts_with('/')) candidates.push_back(p);  // not "[vdso]", "//anon", relative
    }
  }
  // Layout (PT_LOAD offsets) must come from an image: objcopy
  // --only-keep-debug zeroes p_offset in debug files, so their program
  // headers cannot turn a file offset into an address.
  std::vector<ElfSymbol> symbols;
  std::vector<LoadSegment> layout;
  bool have_symbols = false, full = false, have_layout = false;
  std::string symbol_file;
  for (const std::string& path : candidates) {
    if (full && have_layout) break;
    auto elf = ElfFile::Open(path);
    if (!elf.ok()) continue;
    if (elf->build_id() != dso.build_id) {
      dso.refused.push_back(path);
      continue;
    }
    const bool is_image = std::any_of(elf->loads().begin(), elf->loads().end(),
                                      [](const LoadSegment& s) { return s.executable && s.filesz > 0; });
    if (is_image && !have_layout) {
      layout = elf->loads();
      have_layout = true;
    }
    const bool has_symtab = elf->HasSymtab();
    if (!full && (has_symtab || !have_symbols)) {
      symbols = elf->ReadSymbols();
      symbol_file = path;
      have_symbols = true;
      full = has_symtab;
    }
  }
  if (have_symbols && have_layout) {
    dso.symbols = std::make_unique<SymbolTable>(std::move(symbols), std::move(layout), false);
    dso.symbol_file = symbol_file;
  }
  if (dso.symbols != nullptr) ++loads_;
  return dso.symbols.get();
}

const SymbolTable* DsoStore::KernelSymbols(const BuildId& id) {
  if (kernel_attempted_) return id == kernel_id_ ? kernel_.get() : nullptr;
  kernel_attempted_ = true;
  kernel_id_ = ReadKernelBuildId(search_.kernel_notes);
  if (id.empty() || id != kernel_id_) return nullptr;
  auto symbols = ReadKallsyms(search_.kallsyms);
  if (symbols.empty()) return nullptr;
  kernel_ = std::make_unique<SymbolTable>(std::move(symbols), std::vector<LoadSegment>{}, true);
  ++loads_;
  return kernel_.get();
}

BuildId ParseBuildIdNotes(const uint8_t* data, size_t size) {
  size_t off = 0;
  auto align4 = [](size_t n) { return (n + 3) & ~size_t{3}; };
  while (size - off >= 12 && off <= size) {
    uint32_t namesz, descsz, type;
    std::memcpy(&namesz, data + off, 4);
    std::memcpy(&descsz, data + off + 4, 4);
    std::memcpy(&type, data + off + 8, 4);
    size_t name = off + 12;
    if (align4(namesz) > size - name) break;
    size_t desc = name + align4(namesz);
    if (align4(descsz) > size - desc) break;
    if (type == 3 && namesz == 4 && std::memcmp(data + name, "GNU", 4) == 0 && descsz > 0)
      return BuildId(data + desc, descsz);
    off = desc + align4(descsz);
  }
  return {};
}

BuildId ReadKernelBuildId(const std::string& notes_path) {
  std::ifstream in(notes_path, std::ios::binary);
  if (!in) return {};
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return ParseBuildIdNotes(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

std::vector<ElfSymbol> ReadKallsyms(const std::string& path) {
  std::ifstream in(path);
  std::vector<ElfSymbol> out;
  std::string line;
  bool any_nonzero = false;
  while (std::getline(in, line)) {
    // "<hex addr> <type> <name>[\t[module]]"
    std::istringstream ls(line);
    std::string addr, type, name;
    if (!(ls >> addr >> type >> name)) continue;
    if (type.size() != 1 || (type[0] != 't' && type[0] != 'T' && type[0] != 'w' && type[0] != 'W'))
      continue;
    uint64_t a = std::strtoull(addr.c_str(), nullptr, 16);
    if (a != 0) any_nonzero = true;
    out.push_back({a, 0, name});
  }
  if (!any_nonzero) return {};
  std::stable_sort(out.begin(), out.end(),
                   [](const ElfSymbol& a, const ElfSymbol& b) { return a.addr < b.addr; });
  return out;
}

}  // namespace mmap3
