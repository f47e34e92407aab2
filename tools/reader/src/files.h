// File descriptors, and opening files whose paths come from records,
// captures or the command line.
//
// Ownership: a descriptor that is handed on travels as a UniqueFd, which
// closes it when its owner is done; a plain `int fd` parameter is borrowed
// (the callee neither closes nor keeps it).
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
#include <string_view>

#include "result.h"

namespace mmap3 {

// An open file descriptor with one owner: move-only, closed by the
// destructor.  -1 is "none".
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(other.Release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  // The descriptor, still owned by this object (-1 if none).
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership: the caller must close the returned descriptor.
  [[nodiscard]] int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Closes the current descriptor (if any) and owns `fd` instead.
  void Reset(int fd = -1);
  // Closes now and reports close()'s error, which for a written file can be
  // the write error (NFS, quotas); `what` names the file.
  Status Close(const std::string& what);

 private:
  int fd_ = -1;
};

// Read-only, close-on-exec descriptor of a regular file.  Anything else is
// an error naming the path and what it is.
Result<UniqueFd> OpenRegularFile(const std::string& path);

// The same for `name` in directory `dir`, without following a symlink
// there (one is an error, as any other kind of file is); `shown` names the
// file in errors.
Result<UniqueFd> OpenRegularFileAt(int dir, const std::string& name, const std::string& shown);

// `name` as it may be printed: control bytes (a file name may hold any byte
// but '/' and NUL) written as \xNN, so that a message stays on one line and
// cannot drive the terminal.
std::string PrintableName(std::string_view name);

// `text` with every byte that is not part of a printable UTF-8 character
// written as \xNN: bytes of invalid or overlong sequences, surrogates,
// control characters (C0, DEL, C1) and U+FFFE/U+FFFF.  What is left is
// valid UTF-8 (JSON) and XML 1.0 character data (SVG), and cannot drive a
// terminal.
std::string PrintableUtf8(std::string_view text);

// Writes all `size` bytes at `offset` (pwrite, retried on EINTR and short
// writes); `path` names the file in the error.
Status WriteAll(int fd, const void* data, size_t size, uint64_t offset, const std::string& path);

// Writes all of `data` at the descriptor's position (write, retried on
// EINTR and short writes: pipes); `what` names it in the error.
Status WriteToFd(int fd, std::string_view data, const std::string& what);

// An output written where it is, opened for writing; or an invalid fd: the
// output is a new file that replaces what `path` names.  Written in place:
// a device or a FIFO (not followed through a symlink) that root or this
// user owns, and the reader's own descriptors named as /dev/stdout,
// /dev/stderr, /dev/fd/N or /proc/self/fd/N.  Replaced: nothing, a regular
// file, any other symlink (the link, not what it points at: a link planted
// in /tmp does not steer the output).  An error for a device or FIFO
// another user owns (another user would read the output, or hold the
// writer forever).
Result<UniqueFd> OpenOutputInPlace(const std::string& path);

// Whether a file is one only root or this process's user can write: owned
// by either, and not writable by its group or by others.  What the reader
// keeps or reports as another file's contents (the build-id cache, symbols
// for other processes' samples) comes only from such files.  The path's
// form stats what it names now; the fd's, what was opened.
bool IsTrustedFd(int fd);
bool IsTrustedFile(const std::string& path);

// Makes `path` hold exactly `data`.  Replaced (see OpenOutputInPlace()) by
// rename from a file written and synced beside it under a random name, so
// that the path never names a partial file and an existing one keeps its
// contents if anything fails.  Written in place, what OpenOutputInPlace()
// opens, unless it is a terminal: an error.
Status ReplaceFile(const std::string& path, std::string_view data);

// Everything from offset 0 to the end (pread, retried on EINTR); an error,
// naming `path`, if there is more than `max_bytes`.
Result<std::string> ReadAllFd(int fd, uint64_t max_bytes, const std::string& path);

// A word from getrandom().  If that fails (no such call, or interrupted),
// the pid, a per-process counter and the clock: different on every call of
// every running process, and not something an input can choose.  For
// temporary file names (with O_EXCL) and for hash keys.
uint64_t RandomWord();

// A fresh hidden name (no directory) for a file being written beside
// `path`: random, so that another user cannot take every name it could be
// beforehand.
std::string HiddenName(const std::string& path);

}  // namespace mmap3

#endif  // MMAP3_READER_FILES_H_
