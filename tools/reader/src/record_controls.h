// What `record` samples and where, with perf record's names and meanings:
// -e EVENTS, -F HZ / -c PERIOD, -C CPUS, -t TIDS, -p PIDS, -a.  Values and
// their checks only; capture_events.cc opens what they describe, and main.cc
// turns an error here into one line and exit code 2.
#ifndef MMAP3_READER_RECORD_CONTROLS_H_
#define MMAP3_READER_RECORD_CONTROLS_H_

#include <linux/perf_event.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mmap3 {

// A sampling event: perf's generic hardware and software events.
struct EventSpec {
  std::string name;  // perf's name for it ("cycles", "page-faults"), whatever alias was given
  uint32_t type = PERF_TYPE_SOFTWARE;
  uint64_t config = PERF_COUNT_SW_CPU_CLOCK;
  bool operator==(const EventSpec& o) const { return type == o.type && config == o.config; }
};

// What record samples when no -e is given: cpu-clock, as it always did.
EventSpec DefaultEvent();

// perf's name for a generic event (evsel__hw_names, evsel__sw_names: what
// perf report prints for a file without event names), "" for others.
std::string EventName(uint32_t type, uint64_t config);

// The event a name given to -e means: the names perf list shows for the
// generic events and their aliases (cpu-cycles, branch-instructions,
// faults, cs, migrations).  nullopt for any other.
std::optional<EventSpec> FindEvent(std::string_view name);

// The names FindEvent() knows, perf's first, comma-separated: for messages.
std::string KnownEventNames();

// -e, each argument a comma-separated list (-e may be repeated): the events
// in the order given.  On an unknown or repeated event, an empty list and
// `error` says which.
std::vector<EventSpec> ParseEventList(const std::vector<std::string>& args, std::string* error);

// perf's CPU list: "0", "0,2-3" (ranges inclusive), as -C takes it.  Sorted,
// each CPU once.  On anything else (empty, a space, "3-1", "x"), an empty
// list and `error` says what.
std::vector<int> ParseCpuListStrict(std::string_view text, std::string* error);

// "12,34": positive ids, in the order given, each once.  `what` names them
// in the error ("PID", "TID").
std::vector<pid_t> ParseIdList(std::string_view text, const char* what, std::string* error);

// The target and sampling options as the command line gave them; empty or
// false where not given.
struct RecordArgs {
  bool all_cpus = false;           // -a
  std::string pids;                // -p
  std::string tids;                // -t
  std::string cpus;                // -C
  bool has_command = false;        // -- COMMAND
  std::vector<std::string> events; // -e, as given
  std::optional<uint64_t> frequency;  // -F
  std::optional<uint64_t> period;     // -c
};

struct RecordTargets {
  enum class Target { kSystemWide, kPids, kThreads, kCommand };
  Target target = Target::kCommand;
  std::vector<pid_t> pids;  // -p
  std::vector<pid_t> tids;  // -t
  std::vector<int> cpus;    // -C (system-wide on these CPUs); empty: every online CPU
  std::vector<EventSpec> events;  // never empty
  uint64_t frequency = 4000;  // when period is 0
  uint64_t period = 0;        // -c: a sample every `period` events
};

// Checks the combination as perf record would take it, except where perf
// would quietly drop an option (-C beside -p or -t: perf says "PID/TID
// switch overriding CPU" and ignores it): that is an error here.
//   -a, -p PIDS, -t TIDS, -C CPUS (system-wide on those CPUs, perf's -C
//   without -a), or -- COMMAND: exactly one target; -a or -C may bound the
//   capture with a command, -p and -t may not.  -F and -c exclude each
//   other.
// On a bad combination or value, nullopt and `error` says what.
std::optional<RecordTargets> CheckRecordArgs(const RecordArgs& args, std::string* error);

}  // namespace mmap3

#endif  // MMAP3_READER_RECORD_CONTROLS_H_
