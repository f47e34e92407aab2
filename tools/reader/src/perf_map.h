// JIT code's symbols: perf's map files, /tmp/perf-PID.map.
//
// A JIT (a JVM with an agent, node --perf-basic-prof, LuaJIT, CPython 3.12
// with -X perf) writes one line per piece of generated code,
// "START SIZE name", START and SIZE in hex, and appends as it compiles.
// The code lives in anonymous executable memory, which has no file and no
// build-id: the map is the only thing that names it, and it is usually gone
// when the report runs (the JIT deletes it at exit, /tmp is cleaned).  So
// `record` reads the map of each process that has JIT-able mappings while
// that process lives and keeps it in the capture (the reader's metadata
// section, which perf skips and `inject` copies).
//
// Reading: `record` usually runs as root, and /tmp is writable by every
// user.  A map is read only if it is a regular file reached without
// following a symlink (O_PATH|O_NOFOLLOW, then fstat of that very inode),
// owned by the process's real or effective uid or by root, with one link
// (not a hard link to another file), not writable by others, last written
// after the process started (when its start is known), and at most
// kPerfMapMaxBytes long.  Anything else is refused with the reason, never
// read; the report says so.
//
// Contract: ParsePerfMap() takes any bytes: a malformed line is skipped and
// counted, never fatal.  Names are kept printable (see PrintableUtf8).  A
// PerfMap answers for an address covered by lines of one name only: a JIT
// that frees code and reuses the memory appends the new code's line after
// the old one, and the map, which has no times, cannot tell which of the
// two a sample there ran.  Such an address has no name (SeveralNames()).
#ifndef MMAP3_READER_PERF_MAP_H_
#define MMAP3_READER_PERF_MAP_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace mmap3 {

inline constexpr uint64_t kPerfMapMaxBytes = uint64_t{64} << 20;    // one file
inline constexpr uint64_t kPerfMapsMaxBytes = uint64_t{256} << 20;  // one capture

// True for the mappings a perf map may name: anonymous memory ("//anon" in
// the kernel's records, no name in /proc/PID/maps, "[anon:NAME]" named by
// prctl) and memfds ("/memfd:NAME (deleted)").  Never a file on disk, nor
// [heap], [stack], [vdso] and the like.
bool IsJitMappingPath(std::string_view path);

// "perf-PID.map", the name perf gives it in /tmp.
std::string PerfMapFileName(uint32_t pid);

struct PerfMapEntry {
  uint64_t start = 0;
  uint64_t size = 0;  // > 0, and start + size does not wrap
  std::string name;   // printable (PrintableUtf8)
};

struct PerfMapText {
  std::vector<PerfMapEntry> entries;  // in file order
  uint64_t skipped_lines = 0;         // not "START SIZE name": counted, left out
  // The file ended inside a line (the JIT was writing it): left out, since
  // its name may be cut short.
  bool incomplete_last_line = false;
};

// Lines "START SIZE name": START and SIZE hexadecimal (1 to 16 digits, an
// optional 0x), separated by spaces or tabs; the name is the rest of the
// line (it may hold spaces), without trailing blanks or '\r'.  Empty lines
// are ignored; any other line that is not of this form, or whose SIZE is 0
// or whose range wraps, is skipped and counted.
PerfMapText ParsePerfMap(std::string_view text);

// When record took a process's map.
enum class PerfMapTaken : uint8_t {
  kRunning,  // while the process ran (its file was gone by the exit or the end)
  kExit,     // when the process exited (PERF_RECORD_EXIT of its main thread)
  kEnd,      // at the end of the capture, the process still running
};
const char* PerfMapTakenName(PerfMapTaken taken);
std::optional<PerfMapTaken> PerfMapTakenFromName(std::string_view name);

// One process's map as the capture holds it.
class PerfMap {
 public:
  PerfMap() = default;
  PerfMap(PerfMapText text, PerfMapTaken taken, uint64_t bytes);

  // The entry covering `address` (the file's last one that does), or null,
  // also when lines with different names cover it (SeveralNames).  The
  // pointer is valid as long as the PerfMap.
  const PerfMapEntry* Find(uint64_t address) const;
  // True if lines with different names cover `address`.
  bool SeveralNames(uint64_t address) const;

