// What a capture puts in the build-id cache, in one place: the files its
// mappings name (by build-id), the kernel's kallsyms (by the kernel's
// build-id), and modules' symbols (by each module's build-id).
//
// Contract: with no cache every call does nothing.  Each call only queues
// work on the cache's workers (BuildIdCache::Add, AddContents): what is
// copied is opened here, through the mapping where it still exists, so the
// copy is of the mapped inode; the cache checks every copy's build-id.
#ifndef MMAP3_READER_CACHE_FEED_H_
#define MMAP3_READER_CACHE_FEED_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "build_id.h"
#include "build_id_cache.h"
#include "kallsyms.h"
#include "live_system.h"

namespace mmap3 {

class CacheFeed {
 public:
  CacheFeed(BuildIdCache* cache, LiveSystem& system) : cache_(cache), system_(system) {}

  // The file with build-id `id` mapped at [start, end) in `pid` as `path`
  // ("[vdso]": the image).  A mapping already gone is replaced by the file
  // at `path` only if that still has this build-id.
  void AddFile(uint32_t pid, uint64_t start, uint64_t end, const BuildId& id, std::string_view path,
            BuildIdCache::Priority priority = BuildIdCache::Priority::kLive);
  // A whole kallsyms snapshot `text` (parsed: `kallsyms`) of the kernel
  // `kernel_id`; a stored snapshot of the same image is kept.
  void AddKallsyms(const BuildId& kernel_id, std::shared_ptr<const Kallsyms> kallsyms,
                std::string text);
  // The symbols of module `name` ("[ext4]") whose build-id is `id`.
  void AddModuleSymbols(const BuildId& id, const std::string& name, const KernelModule& module);

 private:
  // Whether the image behind `fd` is byte for byte the reader's own
  // [vdso] (read once).
  bool IsOwnVdso(int fd);

  BuildIdCache* cache_;
  LiveSystem& system_;
  std::optional<std::string> own_vdso_;  // empty: none could be read
};

}  // namespace mmap3

#endif  // MMAP3_READER_CACHE_FEED_H_
