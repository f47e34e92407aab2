#include "commands.h"

#include <nlohmann/json.hpp>
#include <cstring>
#include <set>
#include <unordered_map>

#include "dso_store.h"
#include "perf_data.h"
#include "profile.h"
#include "record_sorter.h"
#include "record_writer.h"
#include "symbolizer.h"

namespace mmap3 {
namespace {

using nlohmann::json;

constexpr const char* kKernelName = "[kernel.kallsyms]";

class RecordSink : public CaptureSink {
 public:
  RecordSink(Profile& profile, PerfDataWriter* writer, SampleFormat format,
             const std::function<void(const CaptureStats&)>& on_status)
      : profile_(profile), writer_(writer), format_(format), on_status_(on_status) {}

  void OnRecord(Bytes record) override {
    if (writer_ != nullptr && status_.ok()) status_ = writer_->Write(record);
    sorter_.Push(RecordTime(record, format_), record);
  }
  void OnRoundEnd() override {
    if (writer_ != nullptr && status_.ok()) status_ = writer_->Write(EncodeFinishedRound());
    sorter_.FinishRound([this](Bytes r) { profile_.Process(r); });
  }
  void OnTick(const CaptureStats& stats) override {
    if (on_status_) on_status_(stats);
  }
  void Finish() {
    sorter_.Flush([this](Bytes r) { profile_.Process(r); });
  }
  const Status& status() const { return status_; }

 private:
  Profile& profile_;
  PerfDataWriter* writer_;
  SampleFormat format_;
  const std::function<void(const CaptureStats&)>& on_status_;
  RecordSorter sorter_;
  Status status_;
};

json MetaJson(const Capture& capture, const SourceOverrides& overrides) {
  json o = json::array();
  overrides.ForEach([&](uint32_t pid, uint64_t start, const BuildId& id, BuildIdSource source) {
    o.push_back({{"pid", pid}, {"start", start}, {"build_id", id.Hex()},
                 {"source", BuildIdSourceName(source)}});
  });
  const CaptureStats& s = capture.stats();
  return {{"tool", "mmap3-reader"},
          {"mode", CaptureModeName(capture.mode())},
          {"mode_reason", capture.mode_reason()},
          {"overrides", o},
          {"event_lost", s.event_lost},
          {"lost_records", s.lost_records},
          {"bad_size", s.bad_size},
          {"filled_build_ids", s.filled_build_ids},
          {"fill_failures", s.fill_failures}};
}

SymbolSearch SearchFor(const std::string& cache_dir) {
  SymbolSearch search;
  search.cache_dir = cache_dir;
  return search;
}

}  // namespace

Result<RecordResult> RunRecord(const RecordOptions& options) {
  std::unique_ptr<BuildIdCache> cache;
  CaptureOptions capture_options = options.capture;
  if (!options.cache_dir.empty()) {
    cache = std::make_unique<BuildIdCache>(options.cache_dir);
    cache->Start();
    capture_options.cache = cache.get();
  }
  auto capture = Capture::Create(capture_options);
  if (!capture.ok()) return capture.status();
  Capture& c = **capture;

  std::optional<PerfDataWriter> writer;
  if (!options.output.empty()) {
    auto w = PerfDataWriter::Create(options.output,
                                    {PerfFileAttr{c.attr(), c.event_ids(false)},
                                     PerfFileAttr{c.sideband_attr(), c.event_ids(true)}});
    if (!w.ok()) return w.status();
    writer.emplace(std::move(*w));
  }

  ProfileOptions profile_options;
  profile_options.callchains = options.callchains;
  profile_options.kernel_build_id = ReadKernelBuildId("/sys/kernel/notes");
  profile_options.overrides = &c.overrides();
  Profile profile(profile_options);
  profile.SetFormat(c.format());

  RecordSink sink(profile, writer ? &*writer : nullptr, c.format(), options.on_status);
  Status run = c.Run(sink);
  sink.Finish();
  if (!run.ok()) return run;
  if (!sink.status().ok()) return sink.status();

  RecordResult result;
  result.mode = c.mode();
  result.mode_reason = c.mode_reason();
  result.stats = c.stats();
  result.command_status = c.command_status();
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
    if (Status s = writer->Finish(table, MetaJson(c, c.overrides()).dump()); !s.ok()) return s;
    return result;
  }
  DsoStore store(SearchFor(options.cache_dir));
  Symbolizer symbolizer(store);
  result.report = profile.BuildReport(symbolizer, CaptureModeName(c.mode()));
  result.report.event_lost = static_cast<int64_t>(c.stats().event_lost);
  result.report.bad_records += c.stats().bad_size;  // framing errors in the ring buffers
  return result;
}

