// Opening files whose paths come from records, captures or the command line.
//
// A recorded path (or a map_files entry) can name a FIFO, a terminal or a
// device: opening one for reading may block forever or have side effects,
// and reading one is never what we want.  OpenRegularFile() looks at the
// file before opening it (O_PATH, then fstat) and opens only regular files.
// Needs /proc (the descriptor is reopened through /proc/self/fd).
#ifndef MMAP3_READER_FILES_H_
#define MMAP3_READER_FILES_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "result.h"

namespace mmap3 {

// Read-only, close-on-exec descriptor of a regular file; the caller owns it.
// Anything else is an error naming the path and what it is.
Result<int> OpenRegularFile(const std::string& path);

// Writes all `size` bytes at `offset` (pwrite, retried on EINTR and short
// writes); `path` names the file in the error.
Status WriteAll(int fd, const void* data, size_t size, uint64_t offset, const std::string& path);

}  // namespace mmap3

#endif  // MMAP3_READER_FILES_H_
