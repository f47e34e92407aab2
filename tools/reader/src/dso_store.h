// build-id -> DSO: where a matching file is, and its symbols, loaded once.
//
// Contract: a Dso is created the first time its build-id is seen and lives as
// long as the store (references stay valid).  Symbols are loaded on first use
// from candidate files whose own build-id equals the DSO's, in this order:
//   1. <cache>/.build-id/xx/rest/debug (perf's cached debug file),
//   2. <debug_dir>/.build-id/xx/rest.debug,
//   3. <cache>/.build-id/xx/rest/elf (perf's layout; or the link itself),
//   4. each path the DSO was recorded under (in byte order), if its current
//      build-id matches.
// The first match with a .symtab gives the symbols (otherwise the first match,
// .dynsym only); the file-offset layout always comes from a matching image,
// since debug files carry no valid p_offset.  Debug file alone: no symbols.
// A candidate with a different build-id is never used; the refusal is kept
// for the report.  DSOs without a build-id are not symbolized at all.
// Every path of a build-id must be given (Get) before its first Symbols():
// the load happens once, and a path given later is not looked at.  Given
// that, what is found depends on the paths and the files, never on the
// order they were given in.
#ifndef MMAP3_READER_DSO_STORE_H_
#define MMAP3_READER_DSO_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "build_id.h"
#include "elf_file.h"

namespace mmap3 {

// Sorted function symbols plus the layout needed to turn a file offset into
// the address space the symbols use.
class SymbolTable {
 public:
  SymbolTable() = default;
  SymbolTable(std::vector<ElfSymbol> symbols, std::vector<LoadSegment> loads,
              bool absolute_addresses);
  // The symbol containing `addr` (a symbol address, not a file offset).
  const ElfSymbol* Find(uint64_t addr) const;
  // File offset -> symbol address (identity for absolute tables like kallsyms).
  std::optional<uint64_t> OffsetToAddress(uint64_t offset) const;
  size_t size() const { return symbols_.size(); }

 private:
  std::vector<ElfSymbol> symbols_;
  std::vector<LoadSegment> loads_;
  bool absolute_ = false;
};

struct Dso {
  BuildId build_id;
  std::vector<std::string> paths;  // as recorded, in order first given
  bool load_attempted = false;
  std::unique_ptr<SymbolTable> symbols;  // null if no matching file
  std::string symbol_file;               // which file the symbols came from
  std::vector<std::string> refused;      // candidates with another build-id
};

struct SymbolSearch {
  std::string cache_dir;                     // "" to skip the build-id cache
  std::string debug_dir = "/usr/lib/debug";  // "" to skip
  bool use_recorded_paths = true;
  // Kernel symbols: used only if kernel_notes has the recorded build-id.
  std::string kernel_notes = "/sys/kernel/notes";
  std::string kallsyms = "/proc/kallsyms";
};

class DsoStore {
 public:
  explicit DsoStore(SymbolSearch search) : search_(std::move(search)) {}

  // The DSO for `id` (non-empty), remembering `path` as one of its names.
  Dso& Get(const BuildId& id, std::string_view path);
  // Symbols for a DSO, loading them on first call; nullptr when no file with
  // a matching build-id exists.
  const SymbolTable* Symbols(Dso& dso);
  // Kernel symbols for a kernel with build-id `id` (empty: unknown kernel,
  // refused), loaded once.
  const SymbolTable* KernelSymbols(const BuildId& id);

  size_t size() const { return dsos_.size(); }
  size_t loads() const { return loads_; }  // symbol tables actually read
  const SymbolSearch& search() const { return search_; }

 private:
  SymbolSearch search_;
  std::unordered_map<BuildId, std::unique_ptr<Dso>, BuildIdHash> dsos_;
  size_t loads_ = 0;
  bool kernel_attempted_ = false;
  BuildId kernel_id_;
  std::unique_ptr<SymbolTable> kernel_;
};

// The running kernel's build-id from a notes file (/sys/kernel/notes format:
// a sequence of ELF notes).  Empty if absent.
BuildId ReadKernelBuildId(const std::string& notes_path);
// Parses notes in memory (exposed for tests).
BuildId ParseBuildIdNotes(const uint8_t* data, size_t size);
// Loads function symbols from a kallsyms-format file; empty when addresses
// are hidden (kptr_restrict) or the file is unreadable.
std::vector<ElfSymbol> ReadKallsyms(const std::string& path);

}  // namespace mmap3

#endif  // MMAP3_READER_DSO_STORE_H_
