#include "report.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <nlohmann/json.hpp>

namespace mmap3 {

std::string DsoLabel(const std::string& path, const BuildId& id, BuildIdSource source) {
  auto slash = path.rfind('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty()) base = "[unknown]";
  if (id.empty()) return base + " (no build-id)";
  if (source == BuildIdSource::kPerfHeader)
    return fmt::format("{} ({}, unverified)", base, id.ShortHex());
  return fmt::format("{} ({})", base, id.ShortHex());
}

std::vector<std::string> ReportNotes(const ReportModel& m) {
  std::vector<std::string> notes;
  notes.push_back(fmt::format(
      "mode: {}   samples: {}   lost records: {}   lost samples: {}{}   bad records: {}   "
      "late records: {}",
      m.mode, m.samples, m.lost_records, m.lost_samples,
      m.event_lost < 0 ? "" : fmt::format("   lost (per event): {}", m.event_lost),
      m.bad_records, m.late_records));
  if (m.late_records != 0) {
    notes.push_back(fmt::format(
        "late records: {} arrived after newer records had been attributed and were applied out "
        "of time order",
        m.late_records));
  }
  std::string sources;
  for (int i = 0; i < kBuildIdSourceCount; ++i) {
    if (m.mappings_by_source[i] == 0) continue;
    sources += fmt::format(" {}={}", BuildIdSourceName(static_cast<BuildIdSource>(i)),
                           m.mappings_by_source[i]);
  }
  notes.push_back(fmt::format("mappings by build-id source:{}", sources.empty() ? " (none)" : sources));
  if (m.mappings_by_source[static_cast<int>(BuildIdSource::kPerfHeader)] != 0) {
    notes.push_back(
        "perf_header_unverified: build-ids from perf's table, which perf read by path when "
        "recording ended: a file rewritten in place during the capture would have another; paths "
        "mapped from more than one file get none");
  }
  if (m.startup) {
    notes.push_back(fmt::format(
        "startup: mappings of {} processes read in {:.2f} s, {} records drained meanwhile{}",
        m.startup->processes, m.startup->seconds, m.startup->records_drained,
        m.startup->changed_during_read == 0
            ? ""
            : fmt::format(", {} changed while read (left to the kernel's records)",
                          m.startup->changed_during_read)));
  }
  {
    std::string fetched;
    for (const SymbolFile& f : m.symbol_files) {
      if (f.source != SymbolSource::kDebuginfod) continue;
      fetched += fmt::format("{}{}", fetched.empty() ? "" : ", ", DsoLabel(f.path, f.build_id));
    }
    if (!fetched.empty())
      notes.push_back("symbols from debuginfod (DEBUGINFOD_URLS): " + fetched);
  }
  if (!m.changed_kernel_modules.empty()) {
    std::string names;
    for (const std::string& path : m.changed_kernel_modules) names += " " + path;
    notes.push_back(fmt::format(
        "kernel modules with other code in their place by the end of the capture (a module or "
        "BPF loaded there; their samples are [unknown]):{}",
        names));
  }
  return notes;
}

void WriteTextReport(const ReportModel& m, std::ostream& out) {
  for (const std::string& note : ReportNotes(m)) fmt::print(out, "# {}\n", note);
  fmt::print(out, "#\n");
  size_t comm_w = 7, dso_w = 3;
  std::vector<std::string> dsos;
  dsos.reserve(m.rows.size());
  for (const ReportRow& r : m.rows) {
    dsos.push_back(DsoLabel(r.path, r.build_id, r.source));
    comm_w = std::max(comm_w, r.comm.size());
    dso_w = std::max(dso_w, dsos.back().size());
  }
  fmt::print(out, "# {:>8}  {:>8}  {:<{}}  {:<{}}  {}\n", "Overhead", "Samples", "Command", comm_w,
             "DSO", dso_w, "Symbol");
  for (size_t i = 0; i < m.rows.size(); ++i) {
    const ReportRow& r = m.rows[i];
    fmt::print(out, "  {:>7.2f}%  {:>8}  {:<{}}  {:<{}}  {}\n", r.percent, r.samples, r.comm,
               comm_w, dsos[i], dso_w, r.symbol);
  }
}

void WriteJsonReport(const ReportModel& m, std::ostream& out) {
  using nlohmann::json;
  json sources = json::object();
  for (int i = 0; i < kBuildIdSourceCount; ++i)
    sources[BuildIdSourceName(static_cast<BuildIdSource>(i))] = m.mappings_by_source[i];
  json mappings = json::array();
  for (const ReportMapping& mp : m.mappings) {
    mappings.push_back({{"pid", mp.pid},
                        {"start", fmt::format("{:#x}", mp.start)},
                        {"end", fmt::format("{:#x}", mp.end)},
                        {"pgoff", fmt::format("{:#x}", mp.pgoff)},
                        {"path", mp.path},
                        {"build_id", mp.build_id.Hex()},
                        {"source", BuildIdSourceName(mp.source)}});
  }
  json symbol_files = json::array();
  for (const SymbolFile& f : m.symbol_files) {
    symbol_files.push_back({{"build_id", f.build_id.Hex()},
                            {"path", f.path},
                            {"file", f.file},
                            {"source", SymbolSourceName(f.source)}});
  }
  json rows = json::array();
  for (const ReportRow& r : m.rows) {
    rows.push_back({{"samples", r.samples},
                    {"period", r.period},
                    {"percent", r.percent},
                    {"comm", r.comm},
                    {"path", r.path},
                    {"build_id", r.build_id.Hex()},
                    {"symbol", r.symbol},
                    {"symbol_status", SymbolStatusName(r.symbol_status)},
                    {"source", BuildIdSourceName(r.source)}});
  }
  json doc = {{"schema", "mmap3-reader-report/1"},
              {"capture",
               {{"mode", m.mode},
                {"samples", m.samples},
                {"period", m.period},
                {"lost_records", m.lost_records},
                {"lost_samples", m.lost_samples},
                {"event_lost", m.event_lost < 0 ? json(nullptr) : json(m.event_lost)},
                {"bad_records", m.bad_records},
                {"late_records", m.late_records},
                {"startup", m.startup ? json{{"processes", m.startup->processes},
                                             {"seconds", m.startup->seconds},
                                             {"records_drained", m.startup->records_drained},
                                             {"changed_during_read",
                                              m.startup->changed_during_read}}
                                      : json(nullptr)},
                {"kernel_modules_changed", m.changed_kernel_modules},
                {"mappings_by_source", sources},
                {"mappings", mappings},
                {"symbol_files", symbol_files}}},
              {"rows", rows}};
  // Replace invalid UTF-8 (file names are bytes) instead of throwing.
  out << doc.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
}

void WriteFoldedReport(const ReportModel& m, std::ostream& out) {
  for (const ReportStack& s : m.stacks) fmt::print(out, "{} {}\n", s.folded, s.samples);
}

}  // namespace mmap3
