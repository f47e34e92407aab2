#include "commands.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "bpf_progs.h"
#include "debuginfod.h"
#include "dso_store.h"
#include "linux/perf_event_mmap3.h"
#include "perf_data.h"
#include "profile.h"
#include "record_controls.h"
#include "record_sorter.h"
#include "record_writer.h"
#include "symbolizer.h"

namespace mmap3 {
namespace {

using nlohmann::json;

constexpr const char* kKernelName = "[kernel.kallsyms]";

class RecordSink : public CaptureSink {
 public:
  // With a writer, samples are written and nothing else: what the profile
  // gives a capture to a file (its build-ID table) comes from the other
  // records, and attributing samples there only costs the drain thread.
  RecordSink(Profile& profile, PerfDataWriter* writer, SampleFormat format,
             const std::function<void(const CaptureStats&)>& on_status,
             const std::function<void(const Status&)>& on_output_error)
      : profile_(profile), writer_(writer), layout_(format), on_status_(on_status),
        on_output_error_(on_output_error) {}

  void OnRecord(Bytes record) override {
    Write(record);
    if (writer_ != nullptr && record.size() >= sizeof(perf_event_header)) {
      perf_event_header h;
      std::memcpy(&h, record.data(), sizeof(h));
      if (h.type == PERF_RECORD_SAMPLE) return;
    }
    sorter_.Push(RecordTime(record, layout_), record);
  }
  void OnRoundEnd() override {
    Write(EncodeFinishedRound());
    sorter_.FinishRound([this](std::span<const Bytes> batch) { profile_.ProcessBatch(batch); });
  }
  void OnTick(const CaptureStats& stats) override {
    if (on_status_) on_status_(stats);
  }
  // A capture that cannot be saved ends: going on would only cost the
  // profiled system and lose every later record too.
  bool Failed() const override { return !status_.ok(); }
  void Finish() {
    sorter_.Flush([this](std::span<const Bytes> batch) { profile_.ProcessBatch(batch); });
  }
  const Status& status() const { return status_; }
  uint64_t late_records() const { return sorter_.late(); }
  // Records written to the output (the capture's and the rounds' ends).
  uint64_t written() const { return written_; }

 private:
  // The first failure to write the output (a full filesystem) is said when
  // it happens, not when the capture ends; nothing is written after it, and
  // Failed() ends the capture.
  void Write(Bytes record) {
    if (writer_ == nullptr || !status_.ok()) return;
    status_ = writer_->Write(record);
    if (status_.ok()) ++written_;
    if (!status_.ok() && on_output_error_) on_output_error_(status_);
  }

