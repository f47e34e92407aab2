// One process's view of its mapped files, and what each mapping points at.
//
// Contract: AddressSpace is an ordered, non-overlapping set of mappings.
// Insert() replaces whatever the new mapping overlaps: mappings partly covered
// are trimmed (the right-hand remainder keeps its file offset consistent), so
// the result mirrors what mmap(MAP_FIXED) does to the real address space.
// MappedObject values are immutable and shared (copying an address space on
// fork copies pointers, not paths).
#ifndef MMAP3_READER_ADDRESS_SPACE_H_
#define MMAP3_READER_ADDRESS_SPACE_H_

#include <cstdint>
#include <map>
#include <tuple>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "build_id.h"

namespace mmap3 {

// Where a mapping's build-id came from; reported per capture.
enum class BuildIdSource : uint8_t {
  kNone,         // no build-id known (anonymous, not ELF, no note, unreadable)
  kMmap3,        // PERF_RECORD_MMAP3 from the kernel
  kMmap2,        // PERF_RECORD_MMAP2 with the build-id bit from the kernel
  kMapFiles,     // read by us from /proc/PID/map_files/<range> (the mapped inode)
  kPerfHeader,   // perf.data HEADER_BUILD_ID table, matched by path (perf's
                 // files): "perf_header_unverified", since perf read it by
                 // path when recording ended, not when the file was mapped
  kKernelNotes,  // the kernel image and modules: /sys/kernel/notes, /sys/module/*/notes
  kVdso,         // read by us from the process's [vdso] mapping (/proc/PID/mem)
  kPerfMap,      // no build-id: JIT code (anonymous executable memory) of a
                 // process whose perf map (/tmp/perf-PID.map) the capture
                 // holds; its symbols come from that map ("perf-map")
  kBpf,          // a BPF program's JITed function: no build-id, its tag (8
                 // bytes, a hash of its instructions) from the kernel's
                 // KSYMBOL name "bpf_prog_<tag>_<name>"
};
inline constexpr int kBuildIdSourceCount = 9;
const char* BuildIdSourceName(BuildIdSource source);

// Whether a location got a symbol name, and if not, why.
enum class SymbolStatus : uint8_t {
  kFound,      // a symbol of a file whose build-id is the mapping's
  kNoSymbol,   // such a file was found, but no symbol covers the offset
               // (stripped of .symtab, a PLT header, padding, data)
  kNoFile,     // no usable file with the mapping's build-id was found
  kNoBuildId,  // the mapping has no build-id: no file can be trusted
  kNoMapping,  // the address is in no known mapping
  kGuest,      // a guest's address (AddressOwner::kGuest)
  kHypervisor, // the hypervisor's (AddressOwner::kHypervisor)
  // JIT code (MappedObject::jit_pid): named by its process's perf map,
  kNoPerfMap,       // but the capture has no perf map of that process
  kNoPerfMapEntry,  // but no line of the map covers the address
  kPerfMapAmbiguous,  // but lines with different names cover the address
                      // (the JIT put new code there): which ran is not known
};
const char* SymbolStatusName(SymbolStatus status);

// Where the file a DSO's symbols were read from was found (see dso_store.h).
enum class SymbolSource : uint8_t {
  kNone,          // no file with the build-id: no symbols
  kBuildIdCache,  // <cache>/.build-id/xx/rest/{debug,elf,vdso}
  kDebugDir,      // /usr/lib/debug/.build-id/xx/rest.debug
  kRecordedPath,  // the path it was mapped under, whose build-id still matches
  kDebuginfod,    // a debuginfod server (DEBUGINFOD_URLS), during this report
  // A recorded path another user can write, for its own path's mappings
  // only (DsoStore::SymbolsFor()).
  kOwnPathOnly,
};
const char* SymbolSourceName(SymbolSource source);

// Whose addresses an object stands for.  A guest's samples (cpumode
// PERF_RECORD_MISC_GUEST_*) and the hypervisor's (_HYPERVISOR) carry
// addresses that mean nothing in the host's address spaces: they get an
// object of their own, never a host mapping or symbol.
enum class AddressOwner : uint8_t { kHost, kGuest, kHypervisor };

struct MappedObject {
  std::string path;
  BuildId build_id;
  BuildIdSource source = BuildIdSource::kNone;
  bool kernel = false;  // the kernel image or a module: offsets are addresses
  AddressOwner owner = AddressOwner::kHost;
  // A kernel module (path "[name]" or its .ko): offsets are relative to where
  // it was loaded.
  bool kernel_module = false;
  // The kernel image: the symbol perf's "[kernel.kallsyms]<symbol>" record
  // names ("_text") and its address in this capture, which relate the
  // capture's addresses to any kallsyms snapshot.  Empty if not recorded.
  std::string reloc_symbol;
  uint64_t reloc_address = 0;
  // Anonymous executable memory (or a memfd; IsJitMappingPath) of process
  // jit_pid, without a build-id: JIT code, named by that process's perf map
  // (perf_map.h) if the capture has one.  Offsets are addresses, as the map's
  // are.  -1 for everything else: a file-backed mapping is never named from
  // a perf map.
  int64_t jit_pid = -1;
  // Kernel code a PERF_RECORD_KSYMBOL named (a BPF program's function, a
  // trampoline): the record's name is its one symbol, over the record's
  // whole range; offsets are addresses.
  bool ksymbol = false;
  // The Profile's number for it (see Profile::InternObject): 1, 2, ... in the
  // order objects were interned, 0 for one that was not.  Its key in the
  // flat counts, which hold 32-bit numbers rather than pointers.
  uint32_t number = 0;
};

struct Mapping {
  uint64_t start = 0;
  uint64_t end = 0;    // exclusive
  uint64_t pgoff = 0;  // file offset of `start`
  std::shared_ptr<const MappedObject> object;

