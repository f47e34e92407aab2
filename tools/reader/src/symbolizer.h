// Location -> symbol name, using only files whose build-id matches.
//
// Contract: Symbolize() takes the object a sample hit and the file offset in
// it (for the kernel: the address) and returns a name valid for the life of
// the Symbolizer.  When no matching file exists the answer is
// "[unknown <short build-id>]+0x<offset>" (or "[unknown]+0x<offset>" for an
// object without a build-id); a file with another build-id is never used.
// Results are cached per (build-id, offset); each DSO's symbols are loaded
// once by the DsoStore.
#ifndef MMAP3_READER_SYMBOLIZER_H_
#define MMAP3_READER_SYMBOLIZER_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "address_space.h"
#include "dso_store.h"

namespace mmap3 {

class Symbolizer {
 public:
  explicit Symbolizer(DsoStore& store) : store_(store) {}

  const std::string& Symbolize(const MappedObject& object, uint64_t offset);
  // True if the last Symbolize() for this object found a matching file.
  bool HasSymbols(const MappedObject& object);

 private:
  const SymbolTable* TableFor(const MappedObject& object);

  DsoStore& store_;
  std::map<std::pair<const MappedObject*, uint64_t>, std::string> cache_;
};

}  // namespace mmap3

#endif  // MMAP3_READER_SYMBOLIZER_H_
