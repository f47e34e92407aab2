// Location -> symbol name, using only files whose build-id matches.
//
// Contract: Lookup() takes the object a sample hit and the file offset in
// it (for the kernel image: the address; for a module: the offset from its
// load address) and returns a name valid for the life of
// the Symbolizer, and whether it is a symbol.  When there is none, the name
// says why:
//   "[no symbol <short build-id>]+0x<offset>"  a file with the build-id was
//                                              found; no symbol covers it
//   "[unknown <short build-id>]+0x<offset>"    no file with the build-id
//   "[unknown]+0x<offset>"                     the object has no build-id
// JIT code (MappedObject::jit_pid; the offset is the address) is named by
// its process's perf map, given with SetPerfMaps():
//   "[unknown: no perf map]+0x<address>"       the capture has no map of it
//   "[unknown: not in perf map]+0x<address>"   no line of the map covers it
//   "[unknown: several names in perf map]+0x<address>"
//                                              lines of different names
//                                              cover it (code replaced)
// and an object for a guest's or the hypervisor's addresses is named by its
// path ("[guest.user]", "[hypervisor]", ...), whatever the offset.
// A file with another build-id is never used.  Results are cached per
// (object, offset); each DSO's symbols are loaded once by the DsoStore, each
// name is demangled once, and equal names are the same string (callers may
// compare the returned references by address).
#ifndef MMAP3_READER_SYMBOLIZER_H_
#define MMAP3_READER_SYMBOLIZER_H_

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "address_space.h"
#include "dso_store.h"
#include "keyed_hash.h"
#include "perf_map.h"

namespace mmap3 {

class Symbolizer {
 public:
  explicit Symbolizer(DsoStore& store) : store_(store) {}

  // The capture's JIT maps (null: none); they outlive the Symbolizer.  Set
  // before the first Lookup().
  void SetPerfMaps(const PerfMaps* maps) { perf_maps_ = maps; }
  // True if the capture has a perf map of process `pid`.
  bool HasPerfMap(int64_t pid) const {
    return perf_maps_ != nullptr && pid >= 0 && perf_maps_->Find(static_cast<uint32_t>(pid));
  }
  // Where a location's object's identity comes from, as reported: the
  // object's build-id source, or kPerfMap for JIT code of a process whose
  // map the capture has.
  BuildIdSource SourceOf(const MappedObject& object) const {
    return object.jit_pid >= 0 && HasPerfMap(object.jit_pid) ? BuildIdSource::kPerfMap
                                                             : object.source;
  }

  struct Symbol {
    const std::string* name;
    SymbolStatus status;
  };
  // Gives the object's path as a place to look for its build-id's file.
  // Declare every object before the first Lookup(): a DSO's symbols are
  // loaded once, from the paths declared by then, and a build-id mapped
  // under several paths (a container's and the host's) must get the same
  // answer whichever of its locations is looked up first.
  void Declare(const MappedObject& object);
  const Symbol& Lookup(const MappedObject& object, uint64_t offset);
  const std::string& Symbolize(const MappedObject& object, uint64_t offset) {
    return *Lookup(object, offset).name;
  }
  // For a return address, looked up one byte back, in its call: `offset`
  // is that byte.  No call is ever in a function's padding ("__pfx_f",
  // "__cfi_f": the kernel's call padding and CFI preambles), so when that
  // byte is padding and a symbol starts at the next one, the address was
  // not a return address but an interrupted context's ip, at the first
  // instruction of that function (the kernel's unwinder puts those in a
  // call chain unmarked): returns offset + 1 then, else `offset`.  Only for
  // the kernel and its modules: a user program may name a function
  // "__pfx_..." and call from it.
  uint64_t CallerOffset(const MappedObject& object, uint64_t offset);
  // How far `offset` is into the symbol Lookup() found there (0 if none).
  uint64_t OffsetInSymbol(const MappedObject& object, uint64_t offset);
  // True if a file with the object's build-id gave a symbol table.
  bool HasSymbols(const MappedObject& object);

 private:
  const SymbolTable* TableFor(const MappedObject& object);
  const std::string& Intern(std::string name) { return *names_.insert(std::move(name)).first; }

  // JIT code: the perf map's name for `address`.
  Symbol LookupJit(const MappedObject& object, uint64_t address);

  DsoStore& store_;
  const PerfMaps* perf_maps_ = nullptr;
  std::unordered_map<const MappedObject*, const SymbolTable*> tables_;
  std::unordered_map<const ElfSymbol*, const std::string*> demangled_;
  KeyedSet<std::string> names_;  // node-based: references stay valid
  KeyedMap<std::pair<const MappedObject*, uint64_t>, Symbol> cache_;
};

}  // namespace mmap3

#endif  // MMAP3_READER_SYMBOLIZER_H_
