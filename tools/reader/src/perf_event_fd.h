// perf_event_open(2) plus the ring-buffer mmap, as a move-only owner.
//
// Contract: a PerfEventFd owns the descriptor and, after Map(), the mapping
// (1 control page + 2^n data pages).  ring() is valid while the object lives
// and only after a successful Map().  Events that share another event's
// buffer (SetOutput) have no mapping of their own.
#ifndef MMAP3_READER_PERF_EVENT_FD_H_
#define MMAP3_READER_PERF_EVENT_FD_H_

#include <linux/perf_event.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "result.h"
#include "ring_buffer.h"

namespace mmap3 {

class PerfEventFd {
 public:
  // pid/cpu as in perf_event_open(2); flags always include PERF_FLAG_FD_CLOEXEC.
  static Result<PerfEventFd> Open(const perf_event_attr& attr, pid_t pid, int cpu,
                                  int group_fd = -1);

  PerfEventFd(PerfEventFd&& other) noexcept;
  PerfEventFd& operator=(PerfEventFd&& other) noexcept;
  PerfEventFd(const PerfEventFd&) = delete;
  PerfEventFd& operator=(const PerfEventFd&) = delete;
  ~PerfEventFd();

  // Maps 1 + data_pages pages (data_pages must be a power of two).
  Status Map(size_t data_pages);
  // Sends this event's records into `target`'s buffer (same CPU required).
  Status SetOutput(const PerfEventFd& target);
  Status Enable();
  Status Disable();
  // The kernel-assigned event id (PERF_EVENT_IOC_ID).
  Result<uint64_t> Id() const;
  // read(2) with read_format ID|LOST: the number of lost samples (6.0+).
  Result<uint64_t> LostSamples() const;

  int fd() const { return fd_; }
  int cpu() const { return cpu_; }
  RingBuffer* ring() { return ring_ ? &*ring_ : nullptr; }
  const RingBuffer* ring() const { return ring_ ? &*ring_ : nullptr; }

 private:
  PerfEventFd(int fd, int cpu) : fd_(fd), cpu_(cpu) {}
  void Reset();

  int fd_ = -1;
  int cpu_ = -1;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::optional<RingBuffer> ring_;
};

}  // namespace mmap3

#endif  // MMAP3_READER_PERF_EVENT_FD_H_
