#include "record_controls.h"

#include <algorithm>
#include <charconv>
#include <set>

#include <fmt/format.h>

namespace mmap3 {
namespace {

struct KnownEvent {
  const char* name;  // perf's
  const char* alias;  // or nullptr
  uint32_t type;
  uint64_t config;
};

// The generic events perf list shows as "Hardware event" and "Software
// event" that sample something (not dummy, bpf-output), with perf's names
// and aliases.
constexpr KnownEvent kEvents[] = {
    {"cycles", "cpu-cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
    {"instructions", nullptr, PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS},
    {"cache-references", nullptr, PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES},
    {"cache-misses", nullptr, PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES},
    {"branches", "branch-instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
    {"branch-misses", nullptr, PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES},
    {"bus-cycles", nullptr, PERF_TYPE_HARDWARE, PERF_COUNT_HW_BUS_CYCLES},
    {"stalled-cycles-frontend", "idle-cycles-frontend", PERF_TYPE_HARDWARE,
     PERF_COUNT_HW_STALLED_CYCLES_FRONTEND},
    {"stalled-cycles-backend", "idle-cycles-backend", PERF_TYPE_HARDWARE,
     PERF_COUNT_HW_STALLED_CYCLES_BACKEND},
    {"ref-cycles", nullptr, PERF_TYPE_HARDWARE, PERF_COUNT_HW_REF_CPU_CYCLES},
    {"cpu-clock", nullptr, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK},
    {"task-clock", nullptr, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK},
    {"page-faults", "faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS},
    {"context-switches", "cs", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES},
    {"cpu-migrations", "migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS},
    {"minor-faults", nullptr, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MIN},
    {"major-faults", nullptr, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MAJ},
    {"alignment-faults", nullptr, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_ALIGNMENT_FAULTS},
    {"emulation-faults", nullptr, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_EMULATION_FAULTS},
};

// A decimal number that is the whole of `text`; nullopt otherwise (no sign,
// no space, no hex).
std::optional<uint64_t> Decimal(std::string_view text) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

// "a,b" -> {"a", "b"}, keeping empty items (which are errors to the callers).
std::vector<std::string_view> Items(std::string_view text) {
  std::vector<std::string_view> items;
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    items.push_back(text.substr(pos, comma == std::string_view::npos ? std::string_view::npos
                                                                     : comma - pos));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return items;
}

// The shortest period the kernel's cpu-clock and task-clock timers fire
// at, in nanoseconds.
constexpr uint64_t kMinClockPeriod = 10000;

// Well above any kernel's NR_CPUS (8192 on x86_64 distributions).
constexpr uint64_t kMaxCpu = 1 << 20;

}  // namespace

EventSpec DefaultEvent() { return EventSpec{"cpu-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK}; }

std::string EventName(uint32_t type, uint64_t config) {
  for (const KnownEvent& e : kEvents)
    if (e.type == type && e.config == config) return e.name;
  return "";
}

std::optional<EventSpec> FindEvent(std::string_view name) {
  for (const KnownEvent& e : kEvents) {
    if (name == e.name || (e.alias != nullptr && name == e.alias))
      return EventSpec{e.name, e.type, e.config};
  }
  return std::nullopt;
}

std::string KnownEventNames() {
  std::string out;
  for (const KnownEvent& e : kEvents) {
    if (!out.empty()) out += ", ";
    out += e.name;
    if (e.alias != nullptr) out += fmt::format(" ({})", e.alias);
  }
  return out;
}

std::vector<EventSpec> ParseEventList(const std::vector<std::string>& args, std::string* error) {
  std::vector<EventSpec> events;
  for (const std::string& arg : args) {
    for (std::string_view item : Items(arg)) {
      if (item.empty()) {
        *error = fmt::format("-e '{}': an empty event name", arg);
        return {};
      }
      auto event = FindEvent(item);
      if (!event) {
        // perf's modifiers (cycles:u), raw events (r003c) and PMU events
        // (cpu/.../) are not taken: say which are.
        *error = fmt::format("unknown event '{}' (known: {})", item, KnownEventNames());
        return {};
      }
      if (std::find(events.begin(), events.end(), *event) != events.end()) {
        *error = fmt::format("event '{}' given twice", event->name);
        return {};
      }
      events.push_back(std::move(*event));
    }
  }
  return events;
}

std::vector<int> ParseCpuListStrict(std::string_view text, std::string* error) {
  std::set<int> cpus;
  for (std::string_view item : Items(text)) {
    const size_t dash = item.find('-');
    auto first = Decimal(item.substr(0, dash));
    auto last = dash == std::string_view::npos ? first : Decimal(item.substr(dash + 1));
    if (!first || !last) {
      *error = fmt::format("-C '{}': '{}' is not a CPU or a range of CPUs (a list like 0,2-3)",
                           text, item);
      return {};
    }
    if (*first > *last) {
      *error = fmt::format("-C '{}': the range '{}' ends before it starts", text, item);
      return {};
    }
    if (*last >= kMaxCpu) {
      *error = fmt::format("-C '{}': CPU {} is out of range", text, *last);
      return {};
    }
    for (uint64_t c = *first; c <= *last; ++c) cpus.insert(static_cast<int>(c));
  }
  return {cpus.begin(), cpus.end()};
}

std::vector<pid_t> ParseIdList(std::string_view text, const char* what, std::string* error) {
  std::vector<pid_t> ids;
  for (std::string_view item : Items(text)) {
    auto v = Decimal(item);
    // The kernel's PID_MAX_LIMIT is 4194304; anything up to 2^30 is left to
    // the kernel to say it has no such task.
    if (!v || *v == 0 || *v > 0x3fffffff) {
      *error = fmt::format("bad {} '{}'", what, item);
      return {};
    }
    const pid_t id = static_cast<pid_t>(*v);
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

std::optional<RecordTargets> CheckRecordArgs(const RecordArgs& a, std::string* error) {
  RecordTargets t;
  const bool pids = !a.pids.empty(), tids = !a.tids.empty(), cpus = !a.cpus.empty();
  // -a and -C are one target (system-wide), a command beside them only
  // bounds it.
  const int targets = ((a.all_cpus || cpus) ? 1 : 0) + (pids ? 1 : 0) + (tids ? 1 : 0) +
                      (a.has_command && !a.all_cpus && !cpus ? 1 : 0);
  if (targets == 0) {
    *error = "record needs one of -a, -C CPUS, -p PID, -t TID or -- COMMAND";
    return std::nullopt;
  }
  if (cpus && (pids || tids)) {
    *error = fmt::format("-C is system-wide on those CPUs (as -a); it cannot be combined with {} "
                         "(perf would ignore -C)", pids ? "-p" : "-t");
    return std::nullopt;
  }
  if (pids && tids) {
    *error = "-p and -t cannot be combined: -p PIDS profiles whole processes, -t TIDS only these threads";
    return std::nullopt;
  }
  if (targets != 1 || ((pids || tids) && a.has_command)) {
    if ((pids || tids) && a.has_command)
      *error = fmt::format("{} cannot be combined with a command", pids ? "-p" : "-t");
    else
      *error = "record needs exactly one of -a, -C CPUS, -p PID, -t TID or -- COMMAND";
    return std::nullopt;
  }
  if (a.frequency && a.period) {
    *error = "-F (samples per second) and -c (a sample every N events) exclude each other; give one";
    return std::nullopt;
  }
  if (a.period && *a.period == 0) {
    *error = "-c 0: the period must be at least 1";
    return std::nullopt;
  }
  if (a.frequency && *a.frequency == 0) {
    *error = "-F 0: the frequency must be at least 1 Hz";
    return std::nullopt;
  }
  if (a.all_cpus || cpus) {
    t.target = RecordTargets::Target::kSystemWide;
    if (cpus) {
      t.cpus = ParseCpuListStrict(a.cpus, error);
      if (t.cpus.empty()) return std::nullopt;
    }
  } else if (pids) {
    t.target = RecordTargets::Target::kPids;
    t.pids = ParseIdList(a.pids, "PID", error);
    if (t.pids.empty()) return std::nullopt;
  } else if (tids) {
    t.target = RecordTargets::Target::kThreads;
    t.tids = ParseIdList(a.tids, "TID", error);
    if (t.tids.empty()) return std::nullopt;
  } else {
    t.target = RecordTargets::Target::kCommand;
  }
  if (a.events.empty()) {
    t.events = {DefaultEvent()};
  } else {
    t.events = ParseEventList(a.events, error);
    if (t.events.empty()) return std::nullopt;
  }
  if (a.period && *a.period >= uint64_t{1} << 63) {
    // perf_event_open refuses a sample_period with the top bit set.
    *error = fmt::format("-c {}: the period must be below 2^63", *a.period);
    return std::nullopt;
  }
  if (a.period && *a.period < kMinClockPeriod) {
    // cpu-clock and task-clock sample from an hrtimer the kernel fires at
    // most every 10 us (perf_swevent_start_hrtimer), while their samples
    // say the period asked for: each would stand for less time than it did.
    for (const EventSpec& e : t.events) {
      if (e.type == PERF_TYPE_SOFTWARE &&
          (e.config == PERF_COUNT_SW_CPU_CLOCK || e.config == PERF_COUNT_SW_TASK_CLOCK)) {
        *error = fmt::format("-c {}: {}'s timer fires at most every {} ns, so each sample would "
                             "stand for at least {} ns, not {}: give -c {} or more",
                             *a.period, e.name, kMinClockPeriod, kMinClockPeriod, *a.period,
                             kMinClockPeriod);
        return std::nullopt;
      }
    }
  }
  if (a.period) t.period = *a.period;
  if (a.frequency) t.frequency = *a.frequency;
  return t;
}

}  // namespace mmap3