  // File offset of an address inside the mapping.
  uint64_t FileOffset(uint64_t addr) const { return addr - start + pgoff; }
};

// Where the build-ids of MMAP records came from when that is not visible in
// the record itself: a reader-filled MMAP2 build-id looks like a kernel one.
class SourceOverrides {
 public:
  void Add(uint32_t pid, uint64_t start, const BuildId& id, BuildIdSource source) {
    map_[{pid, start, id}] = source;
  }
  const BuildIdSource* Find(uint32_t pid, uint64_t start, const BuildId& id) const {
    auto it = map_.find({pid, start, id});
    return it == map_.end() ? nullptr : &it->second;
  }
  size_t size() const { return map_.size(); }
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const auto& [k, v] : map_) fn(std::get<0>(k), std::get<1>(k), std::get<2>(k), v);
  }

 private:
  std::map<std::tuple<uint32_t, uint64_t, BuildId>, BuildIdSource> map_;
};

class AddressSpace {
 public:
  AddressSpace() = default;
  // A copy (fork) has its own mappings; its lookup index is rebuilt.
  AddressSpace(const AddressSpace& other) : by_start_(other.by_start_) {}
  AddressSpace& operator=(const AddressSpace& other) {
    by_start_ = other.by_start_;
    index_.clear();
    index_valid_ = false;
    return *this;
  }

  // Adds `m`, trimming or removing mappings it overlaps.  Empty ranges are
  // ignored.
  void Insert(Mapping m);
  // Removes [start, end), trimming the mappings that reach into it.
  void Erase(uint64_t start, uint64_t end);
  // The mapping containing `addr`, or nullptr.  The pointer stays valid
  // until the next Insert.
  const Mapping* Find(uint64_t addr) const;
  size_t size() const { return by_start_.size(); }
  std::vector<Mapping> Mappings() const;

  // Find() runs once per sample and Insert() once per mapping: lookups use
  // a sorted array of the mappings' ranges (one binary search over
  // contiguous memory), rebuilt on the first lookup after a change.  Each
  // range carries what a sample needs of its mapping and of its object
  // (copied: an object never changes), so that counting a sample at an
  // address reads nothing else.
  struct Range {
    uint64_t start, end, pgoff;
    const MappedObject* object;
    const Mapping* mapping;
    // An address's offset in the object is the address plus this: 0 for
    // JIT code (its perf map names addresses), else pgoff - start (mod 2^64).
    uint64_t offset_bias;
    uint32_t number;  // object->number
    bool bpf;         // object->source == BuildIdSource::kBpf

    uint64_t Offset(uint64_t addr) const { return addr + offset_bias; }
  };
  // The index, valid until the next Insert or Erase.
  std::span<const Range> Ranges() const {
    if (!index_valid_) BuildIndex();
    return index_;
  }
  // The range of `ranges` (an index from Ranges()) holding `addr`, or null.
  // Inline (forced: GCC kept it out of line, a call a sample): it is on
  // every sample's path.
  [[gnu::always_inline]] static const Range* FindRange(std::span<const Range> ranges,
                                                       uint64_t addr) {
    if (ranges.empty()) return nullptr;
    // The last range starting at or before addr (mappings do not overlap),
    // by a binary search whose steps depend only on the size: a
    // conditional move each, no branch to mispredict when samples hit
    // mappings at random.
    const Range* base = ranges.data();
    size_t len = ranges.size();
    while (len > 1) {
      const size_t half = len / 2;
      base = base[half].start <= addr ? base + half : base;
      len -= half;
    }
    return base->start <= addr && addr < base->end ? base : nullptr;
  }

 private:
  void BuildIndex() const;

  std::map<uint64_t, Mapping> by_start_;
  mutable std::vector<Range> index_;
  mutable bool index_valid_ = false;
};

}  // namespace mmap3

#endif  // MMAP3_READER_ADDRESS_SPACE_H_
