// mmap3-reader command line.  The only place that prints errors and picks
// exit codes: 0 success, 1 failure, 2 usage.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "build_id_cache.h"
#include "commands.h"
#include "files.h"
#include "flamegraph.h"
#include "pprof.h"
#include "proc_maps.h"
#include "record_controls.h"
#include "report.h"
#include "script_output.h"

namespace {

// report and script ask the servers in DEBUGINFOD_URLS for files no local
// copy has, and say on stderr when a server fails them.
void AskDebuginfod(mmap3::ReportOptions& opts) {
  if (const char* urls = std::getenv("DEBUGINFOD_URLS")) opts.debuginfod_urls = urls;
  opts.on_warning = [](const std::string& m) { fmt::print(stderr, "mmap3-reader: warning: {}\n", m); };
}

using namespace mmap3;

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

enum class Format { kText, kJson, kFolded, kPprof, kFlamegraph };

// A report written in full exits 0, or 1 when a debuginfod server failed
// it (said in one warning line when it happened): its output lacks what a
// working server could have named.
int ReportExit(const ReportModel& model) {
  return model.debuginfod_failed ? kExitFailure : kExitOk;
}

// The outputs without the text report's header (folded stacks, pprof, a
// flame graph, script) do not show the records left out; where there were
// any, say so on stderr (helper-62's review: a capture whose samples were
// all of ids that two events list printed nothing and exited 0).
void NoteBadRecords(const ReportModel& model) {
  if (model.bad_records == 0) return;
  fmt::print(stderr,
             "mmap3-reader: warning: {} bad records not counted: {} malformed, {} samples of an "
             "id that no single event of the capture lists; the text report's header and "
             "--format json count them\n",
             model.bad_records, model.bad_records - model.bad_samples_of_no_event,
             model.bad_samples_of_no_event);
}

void PrintReport(const ReportModel& model, Format format) {
  switch (format) {
    case Format::kText: WriteTextReport(model, std::cout); break;
    case Format::kJson: WriteJsonReport(model, std::cout); break;
    case Format::kFolded: WriteFoldedReport(model, std::cout); break;
    case Format::kPprof: break;  // binary, to -o: see the report command below
    case Format::kFlamegraph: break;  // to -o, as pprof
  }
  std::cout.flush();
}

// A sysctl's value ("kernel/perf_event_paranoid"), or "unknown".
std::string Sysctl(const std::string& name) {
  auto text = ReadSmallFile("/proc/sys/" + name);
  if (!text.ok()) return "unknown";
  std::string v = std::move(*text);
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return v;
}

int Fail(const Status& status) {
  std::string msg = status.ToString();
  const int e = status.error_number();
  if (status.context().rfind("perf_event_open", 0) == 0 && (e == EACCES || e == EPERM)) {
    msg += fmt::format(
        "\n  The kernel refused the perf event; kernel.perf_event_paranoid is {}."
        "\n  System-wide profiling (-a) needs it at 0 or below"
        " (sysctl -w kernel.perf_event_paranoid=0),"
        "\n  kernel samples of your own processes at 1 or below; or run with CAP_PERFMON"
        "\n  (CAP_SYS_ADMIN before Linux 5.8), which processes of other users always need.",
        Sysctl("kernel/perf_event_paranoid"));
  } else if (status.context().rfind("mmap perf ring buffer", 0) == 0 && e == EPERM) {
    msg += fmt::format(
        "\n  The ring buffers exceed what an unprivileged user may lock:"
        " kernel.perf_event_mlock_kb is {} KiB per CPU."
        "\n  Use fewer pages (-m), raise the limit (sysctl -w kernel.perf_event_mlock_kb=...),"
        "\n  or run with CAP_IPC_LOCK.",
        Sysctl("kernel/perf_event_mlock_kb"));
  } else if (e == ESRCH) {
    msg = fmt::format("no such process: {}", status.context());
  }
  fmt::print(stderr, "mmap3-reader: error: {}\n", msg);
  return kExitFailure;
}

// How the profiled command ended, from its waitpid() status.
std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return fmt::format("the command exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("the command was killed by signal {} ({}){}", WTERMSIG(status),
                       strsignal(WTERMSIG(status)), WCOREDUMP(status) ? ", core dumped" : "");
  return fmt::format("the command ended with wait status {:#x}", status);
}

