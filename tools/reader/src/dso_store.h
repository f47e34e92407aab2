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
// for the report.  When none of them gives a table and a debuginfod fetcher
// is set (SymbolSearch::debuginfod), the servers are asked: for the
// executable when no matching image was found, then for the debuginfo when
// no matching file had a .symtab; what they send is one more candidate,
// checked like the others.  DSOs without a build-id are not symbolized at all.
// Every path of a build-id must be given (Get) before its first Symbols():
// the load happens once, and a path given later is not looked at.  Given
// that, what is found depends on the paths and the files, never on the
// order they were given in.
//
// Kernel symbols come from kallsyms snapshots, which hold for one boot:
//   - the kernel image: <cache>/[kernel.kallsyms]/<id>/kallsyms (what record
//     stored for that build-id, perhaps in another boot), shifted by the
//     difference between its `_text` and the capture's (KASLR); otherwise
//     the live /proc/kallsyms, but only if /sys/kernel/notes has the
//     build-id and its `_text` is where the capture's was (same boot, or no
//     KASLR).  Addresses outside the image's text (_text.._etext) have no
//     symbol: they are modules, BPF or trampolines, not the image.
//   - a module: <cache>/[<name>]/<id>/symbols (offsets from its load
//     address, which hold in every boot that loads this build); otherwise
//     the live kallsyms, if /sys/module/<name>/notes has the build-id.
#ifndef MMAP3_READER_DSO_STORE_H_
#define MMAP3_READER_DSO_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "address_space.h"
#include "build_id.h"
#include "debuginfod.h"
#include "elf_file.h"
#include "kallsyms.h"

namespace mmap3 {

// Sorted function symbols plus the layout needed to turn a file offset into
// the address space the symbols use.
class SymbolTable {
 public:
  SymbolTable() = default;
  SymbolTable(std::vector<ElfSymbol> symbols, std::vector<LoadSegment> loads,
              bool absolute_addresses);
  // A table whose offsets are addresses (kallsyms): offset + bias is a
  // symbol address, valid only inside [lo, hi).
  static SymbolTable Relocated(std::vector<ElfSymbol> symbols, uint64_t bias, uint64_t lo,
                               uint64_t hi);
  // The symbol containing `addr` (a symbol address, not a file offset).
  const ElfSymbol* Find(uint64_t addr) const;
  // File offset -> symbol address; nullopt outside the table's range.
  std::optional<uint64_t> OffsetToAddress(uint64_t offset) const;
  size_t size() const { return symbols_.size(); }

 private:
  std::vector<ElfSymbol> symbols_;
  std::vector<LoadSegment> loads_;
  bool absolute_ = false;
  uint64_t bias_ = 0, lo_ = 0, hi_ = UINT64_MAX;  // absolute tables
};

struct Dso {
  BuildId build_id;
  std::vector<std::string> paths;  // as recorded, in order first given
  bool load_attempted = false;
  std::unique_ptr<SymbolTable> symbols;  // null if no matching file
  std::string symbol_file;               // which file the symbols came from
  SymbolSource symbol_source = SymbolSource::kNone;  // and where it was found
  std::vector<std::string> refused;      // candidates with another build-id
  // Recorded paths another user can write (IsTrustedFile()): each names
  // only the mappings of its own path, and only where `symbols` is null
  // (SymbolsFor()); loaded on first use, null if it has no symbols.
  std::map<std::string, std::unique_ptr<SymbolTable>, std::less<>> others;
};

struct SymbolSearch {
  std::string cache_dir;                     // "" to skip the build-id cache
  std::string debug_dir = "/usr/lib/debug";  // "" to skip
  bool use_recorded_paths = true;
  // The running kernel, used only for its own build-ids (see above).
  std::string kernel_notes = "/sys/kernel/notes";
  std::string kallsyms = "/proc/kallsyms";
  std::string modules_dir = "/sys/module";
  std::string proc_modules = "/proc/modules";
  // Asked when no local file has a DSO's build-id; null: never.  Borrowed.
  DebuginfodFetcher* debuginfod = nullptr;
};

class DsoStore {
 public:
  explicit DsoStore(SymbolSearch search) : search_(std::move(search)) {}

  // The DSO for `id` (non-empty), remembering `path` as one of its names.
  Dso& Get(const BuildId& id, std::string_view path);
  // Symbols for a DSO, loading them on first call; nullptr when no file with
  // a matching build-id exists.
  const SymbolTable* Symbols(Dso& dso);
  // The symbols for a mapping of the DSO at `path`: Symbols(dso), or where
  // that has none, those of the file at `path` itself if it is a recorded
  // path another user can write whose build-id is the DSO's.  Such a file's
  // note is whatever its owner wrote: its names are never given to a
  // mapping of another path (helper-57 and helper-58's reviews: a forged
  // copy of a library named root's samples of the library).
  const SymbolTable* SymbolsFor(Dso& dso, std::string_view path);
  // Symbols of the kernel image with build-id `id` (empty: unknown kernel,
  // refused) for a capture in which its symbol `ref_symbol` (perf's
  // "[kernel.kallsyms]_text" record: "_text", at `ref_address`) was; offsets
  // are the capture's addresses.  No reference: refused, since the capture's
  // addresses cannot be related to any snapshot.  Loaded once per argument.
  const SymbolTable* KernelSymbols(const BuildId& id, const std::string& ref_symbol,
                                   uint64_t ref_address);
  // Symbols of kernel module `name` ("ext4") with build-id `id`; offsets are
  // relative to the module's load address.  Loaded once per build-id.
  const SymbolTable* ModuleSymbols(const BuildId& id, const std::string& name);

  size_t size() const { return dsos_.size(); }
  // Every DSO whose symbols were looked for, by build-id.
  std::vector<const Dso*> LoadedDsos() const;
  size_t loads() const { return loads_; }  // symbol tables actually read
  const SymbolSearch& search() const { return search_; }

 private:
  SymbolSearch search_;
  const Kallsyms* LiveKallsyms();
  const BuildId& LiveKernelId();

  std::unordered_map<BuildId, std::unique_ptr<Dso>, BuildIdHash> dsos_;
  size_t loads_ = 0;
  // Null entries remember that nothing matched.
  std::map<std::tuple<BuildId, std::string, uint64_t>, std::unique_ptr<SymbolTable>> kernels_;
  std::map<std::pair<BuildId, std::string>, std::unique_ptr<SymbolTable>> modules_;
  std::optional<Kallsyms> live_;  // read on first use
  std::optional<BuildId> live_kernel_id_;
};

// The running kernel's build-id from a notes file (/sys/kernel/notes format:
// a sequence of ELF notes).  Empty if absent.
BuildId ReadKernelBuildId(const std::string& notes_path);
// Parses notes in memory (exposed for tests).
BuildId ParseBuildIdNotes(const uint8_t* data, size_t size);
// Loads function symbols from a kallsyms-format file; empty when addresses
// are hidden (kptr_restrict) or the file is unreadable.
std::vector<ElfSymbol> ReadKallsyms(const std::string& path);
// The module name of a kernel module object's path: "[nf_nat]" or
// ".../nf-nat.ko.xz" -> "nf_nat" (the kernel's spelling); "" if neither.
std::string KernelModuleName(std::string_view path);

}  // namespace mmap3

#endif  // MMAP3_READER_DSO_STORE_H_
