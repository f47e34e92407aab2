// Report output formats.  No logic: everything here formats a ReportModel
// that profile.cc computed.
//
// JSON schema (`--format json`, "schema": "mmap3-reader-report/1"):
// {
//   "schema": "mmap3-reader-report/1",
//   "capture": {
//     "mode": "mmap3" | "mmap2-build-id" | "mmap2" | "perf.data",
//     "samples": N, "period": N, "unsampled_events": ["name", ...]
//     (counted, not sampled: see ReportModel), "lost_records": N, "lost_samples": N,
//     "event_lost": N | null,
//     "bad_records": N,
//     "bad_samples_of_no_event": N   (of bad_records: samples of an id
//                          no single event lists; the rest are malformed),
//     "late_records": N   (records older than one already attributed:
//                          applied out of time order),
//     "stray_build_id_bits": N   (MMAP2 records whose build-id bit was over
//                          the inode layout: read as inode identity),
//     "oversized_sideband": N   (KSYMBOL and BPF_EVENT records longer than
//                          their contents: read by their contents, or
//                          cut to them by record),
//     "startup": {"processes": N, "seconds": F, "records_drained": N,
//                 "changed_during_read": N} | null
//                (-a and -p; null for a command, perf's files, older files),
//     "kernel_modules_changed": ["[name]", ...]   (modules recorded at the
//                start whose range held other code by the end: another
//                module, another build, BPF; their samples are
//                "[unknown]+0x<offset>", the module's build-id not given),
//     "mappings_by_source": {"none": N, "mmap3": N, "mmap2": N, "map_files": N,
//                            "perf_header_unverified": N, "kernel_notes": N,
//                            "vdso": N, "perf-map": N},
//     "mappings": [{"pid": N (-1: kernel image, modules), "start": "0x..",
//                   "end": "0x..", "pgoff": "0x..",
//                   "path": "...", "build_id": "hex" | "", "source": "..."}],
//     "perf_maps": [{"pid": N, "taken": "running" | "exit" | "end",
//                    "entries": N, "bytes": N, "skipped_lines": N,
//                    "incomplete_last_line": B}]
//                (the JIT maps, /tmp/perf-PID.map, that record took: when
//                 the process exited, at the end of the capture, or while it
//                 ran if the file was gone by then),
//     "perf_maps_refused": [{"pid": N, "reason": "..."}]
//                (maps record did not read: a symlink, another user's file),
//     "symbol_files": [{"build_id": "hex", "path": "...", "file": "..." | "",
//                       "source": "build_id_cache" | "debug_dir" |
//                                 "recorded_path" | "debuginfod" | "none"}]
//                (each user-space build-id whose symbols were looked for,
//                 by build-id: where the file they came from was found;
//                 "debuginfod": fetched from DEBUGINFOD_URLS by this report)
//   },
//   "events": [{"name": "...", "unit": "nanoseconds" | "count", "samples": N,
//               "period": N, "matched_samples": N, "matched_period": N,
//               "rows_below_limit": N, "rows": [...]}]
//              (each sampling event with its own rows, whose percentages
//               are of its own periods),
//   "rows" (one event only; with several, only in "events"):
//           [{"samples": N, "period": N, "percent": F, "comm": "...",
//             "path": "...", "build_id": "full hex" | "", "symbol": "...",
//             "symbol_status": "found" | "no_symbol" | "no_file" |
//                              "no_build_id" | "no_mapping" | "guest" |
//                              "hypervisor" | "no_perf_map" |
//                              "no_perf_map_entry",
//             "source": "..."}]
// }
// Source "perf_header_unverified" (perf's own files): the id is perf's
// HEADER_BUILD_ID entry for the path, which perf read when recording ended;
// it is never given to a path whose MMAP2 records show more than one file,
// and is unverified because a file rewritten in place keeps its inode.  The
// text report labels such a DSO "name (<short id>, unverified)".
// "symbol_status" says why a row has no symbol name: "no_symbol", a file
// with the build-id was found but no symbol covers the offset (the symbol
// reads "[no symbol <id>]+0x<offset>"); "no_file", no file with the build-id
// was found ("[unknown <id>]+0x<offset>"); "no_build_id", the mapping has
// none ("[unknown]+0x<offset>"); "no_mapping", the address is in no known
// mapping (path and symbol "[unknown]"); "guest" and "hypervisor", an
// address of a guest or of the hypervisor, which no host mapping names
// (path and symbol "[guest.kernel]", "[guest.user]", "[guest]",
// "[hypervisor]"); "no_perf_map" and "no_perf_map_entry", JIT code
// (anonymous executable memory) of a process whose perf map the capture
// does not have ("[unknown: no perf map]+0x<address>"), or whose map has no
// line for the address ("[unknown: not in perf map]+0x<address>");
// "perf_map_ambiguous", lines of different names cover it (code replaced:
// "[unknown: several names in perf map]+0x<address>").  JIT
// code named by the map has "found", and source "perf-map".
//   "controls": {"sort": ["comm", "dso", "sym"], "comms": [...], "dsos": [...],
//                "symbols": [...], "percentage": "absolute" | "relative",
//                "matched_samples": N, "matched_period": N, "children": B,
//                "percent_limit": F, "rows_below_limit": N},
// A row has the fields of the --sort keys only (comm: "comm"; pid: "pid";
// tid: "tid"; dso: "path", "build_id", "source"; build_id: "build_id",
// "source"; sym: "symbol", "symbol_status"; a row in no mapping always has
// "path": "[unknown]"), and with --children "children_period" and
// "children_percent".
// Rows are sorted by period (overhead; Children first with --children),
// then samples, descending.  "percent"
// (the text report's Overhead) is the row's share of the summed sample
// periods, as in perf.  Folded output (`--format folded`)
// is "comm;outermost;...;leaf count" per line, for flamegraph.pl.
#ifndef MMAP3_READER_REPORT_H_
#define MMAP3_READER_REPORT_H_