// What record exits with when the command's end ended the capture, as perf
// record does: the command's exit status, or 128+N for a signal N.
int CommandExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitFailure;
}

// "2G", "512M", "1.5g", "100000", "unlimited": bytes, in binary units
// (K = 1024); nullopt if it is not a size.
std::optional<uint64_t> ParseSize(const std::string& text) {
  if (text == "unlimited") return BuildIdCache::kNoLimit;
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::string unit = text.substr(used);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && (unit.substr(1) == "B" || unit.substr(1) == "IB")) unit.resize(1);
  const std::map<std::string, double> kUnits{
      {"", 1}, {"B", 1}, {"K", 0x1p10}, {"M", 0x1p20}, {"G", 0x1p30}, {"T", 0x1p40}};
  auto it = kUnits.find(unit);
  if (it == kUnits.end() || !(value >= 0)) return std::nullopt;
  const double bytes = value * it->second;
  if (bytes >= 0x1p64) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

std::string CacheSummary(const std::string& dir, const BuildIdCache::Stats& c) {
  std::string out = fmt::format("[ build-id cache {}: {} copied, {} present, {} changed, {} failed",
                                dir, c.copied, c.present, c.mismatch, c.failed);
  if (c.unchecked)
    out += fmt::format(", {} not cached (notes over 1 MiB: build-id not checked)", c.unchecked);
  if (c.refused) out += fmt::format(", {} refused (unsafe path or symlink)", c.refused);
  if (c.too_large) out += fmt::format(", {} over --buildid-cache-max-file", c.too_large);
  if (c.skipped) out += fmt::format(", {} not copied (copying stopped)", c.skipped);
  return out + " ]\n";
}

// "1 entry", "2 entries".
std::string Count(uint64_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

int Main(int argc, char** argv);

}  // namespace

// Nothing is expected to throw; if something does (out of memory, a
// library's exception on input we did not foresee), say so and exit 1
// rather than abort.
int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "mmap3-reader: error: out of memory\n");
  } catch (const std::exception& e) {
    fmt::print(stderr, "mmap3-reader: error: {}\n", e.what());
  }
  return kExitFailure;
}

