#include "symbolizer.h"

#include <cxxabi.h>
#include <fmt/format.h>

#include <cstdlib>

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
  if (object.build_id.empty()) return nullptr;
  if (object.kernel) return store_.KernelSymbols(object.build_id);
  return store_.Symbols(store_.Get(object.build_id, object.path));
}

bool Symbolizer::HasSymbols(const MappedObject& object) { return TableFor(object) != nullptr; }

const std::string& Symbolizer::Symbolize(const MappedObject& object, uint64_t offset) {
  auto key = std::make_pair(&object, offset);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  std::string name;
  if (const SymbolTable* table = TableFor(object)) {
    if (auto addr = table->OffsetToAddress(offset)) {
      if (const ElfSymbol* sym = table->Find(*addr)) name = Demangle(sym->name);
    }
    if (name.empty()) name = fmt::format("[unknown {}]+{:#x}", object.build_id.ShortHex(), offset);
  } else if (object.build_id.empty()) {
    name = fmt::format("[unknown]+{:#x}", offset);
  } else {
    name = fmt::format("[unknown {}]+{:#x}", object.build_id.ShortHex(), offset);
  }
  return cache_.emplace(key, std::move(name)).first->second;
}

}  // namespace mmap3
