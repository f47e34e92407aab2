#include "inode_build_ids.h"

namespace mmap3 {
namespace {

int64_t Ns(const timespec& t) { return t.tv_sec * 1'000'000'000ll + t.tv_nsec; }

}  // namespace

InodeBuildIds::Key InodeBuildIds::KeyOf(const struct stat& st) {
  return {st.st_dev, st.st_ino, st.st_size, Ns(st.st_mtim), Ns(st.st_ctim)};
}

std::optional<BuildId> InodeBuildIds::Find(const struct stat& st) const {
  auto it = ids_.find(KeyOf(st));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

bool InodeBuildIds::Store(const struct stat& before, const struct stat& after,
                          const timespec& read_start, const BuildId& id) {
  // ctime alone does not tell two versions apart: the kernel stamps files
  // from a coarse clock (one tick, 4 ms at HZ=250) truncated to the
  // filesystem's granularity, so a file rewritten in place within that
  // time keeps its ctime (and may keep its size and mtime).  But every
  // write after read_start gets a ctime of at least read_start - tick -
  // granularity > ctime when ctime is older than read_start by kSettleNs:
  // then the key changes with any change after we began reading, and what
  // we read is what the key stands for.  (A wall clock stepped back by
  // more than that could break this; nothing else can.)
  if (KeyOf(before) != KeyOf(after)) return false;  // changed while we read it
  if (Ns(before.st_ctim) > Ns(read_start) - kSettleNs) return false;
  ids_[KeyOf(before)] = id;
  return true;
}

}  // namespace mmap3
