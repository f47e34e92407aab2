// Build-ids of files by their identity in stat(), so that a capture reading
// the map_files of many processes parses a shared library once per version
// instead of once per mapping.
//
// Contract: Find() returns an id only for a stat whose device, inode, size,
// mtime and ctime all equal those of a stat Store() accepted.  Store()
// accepts only when it can prove that any later change to the file gives
// another key: the file did not change while it was read (`before` equals
// `after`), and its ctime is older than `read_start` (CLOCK_REALTIME, taken
// before `before` and before the read) by more than kSettleNs.  Files
// changed more recently are read every time.  Not thread-safe.
#ifndef MMAP3_READER_INODE_BUILD_IDS_H_
#define MMAP3_READER_INODE_BUILD_IDS_H_

#include <sys/stat.h>
#include <time.h>

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>

#include "build_id.h"

namespace mmap3 {

class InodeBuildIds {
 public:
  // Larger than a timer tick (the coarse clock file times come from lags
  // by up to one) plus the coarsest timestamp granularity of a Linux
  // filesystem that a library is mapped from (1 s: ext3's small inodes,
  // 9p and FUSE servers that give seconds).
  static constexpr int64_t kSettleNs = 2'000'000'000;

  std::optional<BuildId> Find(const struct stat& st) const;
  // True if `id` was kept.
  bool Store(const struct stat& before, const struct stat& after, const timespec& read_start,
             const BuildId& id);
  size_t size() const { return ids_.size(); }

 private:
  // dev, ino, size, mtime ns, ctime ns
  using Key = std::tuple<uint64_t, uint64_t, int64_t, int64_t, int64_t>;
  static Key KeyOf(const struct stat& st);
  std::map<Key, BuildId> ids_;
};

}  // namespace mmap3

#endif  // MMAP3_READER_INODE_BUILD_IDS_H_