Result<ReportModel> RunReport(const ReportOptions& options) {
  auto file = PerfDataReader::Open(options.input);
  if (!file.ok()) return file.status();
  const PerfDataReader& r = *file;
  if (r.HasFeature(kFeatureCompressed))
    return Status::Failure(options.input + ": compressed (zstd) perf.data is not supported; "
                                           "re-record with perf record -z off");

  // Records are parsed with their event's sample format.  With one format
  // for all events that is trivial; otherwise every event must carry
  // PERF_SAMPLE_IDENTIFIER (perf adds it whenever formats differ), whose
  // position does not depend on the format: the first u64 of a sample, the
  // last u64 of any other record.
  const perf_event_attr& a0 = r.attrs()[0].attr;
  const SampleFormat first{a0.sample_type, a0.read_format, a0.sample_id_all != 0};
  bool uniform = true, identified = true;
  std::unordered_map<uint64_t, SampleFormat> format_by_id;
  for (const PerfFileAttr& a : r.attrs()) {
    SampleFormat f{a.attr.sample_type, a.attr.read_format, a.attr.sample_id_all != 0};
    if (f.sample_type != first.sample_type || f.read_format != first.read_format ||
        f.sample_id_all != first.sample_id_all)
      uniform = false;
    if (!(f.sample_type & PERF_SAMPLE_IDENTIFIER)) identified = false;
    for (uint64_t id : a.ids) format_by_id[id] = f;
  }
  if (!uniform && !identified)
    return Status::Failure(options.input +
                           ": events with different sample formats and no identifier");
  auto format_of = [&](Bytes rec) -> SampleFormat {
    if (uniform) return first;
    perf_event_header h;
    if (!ReadHeader(rec, &h) || rec.size() < sizeof(h) + 8) return first;
    uint64_t id;
    if (h.type == PERF_RECORD_SAMPLE) {
      std::memcpy(&id, rec.data() + sizeof(h), 8);
    } else if (first.sample_id_all && h.type < kRecordUserTypeStart) {
      std::memcpy(&id, rec.data() + rec.size() - 8, 8);
    } else {
      return first;
    }
    auto it = format_by_id.find(id);
    return it == format_by_id.end() ? first : it->second;  // id 0: synthesized
  };
  std::string mode = "perf.data";
  SourceOverrides overrides;
  int64_t event_lost = -1;
  uint64_t ring_bad = 0;
  if (!r.meta_json().empty()) {
    json meta = json::parse(r.meta_json(), nullptr, /*allow_exceptions=*/false);
    if (meta.is_object()) {
      mode = meta.value("mode", mode);
      if (meta.contains("event_lost") && meta["event_lost"].is_number())
        event_lost = meta["event_lost"].get<int64_t>();
      if (meta.contains("bad_size") && meta["bad_size"].is_number_unsigned())
        ring_bad = meta["bad_size"].get<uint64_t>();
      if (meta.contains("overrides") && meta["overrides"].is_array()) {
        for (const json& o : meta["overrides"]) {
          if (!o.is_object()) continue;
          auto id = BuildId::FromHex(o.value("build_id", ""));
          if (!id || o.value("source", "") != "map_files") continue;
          overrides.Add(o.value("pid", 0u), o.value("start", uint64_t{0}), *id,
                        BuildIdSource::kMapFiles);
        }
      }
    }
  }

  // perf's build-id table is keyed by path: a path that was replaced during
  // the capture appears with several ids, and any one of them may be wrong
  // for a given mapping.  Use it only for files perf wrote (ours carry the
  // id in every mapping that has one), and only for paths with one id.
  const bool ours = !r.meta_json().empty();
  std::map<std::string, BuildId, std::less<>> by_path;
  std::set<std::string> ambiguous;
  BuildId kernel_id;
  for (const BuildIdEntry& e : r.build_ids()) {
    if (e.misc == PERF_RECORD_MISC_KERNEL || e.misc == PERF_RECORD_MISC_GUEST_KERNEL) {
      if (e.filename.rfind(kKernelName, 0) == 0 || e.filename.find("vmlinux") != std::string::npos)
        kernel_id = e.build_id;
      continue;
    }
    auto [it, inserted] = by_path.emplace(e.filename, e.build_id);
    if (!inserted && it->second != e.build_id) ambiguous.insert(e.filename);
  }
  for (const std::string& path : ambiguous) by_path.erase(path);
  if (ours) by_path.clear();

  ProfileOptions po;
  po.callchains = options.callchains;
  po.kernel_build_id = kernel_id;
  po.overrides = &overrides;
  po.path_build_id = [&by_path](std::string_view path) {
    auto it = by_path.find(path);
    return it == by_path.end() ? BuildId() : it->second;
  };
  Profile profile(po);

  RecordSorter sorter;
  auto process = [&](Bytes rec) {
    profile.SetFormat(format_of(rec));
    profile.Process(rec);
  };
  uint64_t framing_errors = r.ForEachRecord([&](Bytes rec) {
    perf_event_header h;
    if (!ReadHeader(rec, &h)) return;
    if (h.type == kRecordFinishedRound) {
      sorter.FinishRound(process);
      return;
    }
    sorter.Push(RecordTime(rec, format_of(rec)), rec);
  });
  sorter.Flush(process);

  DsoStore store(SearchFor(options.cache_dir));
  Symbolizer symbolizer(store);
  ReportModel model = profile.BuildReport(symbolizer, mode);
  model.bad_records += framing_errors + ring_bad;
  model.event_lost = event_lost;
  return model;
}

}  // namespace mmap3