namespace {

int Main(int argc, char** argv) {
  CLI::App app{"mmap3-reader: a profiler that attributes samples by build-id"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for all subcommands");

  Format format = Format::kText;
  const std::map<std::string, Format> kFormats{{"text", Format::kText},
                                               {"json", Format::kJson},
                                               {"folded", Format::kFolded},
                                               {"pprof", Format::kPprof},
                                               {"flamegraph", Format::kFlamegraph}};
  std::string cache_dir = DefaultBuildIdCacheDir();

  // record
  CLI::App* record = app.add_subcommand("record", "Capture a profile");
  bool system_wide = false, callchains = false, quiet = false, no_cache = false;
  std::string pid_list, tid_list, cpu_list, output, mode = "auto", control;
  uint64_t frequency = 4000, period = 0;
  double duration = 0;
  size_t pages = 256;
  std::vector<std::string> command, event_args;
  record->add_flag("-a,--all-cpus", system_wide, "System-wide collection from all CPUs");
  record->add_option("-p,--pid", pid_list, "Profile existing processes (comma-separated PIDs)");
  record->add_option("-t,--tid", tid_list,
                     "Profile existing threads only (comma-separated TIDs; not the threads they "
                     "start, as perf's -t)");
  record->add_option("-C,--cpu", cpu_list,
                     "System-wide on these CPUs only (perf's list: 0,2-3); with a command, until "
                     "it exits");
  record->add_option("-e,--event", event_args,
                     "Events to sample, comma-separated, -e repeatable: cycles, instructions, "
                     "cache-references, cache-misses, branches, branch-misses, cpu-clock, "
                     "task-clock, page-faults (faults), context-switches (cs), cpu-migrations, "
                     "minor-faults, major-faults, ... (default cpu-clock)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  record->add_option("-F,--freq", frequency, "Sampling frequency in Hz (default 4000)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1000000}));
  record->add_option("-c,--count", period,
                     "Sample every this many events (a fixed period), instead of -F");
  record->add_flag("-g,--call-graph", callchains, "Record call chains");
  record->add_option("-d,--duration", duration, "Stop after this many seconds")
      ->check(CLI::Range(0.0, 1e7));
  record->add_option("-o,--output", output,
                     "Write a perf.data file instead of printing a report");
  record->add_option("-m,--mmap-pages", pages, "Ring buffer data pages per CPU (power of two)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  record->add_option("--mode", mode,
                     "Build-id mode: auto (the best the kernel has), mmap3 (required, "
                     "else fail), or at most mmap2-build-id or mmap2")
      ->check(CLI::IsMember({"auto", "mmap3", "mmap2-build-id", "mmap2"}));
  record->add_option("--control", control,
                     "fifo:CTL[,ACK] or fd:CTL[,ACK]: take commands on CTL once capturing "
                     "(ping: answer 'ack' on ACK; stop: end the capture), as perf record's");
  record->add_flag("-q,--quiet", quiet, "No live status line and no summary");
  record->add_flag("--no-buildid-cache", no_cache, "Do not copy DSOs into the build-id cache");
  record->add_option("--buildid-dir", cache_dir, "Build-id cache directory (default ~/.debug)");
  std::string cache_max = "2G", cache_max_file = "512M";
  record->add_option("--buildid-cache-max", cache_max,
                     "Stop copying when the build-id cache would grow past this size "
                     "(K, M, G, T; 'unlimited'; default 2G)");
  record->add_option("--buildid-cache-max-file", cache_max_file,
                     "Do not copy files larger than this (default 512M)");
  record->add_option("--format", format, "Report format when not writing a file")
      ->transform(CLI::CheckedTransformer(kFormats, CLI::ignore_case));
  record->add_option("command", command, "Command to run and profile (after --)");
  record->positionals_at_end();

  // report
  CLI::App* report = app.add_subcommand("report", "Report a saved capture");
  std::string input = "perf.data", report_output;
  bool report_callchains = false;
  report->add_option("-i,--input", input, "perf.data file (ours or perf's)");
  report->add_option("--format", format, "text, json, folded, pprof or flamegraph (an SVG)")
      ->transform(CLI::CheckedTransformer(kFormats, CLI::ignore_case));
  report->add_option("-o,--output", report_output,
                     "File to write (--format pprof and flamegraph, which need it; '-': "
                     "standard output, for pprof if not a terminal)");
  report->add_flag("-g,--call-graph", report_callchains, "Use call chains (for --format folded)");
  report->add_option("--buildid-dir", cache_dir, "Build-id cache directory (default ~/.debug)");
  std::string sort_keys, comm_list, dso_list, symbol_list, percentage = "absolute";
  bool children = false;
  double percent_limit = 0;
  report->add_option("-s,--sort", sort_keys,
                     "Rows by these keys, comma-separated: comm, pid (the process), tid (the "
                     "thread; perf 6.1's pid key), dso (path and build-id: each version its own "
                     "row), sym, build_id.  Default comm,dso,sym, as perf's");
  report->add_option("-c,--comms,--comm", comm_list,
                     "Count only the samples of these commands (comma-separated, exact names, "
                     "as perf's --comms)");
  report->add_option("-d,--dsos,--dso", dso_list,
                     "Count only the samples in these DSOs (comma-separated base names or full "
                     "paths, as perf's --dsos)");
  report->add_option("-S,--symbols", symbol_list,
                     "Count only the samples on these symbols (comma-separated exact names, as "
                     "perf's --symbols)");
  report->add_option("--percentage", percentage,
                     "Percentages of filtered reports: absolute (of all samples; perf's default) "
                     "or relative (of the samples the filters let through)")
      ->check(CLI::IsMember({"absolute", "relative"}));
  report->add_flag("--children,!--no-children", children,
                   "Add perf's Children column: the share of samples with the row's key "
                   "anywhere in their call chain, once per sample (uses the call chains; "
                   "default --no-children)");
  report->add_option("--percent-limit", percent_limit,
                     "Leave out rows whose overhead (Children with --children) is below this "
                     "percentage; a row at it is shown (perf's --percent-limit)");

