#include "mapped_build_ids.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "elf_file.h"
#include "proc_maps.h"

namespace mmap3 {

BuildId MappedBuildIds::OfVdso(uint32_t pid, uint64_t start, uint64_t end, std::string* error) {
  auto fd = system_.OpenVdso(pid, start, end);
  if (!fd.ok()) {
    *error = fd.status().ToString();
    return {};
  }
  auto id = ReadBuildIdFromFd(fd->get(), "[vdso]");
  if (!id.ok()) {
    *error = id.status().ToString();
    return {};
  }
  if (id->empty()) *error = "[vdso] image has no build-id note";
  return *id;
}

BuildId MappedBuildIds::OfFile(uint32_t pid, uint64_t start, uint64_t end,
                               const FileIdentity* want, std::string* error) {
  auto fd = system_.OpenMapping(pid, start, end);
  if (!fd.ok()) {
    *error = fd.status().ToString();
    return {};
  }
  // Reading the note adds about 70 us a file (libelf maps the file, then
  // the headers fault in) to the 40 us of opening the map_files entry and
  // fstat (measured on this project's 2-core host, libc, 20,000 times):
  // at the start of -a, with every process mapping the same libraries, the
  // memo saves most of that.  It serves an id only for a file that
  // provably has not changed since it was read (see InodeBuildIds).
  const timespec read_start = system_.RealTime();
  struct stat before, after;
  const bool have_stat = fstat(fd->get(), &before) == 0;
  if (want != nullptr) {
    if (!have_stat) {
      *error = MapFilesPath(static_cast<pid_t>(pid), start, end) + ": cannot stat it";
      return {};
    }
    if (major(before.st_dev) != want->maj || minor(before.st_dev) != want->min ||
        before.st_ino != want->ino) {
      *error = MapFilesPath(static_cast<pid_t>(pid), start, end) + " is inode " +
               std::to_string(major(before.st_dev)) + ":" + std::to_string(minor(before.st_dev)) +
               "/" + std::to_string(before.st_ino) + ", not the " + std::to_string(want->maj) +
               ":" + std::to_string(want->min) + "/" + std::to_string(want->ino) +
               " that was mapped there";
      return {};
    }
  }
  if (have_stat) {
    // A file written through a shared writable mapping keeps its times
    // (only the first store to a clean page stamps them), so a hit is
    // served only if the file's notes still say the same.
    if (auto cached = by_inode_.Find(before); cached && BuildIdStillIn(fd->get(), *cached))
      return *cached;
  }
  BuildId id;
  auto r = ReadBuildIdFromFd(fd->get(), MapFilesPath(static_cast<pid_t>(pid), start, end));
  if (r.ok()) {
    id = *r;
    if (have_stat && fstat(fd->get(), &after) == 0) by_inode_.Store(before, after, read_start, id);
  } else {
    *error = r.status().ToString();
  }
  return id;
}

}  // namespace mmap3
