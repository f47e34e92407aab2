#include "control.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

namespace mmap3 {

Result<ControlSpec> ParseControlSpec(const std::string& text) {
  ControlSpec spec;
  std::string_view rest = text;
  if (rest.starts_with("fifo:")) {
    spec.fifo = true;
  } else if (!rest.starts_with("fd:")) {
    return Status::Failure(fmt::format("--control '{}': expected fifo:CTL[,ACK] or fd:CTL[,ACK]",
                                       text));
  }
  rest.remove_prefix(spec.fifo ? 5 : 3);
  const size_t comma = rest.find(',');
  const std::string ctl(rest.substr(0, comma));
  const std::string ack(comma == std::string_view::npos ? "" : rest.substr(comma + 1));
  if (ctl.empty() || (comma != std::string_view::npos && ack.empty()))
    return Status::Failure(fmt::format("--control '{}': an empty name", text));
  if (spec.fifo) {
    spec.ctl = ctl;
    spec.ack = ack;
    return spec;
  }
  auto number = [&](const std::string& item, int* out) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || v < 0 || v > 1 << 20) return false;
    *out = static_cast<int>(v);
    return true;
  };
  if (!number(ctl, &spec.ctl_fd) || (!ack.empty() && !number(ack, &spec.ack_fd)))
    return Status::Failure(fmt::format("--control '{}': not a descriptor number", text));
  return spec;
}

namespace {

// Read-write: opening does not wait for a writer, and the last writer
// closing is not an end of file; a command may come from each of many
// `echo ping > CTL`.  Blocking: the read is io_uring's to wait on.
// Checked before it is opened too: opening a device runs its driver's
// open (a tape rewinds, a watchdog starts), whatever is read from it later.
Result<UniqueFd> OpenFifo(const std::string& path) {
  auto not_fifo = [&]() {
    return Status::Failure(fmt::format("--control: {} is not a FIFO (make one with mkfifo)", path));
  };
  struct stat before;
  if (stat(path.c_str(), &before) != 0) return ErrnoStatus("--control: stat " + path);
  if (!S_ISFIFO(before.st_mode)) return not_fifo();
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("--control: open " + path);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoStatus("--control: stat " + path);
  if (!S_ISFIFO(st.st_mode)) return not_fifo();
  return fd;
}

}  // namespace

Result<ControlChannel> ControlChannel::Open(const std::string& text) {
  ControlChannel c;
  if (text.empty()) return c;
  auto spec = ParseControlSpec(text);
  if (!spec.ok()) return spec.status();
  if (spec->fifo) {
    auto ctl = OpenFifo(spec->ctl);
    if (!ctl.ok()) return ctl.status();
    c.owned_ctl_ = std::move(*ctl);
    c.ctl_ = c.owned_ctl_.get();
    if (!spec->ack.empty()) {
      auto ack = OpenFifo(spec->ack);
      if (!ack.ok()) return ack.status();
      c.owned_ack_ = std::move(*ack);
      c.ack_ = c.owned_ack_.get();
      // Nobody reading acks must never stall the capture: a full FIFO
      // drops them instead.
      (void)fcntl(c.ack_, F_SETFL, fcntl(c.ack_, F_GETFL) | O_NONBLOCK);
    }
    return c;
  }
  for (int fd : {spec->ctl_fd, spec->ack_fd}) {
    if (fd < 0) continue;
    // Ours to use, not the profiled command's to inherit.
    const int flags = fcntl(fd, F_GETFD);
    if (flags < 0) return ErrnoStatus(fmt::format("--control: descriptor {}", fd));
    (void)fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
  c.ctl_ = spec->ctl_fd;
  c.ack_ = spec->ack_fd;
  return c;
}

bool ControlChannel::OnInput(std::string_view bytes) {
  bool stop = false;
  line_.append(bytes);
  size_t nl;
  while ((nl = line_.find('\n')) != std::string::npos) {
    std::string_view line(line_.data(), nl);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    // perf's answer to a command it carried out; nothing for others.
    const bool known = line == "ping" || line == "stop";
    if (line == "stop") stop = true;
    if (!known && !line.empty()) ++unknown_;
    if (known && ack_ >= 0) (void)!write(ack_, "ack\n", 4);
    line_.erase(0, nl + 1);
  }
  // A line never ended is not allowed to grow without bound.
  if (line_.size() > 4096) line_.clear();
  return stop;
}

}  // namespace mmap3
