#include "symbolizer.h"

#include <cxxabi.h>
#include <fmt/format.h>

#include <cstdlib>
#include <string_view>

namespace mmap3 {
namespace {

std::string Demangle(const std::string& name) {
  if (name.rfind("_Z", 0) != 0) return name;
  int status = 0;
  char* out = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) return name;
  std::string result(out);
  std::free(out);
  return result;
}

}  // namespace

const SymbolTable* Symbolizer::TableFor(const MappedObject& object) {
  if (auto it = tables_.find(&object); it != tables_.end()) return it->second;
  const SymbolTable* table = nullptr;
  if (object.build_id.empty() || object.ksymbol) {
    table = nullptr;
  } else if (object.kernel_module) {
    table = store_.ModuleSymbols(object.build_id, KernelModuleName(object.path));
  } else if (object.kernel) {
    table = store_.KernelSymbols(object.build_id, object.reloc_symbol, object.reloc_address);
  } else {
    table = store_.SymbolsFor(store_.Get(object.build_id, object.path), object.path);
  }
  tables_.emplace(&object, table);
  return table;
}

void Symbolizer::Declare(const MappedObject& object) {
  if (object.build_id.empty() || object.kernel || object.owner != AddressOwner::kHost) return;
  store_.Get(object.build_id, object.path);
}

uint64_t Symbolizer::OffsetInSymbol(const MappedObject& object, uint64_t offset) {
  if (object.owner != AddressOwner::kHost) return 0;
  if (object.jit_pid >= 0) {
    const PerfMap* map = HasPerfMap(object.jit_pid)
                             ? perf_maps_->Find(static_cast<uint32_t>(object.jit_pid))
                             : nullptr;
    const PerfMapEntry* e = map != nullptr ? map->Find(offset) : nullptr;
    return e != nullptr ? offset - e->start : 0;
  }
  const SymbolTable* table = TableFor(object);
  if (table == nullptr) return 0;
  auto addr = table->OffsetToAddress(offset);
  if (!addr) return 0;
  const ElfSymbol* sym = table->Find(*addr);
  return sym != nullptr && *addr >= sym->addr ? *addr - sym->addr : 0;
}

uint64_t Symbolizer::CallerOffset(const MappedObject& object, uint64_t offset) {
  if (!object.kernel) return offset;
  const Symbol& at = Lookup(object, offset);
  if (at.status != SymbolStatus::kFound ||
      !(at.name->starts_with("__pfx_") || at.name->starts_with("__cfi_")))
    return offset;
  const Symbol& next = Lookup(object, offset + 1);
  if (next.status != SymbolStatus::kFound || OffsetInSymbol(object, offset + 1) != 0) return offset;
  return offset + 1;
}

bool Symbolizer::HasSymbols(const MappedObject& object) { return TableFor(object) != nullptr; }

const Symbolizer::Symbol& Symbolizer::Lookup(const MappedObject& object, uint64_t offset) {
  auto key = std::make_pair(&object, offset);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  if (object.owner != AddressOwner::kHost) {
    // A guest's or the hypervisor's address: nothing on the host names it.
    const Symbol symbol{&Intern(object.path), object.owner == AddressOwner::kGuest
                                                  ? SymbolStatus::kGuest
                                                  : SymbolStatus::kHypervisor};
    return cache_.emplace(key, symbol).first->second;
  }
  if (object.jit_pid >= 0) return cache_.emplace(key, LookupJit(object, offset)).first->second;
  if (object.ksymbol) {
    // The kernel named this code when it put it there, over its whole
    // range: that name is its symbol (a BPF program's carries its tag).
    return cache_.emplace(key, Symbol{&Intern(object.path), SymbolStatus::kFound}).first->second;
  }
  Symbol symbol{nullptr, SymbolStatus::kFound};
  const SymbolTable* table = TableFor(object);
  if (table != nullptr) {
    if (auto addr = table->OffsetToAddress(offset)) {
      if (const ElfSymbol* sym = table->Find(*addr)) {
        auto [it, inserted] = demangled_.emplace(sym, nullptr);
        if (inserted) {
          // A PLT stub's name is its target's and "@plt": demangled as the
          // target's is.
          const std::string_view name = sym->name;
          it->second = name.ends_with("@plt")
                           ? &Intern(Demangle(std::string(name.substr(0, name.size() - 4))) + "@plt")
                           : &Intern(Demangle(sym->name));
        }
        symbol.name = it->second;
      }
    }
  }
  if (symbol.name == nullptr || symbol.name->empty()) {
    // Say which of "the right file has nothing here" and "the right file
    // was not found": the first is final, the second may change with a
    // build-id cache or debug files.
    if (object.build_id.empty()) {
      symbol = {&Intern(fmt::format("[unknown]+{:#x}", offset)), SymbolStatus::kNoBuildId};
    } else if (table == nullptr) {
      symbol = {&Intern(fmt::format("[unknown {}]+{:#x}", object.build_id.ShortHex(), offset)),
                SymbolStatus::kNoFile};
    } else {
      symbol = {&Intern(fmt::format("[no symbol {}]+{:#x}", object.build_id.ShortHex(), offset)),
                SymbolStatus::kNoSymbol};
    }
  }
  return cache_.emplace(key, symbol).first->second;
}

Symbolizer::Symbol Symbolizer::LookupJit(const MappedObject& object, uint64_t address) {
  // Only the map of the process the mapping belongs to; never a file's
  // symbols (the object has no build-id), nor another process's map.
  const PerfMap* map = HasPerfMap(object.jit_pid)
                           ? perf_maps_->Find(static_cast<uint32_t>(object.jit_pid))
                           : nullptr;
  if (map == nullptr)
    return {&Intern(fmt::format("[unknown: no perf map]+{:#x}", address)), SymbolStatus::kNoPerfMap};
  const PerfMapEntry* e = map->Find(address);
  if (e == nullptr && map->SeveralNames(address)) {
    return {&Intern(fmt::format("[unknown: several names in perf map]+{:#x}", address)),
            SymbolStatus::kPerfMapAmbiguous};
  }
  if (e == nullptr) {
    return {&Intern(fmt::format("[unknown: not in perf map]+{:#x}", address)),
            SymbolStatus::kNoPerfMapEntry};
  }
  return {&Intern(e->name), SymbolStatus::kFound};
}

}  // namespace mmap3