  const std::vector<PerfMapEntry>& entries() const { return entries_; }
  uint64_t skipped_lines() const { return skipped_lines_; }
  bool incomplete_last_line() const { return incomplete_; }
  PerfMapTaken taken() const { return taken_; }
  void set_taken(PerfMapTaken taken) { taken_ = taken; }
  uint64_t bytes() const { return bytes_; }  // the file's size when read

 private:
  std::vector<PerfMapEntry> entries_;
  // Non-overlapping ranges: start -> (end, index into entries_), later
  // entries cut out of earlier ones.
  std::map<uint64_t, std::pair<uint64_t, uint32_t>> index_;
  // Ranges covered by lines of two or more names: start -> end, disjoint.
  std::map<uint64_t, uint64_t> several_names_;
  uint64_t skipped_lines_ = 0;
  bool incomplete_ = false;
  PerfMapTaken taken_ = PerfMapTaken::kRunning;
  uint64_t bytes_ = 0;
};

struct PerfMapRefusal {
  uint32_t pid = 0;
  std::string reason;  // "/tmp/perf-12.map: a symbolic link, not a regular file"
};

// The maps of a capture, by process id, and the files it refused.
class PerfMaps {
 public:
  // The later snapshot of a process replaces the earlier.
  void Set(uint32_t pid, PerfMap map);
  const PerfMap* Find(uint32_t pid) const;
  PerfMap* FindMutable(uint32_t pid);
  // Drops the map of `pid`, if any: it names nothing.
  void Forget(uint32_t pid);
  // Once per (pid, reason).
  void Refuse(uint32_t pid, std::string reason);

  const std::map<uint32_t, PerfMap>& maps() const { return maps_; }
  const std::vector<PerfMapRefusal>& refusals() const { return refusals_; }
  uint64_t bytes() const { return bytes_; }  // of the maps held
  bool empty() const { return maps_.empty() && refusals_.empty(); }

  // The capture's metadata form: {"maps": [{"pid", "taken", "bytes",
  // "skipped_lines", "incomplete_last_line", "entries": [[start, size,
  // "name"], ...]}], "refused": [{"pid", "reason"}]}.  FromJson() checks
  // every field's type and skips (and counts in *bad) what is not right.
  nlohmann::json ToJson() const;
  static PerfMaps FromJson(const nlohmann::json& doc, uint64_t* bad);

 private:
  std::map<uint32_t, PerfMap> maps_;
  std::vector<PerfMapRefusal> refusals_;
  uint64_t bytes_ = 0;
};

// Who may have written a process's map besides root.
struct PerfMapOwner {
  uint32_t ruid = 0, euid = 0;
  // When the process started (CLOCK_REALTIME, seconds, rounded down), if
  // known: a map last written a second or more before is an earlier
  // process's with the same pid, and is refused.
  std::optional<int64_t> started_sec;
  // The same on the events' clock (CLOCK_MONOTONIC, ns), if known, to the
  // precision of a clock tick: a process started after its JIT mapping
  // was made is another process with the pid.
  std::optional<uint64_t> started_ns;
};

// What identifies a version of the file, to read it again only if it changed.
struct PerfMapStamp {
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_sec = 0, mtime_nsec = 0, ctime_sec = 0, ctime_nsec = 0;
  bool operator==(const PerfMapStamp&) const = default;
};

struct PerfMapRead {
  enum class Outcome : uint8_t {
    kRead,       // text holds the file
    kUnchanged,  // the file still has `unchanged_from`'s stamp: not read
    kMissing,    // no such file
    kRefused,    // not read, for `reason` (a symlink, another owner, ...)
    kFailed,     // could not be read: `reason`
  };
  Outcome outcome = Outcome::kMissing;
  std::string text;
  PerfMapStamp stamp;
  std::string reason;
};

// Reads `name` in directory `dir` (borrowed; `shown` names the file in
// reasons) under the rules above.  `owner` nullopt: the process's uids are
// not known, and an existing file is refused.  With `unchanged_from`, a
// file whose lstat() still shows that stamp is not opened (kUnchanged).
PerfMapRead ReadPerfMapAt(int dir, const std::string& name, const std::string& shown,
                          const std::optional<PerfMapOwner>& owner, uint64_t max_bytes,
                          const PerfMapStamp* unchanged_from);

}  // namespace mmap3

#endif  // MMAP3_READER_PERF_MAP_H_
