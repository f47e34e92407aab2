#include "report.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <nlohmann/json.hpp>

#include "files.h"
#include "utf8.h"

namespace mmap3 {

std::string DsoLabel(const std::string& path, const BuildId& id, BuildIdSource source) {
  auto slash = path.rfind('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty()) base = "[unknown]";
  if (id.empty() && source == BuildIdSource::kPerfMap) return base + " (perf-map)";
  if (id.empty()) return base + " (no build-id)";
  if (source == BuildIdSource::kPerfHeader)
    return fmt::format("{} ({}, unverified)", base, id.ShortHex());
  return fmt::format("{} ({})", base, id.ShortHex());
}

std::vector<std::string> ReportNotes(const ReportModel& m) {
  std::vector<std::string> notes;
  notes.push_back(fmt::format(
      "mode: {}   samples: {}   lost records: {}   lost samples: {}{}   bad records: {}{}   "
      "late records: {}",
      m.mode, m.samples, m.lost_records, m.lost_samples,
      m.event_lost < 0 ? "" : fmt::format("   lost (per event): {}", m.event_lost),
      m.bad_records,
      m.bad_samples_of_no_event == 0
          ? ""
          : fmt::format(" ({} samples of an id no single event lists)",
                        m.bad_samples_of_no_event),
      m.late_records));
  if (m.events.size() > 1) {
    std::string list;
    for (const ReportEvent& e : m.events)
      list += fmt::format("{}{} ({} samples)", list.empty() ? "" : ", ", e.name, e.samples);
    notes.push_back(fmt::format("events: {}; each is reported on its own, its percentages of its "
                                "own samples' periods",
                                list));
  }
  // cpu-clock and task-clock fire from an hrtimer the kernel starts at
  // most every 10 us (perf_swevent_start_hrtimer), yet their samples carry
  // the fixed period asked for.
  constexpr uint64_t kMinClockPeriod = 10000;
  for (const ReportEvent& e : m.events) {
    const SampledEvent& s = e.sampled;
    if (s.unit == "nanoseconds" && s.fixed && s.period != 0 && s.period < kMinClockPeriod)
      notes.push_back(fmt::format(
          "{}: the kernel fires its timer at most every {} ns, so each sample stood for at least "
          "that; its event count and periods are up to {:.3g} times too small (percentages hold: "
          "every sample has the same period)",
          s.note, kMinClockPeriod, static_cast<double>(kMinClockPeriod) / static_cast<double>(s.period)));
  }
  if (!m.unsampled_events.empty()) {
    std::string list;
    for (const std::string& name : m.unsampled_events) list += (list.empty() ? "" : ", ") + name;
    notes.push_back(fmt::format("not sampled: {} (counted only, with no period or frequency of "
                                "their own, as perf record's :S makes a group's members; their "
                                "counts are not attributed here)",
                                list));
  }
  if (m.late_records != 0) {
    notes.push_back(fmt::format(
        "late records: {} arrived after newer records had been attributed and were applied out "
        "of time order",
        m.late_records));
  }
  if (m.stray_build_id_bits != 0) {
    notes.push_back(fmt::format(
        "{} MMAP2 records said \"build-id\" over bytes that are not one (a kernel without the "
        "MMAP3 series' first patch, beside another capture with build-ids): read as inode "
        "identity, with no build-id",
        m.stray_build_id_bits));
  }
  if (m.oversized_sideband != 0) {
    notes.push_back(fmt::format(
        "{} KSYMBOL/BPF_EVENT records were longer than their contents (the kernel grows them "
        "for each capture that follows BPF programs; perf reads their time and ids from the "
        "bytes after them): read by their contents, or cut to them as recorded",
        m.oversized_sideband));
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
  if (!m.perf_maps.empty()) {
    // Many JIT processes (-a) make a long line: the JSON has them all.
    constexpr size_t kShown = 8;
    std::string maps;
    for (size_t i = 0; i < m.perf_maps.size() && i < kShown; ++i) {
      const PerfMapSummary& p = m.perf_maps[i];
      const char* when = p.taken == PerfMapTaken::kExit  ? "at its exit"
                         : p.taken == PerfMapTaken::kEnd ? "at the end"
                                                         : "while it ran (gone by its exit)";
      std::string bad;
      if (p.skipped_lines != 0)
        bad += fmt::format(", {} malformed line{} skipped", p.skipped_lines,
                           p.skipped_lines == 1 ? "" : "s");
      if (p.incomplete_last_line) bad += ", an unfinished last line left out";
      maps += fmt::format("{}pid {} ({} entries, {}{})", i == 0 ? "" : "; ", p.pid, p.entries,
                          when, bad);
    }
    if (m.perf_maps.size() > kShown) maps += fmt::format("; and {} more", m.perf_maps.size() - kShown);
    notes.push_back("perf maps (JIT symbols from /tmp/perf-PID.map, taken by record): " + maps);
  }
  for (const ReportBpfProgram& p : m.bpf_programs) {
    if (p.samples == 0) continue;  // the JSON lists every program
    std::string lines;
    constexpr size_t kShown = 3;
    for (size_t i = 0; i < p.lines.size() && i < kShown; ++i)
      lines += fmt::format("{}{}:{} ({})", i == 0 ? "" : ", ", PrintableUtf8(p.lines[i].file),
                           p.lines[i].line, p.lines[i].samples);
    notes.push_back(fmt::format("BPF program {} {} (tag {}): {} samples{}", p.id,
                                PrintableUtf8(p.functions.empty() ? p.name : p.functions.front()),
                                p.tag, p.samples,
                                !p.has_lines    ? "; no source lines: " + p.lines_missing
                                : lines.empty() ? ""
                                                : "; hottest lines: " + lines));
  }
  if (!m.bpf_untracked.empty()) {
    notes.push_back("BPF programs not followed: " + m.bpf_untracked +
                    "; samples in BPF code are the kernel's, without a symbol");
  }
  if (m.bpf_samples_of_unknown_programs != 0) {
    notes.push_back(fmt::format(
        "BPF: {} samples in functions of no program the capture describes or says it could not "
        "(their load record is missing, or they are a subprogram of one not described): their "
        "rows have the kernel's name for the code, no program, no lines",
        m.bpf_samples_of_unknown_programs));
  }
  // Programs loaded and gone at once (libbpf's feature probes) are many
  // on a busy machine: one line for them, one each for those that ran.
  size_t quiet = 0;
  const ReportBpfNotRead* example = nullptr;
  for (const ReportBpfNotRead& n : m.bpf_not_read) {
    if (n.samples == 0) {
      ++quiet;
      if (example == nullptr) example = &n;
      continue;
    }
    notes.push_back(fmt::format("BPF program {} (tag {}): {} samples in its main function, not "
                                "described: {} (its rows keep the kernel's name for the code, "
                                "without lines)",
                                n.id, n.tag, n.samples, n.reason));
  }
  if (quiet != 0) {
    notes.push_back(fmt::format("BPF programs not described, without samples: {} ({}{})", quiet,
                                example->reason, quiet > 1 ? ", and others" : ""));
  }
  if (!m.perf_maps_refused.empty()) {
    constexpr size_t kShown = 4;
    std::string refused;
    for (size_t i = 0; i < m.perf_maps_refused.size() && i < kShown; ++i) {
      refused += fmt::format("{}pid {}: {}", i == 0 ? "" : "; ", m.perf_maps_refused[i].pid,
                             m.perf_maps_refused[i].reason);
    }
    if (m.perf_maps_refused.size() > kShown)
      refused += fmt::format("; and {} more", m.perf_maps_refused.size() - kShown);
    notes.push_back("perf maps refused (not read; their JIT code has no names): " + refused);
  }
  {
    std::string fetched;
    for (const SymbolFile& f : m.symbol_files) {
      if (f.source != SymbolSource::kDebuginfod) continue;
      fetched += fmt::format("{}{}", fetched.empty() ? "" : ", ", DsoLabel(f.path, f.build_id));
    }
    if (!fetched.empty())
      notes.push_back("symbols from debuginfod (DEBUGINFOD_URLS): " + fetched);
    std::string others;
    for (const SymbolFile& f : m.symbol_files) {
      if (f.source != SymbolSource::kOwnPathOnly) continue;
      others += fmt::format("{}{}", others.empty() ? "" : ", ", DsoLabel(f.path, f.build_id));
    }
    if (!others.empty())
      notes.push_back("symbols from files another user can write, for their own paths only: " +
                      others);
  }
  if (!m.changed_kernel_modules.empty()) {
    std::string names;
    for (const std::string& path : m.changed_kernel_modules) names += " " + path;
    notes.push_back(fmt::format(
        "kernel modules with other code in their place by the end of the capture (a module or "
        "BPF loaded there; their samples are [unknown]):{}",
        names));
  }
  const ReportControls& c = m.controls;
  if (c.Filters()) {
    if (m.matched_samples == 0) {
      notes.push_back(fmt::format("no samples match {} (of {} samples)", c.FilterText(), m.samples));
    } else {
      notes.push_back(fmt::format(
          "filters {}: {} of {} samples match; percentages are of {} (perf's --percentage {})",
          c.FilterText(), m.matched_samples, m.samples,
          c.relative ? "the matching samples" : "all samples", c.relative ? "relative" : "absolute"));
    }
  }
  if (c.children) {
    notes.push_back(
        "children: a row's Children is the share of the samples with its key anywhere in their "
        "call chain, each sample once; Self, the samples on it");
  }
  if (c.percent_limit > 0) {
    notes.push_back(fmt::format("percent limit {}%: {} rows below it not shown", c.percent_limit,
                                m.rows_below_limit));
  }
  return notes;
}

namespace {

// The table of the rows [begin, end), all of one event.
void WriteTextTable(const ReportModel& m, size_t begin, size_t end, std::ostream& out) {
  // The columns of --sort, in its order; the last one is not padded.
  struct Column {
    std::string title;
    std::vector<std::string> cells;
    size_t width = 0;
  };
  std::vector<Column> columns;
  for (SortKey key : m.controls.sort) {
    Column col;
    switch (key) {
      case SortKey::kComm: col.title = "Command"; break;
      case SortKey::kPid: col.title = "Pid"; break;
      case SortKey::kTid: col.title = "Tid"; break;
      case SortKey::kDso: col.title = "DSO"; break;
      case SortKey::kSym: col.title = "Symbol"; break;
      case SortKey::kBuildId: col.title = "Build-id"; break;
    }
    col.width = col.title.size();
    for (size_t i = begin; i < end; ++i) {
      const ReportRow& r = m.rows[i];
      std::string cell;
      switch (key) {
        case SortKey::kComm: cell = r.comm; break;
        case SortKey::kPid: cell = std::to_string(r.pid); break;
        case SortKey::kTid: cell = std::to_string(r.tid); break;
        case SortKey::kDso: cell = DsoLabel(r.path, r.build_id, r.source); break;
        case SortKey::kSym: cell = r.symbol; break;
        case SortKey::kBuildId:
          cell = r.path == "[unknown]" ? r.path
                 : r.build_id.empty()  ? "(no build-id)"
                                       : r.build_id.Hex();
          break;
      }
      col.width = std::max(col.width, cell.size());
      col.cells.push_back(std::move(cell));
    }
    columns.push_back(std::move(col));
  }
  const bool children = m.controls.children;
  std::string header = children ? fmt::format("{:>8}  {:>8}", "Children", "Self")
                                 : fmt::format("{:>8}", "Overhead");
  header += fmt::format("  {:>8}", "Samples");
  for (size_t c = 0; c < columns.size(); ++c) {
    header += c + 1 < columns.size()
                  ? fmt::format("  {:<{}}", columns[c].title, columns[c].width)
                  : "  " + columns[c].title;
  }
  fmt::print(out, "# {}\n", header);
  for (size_t i = begin; i < end; ++i) {
    const ReportRow& r = m.rows[i];
    std::string line = children ? fmt::format("{:>7.2f}%  {:>7.2f}%", r.children_percent, r.percent)
                                : fmt::format("{:>7.2f}%", r.percent);
    line += fmt::format("  {:>8}", r.samples);
    for (size_t c = 0; c < columns.size(); ++c) {
      line += c + 1 < columns.size()
                  ? fmt::format("  {:<{}}", columns[c].cells[i - begin], columns[c].width)
                  : "  " + columns[c].cells[i - begin];
    }
    fmt::print(out, "  {}\n", line);
  }
}

}  // namespace

void WriteTextReport(const ReportModel& m, std::ostream& out) {
  for (const std::string& note : ReportNotes(m)) fmt::print(out, "# {}\n", note);
  fmt::print(out, "#\n");
  if (m.events.size() <= 1) {
    WriteTextTable(m, 0, m.rows.size(), out);
    return;
  }
  // A section per event, as perf report prints one.
  size_t begin = 0;
  for (uint32_t e = 0; e < m.events.size(); ++e) {
    size_t end = begin;
    while (end < m.rows.size() && m.rows[end].event == e) ++end;
    const ReportEvent& event = m.events[e];
    fmt::print(out, "{}# Samples: {} of event '{}'\n", e == 0 ? "" : "\n", event.samples, event.name);
    fmt::print(out, "# Event count: {}{}\n", event.period,
               event.sampled.unit == "count" ? "" : " " + event.sampled.unit);
    if (m.controls.Filters())
      fmt::print(out, "# Matching the filters: {} samples, event count {}\n", event.matched_samples,
                 event.matched_period);
    if (m.controls.percent_limit > 0)
      fmt::print(out, "# Below the percent limit: {} rows\n", event.rows_below_limit);
    fmt::print(out, "#\n");
    WriteTextTable(m, begin, end, out);
    begin = end;
  }
}

// File names, comms and symbols are bytes; JSON strings are UTF-8.  Each
// string that is not is escaped (EscapeNonUtf8: \xNN, \\), never replaced
// with U+FFFD, which would show two paths that differ as one.
static void EscapeNonUtf8Strings(nlohmann::json& j) {
  if (j.is_string()) {
    std::string& s = j.get_ref<std::string&>();
    s = EscapeNonUtf8(s);
  } else if (j.is_structured()) {
    for (nlohmann::json& v : j) EscapeNonUtf8Strings(v);
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
  json bpf_programs = json::array();
  for (const ReportBpfProgram& p : m.bpf_programs) {
    json lines = json::array();
    for (const ReportBpfLine& l : p.lines)
      lines.push_back({{"file", l.file}, {"line", l.line}, {"samples", l.samples}});
    bpf_programs.push_back({{"id", p.id}, {"tag", p.tag}, {"name", p.name},
                            {"functions", p.functions}, {"samples", p.samples},
                            {"has_lines", p.has_lines}, {"lines_missing", p.lines_missing},
                            {"lines", lines}});
  }
  json bpf_not_read = json::array();
  for (const ReportBpfNotRead& n : m.bpf_not_read)
    bpf_not_read.push_back({{"id", n.id}, {"tag", n.tag}, {"reason", n.reason}, {"samples", n.samples}});
  json symbol_files = json::array();
  for (const SymbolFile& f : m.symbol_files) {
    symbol_files.push_back({{"build_id", f.build_id.Hex()},
                            {"path", f.path},
                            {"file", f.file},
                            {"source", SymbolSourceName(f.source)}});
  }
  json perf_maps = json::array();
  for (const PerfMapSummary& p : m.perf_maps) {
    perf_maps.push_back({{"pid", p.pid},
                         {"taken", PerfMapTakenName(p.taken)},
                         {"entries", p.entries},
                         {"bytes", p.bytes},
                         {"skipped_lines", p.skipped_lines},
                         {"incomplete_last_line", p.incomplete_last_line}});
  }
  json perf_maps_refused = json::array();
  for (const PerfMapRefusal& r : m.perf_maps_refused)
    perf_maps_refused.push_back({{"pid", r.pid}, {"reason", r.reason}});
  const ReportControls& c = m.controls;
  const bool by_file = c.Has(SortKey::kDso) || c.Has(SortKey::kBuildId);
  std::vector<json> rows_of(std::max<size_t>(m.events.size(), 1), json::array());
  for (const ReportRow& r : m.rows) {
    json& rows = rows_of[std::min<size_t>(r.event, rows_of.size() - 1)];
    // Only the fields of the --sort keys (all of them by default).
    json row = {{"samples", r.samples}, {"period", r.period}, {"percent", r.percent}};
    if (c.children) {
      row["children_period"] = r.children_period;
      row["children_percent"] = r.children_percent;
    }
    if (c.Has(SortKey::kComm)) row["comm"] = r.comm;
    if (c.Has(SortKey::kPid)) row["pid"] = r.pid;
    if (c.Has(SortKey::kTid)) row["tid"] = r.tid;
    if (c.Has(SortKey::kDso) || r.path == "[unknown]") row["path"] = r.path;
    if (by_file) row["build_id"] = r.build_id.Hex();
    if (c.Has(SortKey::kSym)) {
      row["symbol"] = r.symbol;
      row["symbol_status"] = SymbolStatusName(r.symbol_status);
    }
    if (by_file) row["source"] = BuildIdSourceName(r.source);
    rows.push_back(std::move(row));
  }
  json sort = json::array();
  for (SortKey key : c.sort) sort.push_back(SortKeyName(key));
  json controls = {{"sort", sort},
                   {"comms", c.comms},
                   {"dsos", c.dsos},
                   {"symbols", c.symbols},
                   {"percentage", c.relative ? "relative" : "absolute"},
                   {"matched_samples", m.matched_samples},
                   {"matched_period", m.matched_period},
                   {"children", c.children},
                   {"percent_limit", c.percent_limit},
                   {"rows_below_limit", m.rows_below_limit}};

  json events = json::array();
  for (size_t e = 0; e < m.events.size(); ++e) {
    const ReportEvent& ev = m.events[e];
    events.push_back({{"name", ev.name},
                      {"unit", ev.sampled.unit},
                      {"samples", ev.samples},
                      {"period", ev.period},
                      {"matched_samples", ev.matched_samples},
                      {"matched_period", ev.matched_period},
                      {"rows_below_limit", ev.rows_below_limit},
                      {"rows", rows_of[e]}});
  }
  json doc = {{"schema", "mmap3-reader-report/1"},
              {"capture",
               {{"mode", m.mode},
                {"samples", m.samples},
                {"period", m.period},
                {"unsampled_events", m.unsampled_events},
                {"lost_records", m.lost_records},
                {"lost_samples", m.lost_samples},
                {"event_lost", m.event_lost < 0 ? json(nullptr) : json(m.event_lost)},
                {"bad_records", m.bad_records},
                {"bad_samples_of_no_event", m.bad_samples_of_no_event},
                {"late_records", m.late_records},
                {"stray_build_id_bits", m.stray_build_id_bits},
                {"oversized_sideband", m.oversized_sideband},
                {"startup", m.startup ? json{{"processes", m.startup->processes},
                                             {"seconds", m.startup->seconds},
                                             {"records_drained", m.startup->records_drained},
                                             {"changed_during_read",
                                              m.startup->changed_during_read}}
                                      : json(nullptr)},
                {"kernel_modules_changed", m.changed_kernel_modules},
                {"mappings_by_source", sources},
                {"mappings", mappings},
                {"perf_maps", perf_maps},
                {"perf_maps_refused", perf_maps_refused},
                {"bpf_programs", bpf_programs},
                {"bpf_not_read", bpf_not_read},
                {"bpf_samples_of_unknown_programs", m.bpf_samples_of_unknown_programs},
                {"bpf_untracked", m.bpf_untracked},
                {"symbol_files", symbol_files}}},
              {"controls", controls},
              {"events", events}};
  // One event: its rows at the top level too, where they always were.
  // Several: only in their events, so that no one adds up rows whose
  // periods count different things.
  if (m.events.size() <= 1) doc["rows"] = rows_of[0];
  EscapeNonUtf8Strings(doc);
  out << doc.dump(2, ' ', false, json::error_handler_t::strict) << "\n";
}

void WriteFoldedReport(const ReportModel& m, std::ostream& out) {
  for (const ReportStack& s : m.stacks) fmt::print(out, "{} {}\n", s.folded, s.samples);
}

}  // namespace mmap3
