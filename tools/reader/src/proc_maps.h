// /proc access: mappings of running processes and their exact mapped files.
//
// Contract: build-ids are read from /proc/PID/map_files/<start>-<end>, which
// opens the very inode that is mapped (correct when the path was replaced,
// renamed or deleted), never from the path in /proc/PID/maps.  map_files
// needs CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE) over the target; without it
// the call fails with EPERM and the caller records "no build-id".
#ifndef MMAP3_READER_PROC_MAPS_H_
#define MMAP3_READER_PROC_MAPS_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "build_id.h"
#include "files.h"
#include "result.h"

namespace mmap3 {

struct ProcMapping {
  uint64_t start = 0, end = 0, pgoff = 0;
  bool readable = false, writable = false, executable = false, shared = false;
  uint32_t maj = 0, min = 0;
  uint64_t ino = 0;
  std::string path;  // may be empty, "[vdso]", or end in " (deleted)"
};

// Parses the text of /proc/PID/maps; malformed lines are skipped.
std::vector<ProcMapping> ParseProcMaps(std::string_view text);
Result<std::vector<ProcMapping>> ReadProcMaps(pid_t pid);

std::string MapFilesPath(pid_t pid, uint64_t start, uint64_t end);
// Opens the mapped file read-only (O_CLOEXEC).
Result<UniqueFd> OpenMappedFile(pid_t pid, uint64_t start, uint64_t end);
// Build-id of the mapped file (empty if it has no note).
Result<BuildId> ReadMappedBuildId(pid_t pid, uint64_t start, uint64_t end);

// A memfd holding the image mapped at [start, end) in `pid` (its [vdso]),
// read through /proc/PID/mem: the vDSO has no file.
Result<UniqueFd> ReadVdsoImage(pid_t pid, uint64_t start, uint64_t end);
// The same for this process's own [vdso].
Result<UniqueFd> OwnVdsoImage();

bool ProcessExists(pid_t pid);
// True if process pid exists but /proc/PID shows no mappings: a kernel
// thread, or a process whose main thread has exited while other threads
// live on (a zombie leader; /proc/TID of a live thread shows them).
bool HasNoMappings(pid_t pid);
// True if task tid is (still) a thread of process pid.
bool IsThreadOf(pid_t pid, pid_t tid);
// The process (thread group) a task belongs to, from /proc/TID/status: a
// thread id gives its process's pid.  nullopt if the task is gone.
std::optional<pid_t> ReadTgid(pid_t tid);
// The "Tgid:" field of a /proc/PID/status text.
std::optional<pid_t> ParseTgid(std::string_view status);
// The real and effective uids ("Uid:" field) of a /proc/PID/status text.
std::optional<std::pair<uint32_t, uint32_t>> ParseUids(std::string_view status);
// The same read from /proc/PID/status; nullopt if the process is gone.
std::optional<std::pair<uint32_t, uint32_t>> ReadUids(pid_t pid);
std::vector<pid_t> ListProcesses();
std::vector<pid_t> ListThreads(pid_t pid);
// Contents of /proc/PID/task/TID/comm without the newline ("" if gone).
std::string ReadComm(pid_t pid, pid_t tid);
// Reads a whole small file (procfs/sysfs).
Result<std::string> ReadSmallFile(const std::string& path);

}  // namespace mmap3

#endif  // MMAP3_READER_PROC_MAPS_H_
