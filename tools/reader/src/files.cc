#include "files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mmap3 {
namespace {

const char* KindOf(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    default: return "not a regular file";
  }
}

}  // namespace

Result<int> OpenRegularFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus("open " + path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    Status s = ErrnoStatus("stat " + path);
    close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return Status::Failure(path + ": " + KindOf(st.st_mode) + ", not a regular file");
  }
  // Back to blocking reads (no effect on regular files, but no surprises).
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace mmap3
