#include "perf_event_fd.h"

#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

namespace mmap3 {

Result<PerfEventFd> PerfEventFd::Open(const perf_event_attr& attr, pid_t pid, int cpu,
                                      int group_fd) {
  long fd = syscall(SYS_perf_event_open, &attr, pid, cpu, group_fd, PERF_FLAG_FD_CLOEXEC);
  if (fd < 0) return ErrnoStatus(fmt::format("perf_event_open (pid {}, cpu {})", pid, cpu));
  return PerfEventFd(static_cast<int>(fd), cpu);
}

PerfEventFd::PerfEventFd(PerfEventFd&& o) noexcept
    : fd_(o.fd_), cpu_(o.cpu_), map_(o.map_), map_size_(o.map_size_), ring_(std::move(o.ring_)) {
  o.fd_ = -1;
  o.map_ = nullptr;
  o.ring_.reset();
}

PerfEventFd& PerfEventFd::operator=(PerfEventFd&& o) noexcept {
  if (this != &o) {
    Reset();
    fd_ = o.fd_;
    cpu_ = o.cpu_;
    map_ = o.map_;
    map_size_ = o.map_size_;
    ring_ = std::move(o.ring_);
    o.fd_ = -1;
    o.map_ = nullptr;
    o.ring_.reset();
  }
  return *this;
}

PerfEventFd::~PerfEventFd() { Reset(); }

void PerfEventFd::Reset() {
  ring_.reset();
  if (map_ != nullptr) munmap(map_, map_size_);
  if (fd_ >= 0) close(fd_);
  map_ = nullptr;
  fd_ = -1;
}

Status PerfEventFd::Map(size_t data_pages) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  map_size_ = (1 + data_pages) * page;
  // PROT_WRITE makes the buffer "overwrite = false": the kernel respects
  // data_tail and never overwrites records we have not consumed.
  void* p = mmap(nullptr, map_size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    map_size_ = 0;
    return ErrnoStatus(fmt::format("mmap perf ring buffer ({} pages, cpu {})", data_pages, cpu_));
  }
  map_ = p;
  ring_.emplace(map_, page, data_pages * page);
  return {};
}

Status PerfEventFd::SetOutput(const PerfEventFd& target) {
  if (ioctl(fd_, PERF_EVENT_IOC_SET_OUTPUT, target.fd_) != 0)
    return ErrnoStatus("PERF_EVENT_IOC_SET_OUTPUT");
  return {};
}

Status PerfEventFd::Enable() {
  if (ioctl(fd_, PERF_EVENT_IOC_ENABLE, 0) != 0) return ErrnoStatus("PERF_EVENT_IOC_ENABLE");
  return {};
}

Status PerfEventFd::Disable() {
  if (ioctl(fd_, PERF_EVENT_IOC_DISABLE, 0) != 0) return ErrnoStatus("PERF_EVENT_IOC_DISABLE");
  return {};
}

Result<uint64_t> PerfEventFd::Id() const {
  uint64_t id = 0;
  if (ioctl(fd_, PERF_EVENT_IOC_ID, &id) != 0) return ErrnoStatus("PERF_EVENT_IOC_ID");
  return id;
}

Result<uint64_t> PerfEventFd::LostSamples() const {
  // read_format = ID | LOST: {value, id, lost}
  uint64_t values[3] = {};
  ssize_t n = read(fd_, values, sizeof(values));
  if (n < 0) return ErrnoStatus("read perf event");
  if (n != static_cast<ssize_t>(sizeof(values))) return uint64_t{0};
  return values[2];
}

}  // namespace mmap3
