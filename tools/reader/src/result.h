// Error values for system calls and file access.
//
// Contract: functions that touch the system return Status or Result<T>; both
// are [[nodiscard]].  A failure carries the errno (0 when the failure is not a
// system-call error, e.g. a malformed file) and a context string naming what
// was attempted ("open /proc/12/maps").  Nothing here prints: main.cc turns a
// Status into a message and an exit code.
#ifndef MMAP3_READER_RESULT_H_
#define MMAP3_READER_RESULT_H_

#include <string>
#include <utility>
#include <variant>

namespace mmap3 {

class [[nodiscard]] Status {
 public:
  Status() = default;  // success

  // A failed system call; `error_number` is the errno it reported.
  static Status FromErrno(int error_number, std::string context) {
    Status s;
    s.failed_ = true;
    s.errno_ = error_number;
    s.context_ = std::move(context);
    return s;
  }
  // A failure that is not a system-call error (bad file contents, usage).
  static Status Failure(std::string message) { return FromErrno(0, std::move(message)); }

  bool ok() const { return !failed_; }
  int error_number() const { return errno_; }
  const std::string& context() const { return context_; }
  // "context: strerror(errno)" or just the context when errno is 0.
  std::string ToString() const;

 private:
  bool failed_ = false;
  int errno_ = 0;
  std::string context_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT; must be a failure

  bool ok() const { return v_.index() == 0; }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<1>(v_);
  }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

// Status from the current errno; for use right after a failed call.
Status ErrnoStatus(std::string context);

}  // namespace mmap3

#endif  // MMAP3_READER_RESULT_H_