  Profile& profile_;
  PerfDataWriter* writer_;
  SampleLayout layout_;
  const std::function<void(const CaptureStats&)>& on_status_;
  const std::function<void(const Status&)>& on_output_error_;
  RecordSorter sorter_;
  Status status_;
  uint64_t written_ = 0;
};

// What a report says of the JIT maps a capture holds.
void DescribePerfMaps(const PerfMaps& maps, std::vector<PerfMapSummary>* summaries,
                      std::vector<PerfMapRefusal>* refused) {
  for (const auto& [pid, map] : maps.maps()) {
    summaries->push_back({pid, map.taken(), map.entries().size(), map.bytes(), map.skipped_lines(),
                          map.incomplete_last_line()});
  }
  *refused = maps.refusals();
}

json MetaJson(const Capture& capture, const SourceOverrides& overrides) {
  json o = json::array();
  overrides.ForEach([&](uint32_t pid, uint64_t start, const BuildId& id, BuildIdSource source) {
    o.push_back({{"pid", pid}, {"start", start}, {"build_id", id.Hex()},
                 {"source", BuildIdSourceName(source)}});
  });
  const CaptureStats& s = capture.stats();
  json meta = {{"tool", "mmap3-reader"},
               {"mode", CaptureModeName(capture.mode())},
               {"mode_reason", capture.mode_reason()},
               {"overrides", o},
               {"event_lost", s.event_lost},
               {"lost_records", s.lost_records},
               {"bad_size", s.bad_size},
               {"filled_build_ids", s.filled_build_ids},
               {"fill_failures", s.fill_failures},
               {"stray_build_id_bits", s.stray_build_id_bits},
               {"oversized_sideband", s.oversized_sideband}};
  json changed = json::array();
  for (const KernelModuleMapping& m : s.changed_kernel_modules)
    changed.push_back({{"path", m.path}, {"start", m.start}});
  meta["kernel_modules_changed"] = changed;
  // JIT maps: the file is usually gone by the time the capture is read.
  meta["perf_maps"] = capture.perf_maps().ToJson();
  // BPF programs are in perf's own sections; those that could not be read
  // only here.
  json not_read = json::array();
  for (const BpfNotRead& n : capture.bpf_programs().not_read())
    not_read.push_back({{"id", n.id}, {"tag", n.tag == BpfTag{} ? "" : BpfTagHex(n.tag)},
                        {"reason", n.reason}});
  meta["bpf_not_read"] = not_read;
  meta["bpf_untracked"] = capture.bpf_untracked();
  if (s.startup) {
    meta["startup"] = {{"processes", s.startup->processes},
                       {"seconds", s.startup->seconds},
                       {"records_drained", s.startup->records_drained},
                       {"changed_during_read", s.startup->changed_during_read}};
  }
  return meta;
}

// What perf's own files say about the files mapped at each path, for
// deciding whether perf's build-id table may be used for it.
//
// perf fills HEADER_BUILD_ID when recording ends, by reading the file at
// each path: one id per path, that of whatever the path held then.  A path
// whose MMAP2 records show more than one file (another inode, or the same
// inode number with another generation: deleted and reused) was replaced
// during the capture, and the table's one id cannot be right for all of its
// mappings: such a path gets no id from the table.  One file is no proof
// either: a file rewritten in place keeps its inode, so MMAP2 cannot tell
// its versions apart, and the table's id is always reported as unverified.
class PathFiles {
 public:
  void Add(const MmapRecord& m) {
    if (m.pid == kKernelPid || !m.build_id.empty()) return;  // carries its own id
    auto [it, inserted] = paths_.try_emplace(std::string(m.filename));
    Files& f = it->second;
    if (!m.has_inode) {  // PERF_RECORD_MMAP: which file is not said
      f.several = true;
      return;
    }
    // perf synthesizes the mappings of running processes from
    // /proc/PID/maps, which has no generation: 0 there means "not said",
    // not a different file.
    if (inserted) {
      f = Files{m.maj, m.min, m.ino, m.ino_generation, false};
      return;
    }
    if (f.maj != m.maj || f.min != m.min || f.ino != m.ino) f.several = true;
    if (m.ino_generation != 0) {
      if (f.generation == 0) {
        f.generation = m.ino_generation;
      } else if (f.generation != m.ino_generation) {
        f.several = true;
      }
    }
  }
  // True if every mapping of `path` was of one file (as far as MMAP2 says).
  bool OneFile(std::string_view path) const {
    auto it = paths_.find(path);
    return it != paths_.end() && !it->second.several;
  }

