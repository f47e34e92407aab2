// Build-ids of what processes map, read by us where the kernel gave none:
// a file through its mapping (map_files), the vDSO from its image.
//
// Contract: the id is read from the inode that is mapped, never from the
// path.  A shared library mapped by many processes is parsed once per
// version: an id is reused only for a file that provably has not changed
// since it was read (InodeBuildIds).  Not thread-safe.
#ifndef MMAP3_READER_MAPPED_BUILD_IDS_H_
#define MMAP3_READER_MAPPED_BUILD_IDS_H_

#include <cstdint>
#include <string>

#include "build_id.h"
#include "inode_build_ids.h"
#include "live_system.h"

namespace mmap3 {

// The inode a record or /proc/PID/maps names: the kernel's s_dev split as
// perf and /proc show it, and the inode number.
struct FileIdentity {
  uint32_t maj = 0, min = 0;
  uint64_t ino = 0;
};

class MappedBuildIds {
 public:
  explicit MappedBuildIds(LiveSystem& system) : system_(system) {}

  // Build-id of the file mapped at [start, end) in `pid`; empty with
  // *error set if it cannot be read, empty with *error untouched if the
  // file has no note.  With `want`, the file found there must be that
  // inode: the mapping the record describes may have been replaced by
  // another at the same addresses before map_files was opened, and the
  // other file's id must not be given to it.  (A filesystem whose stat()
  // shows another device than its superblock's, such as btrfs
  // subvolumes, then gets no id: unknown, never wrong.)
  BuildId OfFile(uint32_t pid, uint64_t start, uint64_t end, const FileIdentity* want,
                 std::string* error);
  // Build-id of the [vdso] image at [start, end) in `pid`; empty, with
  // *error set, if the image cannot be read or (unlike a file) has no note.
  BuildId OfVdso(uint32_t pid, uint64_t start, uint64_t end, std::string* error);

 private:
  LiveSystem& system_;
  InodeBuildIds by_inode_;
};

}  // namespace mmap3

#endif  // MMAP3_READER_MAPPED_BUILD_IDS_H_
