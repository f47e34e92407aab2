// perf record's --control: commands to a running capture.
//
// Commands arrive on the control descriptor, one per line:
//   ping   answered with "ack\n" on the ack descriptor (if any);
//   stop   ends the capture as SIGINT would (acknowledged first).
// The capture reads nothing from it before it runs: the events are enabled,
// the processes that existed are read and the command (if any) has been
// started, so an acknowledged ping means "profiling now".  The buffers are
// drained before a command is taken: the ack also means that every record
// the kernel wrote before the command was sent has been read, and the
// build-ids of the mappings they name filled in (or found missing).
#ifndef MMAP3_READER_CONTROL_H_
#define MMAP3_READER_CONTROL_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "files.h"
#include "result.h"

namespace mmap3 {

// A parsed --control argument.
struct ControlSpec {
  bool fifo = false;      // paths (fifo:) or inherited descriptors (fd:)
  std::string ctl, ack;   // fifo: paths; ack may be empty
  int ctl_fd = -1, ack_fd = -1;  // fd: numbers; ack_fd may be -1
};
// Parses "fifo:CTL[,ACK]" or "fd:N[,M]"; the error says what is wrong.
Result<ControlSpec> ParseControlSpec(const std::string& text);

// The descriptors of one --control, and the commands read from them.
//
// Ownership: FIFOs (fifo:) are opened, owned and closed here.  Inherited
// descriptors (fd:) stay the caller's: they are used, marked close-on-exec
// (so the profiled command does not inherit them), and never closed here.
class ControlChannel {
 public:
  ControlChannel() = default;  // no --control: fd() is -1
  // Opens `text` as ParseControlSpec() reads it; "" gives no channel.
  static Result<ControlChannel> Open(const std::string& text);

  // The descriptor to read commands from, still owned as described above;
  // -1 if there is none.
  int fd() const { return ctl_; }
  // Takes bytes read from fd(); acknowledges known commands.  True: stop.
  bool OnInput(std::string_view bytes);
  // Lines that were no command we know.
  uint64_t unknown() const { return unknown_; }

 private:
  UniqueFd owned_ctl_, owned_ack_;  // fifo:
  int ctl_ = -1, ack_ = -1;         // in use: owned_* or inherited (fd:)
  std::string line_;                // a command not yet ended by a newline
  uint64_t unknown_ = 0;
};

}  // namespace mmap3

#endif  // MMAP3_READER_CONTROL_H_
