#include "result.h"

#include <cerrno>
#include <cstring>

namespace mmap3 {

std::string Status::ToString() const {
  if (ok()) return "ok";
  if (errno_ == 0) return context_;
  return context_ + ": " + std::strerror(errno_);
}

Status ErrnoStatus(std::string context) { return Status::FromErrno(errno, std::move(context)); }

}  // namespace mmap3
