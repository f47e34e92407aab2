// pid -> address space and tid -> command name, driven by task records.
//
// Contract (the kernel's task model as perf records expose it):
//  - FORK with pid == ppid creates a thread: it shares its process's address
//    space.  FORK with pid != ppid creates a process with a copy of the
//    parent's address space (later mappings in either do not affect the
//    other; the copy is made when one of them first maps something).  The
//    child inherits the parent thread's command name.
//  - COMM with the exec bit gives the process a fresh, empty address space
//    and one thread, tid == pid: an exec by another thread makes it the
//    leader (de_thread), and its old tid is gone without an EXIT record.
//  - EXIT of a thread forgets the thread; when the last known thread of a
//    process exits, the process (and its address space) is dropped.  The
//    thread's command name stays until a FORK or COMM reuses the tid: the
//    kernel writes EXIT before it tears the memory down, and samples of
//    that (kernel) work still belong to the command.
//  - pid 0 is the idle task: "swapper", as perf calls it.
//  - Unknown pids get an empty process on first use, so records from tasks
//    that predate the capture are still accounted.
// Kernel mappings (pid -1 in MMAP records) live in a separate kernel space.
#ifndef MMAP3_READER_PROCESS_TABLE_H_
#define MMAP3_READER_PROCESS_TABLE_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>

#include "address_space.h"
#include "keyed_hash.h"

namespace mmap3 {

inline constexpr uint32_t kKernelPid = 0xffffffffu;

class ProcessTable {
 public:
  void OnFork(uint32_t pid, uint32_t ppid, uint32_t tid, uint32_t ptid);
  void OnComm(uint32_t pid, uint32_t tid, std::string_view comm, bool exec);
  void OnExit(uint32_t pid, uint32_t tid);
  // pid == kKernelPid adds to the kernel space.
  void OnMmap(uint32_t pid, Mapping mapping);
  // Kernel code at [start, end) is gone (a KSYMBOL unregister).
  void EraseKernel(uint64_t start, uint64_t end) { kernel_.Erase(start, end); }

  // The mapping covering `addr` in `pid` (or the kernel space), or nullptr.
  const Mapping* FindUser(uint32_t pid, uint64_t addr) const;
  const Mapping* FindKernel(uint64_t addr) const { return kernel_.Find(addr); }
  // Command name of a thread, falling back to its process, then ":<tid>"
  // ("swapper" for the idle task).
  std::string Comm(uint32_t pid, uint32_t tid) const;

  bool HasProcess(uint32_t pid) const { return processes_.count(pid) != 0; }
  size_t process_count() const { return processes_.size(); }
  // nullptr if the process is unknown.
  const AddressSpace* Space(uint32_t pid) const;

 private:
  struct Process {
    // Shared by processes forked from one another until one of them maps
    // something (copy on write); its threads share it by sharing Process.
    std::shared_ptr<AddressSpace> space = std::make_shared<AddressSpace>();
    std::set<uint32_t> threads;
  };
  Process& GetProcess(uint32_t pid);

  KeyedMap<uint32_t, Process> processes_;
  KeyedMap<uint32_t, std::string> comms_;  // by tid
  AddressSpace kernel_;
};

}  // namespace mmap3

#endif  // MMAP3_READER_PROCESS_TABLE_H_
