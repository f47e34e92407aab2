#include "child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

namespace mmap3 {

ChildProcess::~ChildProcess() {
  // A child still held reads EOF and exits without running anything.
  go_.Reset();
  err_.Reset();
  if (pid_ > 0 && status_ == -1) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

Status ChildProcess::Start(std::vector<std::string> argv) {
  argv_ = std::move(argv);
  int go[2], err[2];
  if (pipe2(go, O_CLOEXEC) != 0) return ErrnoStatus("pipe");
  UniqueFd go_read(go[0]), go_write(go[1]);
  if (pipe2(err, O_CLOEXEC) != 0) return ErrnoStatus("pipe");
  UniqueFd err_read(err[0]), err_write(err[1]);
  std::vector<char*> args;
  for (std::string& s : argv_) args.push_back(s.data());
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) return ErrnoStatus("fork");
  if (pid == 0) {
    // Child: wait until the parent has opened the events, then exec.  Only
    // async-signal-safe calls from here on (no destructors: _exit or exec).
    close(go[1]);
    close(err[0]);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    char c;
    ssize_t n;
    do {
      n = read(go[0], &c, 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1) _exit(127);  // parent gave up
    execvp(args[0], args.data());
    int e = errno;
    (void)!write(err[1], &e, sizeof(e));
    _exit(127);
  }
  pid_ = pid;
  go_ = std::move(go_write);
  err_ = std::move(err_read);
  return {};
}

Status ChildProcess::Release() {
  char c = 1;
  if (write(go_.get(), &c, 1) != 1) return ErrnoStatus("start command");
  go_.Reset();
  int e = 0;
  ssize_t n;
  do {
    n = read(err_.get(), &e, sizeof(e));
  } while (n < 0 && errno == EINTR);
  err_.Reset();
  if (n == static_cast<ssize_t>(sizeof(e))) {
    Reap(true);
    return Status::FromErrno(e, fmt::format("cannot run '{}'", argv_[0]));
  }
  return {};  // EOF: exec succeeded and closed the CLOEXEC pipe
}

void ChildProcess::Reap(bool block) {
  if (pid_ <= 0 || status_ != -1) return;
  int status;
  pid_t r = waitpid(pid_, &status, block ? 0 : WNOHANG);
  if (r == pid_) status_ = status;
}

void ChildProcess::Stop() {
  if (pid_ <= 0 || status_ != -1) return;
  kill(pid_, SIGINT);
  for (int i = 0; i < 200 && status_ == -1; ++i) {
    Reap(false);
    if (status_ == -1) usleep(10'000);
  }
  if (status_ == -1) {
    kill(pid_, SIGKILL);
    Reap(true);
  }
}

}  // namespace mmap3