 private:
  struct Files {
    uint32_t maj = 0, min = 0;
    uint64_t ino = 0, generation = 0;
    bool several = false;
  };
  std::map<std::string, Files, std::less<>> paths_;
};

// Where each looked-up DSO's symbols came from, for the report.
std::vector<SymbolFile> SymbolFilesOf(const DsoStore& store) {
  std::vector<SymbolFile> files;
  for (const Dso* dso : store.LoadedDsos()) {
    std::vector<std::string> paths = dso->paths;
    std::sort(paths.begin(), paths.end());
    files.push_back({dso->build_id, paths.empty() ? std::string() : paths.front(),
                     dso->symbol_file, dso->symbol_source});
    // Files another user can write that named their own path's mappings.
    for (const auto& [path, table] : dso->others)
      if (table != nullptr)
        files.push_back({dso->build_id, path, path, SymbolSource::kOwnPathOnly});
  }
  return files;
}

SymbolSearch SearchFor(const std::string& cache_dir) {
  SymbolSearch search;
  search.cache_dir = cache_dir;
  return search;
}

bool IsSideband(const perf_event_attr& a) {
  return a.type == PERF_TYPE_SOFTWARE && a.config == PERF_COUNT_SW_DUMMY;
}

// An event that takes samples of its own: a period or a frequency.  A
// group member of perf record's leader sampling (:S) has neither; its
// counts ride in the leader's samples (PERF_SAMPLE_READ).
bool Samples(const perf_event_attr& a) { return a.freq || a.sample_period != 0; }

std::string EventNameOf(const perf_event_attr& a) {
  std::string name = EventName(a.type, a.config);
  return name.empty() ? fmt::format("event-{}-{:#x}", a.type, a.config) : name;
}

// A fixed period the samples do not carry (perf record -c writes no
// PERF_SAMPLE_PERIOD): the attr's; 0 otherwise.
uint64_t FixedPeriod(const perf_event_attr& a) {
  return !a.freq && !(a.sample_type & PERF_SAMPLE_PERIOD) ? a.sample_period : 0;
}

// The sampling events of a capture (its attrs but the side-band dummy) as
// the report shows them, and which a sample is of, by its id.  Samples
// that do not carry an id (no PERF_SAMPLE_ID or IDENTIFIER) cannot be told
// apart: several such events are reported as one, named after them all.
struct CaptureEventsOf {
  std::vector<ReportEvent> events;
  KeyedMap<uint64_t, uint32_t> event_of_id;
  std::vector<std::string> unsampled;  // events that take no samples, by name
};

CaptureEventsOf EventsOf(const std::vector<perf_event_attr>& attrs,
                         const std::vector<std::vector<uint64_t>>& ids) {
  CaptureEventsOf out;
  std::vector<size_t> sampling;
  for (size_t i = 0; i < attrs.size(); ++i) {
    if (IsSideband(attrs[i])) continue;
    if (Samples(attrs[i]))
      sampling.push_back(i);
    else
      out.unsampled.push_back(EventNameOf(attrs[i]));
  }
  if (sampling.empty()) return out;
  bool identified = sampling.size() > 1;
  for (size_t i : sampling) {
    if (!(attrs[i].sample_type & (PERF_SAMPLE_ID | PERF_SAMPLE_IDENTIFIER)) || ids[i].empty())
      identified = false;
  }
  if (!identified) {
    ReportEvent e;
    std::vector<perf_event_attr> all;
    for (size_t i : sampling) {
      e.name += (e.name.empty() ? "" : ",") + EventNameOf(attrs[i]);
      all.push_back(attrs[i]);
    }
    e.sampled = SampledEventOf(all);
    // One fixed period for all, or none.
    e.fixed_period = FixedPeriod(attrs[sampling[0]]);
    for (size_t i : sampling)
      if (FixedPeriod(attrs[i]) != e.fixed_period) e.fixed_period = 0;
    out.events.push_back(std::move(e));
    return out;
  }
  std::set<uint64_t> ambiguous;
  for (size_t i : sampling) {
    const uint32_t index = static_cast<uint32_t>(out.events.size());
    ReportEvent e;
    e.name = EventNameOf(attrs[i]);
    e.sampled = SampledEventOf({attrs[i]});
    e.fixed_period = FixedPeriod(attrs[i]);
    out.events.push_back(std::move(e));
    for (uint64_t id : ids[i]) {
      auto [it, inserted] = out.event_of_id.emplace(id, index);
      if (!inserted && it->second != index) ambiguous.insert(id);
    }
  }
  // An id that two events list says of neither which a sample is: its
  // samples are counted as bad records, not given to one of them.
  for (uint64_t id : ambiguous) out.event_of_id.erase(id);
  return out;
}

}  // namespace

SampledEvent SampledEventOf(const std::vector<perf_event_attr>& attrs) {
  std::vector<const perf_event_attr*> sampling;
  for (const perf_event_attr& a : attrs) {
    if (IsSideband(a) || !Samples(a)) continue;
    sampling.push_back(&a);
  }
  SampledEvent e;
  if (sampling.empty()) return e;
  const perf_event_attr& a = *sampling[0];
  for (const perf_event_attr* other : sampling) {
    if (other->type != a.type || other->config != a.config) {
      e.note = "several events: their periods are added up in one value";
      return e;
    }
    // Without recorded periods, a fixed period is the attr's (perf -c).
    if (!(other->sample_type & PERF_SAMPLE_PERIOD) && (other->freq || other->sample_period == 0)) {
      e.note = "periods not recorded: every sample counts 1";
      return e;
    }
  }
  const std::string name = EventNameOf(a);
  const bool clock = a.type == PERF_TYPE_SOFTWARE &&
                     (a.config == PERF_COUNT_SW_CPU_CLOCK || a.config == PERF_COUNT_SW_TASK_CLOCK);
  // cpu-clock's period is nanoseconds of CPU time: what pprof calls "cpu".
  e.name = clock && a.config == PERF_COUNT_SW_CPU_CLOCK ? "cpu" : name;
  e.unit = clock ? "nanoseconds" : "count";
  if (a.freq) {
    if (clock && a.sample_freq != 0) e.period = 1000000000 / a.sample_freq;
    e.note = fmt::format("event {} sampled at {} Hz", name, a.sample_freq);
  } else {
    e.period = a.sample_period;
    e.fixed = true;
    e.note = fmt::format("event {} sampled every {} {}", name, a.sample_period, e.unit);
  }
  return e;
}

Result<RecordResult> RunRecord(const RecordOptions& options) {
  std::unique_ptr<BuildIdCache> cache;
  CaptureOptions capture_options = options.capture;
  if (!options.cache_dir.empty()) {
    cache = std::make_unique<BuildIdCache>(options.cache_dir, options.cache_limits);
    cache->set_on_warning(options.on_cache_warning);
    cache->Start();
    capture_options.cache = cache.get();
  }
  auto capture = Capture::Create(capture_options);
  if (!capture.ok()) return capture.status();
  Capture& c = **capture;

  std::optional<PerfDataWriter> writer;
  if (!options.output.empty()) {
    // One attr per event with its ids, as perf writes them: perf report
    // and perf script tell the events apart by them too.
    std::vector<PerfFileAttr> attrs;
    for (size_t e = 0; e < c.attrs().size(); ++e) attrs.push_back({c.attrs()[e], c.event_ids(e)});
    attrs.push_back({c.sideband_attr(), c.sideband_ids()});
    if (auto ids = c.bpf_sideband_ids(); !ids.empty()) attrs.push_back({c.bpf_sideband_attr(), ids});
    auto w = PerfDataWriter::Create(options.output, std::move(attrs));
    if (!w.ok()) return w.status();
    writer.emplace(std::move(*w));
  }

  ProfileOptions profile_options;
  profile_options.callchains = options.callchains;
  profile_options.kernel_build_id = ReadKernelBuildId("/sys/kernel/notes");
  profile_options.overrides = &c.overrides();
  profile_options.bpf_programs = &c.bpf_programs();
  profile_options.bpf_untracked = c.bpf_untracked();
  {
    std::vector<std::vector<uint64_t>> ids;
    for (size_t e = 0; e < c.attrs().size(); ++e) ids.push_back(c.event_ids(e));
    CaptureEventsOf events = EventsOf(c.attrs(), ids);
    profile_options.events = std::move(events.events);
    profile_options.event_of_id = std::move(events.event_of_id);
  }
  Profile profile(profile_options);
  profile.SetFormat(c.format());

  RecordSink sink(profile, writer ? &*writer : nullptr, c.format(), options.on_status,
                  options.on_output_error);
  Status run = c.Run(sink);
  sink.Finish();
  if (!run.ok()) return run;
  if (!sink.status().ok()) return sink.status();

  RecordResult result;
  result.mode = c.mode();
  result.mode_reason = c.mode_reason();
  result.stats = c.stats();
  result.command_status = c.command_status();
  result.command_ended_capture = c.command_ended_capture();
  result.samples_attributed = profile.samples();
  DescribePerfMaps(c.perf_maps(), &result.perf_maps, &result.perf_maps_refused);
  result.bpf_programs_read = c.bpf_programs().programs().size();
  result.bpf_programs_not_read = c.bpf_programs().not_read().size();
  if (cache) {
    cache->Stop();  // copies finish before we symbolize from them
    result.cache = cache->stats();
  }
  if (writer) {
    std::vector<BuildIdEntry> table;
    for (const MappedObject* o : profile.Objects()) {
      if (o->build_id.empty()) continue;
      BuildIdEntry e;
      e.misc = o->kernel ? PERF_RECORD_MISC_KERNEL : PERF_RECORD_MISC_USER;
      e.build_id = o->build_id;
      e.filename = o->path;
      table.push_back(std::move(e));
    }
    result.bytes_written = writer->data_size();
    result.records_written = sink.written();
    // Names in perf maps are printable UTF-8 (PrintableUtf8); paths are
    // bytes: replaced rather than thrown on.
    const std::string meta =
        MetaJson(c, c.overrides()).dump(-1, ' ', false, json::error_handler_t::replace);
    std::vector<std::pair<int, std::vector<uint8_t>>> more;
    more.emplace_back(kFeatureBpfProgInfo, c.bpf_programs().ProgInfoFeature());
    more.emplace_back(kFeatureBpfBtf, c.bpf_programs().BtfFeature());
    if (Status s = writer->Finish(table, meta, std::move(more)); !s.ok()) return s;
    return result;
  }
  profile.SetChangedKernelModules(c.stats().changed_kernel_modules);
  DsoStore store(SearchFor(options.cache_dir));
  Symbolizer symbolizer(store);
  symbolizer.SetPerfMaps(&c.perf_maps());
  result.report = profile.BuildReport(symbolizer, CaptureModeName(c.mode()));
  profile.DescribeBpfPrograms(c.bpf_programs(), result.report);
  result.report.perf_maps = result.perf_maps;
  result.report.perf_maps_refused = result.perf_maps_refused;
  result.report.symbol_files = SymbolFilesOf(store);
  result.report.event = SampledEventOf(c.attrs());
  result.report.callchains = (c.attrs().front().sample_type & PERF_SAMPLE_CALLCHAIN) != 0;
  result.report.event_lost = static_cast<int64_t>(c.stats().event_lost);
  result.report.bad_records += c.stats().bad_size;  // framing errors in the ring buffers
  result.report.late_records = sink.late_records();
  result.report.startup = c.stats().startup;
  return result;
}

Result<ReportModel> RunReport(const ReportOptions& options) {
  auto file = PerfDataReader::Open(options.input);
  if (!file.ok()) return file.status();
  const PerfDataReader& r = *file;

  auto formats = FileFormats::Create(r.attrs(), /*perfs=*/r.meta_json().empty());
  if (!formats.ok()) return Status::Failure(options.input + ": " + formats.status().ToString());
  auto format_of = [&](Bytes rec) -> const SampleLayout& { return formats->For(rec); };
  std::string mode = "perf.data";
  SourceOverrides overrides;
  int64_t event_lost = -1;
  uint64_t ring_bad = 0;
  uint64_t cut_sideband = 0;  // oversized KSYMBOL/BPF_EVENT records record cut
  std::optional<StartupStats> startup;
  std::vector<KernelModuleMapping> changed_modules;
  PerfMaps perf_maps;
  std::vector<BpfNotRead> bpf_not_read;
  std::string bpf_untracked;
  if (!r.meta_json().empty()) {
    // Our own section, but from a file: every field is checked for its type
    // (json::value() throws on a mistyped one) and a bad one is ignored.
    json meta = json::parse(r.meta_json(), nullptr, /*allow_exceptions=*/false);
    auto field = [&](const json& o, const char* key) -> const json* {
      auto it = o.find(key);
      return it == o.end() ? nullptr : &*it;
    };
    if (meta.is_object()) {
      if (const json* m = field(meta, "mode"); m && m->is_string()) mode = m->get<std::string>();
      if (const json* e = field(meta, "event_lost"); e && e->is_number_integer())
        event_lost = e->get<int64_t>();
      if (const json* b = field(meta, "bad_size"); b && b->is_number_unsigned())
        ring_bad = b->get<uint64_t>();
      if (const json* o = field(meta, "oversized_sideband"); o && o->is_number_unsigned())
        cut_sideband = o->get<uint64_t>();
      if (const json* s = field(meta, "startup"); s && s->is_object()) {
        const json* n = field(*s, "processes");
        const json* secs = field(*s, "seconds");
        const json* drained = field(*s, "records_drained");
        if (n && n->is_number_unsigned() && secs && secs->is_number() && drained &&
            drained->is_number_unsigned())
          startup = StartupStats{n->get<uint64_t>(), secs->get<double>(), drained->get<uint64_t>(), 0};
        // Absent in files of older readers.
        if (const json* c = field(*s, "changed_during_read"); startup && c && c->is_number_unsigned())
          startup->changed_during_read = c->get<uint64_t>();
      }
      if (const json* list = field(meta, "kernel_modules_changed"); list && list->is_array()) {
        for (const json& m : *list) {
          if (!m.is_object()) continue;
          const json* path = field(m, "path");
          const json* start = field(m, "start");
          if (path && path->is_string() && start && start->is_number_unsigned())
            changed_modules.push_back({path->get<std::string>(), start->get<uint64_t>()});
        }
      }
      if (const json* u = field(meta, "bpf_untracked"); u && u->is_string())
        bpf_untracked = u->get<std::string>();
      if (const json* list = field(meta, "bpf_not_read"); list && list->is_array()) {
        for (const json& n : *list) {
          if (!n.is_object()) continue;
          const json* id = field(n, "id");
          const json* tag = field(n, "tag");
          const json* reason = field(n, "reason");
          if (!id || !id->is_number_unsigned() || !tag || !tag->is_string() || !reason ||
              !reason->is_string())
            continue;
          BpfNotRead entry{static_cast<uint32_t>(id->get<uint64_t>()), {}, reason->get<std::string>()};
          if (auto parsed = BpfTagOfSymbol("bpf_prog_" + tag->get<std::string>())) entry.tag = *parsed;
          bpf_not_read.push_back(std::move(entry));
        }
      }
      if (const json* maps = field(meta, "perf_maps")) {
        uint64_t bad = 0;  // a malformed part names nothing: its JIT code stays unknown
        perf_maps = PerfMaps::FromJson(*maps, &bad);
      }
      if (const json* list = field(meta, "overrides"); list && list->is_array()) {
        for (const json& o : *list) {
          if (!o.is_object()) continue;
          const json* pid = field(o, "pid");
          const json* start = field(o, "start");
          const json* id_hex = field(o, "build_id");
          const json* source = field(o, "source");
          if (!pid || !pid->is_number_unsigned() || !start || !start->is_number_unsigned() ||
              !id_hex || !id_hex->is_string() || !source || !source->is_string())
            continue;
          const std::string kind = source->get<std::string>();
          if (kind != "map_files" && kind != "vdso") continue;
          auto id = BuildId::FromHex(id_hex->get<std::string>());
          if (!id) continue;
          overrides.Add(static_cast<uint32_t>(pid->get<uint64_t>()), start->get<uint64_t>(), *id,
                        kind == "vdso" ? BuildIdSource::kVdso : BuildIdSource::kMapFiles);
        }
      }
    }
  }

  // perf's build-id table is keyed by path: a path that was replaced during
  // the capture may appear with several ids, and any one of them may be
  // wrong for a given mapping.  Use it only for files perf wrote (ours carry
  // the id in every mapping that has one), only for paths with one id, and
  // only for paths whose mappings were all of one file (see PathFiles).
  const bool ours = !r.meta_json().empty();
  std::map<std::string, BuildId, std::less<>> by_path;
  // Modules (misc KERNEL, by their .ko path or "[name]"): perf read their
  // ids from /sys/module/<name>/notes when it synthesized their records,
  // from the loaded module, not from the path; a module's MMAP record
  // carries none.
  std::map<std::string, BuildId, std::less<>> module_by_path;
  std::set<std::string> ambiguous;
  BuildId kernel_id;
  for (const BuildIdEntry& e : r.build_ids()) {
    if (e.misc == PERF_RECORD_MISC_GUEST_KERNEL) continue;
    const bool kernel = e.misc == PERF_RECORD_MISC_KERNEL;
    if (kernel &&
        (e.filename.rfind(kKernelName, 0) == 0 || e.filename.find("vmlinux") != std::string::npos)) {
      kernel_id = e.build_id;
      continue;
    }
    auto [it, inserted] = (kernel ? module_by_path : by_path).emplace(e.filename, e.build_id);
    if (!inserted && it->second != e.build_id) ambiguous.insert(e.filename);
  }
  for (const std::string& path : ambiguous) {
    by_path.erase(path);
    module_by_path.erase(path);
  }
  if (ours) {
    by_path.clear();
    module_by_path.clear();
  }
  // A file is read front to back, up to twice (the scan below, then the
  // replay): the pages behind the reader are given back as it goes, every
  // 64 MiB, so a capture larger than memory does not stay resident.
  constexpr size_t kDropEvery = size_t{64} << 20;
  // What the replay needs to know of the whole file first, in one scan:
  // - with build IDs by path from perf's table: which paths name one file
  //   throughout (PathFiles);
  // - for a perf-written file, did perf follow every task?  Only then are
  //   its KSYMBOL records every program's coming and going (a per-task
  //   perf record gets those of the profiled tasks: a program another task
  //   loads, or one freed from an RCU callback, is missing, and its range
  //   keeps the last name it had).  perf record writes its thread map
  //   first: system-wide it is one entry, pid -1.
  const bool want_files = !by_path.empty(), want_ksymbols = !ours;
  PathFiles files;
  bool ksymbols = false, thread_map = false, per_task = false;
  if (want_files || want_ksymbols) {
    const uint8_t* dropped = r.data().data();
    // Inline (forced: GCC called it), and out at once for a sample: the
    // scan is a pass over every record of the file.
    r.ForEachRecord([&](Bytes rec) __attribute__((always_inline)) {
      if (static_cast<size_t>(rec.data() - dropped) >= kDropEvery) [[unlikely]] {
        r.DropPagesBefore(rec.data());
        dropped = rec.data();
      }
      perf_event_header h;
      if (!ReadHeader(rec, &h) || h.type == PERF_RECORD_SAMPLE) return;
      if (want_files && (h.type == PERF_RECORD_MMAP || h.type == PERF_RECORD_MMAP2)) {
        Record d;
        if (DecodeRecord(rec, format_of(rec), &d) == DecodeStatus::kOk)
          files.Add(std::get<MmapRecord>(d));
      }
      if (!want_ksymbols) return;
      if (h.type == PERF_RECORD_KSYMBOL) ksymbols = true;
      if (h.type != kRecordThreadMap || rec.size() < 16) return;
      thread_map = true;
      uint64_t nr;
      std::memcpy(&nr, rec.data() + 8, 8);
      for (uint64_t i = 0; i < nr && 16 + (i + 1) * 24 <= rec.size(); ++i) {
        uint64_t pid;
        std::memcpy(&pid, rec.data() + 16 + i * 24, 8);
        if (pid != ~uint64_t{0}) per_task = true;
      }
    });
    r.DropPagesBefore(r.data().data() + r.data().size());
  }
  if (want_files)
    std::erase_if(by_path, [&](const auto& entry) { return !files.OneFile(entry.first); });
  if (want_ksymbols && ksymbols && per_task)
    bpf_untracked = "perf recorded the profiled tasks only (its thread map names them), so "
                    "its KSYMBOL records miss the BPF programs other tasks loaded or unloaded";
  else if (want_ksymbols && ksymbols && !thread_map)
    bpf_untracked = "the capture does not say whether it followed every task (no thread map "
                    "record), so its KSYMBOL records may miss programs' coming and going";

  ProfileOptions po;
  po.callchains = options.callchains;
  po.sample_frames = options.sample_frames;
  po.controls = options.controls;
  po.script = options.script;
  po.kernel_build_id = kernel_id;
  po.overrides = &overrides;
  po.path_build_id = [&by_path](std::string_view path) {
    auto it = by_path.find(path);
    return it == by_path.end() ? BuildId() : it->second;
  };
  po.module_build_id = [&module_by_path](std::string_view path) {
    auto it = module_by_path.find(path);
    return it == module_by_path.end() ? BuildId() : it->second;
  };
  std::vector<std::string> unsampled;
  {
    std::vector<perf_event_attr> attrs;
    std::vector<std::vector<uint64_t>> ids;
    for (const PerfFileAttr& a : r.attrs()) {
      attrs.push_back(a.attr);
      ids.push_back(a.ids);
    }
    CaptureEventsOf events = EventsOf(attrs, ids);
    po.events = std::move(events.events);
    po.event_of_id = std::move(events.event_of_id);
    unsampled = std::move(events.unsampled);
  }
  // perf's sections, whoever wrote them; a malformed entry describes
  // nothing (its samples keep the KSYMBOL's name, without lines).
  uint64_t bad_bpf = 0;
  BpfPrograms bpf = BpfPrograms::FromFeatures(r.feature(kFeatureBpfProgInfo),
                                              r.feature(kFeatureBpfBtf), &bad_bpf);
  for (BpfNotRead& n : bpf_not_read) bpf.NotRead(std::move(n));
  if (bad_bpf != 0)
    bpf.NotRead({0, {}, fmt::format("{} malformed entries of the capture's BPF program sections "
                                    "were left out", bad_bpf)});
  po.bpf_programs = &bpf;
  po.bpf_untracked = bpf_untracked;
  Profile profile(po);

  RecordSorter sorter;
  const SampleLayout* layout = nullptr;  // the profile's
  // In batches of one format each.
  auto process = [&](std::span<const Bytes> batch) {
    while (!batch.empty()) {
      const SampleLayout& l = format_of(batch[0]);
      if (&l != layout) profile.SetFormat(*(layout = &l));
      size_t n = 1;
      while (n < batch.size() && &format_of(batch[n]) == layout) ++n;
      profile.ProcessBatch(batch.first(n));
      batch = batch.subspan(n);
    }
  };
  const uint8_t* dropped = r.data().data();
  uint64_t framing_errors = r.ForEachRecord([&](Bytes rec) {
    perf_event_header h;
    if (!ReadHeader(rec, &h)) return;
    if (h.type == kRecordFinishedRound) {
      sorter.FinishRound(process);
      if (static_cast<size_t>(rec.data() - dropped) >= kDropEvery) {
        // Only what no pending record points into.
        const uint8_t* low = sorter.LowestView();
        const uint8_t* upto = low != nullptr && low < rec.data() ? low : rec.data();
        if (upto > dropped) {
          r.DropPagesBefore(upto);
          dropped = upto;
        }
      }
      return;
    }
    sorter.PushView(RecordTime(rec, format_of(rec)), rec);  // the file stays mapped
  });
  sorter.Flush(process);
  profile.SetChangedKernelModules(changed_modules);

  SymbolSearch search = SearchFor(options.cache_dir);
  search.kernel_notes = options.kernel_notes;
  if (options.kernel_notes.empty()) {
    // Nothing of the running kernel: not its modules either.
    search.kallsyms.clear();
    search.modules_dir.clear();
  }
  std::optional<DebuginfodFetcher> debuginfod;
  if (DebuginfodUrlsSet(options.debuginfod_urls)) {
    DebuginfodOptions d;
    d.urls = options.debuginfod_urls;
    d.budget = options.debuginfod_budget;
    d.cache_dir = options.cache_dir;
    d.on_warning = options.on_warning;
    search.debuginfod = &debuginfod.emplace(std::move(d), MakeLibDebuginfodTransport());
  }
  DsoStore store(search);
  Symbolizer symbolizer(store);
  symbolizer.SetPerfMaps(&perf_maps);
  ReportModel model = profile.BuildReport(symbolizer, mode);
  profile.DescribeBpfPrograms(bpf, model);
  model.symbol_files = SymbolFilesOf(store);
  model.debuginfod_failed = debuginfod && debuginfod->failed();
  DescribePerfMaps(perf_maps, &model.perf_maps, &model.perf_maps_refused);
  {
    std::vector<perf_event_attr> attrs;
    for (const PerfFileAttr& a : r.attrs()) {
      attrs.push_back(a.attr);
      if (a.attr.sample_type & PERF_SAMPLE_CALLCHAIN) model.callchains = true;
    }
    model.event = SampledEventOf(attrs);
  }
  model.unsampled_events = std::move(unsampled);
  model.bad_records += framing_errors + ring_bad;
  model.oversized_sideband += cut_sideband;
  model.late_records = sorter.late();
  model.event_lost = event_lost;
  model.startup = startup;
  return model;
}

Result<InjectResult> RunInject(const InjectOptions& options) {
  auto file = PerfDataReader::Open(options.input);
  if (!file.ok()) return file.status();
  const PerfDataReader& r = *file;
  if (r.meta_json().empty())
    return Status::Failure(options.input +
                           ": not an mmap3-reader capture (perf's own files need no conversion)");
  auto formats = FileFormats::Create(r.attrs());
  if (!formats.ok()) return Status::Failure(options.input + ": " + formats.status().ToString());

  std::vector<PerfFileAttr> attrs = r.attrs();
  for (PerfFileAttr& a : attrs) {
    if (!perf_mmap3_attr_test(&a.attr)) continue;
    perf_mmap3_attr_clear(&a.attr);
    a.attr.mmap = 1;
    a.attr.mmap2 = 1;
    a.attr.build_id = 1;
  }
  // The writer names the output only once it is complete (see perf_data.h):
  // the output may be the input (converted in place; the reader maps the
  // old inode), a failure leaves no half-written file behind, and no
  // existing file (the input included) is ever truncated.
  auto w = PerfDataWriter::Create(options.output, std::move(attrs));
  if (!w.ok()) return w.status();
  PerfDataWriter& writer = *w;

  InjectResult result;
  Status status;
  std::vector<uint8_t> out;
  result.framing_errors = r.ForEachRecord([&](Bytes rec) {
    if (!status.ok()) return;
    perf_event_header h;
    ReadHeader(rec, &h);
    if (h.type != kRecordMmap3) {
      // perf takes a record's trailer from its end: one the kernel made
      // longer than its contents (see SampleIdOffset()) goes without the
      // bytes after its trailer, which a capture older than record's cut
      // holds.
      status = CutToContents(rec, formats->For(rec).trailer_size, &out) ? writer.Write(out)
                                                                          : writer.Write(rec);
      ++result.records;
      return;
    }
    const SampleLayout& l = formats->For(rec);
    const SampleFormat& f = l.format;
    Record decoded;
    if (DecodeRecord(rec, l, &decoded) != DecodeStatus::kOk) {
      ++result.dropped;
      return;
    }
    MmapRecord m = std::get<MmapRecord>(decoded);
    // The body is re-encoded; the sample_id trailer is kept byte for byte.
    const SampleFormat body{f.sample_type, f.read_format, false};
    if (m.mmap3_flags & PERF_MMAP3_UNLOADED) {
      // MMAP2 cannot say "gone", and as a record it would say the module
      // was loaded there again.  perf removes the kernel map at the address
      // of a KSYMBOL unregister, which is what it needs: without it, a
      // module loaded later at that address would be found behind the old
      // one's map.
      KsymbolRecord k;
      k.addr = m.start;
      k.len = static_cast<uint32_t>(std::min<uint64_t>(m.len, UINT32_MAX));
      k.ksym_type = PERF_RECORD_KSYMBOL_TYPE_UNKNOWN;
      k.unregister = true;
      k.name = m.filename;
      out = EncodeKsymbol(k, body);
      ++result.unloads;
    } else {
      m.format = m.build_id.empty() ? MmapFormat::kMmap2 : MmapFormat::kMmap2BuildId;
      out = EncodeMmap(m, body);
    }
    const size_t trailer = l.trailer_size;
    out.insert(out.end(), rec.end() - static_cast<ptrdiff_t>(trailer), rec.end());
    const uint16_t size = static_cast<uint16_t>(out.size());
    std::memcpy(out.data() + offsetof(perf_event_header, size), &size, sizeof(size));
    status = writer.Write(out);
    ++result.records;
    if (!(m.mmap3_flags & PERF_MMAP3_UNLOADED)) {
      ++result.converted;
      if (!m.build_id.empty()) ++result.with_build_id;
    }
  });
  // Without a single record (the first one cannot be framed, or every one
  // was an undecodable MMAP3) the copy would have an empty data section,
  // which no reader accepts: that is a failure, not a converted file.
  if (status.ok() && result.records == 0)
    status = Status::Failure(options.input + ": no record to convert (" +
                             std::to_string(result.framing_errors) + " framing errors, " +
                             std::to_string(result.dropped) + " undecodable MMAP3 records)");
  if (status.ok()) {
    json meta = json::parse(r.meta_json(), nullptr, /*allow_exceptions=*/false);
    if (meta.is_object()) meta["injected"] = "MMAP3 records rewritten as MMAP2 for perf";
    // The BPF programs' sections go along as they were (perf's layout).
    std::vector<std::pair<int, std::vector<uint8_t>>> more;
    for (int bit : {kFeatureBpfProgInfo, kFeatureBpfBtf}) {
      const Bytes f = r.feature(bit);
      more.emplace_back(bit, std::vector<uint8_t>(f.begin(), f.end()));
    }
    status = writer.Finish(r.build_ids(), meta.is_object() ? meta.dump() : r.meta_json(),
                           std::move(more));
  }
  if (!status.ok()) return status;
  return result;
}

}  // namespace mmap3