  // script
  CLI::App* script = app.add_subcommand("script", "Print every sample, one line each (perf script)");
  std::string script_input = "perf.data";
  bool script_callchains = false;
  script->add_option("-i,--input", script_input, "perf.data file (ours or perf's)");
  script->add_flag("-g,--call-graph", script_callchains,
                   "Print each sample's call chain, one frame a line, as perf script does");
  script->add_option("--buildid-dir", cache_dir, "Build-id cache directory (default ~/.debug)");

  // buildid-list
  CLI::App* buildid_list = app.add_subcommand(
      "buildid-list", "List the build-ids of a capture's files (perf buildid-list), one line per "
                      "version of each file; files without one are listed with the reason");
  std::string list_input = "perf.data";
  buildid_list->add_option("-i,--input", list_input, "perf.data file (ours or perf's)");

  // buildid-cache
  CLI::App* buildid_cache =
      app.add_subcommand("buildid-cache", "List or purge the build-id cache");
  bool cache_list = false, cache_purge_all = false;
  std::vector<std::string> cache_purge;
  buildid_cache->add_option("--buildid-dir", cache_dir,
                            "Build-id cache directory (default ~/.debug)");
  buildid_cache->add_flag("-l,--list", cache_list, "List the cached files");
  buildid_cache->add_option("-p,--purge", cache_purge,
                            "Remove every cached version of this path (repeatable)");
  buildid_cache->add_flag("-P,--purge-all", cache_purge_all, "Remove everything in the cache");