#include <array>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "address_space.h"
#include "build_id.h"
#include "perf_map.h"
#include "report_controls.h"

namespace mmap3 {

struct ReportRow {
  uint64_t samples = 0;
  uint64_t period = 0;  // summed sample periods
  double percent = 0;   // share of the capture's period
  std::string comm;
  std::string path;
  BuildId build_id;
  std::string symbol;
  SymbolStatus symbol_status = SymbolStatus::kFound;
  BuildIdSource source = BuildIdSource::kNone;
  // With --sort pid / tid; -1 otherwise.  Fields of keys not in --sort are
  // empty and not shown.
  int64_t pid = -1, tid = -1;
  // With --children: the period of every sample with this row's key
  // anywhere in its chain, once per sample, and its share.
  uint64_t children_period = 0;
  double children_percent = 0;
  uint32_t event = 0;  // index into ReportModel::events
};

// `script`: one sampled address, symbolized once (see ScriptSample).
struct ScriptLocation {
  uint64_t ip = 0;  // as recorded: the sample's ip, or a return address
  std::string symbol;  // the report's name for it (see SymbolStatus)
  SymbolStatus status = SymbolStatus::kNoMapping;
  uint64_t symbol_offset = 0;  // ip - the symbol's start, when status is kFound
  std::string path;            // "[unknown]" in no mapping
  BuildId build_id;
  BuildIdSource source = BuildIdSource::kNone;
};

struct ScriptSample {
  uint64_t time = 0;  // ns, as recorded (0 without PERF_SAMPLE_TIME)
  uint32_t pid = 0, tid = 0;
  int64_t cpu = -1;  // -1: not recorded
  uint64_t period = 0;
  std::string comm;
  std::vector<uint32_t> locations;  // into script_locations, the sample's ip first
  uint32_t event = 0;  // index into ReportModel::events
};

struct ReportMapping {
  int64_t pid = 0;  // -1: the kernel image and its modules
  uint64_t start = 0, end = 0, pgoff = 0;
  std::string path;
  BuildId build_id;
  BuildIdSource source = BuildIdSource::kNone;
};

// Where a DSO's symbols came from (dso_store.h).
struct SymbolFile {
  BuildId build_id;
  std::string path;  // a path it was mapped under
  std::string file;  // the file read, "" if none
  SymbolSource source = SymbolSource::kNone;
};

struct ReportStack {
  std::string folded;  // "comm;frame;...;leaf"
  uint64_t samples = 0;
};

// Every sample with the addresses of its frames and the mappings they are
// in: what --format pprof writes (ProfileOptions::sample_frames).  The
// attribution is the flat rows': a stack's first location (its leaf) is the
// (object, offset) its row counted, on that object's mapping, and a sample
// the rows put on no mapping ("[unknown]") has a location in none.
struct FrameMapping {
  // [start, limit) and the file offset of start, as recorded.  0, 0: no
  // recorded range holds its addresses (kernel addresses outside every
  // kernel mapping, the guest's and the hypervisor's).
  uint64_t start = 0, limit = 0, file_offset = 0;
  std::string path;
  BuildId build_id;
  BuildIdSource source = BuildIdSource::kNone;
  bool kernel = false;       // the kernel image or a module
  bool has_symbols = false;  // some location in it got a symbol
};

struct FrameLocation {
  uint32_t mapping = 0;  // index into frame_mappings + 1; 0: in no known mapping
  // The address looked up: the sample's ip, a return address less one (a
  // kernel frame found to be an interrupted ip: as recorded), or the ip in
  // no mapping; 0 for a guest's or the hypervisor's.
  uint64_t address = 0;
  std::string symbol;  // the report's name for it (see SymbolStatus)
  SymbolStatus status = SymbolStatus::kNoMapping;
};

struct FrameStack {
  std::string comm;
  std::vector<uint32_t> locations;  // indices into frame_locations, leaf first
  uint64_t samples = 0;
  uint64_t period = 0;
  uint32_t event = 0;  // index into ReportModel::events
};

// What a sample's period counts: "cpu" in "nanoseconds" for the cpu-clock
// and task-clock events record uses, "cycles" in "count", ...; `period` is
// the nominal period (0 when not known).  A capture of several events says
// "events" (the periods of different events added up).
struct SampledEvent {
  std::string name = "events";
  std::string unit = "count";
  uint64_t period = 0;
  bool fixed = false;  // period is the attr's sample_period (-c), not from a frequency
  std::string note;  // what else a reader of the numbers must know, or ""
};

// One sampling event of a capture, reported on its own as perf reports
// each event: its rows' percentages are of its own samples' periods (the
// periods of different events count different things and are never added
// up).  A capture whose samples do not say their event (several events,
// no PERF_SAMPLE_ID or IDENTIFIER) is one event named after all of them.
struct ReportEvent {
  std::string name;      // perf's name: "cycles", "page-faults", ..., or "event-TYPE-0xCONFIG"
  SampledEvent sampled;  // what its period counts
  // The attr's sample_period for samples that do not record theirs (a
  // fixed period without PERF_SAMPLE_PERIOD, as perf record -c and record
  // -c write them); 0: the samples' own.
  uint64_t fixed_period = 0;
  uint64_t samples = 0, period = 0;
  uint64_t matched_samples = 0, matched_period = 0;  // what the filters let through
  uint64_t rows_below_limit = 0;
};

// A kernel module's mapping as record wrote it: "[ext4]" at its load address.
struct KernelModuleMapping {
  std::string path;
  uint64_t start = 0;
  bool operator<(const KernelModuleMapping& o) const {
    return std::tie(path, start) < std::tie(o.path, o.start);
  }
};

// What record read of the processes that existed when it started (-a, -p).
struct StartupStats {
  uint64_t processes = 0;
  double seconds = 0;
  uint64_t records_drained = 0;  // taken from the buffers meanwhile
  // Mappings and names that changed while they were read: not synthesized,
  // the kernel's records of the change describe them.
  uint64_t changed_during_read = 0;
};

// A JIT map the capture holds (perf_map.h), as the report describes it.
struct PerfMapSummary {
  uint32_t pid = 0;
  PerfMapTaken taken = PerfMapTaken::kRunning;
  uint64_t entries = 0, bytes = 0, skipped_lines = 0;
  bool incomplete_last_line = false;
};

// A BPF program the capture describes (bpf_progs.h), with the samples its
// JITed functions took and, where it has line info, the source lines they
// were on.
struct ReportBpfLine {
  std::string file;
  uint32_t line = 0;
  uint64_t samples = 0;
};
struct ReportBpfProgram {
  uint32_t id = 0;
  std::string tag;   // hex
  std::string name;
  std::vector<std::string> functions;  // their KSYMBOL names
  uint64_t samples = 0;                // of every event, whatever the filters
  bool has_lines = false;              // the capture has its line info and BTF
  std::string lines_missing;           // if not, why
  std::vector<ReportBpfLine> lines;    // most samples first
};
// A BPF program seen loaded whose description the capture lacks.
struct ReportBpfNotRead {
  uint32_t id = 0;
  std::string tag;  // hex; empty when not known
  std::string reason;
  // Samples in functions named with its tag (its main function's; its
  // subprograms' tags are in the description it lacks).
  uint64_t samples = 0;
};

struct ReportModel {
  std::string mode;
  uint64_t samples = 0;
  uint64_t period = 0;
  uint64_t lost_records = 0;
  uint64_t lost_samples = 0;
  // Per-event lost counts from read_format LOST at the end of the capture
  // (-1 when unknown: older kernels, or perf's own files).
  int64_t event_lost = -1;
  uint64_t bad_records = 0;
  // Of bad_records: samples of an id that no single event of the capture
  // lists (an id two events share, or one no event has).  The rest are
  // malformed records (and framing errors).
  uint64_t bad_samples_of_no_event = 0;
  // Records older than one already attributed: time order across buffers
  // was broken for them (see RecordSorter::late()), so they were applied
  // out of order (a late mapping misses the samples before it).
  uint64_t late_records = 0;
  // MMAP2 records that set the build-id bit over the inode layout (a kernel
  // without the MMAP3 series' first patch), read as inode identity.
  uint64_t stray_build_id_bits = 0;
  // KSYMBOL and BPF_EVENT records longer than what the kernel wrote in
  // them (SampleIdOffset()): read by their contents, or cut to them by
  // record (its metadata's count).
  uint64_t oversized_sideband = 0;
  std::optional<StartupStats> startup;  // unknown for perf's files
  // Modules whose range held other code by the end of the capture (another
  // module, another build, BPF): their samples are [unknown].  Paths.
  std::vector<std::string> changed_kernel_modules;
  std::array<uint64_t, kBuildIdSourceCount> mappings_by_source{};
  // The JIT maps record took, by pid, and the files it refused to read.
  std::vector<PerfMapSummary> perf_maps;
  std::vector<PerfMapRefusal> perf_maps_refused;
  // BPF programs described, by id; those that could not be.
  std::vector<ReportBpfProgram> bpf_programs;
  std::vector<ReportBpfNotRead> bpf_not_read;
  // Samples in BPF functions of no program in bpf_programs or
  // bpf_not_read (a load record not in the capture, or a subprogram of a
  // program not described); their rows keep the kernel's name for the code.
  uint64_t bpf_samples_of_unknown_programs = 0;
  // Why BPF programs were not followed (ProfileOptions::bpf_untracked).
  std::string bpf_untracked;
  // Rows of every event, event by event (in the order of `events`), each
  // event's sorted by overhead.
  std::vector<ReportRow> rows;
  // The sampling events, in the capture's order; at least one.  samples,
  // period and the matched counts above are their sums.
  std::vector<ReportEvent> events;
  // Events of the capture that do not sample (neither period nor
  // frequency: group members read through their leader's samples, perf
  // record's :S), by name.  Not in `events`: their counts are not
  // attributed here.
  std::vector<std::string> unsampled_events;
  std::vector<ReportMapping> mappings;
  std::vector<SymbolFile> symbol_files;  // by build-id
  // A debuginfod server failed this report (DebuginfodFetcher::failed()):
  // the report is complete but for files a working server could have sent,
  // and the command exits with status 1.
  bool debuginfod_failed = false;
  std::vector<ReportStack> stacks;
  SampledEvent event;
  // The capture's samples carry call chains (PERF_SAMPLE_CALLCHAIN).
  bool callchains = false;
  // Filled only with ProfileOptions::sample_frames, sorted by value (the
  // same capture gives the same model); mappings with more samples (as a
  // leaf) first.
  std::vector<FrameMapping> frame_mappings;
  std::vector<FrameLocation> frame_locations;
  std::vector<FrameStack> frame_stacks;
  // What shaped the rows (--sort, filters, --children, --percent-limit).
  ReportControls controls;
  // Samples and their period that passed the filters (all without filters).
  uint64_t matched_samples = 0, matched_period = 0;
  uint64_t rows_below_limit = 0;  // rows --percent-limit left out
  // Filled only with ProfileOptions::script: every sample in time order.
  std::vector<ScriptSample> script;
  std::vector<ScriptLocation> script_locations;
};

// The lines above the text report's table, without their "# ": the
// counts, and every reason to read the rows with care (late records,
// build-ids from perf's table, modules overlaid).  pprof carries them as
// comments.
std::vector<std::string> ReportNotes(const ReportModel& m);
void WriteTextReport(const ReportModel& model, std::ostream& out);
void WriteJsonReport(const ReportModel& model, std::ostream& out);
void WriteFoldedReport(const ReportModel& model, std::ostream& out);

// "libc.so.6 (a1b2c3d4e5f6)": basename plus short build-id; an id taken
// from perf's table by path is marked "(a1b2c3d4e5f6, unverified)".
std::string DsoLabel(const std::string& path, const BuildId& id,
                     BuildIdSource source = BuildIdSource::kNone);

}  // namespace mmap3

#endif  // MMAP3_READER_REPORT_H_
