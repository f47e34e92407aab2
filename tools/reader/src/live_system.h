// What the enrichment stage reads of the running system: processes'
// mappings, threads and names, the files they map, and the clocks.
// ProcLiveSystem reads /proc; tests give a fake.
//
// Contract: a mapped file is opened through the mapping (map_files, or the
// vDSO image through /proc/PID/mem), never through its path, so what is
// opened is the very inode (or image) that is mapped.  Descriptors are
// returned owned (UniqueFd).
#ifndef MMAP3_READER_LIVE_SYSTEM_H_
#define MMAP3_READER_LIVE_SYSTEM_H_

#include <sys/types.h>
#include <time.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "files.h"
#include "perf_map.h"
#include "proc_maps.h"
#include "result.h"

namespace mmap3 {

class LiveSystem {
 public:
  virtual ~LiveSystem() = default;

  // The mappings of process `pid` (/proc/PID/maps).
  virtual Result<std::vector<ProcMapping>> Maps(pid_t pid) = 0;
  // Its threads (empty if it is gone), and a thread's command name.
  virtual std::vector<pid_t> Threads(pid_t pid) = 0;
  virtual std::string Comm(pid_t pid, pid_t tid) = 0;
  // The file mapped at `start` in process `pid` (the mapping [start, end)
  // as a record or /proc/PID/maps gave it).
  virtual Result<UniqueFd> OpenMapping(uint32_t pid, uint64_t start, uint64_t end) = 0;
  // A copy of the [vdso] image mapped at [start, end) in process `pid`.
  virtual Result<UniqueFd> OpenVdso(uint32_t pid, uint64_t start, uint64_t end) = 0;
  // A copy of this process's own [vdso] image: the kernel's, which no other
  // process can have written.
  virtual Result<UniqueFd> OpenOwnVdso() = 0;
  // The events' clock (CLOCK_MONOTONIC, ns), and the clock of file times.
  virtual uint64_t MonotonicNs() = 0;
  virtual timespec RealTime() = 0;
  // The real and effective uid of process `pid`; nullopt if it is gone.
  virtual std::optional<PerfMapOwner> ProcessOwner(pid_t pid) = 0;
  // Its JIT map, /tmp/perf-PID.map, read under ReadPerfMapAt()'s rules.
  virtual PerfMapRead ReadPerfMap(uint32_t pid, const std::optional<PerfMapOwner>& owner,
                                  const PerfMapStamp* unchanged_from) = 0;
};

class ProcLiveSystem final : public LiveSystem {
 public:
  Result<std::vector<ProcMapping>> Maps(pid_t pid) override;
  std::vector<pid_t> Threads(pid_t pid) override;
  std::string Comm(pid_t pid, pid_t tid) override;
  // A VMA split (mprotect of RELRO, say) or merged since the record is
  // found by `start`; a process whose main thread has exited while others
  // live on (a zombie leader) is read through a live thread.
  Result<UniqueFd> OpenMapping(uint32_t pid, uint64_t start, uint64_t end) override;
  Result<UniqueFd> OpenVdso(uint32_t pid, uint64_t start, uint64_t end) override;
  Result<UniqueFd> OpenOwnVdso() override;
  uint64_t MonotonicNs() override;
  timespec RealTime() override;
  std::optional<PerfMapOwner> ProcessOwner(pid_t pid) override;
  PerfMapRead ReadPerfMap(uint32_t pid, const std::optional<PerfMapOwner>& owner,
                          const PerfMapStamp* unchanged_from) override;

 private:
  UniqueFd tmp_;  // /tmp, opened at the first ReadPerfMap()
};

// True for a mapping name that is no file on disk: anonymous memory,
// "[heap]", "[vdso]" and the like, memfds, /dev/zero, anon inodes.
bool IsSpecialPath(std::string_view path);

}  // namespace mmap3

#endif  // MMAP3_READER_LIVE_SYSTEM_H_