  // inject
  CLI::App* inject = app.add_subcommand(
      "inject", "Rewrite an MMAP3 capture as MMAP2 records that perf 6.1 can read");
  std::string inject_input = "perf.data", inject_output;
  inject->add_option("-i,--input", inject_input, "mmap3-reader capture to convert");
  inject->add_option("-o,--output", inject_output, "perf.data file to write")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "mmap3-reader: {}\n\n", e.what());
    std::cerr << app.help();
    return kExitUsage;
  }

  // A usage error that one line says all about.
  auto usage_line = [&](const std::string& msg) {
    fmt::print(stderr, "mmap3-reader: {}\n", msg);
    return kExitUsage;
  };
  auto usage = [&](const std::string& msg, CLI::App* sub) {
    fmt::print(stderr, "mmap3-reader: {}\n\n", msg);
    std::cerr << sub->help();
    return kExitUsage;
  };

  if (record->parsed()) {
    RecordOptions ro;
    CaptureOptions& co = ro.capture;
    RecordArgs args;
    args.all_cpus = system_wide;
    args.pids = pid_list;
    args.tids = tid_list;
    args.cpus = cpu_list;
    args.has_command = !command.empty();
    args.events = event_args;
    if (record->count("-F") != 0) args.frequency = frequency;
    if (record->count("-c") != 0) args.period = period;
    std::string error;
    auto targets = CheckRecordArgs(args, &error);
    if (!targets) return usage_line(error);
    switch (targets->target) {
      case RecordTargets::Target::kSystemWide:
        // A command only bounds the capture (perf record -a -- sleep 5).
        co.target = CaptureOptions::Target::kSystemWide;
        co.cpus = targets->cpus;
        co.command = command;
        break;
      case RecordTargets::Target::kPids:
        co.target = CaptureOptions::Target::kPids;
        co.pids = targets->pids;
        break;
      case RecordTargets::Target::kThreads:
        co.target = CaptureOptions::Target::kThreads;
        co.tids = targets->tids;
        break;
      case RecordTargets::Target::kCommand:
        co.target = CaptureOptions::Target::kCommand;
        co.command = command;
        break;
    }
    co.events = targets->events;
    co.period = targets->period;
    frequency = targets->frequency;
    if ((pages & (pages - 1)) != 0) return usage("--mmap-pages must be a power of two", record);
    if (!control.empty()) {
      auto spec = ParseControlSpec(control);
      if (!spec.ok()) return usage(spec.status().ToString(), record);
      co.control = control;
    }
    if (format == Format::kFolded && !callchains)
      return usage("--format folded needs -g (call chains)", record);
    if (format == Format::kPprof || format == Format::kFlamegraph)
      return usage(fmt::format("--format {0} is for report: record -o FILE, then report -i FILE "
                               "--format {0} -o OUT", format == Format::kPprof ? "pprof" : "flamegraph"),
                   record);
    if (co.period == 0) {
      const uint64_t max_rate = std::strtoull(Sysctl("kernel/perf_event_max_sample_rate").c_str(),
                                              nullptr, 10);
      if (max_rate > 0 && frequency > max_rate) {
        // What perf record does: lower it and say so (not with -q, as perf's).
        if (!quiet)
          fmt::print(stderr,
                   "mmap3-reader: warning: -F {} exceeds kernel.perf_event_max_sample_rate ({}); "
                   "sampling at {} Hz\n  (raise it with sysctl -w "
                   "kernel.perf_event_max_sample_rate={})\n",
                   frequency, max_rate, max_rate, frequency);
        frequency = max_rate;
      }
    }
    co.frequency = frequency;
    co.callchains = callchains;
    co.duration_seconds = duration;
    co.data_pages = pages;
    if (mode == "mmap3") co.require_mmap3 = true;
    if (mode == "mmap2") co.max_mode = CaptureMode::kMmap2;
    if (mode == "mmap2-build-id") co.max_mode = CaptureMode::kMmap2BuildId;
    ro.output = output;
    ro.callchains = callchains;
    ro.cache_dir = no_cache ? "" : cache_dir;
    {
      auto max = ParseSize(cache_max);
      auto max_file = ParseSize(cache_max_file);
      if (!max) return usage(fmt::format("--buildid-cache-max: '{}' is not a size", cache_max), record);
      if (!max_file)
        return usage(fmt::format("--buildid-cache-max-file: '{}' is not a size", cache_max_file),
                     record);
      ro.cache_limits.max_bytes = *max;
      ro.cache_limits.max_file_bytes = *max_file;
    }
    const bool status_line = !quiet && isatty(STDERR_FILENO);
    if (!quiet) {
      // From a copy worker, when it happens: a full cache or filesystem
      // should not be news at the end of a long capture.
      ro.on_cache_warning = [status_line](const std::string& message) {
        fmt::print(stderr, "{}mmap3-reader: warning: {}\n", status_line ? "\r\033[K" : "", message);
      };
    }
    // Even with -q: the capture is lost, and the user should not find out
    // at the end of it.
    ro.on_output_error = [status_line, output](const Status& error) {
      fmt::print(stderr,
                 "{}mmap3-reader: error: {}: the capture cannot be saved; it ends now "
                 "and {} keeps what it had\n",
                 status_line ? "\r\033[K" : "", error.ToString(), output);
    };
    if (status_line) {
      ro.on_status = [](const CaptureStats& s) {
        double rate = s.elapsed_seconds > 0 ? static_cast<double>(s.samples) / s.elapsed_seconds : 0;
        fmt::print(stderr, "\r\033[K{:.1f}s  {} samples  {:.0f}/s  lost {}  mappings {}",
                   s.elapsed_seconds, s.samples, rate, s.lost_records, s.mmaps);
        std::fflush(stderr);
      };
    }
    auto result = RunRecord(ro);
    if (status_line) fmt::print(stderr, "\r\033[K");
    if (!result.ok()) return Fail(result.status());
    const RecordResult& r = *result;
    if (!quiet) {
      fmt::print(stderr,
                 "[ mmap3-reader: mode {}{}; {} samples, {} mappings, {} build-ids read by the "
                 "reader from map_files or [vdso] ({} unreadable), lost {} ]\n",
                 CaptureModeName(r.mode), r.mode_reason.empty() ? "" : " (" + r.mode_reason + ")",
                 r.stats.samples, r.stats.mmaps, r.stats.filled_build_ids, r.stats.fill_failures,
                 r.stats.lost_records);
      if (r.stats.stray_build_id_bits != 0)
        fmt::print(stderr,
                   "[ mmap3-reader: {} MMAP2 records said \"build-id\" over the inode layout (a "
                   "kernel without the MMAP3 series' first patch, beside another capture with "
                   "build-ids): read as laid out ]\n",
                   r.stats.stray_build_id_bits);
      if (r.stats.oversized_sideband != 0)
        fmt::print(stderr,
                   "[ mmap3-reader: {} KSYMBOL/BPF_EVENT records were longer than their contents "
                   "(the kernel grows them for each capture that follows BPF programs): cut to "
                   "them ]\n",
                   r.stats.oversized_sideband);
      if (!ro.cache_dir.empty()) fmt::print(stderr, "{}", CacheSummary(ro.cache_dir, r.cache));
      if (!output.empty())
        fmt::print(stderr, "[ wrote {}: {} records ({} drained from the ring buffers), {} bytes ]\n",
                   output, r.records_written, r.stats.records, r.bytes_written);
      if (r.command_status != -1) fmt::print(stderr, "[ {} ]\n", DescribeExit(r.command_status));
      if (!r.perf_maps.empty() || !r.perf_maps_refused.empty())
        fmt::print(stderr, "[ JIT perf maps (/tmp/perf-PID.map): {} taken, {} refused ]\n",
                   r.perf_maps.size(), r.perf_maps_refused.size());
      if (r.bpf_programs_read != 0 || r.bpf_programs_not_read != 0)
        fmt::print(stderr, "[ BPF programs: {} described, {} not (report says why) ]\n",
                   r.bpf_programs_read, r.bpf_programs_not_read);
      if (r.stats.module_loads != 0)
        fmt::print(stderr, "[ kernel modules loaded during the capture: {} ({} with symbols "
                   "read while loaded) ]\n", r.stats.module_loads, r.stats.module_symbols_read);
      for (size_t i = 0; i < r.perf_maps_refused.size() && i < 3; ++i)
        fmt::print(stderr, "mmap3-reader: warning: perf map of pid {} not read: {}\n",
                   r.perf_maps_refused[i].pid, r.perf_maps_refused[i].reason);
      if (r.stats.control_unknown != 0)
        fmt::print(stderr, "mmap3-reader: warning: {} --control lines were no command "
                   "(known: ping, stop) and were ignored\n", r.stats.control_unknown);
    }
    if (output.empty()) PrintReport(r.report, format);
    // A capture stopped first (-d, Ctrl-C) succeeded as asked: 0.
    return r.command_ended_capture ? CommandExitCode(r.command_status) : kExitOk;
  }

  if (report->parsed()) {
    ReportOptions opts;
    opts.input = input;
    opts.cache_dir = cache_dir;
    opts.callchains = report_callchains;
    AskDebuginfod(opts);
    ReportControls& controls = opts.controls;
    if (!sort_keys.empty()) {
      std::string error;
      controls.sort = ParseSortKeys(sort_keys, &error);
      if (controls.sort.empty()) return usage_line(error);
    }
    controls.comms = SplitList(comm_list);
    controls.dsos = SplitList(dso_list);
    controls.symbols = SplitList(symbol_list);
    controls.relative = percentage == "relative";
    controls.children = children;
    if (!(percent_limit >= 0 && percent_limit <= 100))
      return usage_line(fmt::format("--percent-limit {}: not a percentage (0 to 100)", percent_limit));
    controls.percent_limit = percent_limit;
    const bool to_file = format == Format::kPprof || format == Format::kFlamegraph;
    if (format == Format::kFolded || to_file) {
      // Filters keep whole stacks there; the table's controls have no table.
      const char* name = format == Format::kFolded ? "folded"
                         : format == Format::kPprof ? "pprof"
                                                    : "flamegraph";
      if (!sort_keys.empty()) return usage_line(fmt::format("--sort is for the text and json tables, not --format {}", name));
      if (children) return usage_line(fmt::format("--children is for the text and json tables, not --format {}", name));
      if (report->count("--percent-limit"))
        return usage_line(fmt::format("--percent-limit is for the text and json tables, not --format {}", name));
    }
    if (format == Format::kFolded && !report_callchains)
      return usage("--format folded needs -g (call chains)", report);
    if (format == Format::kFlamegraph && report_output.empty())
      return usage("--format flamegraph needs -o FILE.svg ('-o -': standard output)", report);
    if (to_file) {
      // Binary output: never onto a terminal.
      if (report_output.empty())
        return usage("--format pprof needs -o FILE (binary output; '-o -' writes it to "
                     "standard output when that is not a terminal)", report);
      if (format == Format::kPprof && report_output == "-" && isatty(STDOUT_FILENO))
        return usage("--format pprof -o -: standard output is a terminal; not writing a "
                     "binary profile there (redirect it or give -o FILE)", report);
      // The capture is the one thing that cannot be made again.
      struct stat in_st, out_st;
      if (report_output != "-" && stat(input.c_str(), &in_st) == 0 &&
          stat(report_output.c_str(), &out_st) == 0 && in_st.st_dev == out_st.st_dev &&
          in_st.st_ino == out_st.st_ino)
        return usage(fmt::format("-o {} is the capture being reported (-i {}); not "
                                 "overwriting it", report_output, input), report);
      opts.sample_frames = true;
    } else if (!report_output.empty()) {
      return usage("-o is for --format pprof and flamegraph; the other formats print to "
                   "standard output", report);
    }
    auto model = RunReport(opts);
    if (!model.ok()) return Fail(model.status());
    if (format == Format::kFlamegraph) {
      const std::string svg = RenderFlamegraph(*model);
      const Status written = report_output == "-"
                                 ? WriteToFd(STDOUT_FILENO, svg, "standard output")
                                 : ReplaceFile(report_output, svg);
      if (!written.ok()) return Fail(written);
      if (report_output != "-")
        fmt::print(stderr, "[ wrote {}: flame graph, {} samples{} ]\n", report_output,
                   model->matched_samples,
                   model->callchains ? "" : "; flat (the capture has no call chains: record -g)");
      NoteBadRecords(*model);
      return ReportExit(*model);
    }
    if (format == Format::kPprof) {
      auto bytes = EncodePprof(*model);
      if (!bytes.ok()) return Fail(bytes.status());
      const Status written = report_output == "-"
                                 ? WriteToFd(STDOUT_FILENO, *bytes, "standard output")
                                 : ReplaceFile(report_output, *bytes);
      if (!written.ok()) return Fail(written);
      if (report_output != "-")
        fmt::print(stderr, "[ wrote {}: pprof, {} samples in {} stacks, {} mappings, {} "
                   "locations ]\n", report_output,
                   controls.Filters() ? fmt::format("{} of {} (filters {})", model->matched_samples,
                                                    model->samples, controls.FilterText())
                                      : std::to_string(model->samples),
                   model->frame_stacks.size(),
                   model->frame_mappings.size(), model->frame_locations.size());
      NoteBadRecords(*model);
      return ReportExit(*model);
    }
    PrintReport(*model, format);
    if (format == Format::kFolded) NoteBadRecords(*model);
    // perf report shows an empty table and exits 0; so do we, and say why.
    if (controls.Filters() && model->matched_samples == 0)
      fmt::print(stderr, "mmap3-reader: no samples match {} (of {} samples)\n",
                 controls.FilterText(), model->samples);
    return ReportExit(*model);
  }
  if (script->parsed()) {
    ReportOptions opts;
    opts.input = script_input;
    opts.cache_dir = cache_dir;
    opts.script = true;
    AskDebuginfod(opts);
    auto model = RunReport(opts);
    if (!model.ok()) return Fail(model.status());
    WriteScript(*model, script_callchains, std::cout);
    std::cout.flush();
    NoteBadRecords(*model);
    return ReportExit(*model);
  }
  if (buildid_list->parsed()) {
    ReportOptions opts;
    opts.input = list_input;
    opts.cache_dir = "";
    opts.kernel_notes = "";
    auto model = RunReport(opts);
    if (!model.ok()) return Fail(model.status());
    WriteBuildIdList(*model, std::cout);
    std::cout.flush();
    return kExitOk;
  }
  if (buildid_cache->parsed()) {
    const int actions = (cache_list ? 1 : 0) + (cache_purge.empty() ? 0 : 1) + (cache_purge_all ? 1 : 0);
    if (actions != 1)
      return usage("buildid-cache needs one of --list, --purge PATH or --purge-all", buildid_cache);
    if (cache_list) {
      auto listing = ListBuildIdCache(cache_dir);
      if (!listing.ok()) return Fail(listing.status());
      for (const CacheEntry& e : listing->entries) {
        fmt::print("{} {:>12} {}{}\n", e.build_id, e.size, PrintableName(e.path),
                   e.file_name.empty() ? "  (no file)" : "");
      }
      std::cout.flush();
      fmt::print(stderr, "[ {}: {}, {} bytes{} ]\n", cache_dir,
                 Count(listing->entries.size(), "entry", "entries"), listing->bytes,
                 listing->foreign_links
                     ? fmt::format("; {} .build-id entries that are not links into it (ignored)",
                                   listing->foreign_links)
                     : "");
      return kExitOk;
    }
    if (cache_purge_all) {
      auto purged = PurgeAllBuildIdCache(cache_dir);
      if (!purged.ok()) return Fail(purged.status());
      fmt::print(stderr, "[ {}: removed {} ({}, {} bytes) ]\n", cache_dir,
                 Count(purged->entries, "entry", "entries"), Count(purged->files, "file", "files"),
                 purged->bytes);
      return kExitOk;
    }
    for (const std::string& path : cache_purge) {
      auto purged = PurgeBuildIdCache(cache_dir, path);
      if (!purged.ok()) return Fail(purged.status());
      if (purged->entries == 0)
        fmt::print(stderr, "[ {}: nothing cached for {} ]\n", cache_dir, PrintableName(path));
      else
        fmt::print(stderr, "[ {}: removed {} of {} ({} bytes) ]\n", cache_dir,
                   Count(purged->entries, "entry", "entries"), PrintableName(path), purged->bytes);
    }
    return kExitOk;
  }
  if (inject->parsed()) {
    InjectOptions opts;
    opts.input = inject_input;
    opts.output = inject_output;
    auto result = RunInject(opts);
    if (!result.ok()) return Fail(result.status());
    fmt::print(stderr, "[ mmap3-reader inject: {} records, {} MMAP3 rewritten as MMAP2 ({} with a "
               "build-id){}; wrote {} ]\n",
               result->records, result->converted, result->with_build_id,
               result->dropped ? fmt::format(", {} undecodable MMAP3 dropped", result->dropped) : "",
               inject_output);
    if (result->unloads)
      fmt::print(stderr, "[ {} module unloads written as KSYMBOL unregister records (MMAP2 "
                 "cannot say that a module is gone) ]\n", result->unloads);
    if (result->framing_errors)
      fmt::print(stderr, "mmap3-reader: warning: {}: the data section ends in a record with an "
                 "impossible size; the records after it are not copied\n", inject_input);
    return kExitOk;
  }
  return kExitUsage;
}

}  // namespace
