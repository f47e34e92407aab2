#include "dso_store.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "build_id_cache.h"
#include "files.h"

namespace mmap3 {

SymbolTable::SymbolTable(std::vector<ElfSymbol> symbols, std::vector<LoadSegment> loads,
                         bool absolute_addresses)
    : symbols_(std::move(symbols)), loads_(std::move(loads)), absolute_(absolute_addresses) {}

SymbolTable SymbolTable::Relocated(std::vector<ElfSymbol> symbols, uint64_t bias, uint64_t lo,
                                   uint64_t hi) {
  SymbolTable t(std::move(symbols), {}, true);
  t.bias_ = bias;
  t.lo_ = lo;
  t.hi_ = hi;
  return t;
}

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
  if (absolute_) {
    const uint64_t addr = offset + bias_;  // wraps: a bias may be "negative"
    if (addr < lo_ || addr >= hi_) return std::nullopt;
    return addr;
  }
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

namespace {
// An image, not a debug file: objcopy --only-keep-debug zeroes p_offset in
// debug files, so their program headers cannot turn a file offset into an
// address.
bool IsImage(const ElfFile& elf) {
  return std::any_of(elf.loads().begin(), elf.loads().end(),
                     [](const LoadSegment& s) { return s.executable && s.filesz > 0; });
}
}  // namespace

const SymbolTable* DsoStore::Symbols(Dso& dso) {
  if (dso.load_attempted) return dso.symbols.get();
  dso.load_attempted = true;
  if (dso.build_id.empty()) return nullptr;
  const std::string hex = dso.build_id.Hex();
  const std::string sub = hex.substr(0, 2) + "/" + hex.substr(2);
  // Separate debug files first (full .symtab), then copies of the image,
  // then the recorded paths.  Among matching files, one with .symtab wins;
  // a stripped image (.dynsym only) is kept as the fallback.
  std::vector<std::pair<std::string, SymbolSource>> candidates;
  const SymbolSource kCache = SymbolSource::kBuildIdCache;
  if (!search_.cache_dir.empty())
    candidates.emplace_back(search_.cache_dir + "/.build-id/" + sub + "/debug", kCache);
  if (!search_.debug_dir.empty())
    candidates.emplace_back(search_.debug_dir + "/.build-id/" + sub + ".debug",
                            SymbolSource::kDebugDir);
  if (!search_.cache_dir.empty()) {
    candidates.emplace_back(search_.cache_dir + "/.build-id/" + sub + "/elf", kCache);  // perf >= 4.6
    candidates.emplace_back(search_.cache_dir + "/.build-id/" + sub + "/vdso", kCache);  // [vdso]
    candidates.emplace_back(search_.cache_dir + "/.build-id/" + sub, kCache);  // older: the file
  }
  // In an order of their own, not the order they were recorded in (which
  // is the order a hash table handed out locations), so that the same
  // paths always give the same file.
  std::vector<std::string> paths = dso.paths;
  std::sort(paths.begin(), paths.end());
  // A recorded path another user can write (IsTrustedFile()) is not a
  // candidate for the DSO: its build-id note is whatever its owner wrote,
  // so a copy of a system library with that library's id and a .symtab of
  // its owner's choosing would name the samples of everyone's copy of the
  // library (helper-57's review).  It names only its own path's mappings,
  // and only where nothing here has the id (SymbolsFor()).
  if (search_.use_recorded_paths) {
    for (const std::string& p : paths) {
      // not "[vdso]", "//anon", relative
      if (!p.starts_with('/')) continue;
      if (IsTrustedFile(p)) candidates.emplace_back(p, SymbolSource::kRecordedPath);
    }
  }
  // Layout (PT_LOAD offsets) must come from an image: objcopy
  // --only-keep-debug zeroes p_offset in debug files, so their program
  // headers cannot turn a file offset into an address.
  std::vector<ElfSymbol> symbols;
  std::vector<LoadSegment> layout;
  bool have_symbols = false, full = false, have_layout = false;
  std::string symbol_file;
  SymbolSource symbol_source = SymbolSource::kNone;
  auto consider = [&](const std::string& path, SymbolSource source) {
    auto fd = OpenRegularFile(path);
    if (!fd.ok()) return;
    // The file opened, not the path looked at before: a path can be
    // switched between the two.  (Cache and debug files are root's.)
    if (source == SymbolSource::kRecordedPath && !IsTrustedFd(fd->get())) return;
    auto elf = ElfFile::FromFd(std::move(*fd), path);
    if (!elf.ok()) return;
    if (elf->build_id() != dso.build_id) {
      dso.refused.push_back(path);
      return;
    }
    if (IsImage(*elf) && !have_layout) {
      layout = elf->loads();
      have_layout = true;
    }
    const bool has_symtab = elf->HasSymtab();
    if (!full && (has_symtab || !have_symbols)) {
      symbols = elf->ReadSymbols();
      symbol_file = path;
      symbol_source = source;
      have_symbols = true;
      full = has_symtab;
    }
  };
  for (const auto& [path, source] : candidates) {
    if (full && have_layout) break;
    consider(path, source);
  }
  // Nothing here has the build-id: the servers may.  The image first (it
  // gives the layout, and often the symbols), then the debug file if the
  // symbols are still only .dynsym or none.
  if (search_.debuginfod != nullptr && !(have_symbols && have_layout)) {
    const std::string cache_under = paths.empty() ? std::string() : paths.front();
    if (!have_layout) {
      if (auto file = search_.debuginfod->Fetch(DebuginfodKind::kExecutable, dso.build_id,
                                                cache_under))
        consider(*file, SymbolSource::kDebuginfod);
    }
    if (have_layout && !full) {
      if (auto file = search_.debuginfod->Fetch(DebuginfodKind::kDebuginfo, dso.build_id,
                                                cache_under))
        consider(*file, SymbolSource::kDebuginfod);
    }
  }
  if (have_symbols && have_layout) {
    dso.symbols = std::make_unique<SymbolTable>(std::move(symbols), std::move(layout), false);
    dso.symbol_file = symbol_file;
    dso.symbol_source = symbol_source;
  }
  if (dso.symbols != nullptr) ++loads_;
  return dso.symbols.get();
}

std::vector<const Dso*> DsoStore::LoadedDsos() const {
  std::vector<const Dso*> out;
  for (const auto& [id, dso] : dsos_)
    if (dso->load_attempted) out.push_back(dso.get());
  std::sort(out.begin(), out.end(),
            [](const Dso* a, const Dso* b) { return a->build_id < b->build_id; });
  return out;
}

namespace {

// Kernel symbols, from an open file: /proc's, or an entry of the cache
// opened by BuildIdCache::OpenEntry(), which refuses what another user
// could have written (unlike an ELF image, such a file carries no build-id
// to check it by).  Never a FIFO or a device.
std::optional<std::string> ReadText(Result<UniqueFd> fd, const std::string& shown) {
  if (!fd.ok()) return std::nullopt;
  auto text = ReadAllFd(fd->get(), kMaxKallsymsBytes, shown);
  if (!text.ok()) return std::nullopt;
  return std::move(*text);
}

std::optional<std::string> ReadWholeFile(const std::string& path) {
  if (path.empty()) return std::nullopt;
  return ReadText(OpenRegularFile(path), path);
}

// The kernel image's table from one snapshot, for a capture whose
// `ref_symbol` was at `ref_address`; null if the snapshot cannot be related
// to the capture or is not whole (see Kallsyms::complete: one cut short
// would put every later address on its last symbol).
std::unique_ptr<SymbolTable> ImageTable(const Kallsyms& k, const std::string& ref_symbol,
                                        uint64_t ref_address) {
  if (!k.complete || k.kernel.empty()) return nullptr;
  const auto ref = k.Marker(ref_symbol);
  if (!ref) return nullptr;
  // Everything of the image moves by one offset (KASLR), so the distance
  // from the reference is the same in both boots.
  const uint64_t bias = *ref - ref_address;
  const uint64_t lo = std::min(*ref, k.Marker("_text").value_or(*ref));
  const uint64_t hi = *k.Marker("_etext");
  return std::make_unique<SymbolTable>(SymbolTable::Relocated(k.kernel, bias, lo, hi));
}

}  // namespace

const Kallsyms* DsoStore::LiveKallsyms() {
  if (!live_) {
    auto text = ReadWholeFile(search_.kallsyms);
    live_ = text ? ParseKallsyms(*text) : Kallsyms{};
  }
  return live_->hidden ? nullptr : &*live_;
}

const BuildId& DsoStore::LiveKernelId() {
  if (!live_kernel_id_) live_kernel_id_ = ReadKernelBuildId(search_.kernel_notes);
  return *live_kernel_id_;
}

const SymbolTable* DsoStore::SymbolsFor(Dso& dso, std::string_view path) {
  if (const SymbolTable* t = Symbols(dso); t != nullptr) return t;
  // (" (deleted)": /proc's name for a mapping whose file is gone; whatever
  // is at that name now is another file.)
  if (!search_.use_recorded_paths || !path.starts_with('/') || path.ends_with(" (deleted)"))
    return nullptr;
  if (auto it = dso.others.find(path); it != dso.others.end()) return it->second.get();
  std::unique_ptr<SymbolTable>& table = dso.others[std::string(path)];  // null until loaded
  // The file itself: its own note must be the DSO's id, its layout and
  // symbols both its own.
  auto fd = OpenRegularFile(std::string(path));
  if (!fd.ok()) return nullptr;
  auto elf = ElfFile::FromFd(std::move(*fd), std::string(path));
  if (!elf.ok() || elf->build_id() != dso.build_id) return nullptr;
  if (!IsImage(*elf)) return nullptr;
  table = std::make_unique<SymbolTable>(elf->ReadSymbols(), elf->loads(), false);
  ++loads_;
  return table.get();
}

const SymbolTable* DsoStore::KernelSymbols(const BuildId& id, const std::string& ref_symbol,
                                           uint64_t ref_address) {
  auto [it, inserted] = kernels_.try_emplace(std::make_tuple(id, ref_symbol, ref_address));
  if (!inserted) return it->second.get();
  // Address 0: the capture's kallsyms was hidden (kptr_restrict), so its
  // addresses cannot be related to any snapshot either.
  if (id.empty() || ref_symbol.empty() || ref_address == 0) return nullptr;
  std::unique_ptr<SymbolTable>& table = it->second;
  // The snapshot record kept for this kernel, from whichever boot.
  if (!search_.cache_dir.empty()) {
    if (auto text = ReadText(
            BuildIdCache::OpenEntry(search_.cache_dir, "[kernel.kallsyms]", id, "kallsyms"),
            BuildIdCache::KallsymsPath(search_.cache_dir, id)))
      table = ImageTable(ParseKallsyms(*text), ref_symbol, ref_address);
  }
  // The running kernel: the same build, relocated the same way.
  if (table == nullptr && LiveKernelId() == id) {
    if (const Kallsyms* live = LiveKallsyms()) {
      if (live->Marker(ref_symbol) == ref_address)
        table = ImageTable(*live, ref_symbol, ref_address);
    }
  }
  if (table != nullptr) ++loads_;
  return table.get();
}

const SymbolTable* DsoStore::ModuleSymbols(const BuildId& id, const std::string& name) {
  auto [it, inserted] = modules_.try_emplace(std::make_pair(id, name));
  if (!inserted) return it->second.get();
  if (id.empty() || name.empty() || name.find('/') != std::string::npos || name[0] == '.')
    return nullptr;
  std::vector<ElfSymbol> symbols;
  if (!search_.cache_dir.empty()) {
    // Written whole by record; a last line without its newline was cut.
    auto text = ReadText(BuildIdCache::OpenEntry(search_.cache_dir, "[" + name + "]", id, "symbols"),
                         BuildIdCache::ModuleSymbolsPath(search_.cache_dir, name, id));
    if (text && text->ends_with('\n')) symbols = ParseModuleSymbols(*text, name);
  }
  if (symbols.empty() && !search_.modules_dir.empty() &&
      ReadKernelBuildId(search_.modules_dir + "/" + name + "/notes/.note.gnu.build-id") == id) {
    const Kallsyms* live = LiveKallsyms();
    auto modules = ReadWholeFile(search_.proc_modules);
    if (live != nullptr && modules) {
      for (KernelModule& m : ParseKernelModules(*modules, *live))
        if (m.name == name) symbols = std::move(m.symbols);
    }
  }
  if (symbols.empty()) return nullptr;
  it->second = std::make_unique<SymbolTable>(
      SymbolTable::Relocated(std::move(symbols), 0, 0, UINT64_MAX));
  ++loads_;
  return it->second.get();
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
  auto text = ReadWholeFile(path);
  if (!text) return {};
  Kallsyms k = ParseKallsyms(*text);
  if (k.hidden) return {};
  return std::move(k.kernel);
}

std::string KernelModuleName(std::string_view path) {
  if (path.size() > 2 && path.front() == '[' && path.back() == ']')
    return std::string(path.substr(1, path.size() - 2));
  if (const size_t slash = path.rfind('/'); slash != std::string_view::npos)
    path.remove_prefix(slash + 1);
  const size_t ko = path.find(".ko");
  if (ko == 0 || ko == std::string_view::npos) return {};
  const std::string_view rest = path.substr(ko + 3);
  if (!rest.empty() && rest != ".xz" && rest != ".gz" && rest != ".zst") return {};
  std::string name(path.substr(0, ko));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

}  // namespace mmap3
