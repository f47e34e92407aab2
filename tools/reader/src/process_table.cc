#include "process_table.h"

#include <fmt/format.h>

namespace mmap3 {

ProcessTable::Process& ProcessTable::GetProcess(uint32_t pid) {
  auto [it, inserted] = processes_.try_emplace(pid);
  if (inserted) it->second.threads.insert(pid);
  return it->second;
}

void ProcessTable::OnFork(uint32_t pid, uint32_t ppid, uint32_t tid, uint32_t ptid) {
  // The child has its parent's name; a name left by an earlier task with
  // this tid is not its.
  if (auto parent_comm = comms_.find(ptid); parent_comm != comms_.end())
    comms_[tid] = parent_comm->second;
  else
    comms_.erase(tid);
  if (pid == ppid) {
    // A new thread: same process, same address space.
    GetProcess(pid).threads.insert(tid);
    return;
  }
  // A new process: the parent's address space, shared until either side
  // maps something (OnMmap copies it then), so a fork costs nothing however
  // many mappings there are, and a child that execs or exits never copies.
  // If the pid was reused and the old entry never saw its exit, the fork
  // replaces it.
  Process child;
  auto parent = processes_.find(ppid);
  if (parent != processes_.end()) child.space = parent->second.space;
  child.threads.insert(tid);
  processes_[pid] = std::move(child);
}

void ProcessTable::OnComm(uint32_t pid, uint32_t tid, std::string_view comm, bool exec) {
  Process& p = GetProcess(pid);
  comms_[tid] = std::string(comm);
  if (!exec) {
    p.threads.insert(tid);
    return;
  }
  // exec replaces the whole image, and de_thread() leaves one thread: the
  // exec'ing one, which takes the leader's pid before the kernel writes
  // this record.  The other threads (the old leader included) were killed
  // and have their EXIT records, but the exec'ing thread's old tid never
  // gets one: were it kept, the process would outlive its last EXIT.
  p.space = std::make_shared<AddressSpace>();
  p.threads.clear();
  p.threads.insert(pid);
  comms_[pid] = std::string(comm);
}

void ProcessTable::OnExit(uint32_t pid, uint32_t tid) {
  auto it = processes_.find(pid);
  if (it == processes_.end()) return;
  it->second.threads.erase(tid);
  if (it->second.threads.empty()) processes_.erase(it);
}

void ProcessTable::OnMmap(uint32_t pid, Mapping mapping) {
  if (pid == kKernelPid) {
    kernel_.Insert(std::move(mapping));
    return;
  }
  Process& p = GetProcess(pid);
  // Shared with a process forked from it or the one it was forked from:
  // this change is its own.
  if (p.space.use_count() > 1) p.space = std::make_shared<AddressSpace>(*p.space);
  p.space->Insert(std::move(mapping));
}

const Mapping* ProcessTable::FindUser(uint32_t pid, uint64_t addr) const {
  auto it = processes_.find(pid);
  if (it == processes_.end()) return nullptr;
  return it->second.space->Find(addr);
}

const AddressSpace* ProcessTable::Space(uint32_t pid) const {
  auto it = processes_.find(pid);
  return it == processes_.end() ? nullptr : it->second.space.get();
}

std::string ProcessTable::Comm(uint32_t pid, uint32_t tid) const {
  if (auto it = comms_.find(tid); it != comms_.end()) return it->second;
  if (auto it = comms_.find(pid); it != comms_.end()) return it->second;
  if (pid == 0 && tid == 0) return "swapper";
  return fmt::format(":{}", tid);
}

}  // namespace mmap3
