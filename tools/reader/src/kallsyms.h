// Parsing of /proc/kallsyms text: bytes in, symbols out, no I/O.
//
// A kallsyms snapshot describes one boot of one kernel: the kernel image's
// symbols are shifted by that boot's KASLR offset, and each module's by
// where it was loaded.  What stays the same from boot to boot is where a
// symbol lies relative to a reference symbol of its own object: `_text` for
// the image (what perf records as "[kernel.kallsyms]_text"), the load
// address for a module.  Callers relocate with that; this file only parses.
//
// Line format: "<hex address> <type> <name>[\t[<owner>]]".  The owner tag
// names a module ("ext4") or another kernel text owner ("bpf",
// "__builtin__ftrace"); lines without one belong to the kernel image.
// Malformed lines are skipped.
#ifndef MMAP3_READER_KALLSYMS_H_
#define MMAP3_READER_KALLSYMS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "build_id.h"
#include "elf_file.h"

namespace mmap3 {

// Larger kallsyms files are not read (a distribution kernel with its
// modules lists about 10 MB).
inline constexpr uint64_t kMaxKallsymsBytes = uint64_t{256} << 20;

struct KallsymsLine {
  uint64_t addr = 0;
  char type = 0;
  std::string_view name;
  std::string_view owner;  // "" for the kernel image
};

// Calls fn(const KallsymsLine&) for every well-formed line of `text`.
void ForEachKallsymsLine(std::string_view text, const std::function<void(const KallsymsLine&)>& fn);
// Text (code) symbol types: t, T, w, W.
bool IsKallsymsText(char type);

struct Kallsyms {
  // Text symbols of the kernel image, sorted by address (size 0: each
  // extends to the next).
  std::vector<ElfSymbol> kernel;
  // Text symbols by owner ("ext4", "bpf", ...), each sorted by address.
  std::map<std::string, std::vector<ElfSymbol>, std::less<>> owners;
  // Addresses of the kernel image's layout markers (_text, _stext, _etext),
  // whatever their type.
  std::map<std::string, uint64_t, std::less<>> markers;
  // True when every address is zero: kptr_restrict hid them from the reader.
  bool hidden = true;
  // True for a whole snapshot of a kernel image: addresses shown, every
  // line ended (the text ends with a newline), and the image's _text below
  // its _etext.  kallsyms lists the image in address order, so a copy cut
  // short anywhere in the image's text lacks _etext.
  bool complete = false;

  std::optional<uint64_t> Marker(std::string_view name) const;
};

Kallsyms ParseKallsyms(std::string_view text);

// Whether two snapshots list one kernel image: the same text symbols at the
// same distances from _text, as any two boots of one build do.
bool SameKernelImage(const Kallsyms& a, const Kallsyms& b);

// A loaded module as /proc/modules and kallsyms show it.
struct KernelModule {
  std::string name;
  // Its code: from the load address (/proc/modules) up to the first of its
  // size, its core size, the next module and the first text symbol of
  // another owner.  /proc/modules' size counts the freed init sections (and
  // since Linux 6.4 data allocated elsewhere), so load address + size can
  // reach past the module into space that other code may take later; the
  // core size (/sys/module/<name>/coresize) is the allocation the code is in
  // (before 6.4), or that and the data sizes (6.4+).
  uint64_t start = 0, end = 0;
  // Its text symbols, addresses relative to `start`, sorted.
  std::vector<ElfSymbol> symbols;
  // From /sys/module/<name>/notes, filled in by the caller (empty: unknown).
  BuildId build_id;
};

// Live modules of a /proc/modules text with nonzero addresses, ordered by
// address, with their symbols from `kallsyms` (the same moment's snapshot).
// `core_sizes` maps names to /sys/module/<name>/coresize where known.
std::vector<KernelModule> ParseKernelModules(
    std::string_view proc_modules, const Kallsyms& kallsyms,
    const std::map<std::string, uint64_t, std::less<>>& core_sizes = {});

// The modules of `before` (loaded when a capture started) whose address
// range, at its end (`after`, `after_kallsyms`), holds code of something
// other than that very module (same name, load address and build-id):
// another module, another build of it, a BPF program or a trampoline.  The
// kernel reports no module loads, so samples in such a range cannot be told
// apart.  A module unloaded or moved whose old range holds nothing is not
// listed.  Indexes into `before`, ascending.
std::vector<size_t> ModulesOverlaid(const std::vector<KernelModule>& before,
                                    const std::vector<KernelModule>& after,
                                    const Kallsyms& after_kallsyms);

// A module's symbols as the build-id cache keeps them: kallsyms lines with
// addresses relative to the load address ("<offset> <type> <name>\t[<module>]"),
// so that they hold in every boot that loads this build of the module.
std::string FormatModuleSymbols(const KernelModule& module);
// The inverse: the symbols of the lines tagged with `name`, sorted.
std::vector<ElfSymbol> ParseModuleSymbols(std::string_view text, std::string_view name);

}  // namespace mmap3

#endif  // MMAP3_READER_KALLSYMS_H_
