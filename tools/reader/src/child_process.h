// The command a capture profiles: forked before the events are opened (so
// they can follow its pid), held before exec until Release(), so that the
// profile starts with its first instruction.
//
// Contract: Start() once, then Release() once.  The descriptors that hold
// the child are owned here.  The destructor of a child that was never reaped
// kills it (SIGKILL) and reaps it.  Not thread-safe; SIGCHLD handling is the
// caller's (Reap() after one).
#ifndef MMAP3_READER_CHILD_PROCESS_H_
#define MMAP3_READER_CHILD_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "files.h"
#include "result.h"

namespace mmap3 {

class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  // Forks a child that waits, then execs `argv` (argv[0] looked up in PATH).
  Status Start(std::vector<std::string> argv);
  // Lets the child exec; an error (with the errno of execvp) if it could
  // not, after which the child has been reaped.
  Status Release();
  // waitpid(); with `block`, until the child has exited.
  void Reap(bool block);
  // Ends a child still running the way a terminal would (SIGINT), and for
  // good (SIGKILL) if it has not exited 2 s later; reaps it.
  void Stop();

  pid_t pid() const { return pid_; }            // -1 before Start()
  bool exited() const { return status_ != -1; }  // reaped
  int status() const { return status_; }         // as from waitpid, or -1

 private:
  std::vector<std::string> argv_;
  pid_t pid_ = -1;
  int status_ = -1;
  UniqueFd go_;   // write end: a byte releases the child into exec
  UniqueFd err_;  // read end: errno from a failed exec, EOF after exec
};

}  // namespace mmap3

#endif  // MMAP3_READER_CHILD_PROCESS_H_
