#include "script_output.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <set>
#include <tuple>

namespace mmap3 {
namespace {

std::string BuildIdText(const BuildId& id, BuildIdSource source) {
  if (id.empty()) return source == BuildIdSource::kPerfMap ? "[perf-map]" : "[no build-id]";
  if (source == BuildIdSource::kPerfHeader) return id.Hex() + "(unverified)";
  return id.Hex();
}

std::string Frame(const ScriptLocation& l) {
  std::string symbol = l.symbol;
  if (l.status == SymbolStatus::kFound) symbol += fmt::format("+{:#x}", l.symbol_offset);
  return fmt::format("{:>16x} {} ({}) {}", l.ip, symbol, l.path, BuildIdText(l.build_id, l.source));
}

// Why a file has no build-id, from what the capture could have had.
std::string NoBuildIdReason(const std::string& mode) {
  if (mode == "mmap3")
    return "none in its MMAP3 record: not ELF, no build-id note, or unreadable";
  if (mode == "perf.data")
    return "not in perf's build-id table (perf lists only files with samples), or the path "
           "held more than one file";
  return "none in its MMAP2 record and none read from /proc/PID/map_files";
}

}  // namespace

void WriteScript(const ReportModel& m, bool callchains, std::ostream& out) {
  for (const ScriptSample& s : m.script) {
    std::string head = fmt::format("{:>16} {:>7}/{:<7}", s.comm, s.pid, s.tid);
    if (s.cpu >= 0) head += fmt::format(" [{:03}]", s.cpu);
    head += fmt::format(" {:>5}.{:06}: {:>10}", s.time / 1000000000, s.time % 1000000000 / 1000,
                        s.period);
    // The event, as perf script prints it after the period.
    if (s.event < m.events.size() && !m.events[s.event].name.empty())
      head += fmt::format(" {}:", m.events[s.event].name);
    if (s.locations.empty()) {
      fmt::print(out, "{}\n", head);
      continue;
    }
    if (!callchains) {
      fmt::print(out, "{} {}\n", head, Frame(m.script_locations[s.locations[0]]));
      continue;
    }
    fmt::print(out, "{}\n", head);
    for (uint32_t l : s.locations) fmt::print(out, "\t{}\n", Frame(m.script_locations[l]));
    fmt::print(out, "\n");
  }
}

void WriteBuildIdList(const ReportModel& m, std::ostream& out) {
  std::set<std::tuple<std::string, BuildId, BuildIdSource>> seen;
  // The kernel's (pid -1) first, as perf lists them.
  for (int kernel = 1; kernel >= 0; --kernel) {
    for (const ReportMapping& mp : m.mappings) {
      if ((mp.pid == -1) != (kernel == 1)) continue;
      // Files, the kernel and its modules, and what has an id ([vdso]); not
      // anonymous memory, [heap], [stack].
      const bool file = mp.path.starts_with('/') && !mp.path.starts_with("//");
      if (!kernel && !file && mp.build_id.empty()) continue;
      if (!seen.emplace(mp.path, mp.build_id, mp.source).second) continue;
      if (mp.build_id.empty()) {
        fmt::print(out, "[no build-id] {} ({})\n", mp.path, NoBuildIdReason(m.mode));
      } else if (mp.source == BuildIdSource::kPerfHeader) {
        fmt::print(out, "{} {} (unverified: perf's build-id table, by path)\n", mp.build_id.Hex(),
                   mp.path);
      } else {
        fmt::print(out, "{} {}\n", mp.build_id.Hex(), mp.path);
      }
    }
  }
}

}  // namespace mmap3
