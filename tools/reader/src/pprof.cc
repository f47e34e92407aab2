#include "pprof.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "keyed_hash.h"
#include "proto/profile.pb.h"
#include "utf8.h"

namespace mmap3 {
namespace {

namespace pb = perftools::profiles;

}  // namespace

// profile.proto's strings are proto3 strings, which must be UTF-8 (strict
// decoders refuse the file otherwise), and file names and comms are bytes.
// A string that is not UTF-8 has each stray byte written as \xNN and each
// backslash as \\, so two names that differ stay two names (pprof merges
// functions of one name).
std::string PprofString(const std::string& s) { return EscapeNonUtf8(s); }

namespace {

// profile.proto keeps every string once, in string_table; fields hold
// indices, and index 0 is "".
class StringTable {
 public:
  explicit StringTable(pb::Profile* profile) : profile_(profile) { Index(""); }
  int64_t Index(const std::string& raw) {
    std::string s = PprofString(raw);
    auto [it, inserted] = index_.try_emplace(s, static_cast<int64_t>(index_.size()));
    if (inserted) profile_->add_string_table(s);
    return it->second;
  }

 private:
  pb::Profile* profile_;
  KeyedMap<std::string, int64_t> index_;
};

}  // namespace

std::string EncodePprofProto(const ReportModel& m) {
  pb::Profile p;
  StringTable strings(&p);
  auto value_type = [&](pb::ValueType* v, const std::string& type, const std::string& unit) {
    v->set_type(strings.Index(type));
    v->set_unit(strings.Index(unit));
  };
  // One event: samples/count and its period.  Several: a pair per event,
  // "<event>-samples"/count and "<event>"/unit, each sample with values in
  // its own event's pair only (and 0 in the others), so that pprof never
  // adds up periods of different events; the first event's period is the
  // default (-sample_index=page-faults picks another).
  const bool several = m.events.size() > 1;
  if (!several) {
    value_type(p.add_sample_type(), "samples", "count");
    value_type(p.add_sample_type(), m.event.name, m.event.unit);
    p.set_default_sample_type(strings.Index(m.event.name));
    value_type(p.mutable_period_type(), m.event.name, m.event.unit);
    p.set_period(static_cast<int64_t>(m.event.period));
  } else {
    for (const ReportEvent& e : m.events) {
      value_type(p.add_sample_type(), e.name + "-samples", "count");
      value_type(p.add_sample_type(), e.name, e.sampled.unit);
    }
    p.set_default_sample_type(strings.Index(m.events[0].name));
    value_type(p.mutable_period_type(), m.events[0].name, m.events[0].sampled.unit);
    p.set_period(static_cast<int64_t>(m.events[0].sampled.period));
  }

  auto comment = [&](const std::string& text) { p.add_comment(strings.Index(text)); };
  comment(fmt::format("mmap3-reader capture mode: {}", m.mode));
  // What the text report says above its table, warnings included.
  for (const std::string& note : ReportNotes(m)) comment(note);
  if (!several && !m.event.note.empty()) comment(m.event.note);
  if (several) {
    for (const ReportEvent& e : m.events)
      if (!e.sampled.note.empty()) comment(e.sampled.note);
  }

  std::set<std::string> sources;
  for (size_t i = 0; i < m.frame_mappings.size(); ++i) {
    const FrameMapping& fm = m.frame_mappings[i];
    pb::Mapping* mp = p.add_mapping();
    mp->set_id(i + 1);
    mp->set_memory_start(fm.start);
    mp->set_memory_limit(fm.limit);
    mp->set_file_offset(fm.file_offset);
    mp->set_filename(strings.Index(fm.path));
    if (!fm.build_id.empty()) mp->set_build_id(strings.Index(fm.build_id.Hex()));
    mp->set_has_functions(fm.has_symbols);
    // Once per file, not per mapping: an -a capture maps libc hundreds of
    // times, and pprof prints every comment above its reports.
    std::string source = fmt::format("build-id of {}: {} (source {})", fm.path,
                                     fm.build_id.empty() ? "none" : fm.build_id.Hex(),
                                     BuildIdSourceName(fm.source));
    if (sources.insert(source).second) comment(source);
  }

  // A function is a symbol of one object: the contents a build-id names
  // (copies of one binary at several paths are one object), or the path
  // where there is no build-id.  pprof adds up functions by name, so a name
  // that two objects have (two versions of a replaced library, strlen in
  // the kernel and in ld.so) is given its object in the name, or their
  // samples would be shown as one function's; system_name keeps the symbol.
  auto mapping_of = [&](const FrameLocation& fl) -> const FrameMapping* {
    if (fl.mapping == 0 || fl.mapping > m.frame_mappings.size()) return nullptr;
    return &m.frame_mappings[fl.mapping - 1];
  };
  std::vector<std::string> object(m.frame_locations.size());
  KeyedMap<std::string, std::set<std::string>> objects_of_name;
  for (size_t i = 0; i < m.frame_locations.size(); ++i) {
    const FrameLocation& fl = m.frame_locations[i];
    if (fl.status != SymbolStatus::kFound) continue;
    if (const FrameMapping* fm = mapping_of(fl))
      object[i] = fm->build_id.empty() ? "path " + fm->path : "build-id " + fm->build_id.Hex();
    objects_of_name[fl.symbol].insert(object[i]);
  }
  auto display_name = [&](const FrameLocation& fl) {
    const FrameMapping* fm = mapping_of(fl);
    if (objects_of_name[fl.symbol].size() < 2 || fm == nullptr) return fl.symbol;
    const std::string base = fm->path.substr(fm->path.rfind('/') + 1);
    return fm->build_id.empty()
               ? fmt::format("{} [{}]", fl.symbol, base)
               : fmt::format("{} [{} {}]", fl.symbol, base, fm->build_id.Hex().substr(0, 12));
  };
  std::map<std::pair<std::string, std::string>, uint64_t> function_ids;
  for (size_t i = 0; i < m.frame_locations.size(); ++i) {
    const FrameLocation& fl = m.frame_locations[i];
    pb::Location* loc = p.add_location();
    loc->set_id(i + 1);
    loc->set_mapping_id(fl.mapping);
    loc->set_address(fl.address);
    if (fl.status != SymbolStatus::kFound) continue;  // the address says where
    auto [it, inserted] =
        function_ids.try_emplace({fl.symbol, object[i]}, function_ids.size() + 1);
    if (inserted) {
      pb::Function* f = p.add_function();
      f->set_id(it->second);
      f->set_name(strings.Index(display_name(fl)));
      f->set_system_name(strings.Index(fl.symbol));
    }
    loc->add_line()->set_function_id(it->second);
  }

  const int64_t comm_key = strings.Index("comm");
  const int64_t event_key = several ? strings.Index("event") : 0;
  for (const FrameStack& st : m.frame_stacks) {
    pb::Sample* s = p.add_sample();
    for (uint32_t l : st.locations) s->add_location_id(l + 1);
    const size_t pairs = several ? m.events.size() : 1;
    for (size_t e = 0; e < pairs; ++e) {
      const bool own = !several || e == st.event;
      s->add_value(own ? static_cast<int64_t>(st.samples) : 0);
      s->add_value(own ? static_cast<int64_t>(st.period) : 0);
    }
    pb::Label* label = s->add_label();
    label->set_key(comm_key);
    label->set_str(strings.Index(st.comm));
    if (several && st.event < m.events.size()) {
      pb::Label* event = s->add_label();
      event->set_key(event_key);
      event->set_str(strings.Index(m.events[st.event].name));
    }
  }
  return p.SerializeAsString();
}

Result<std::string> EncodePprof(const ReportModel& model) {
  const std::string raw = EncodePprofProto(model);
  z_stream z;
  std::memset(&z, 0, sizeof(z));
  // windowBits 15 + 16: a gzip header and trailer, as pprof expects.
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return Status::Failure("pprof: zlib deflateInit2 failed");
  std::string out;
  char chunk[1 << 16];
  size_t consumed = 0;
  int rc = Z_OK;
  // zlib counts in uInt (32 bits): the input is fed in pieces.
  while (rc == Z_OK) {
    if (z.avail_in == 0 && consumed < raw.size()) {
      const size_t n = std::min<size_t>(raw.size() - consumed, 1u << 30);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data() + consumed));
      z.avail_in = static_cast<uInt>(n);
      consumed += n;
    }
    z.next_out = reinterpret_cast<Bytef*>(chunk);
    z.avail_out = sizeof(chunk);
    rc = deflate(&z, consumed == raw.size() ? Z_FINISH : Z_NO_FLUSH);
    out.append(chunk, sizeof(chunk) - z.avail_out);
  }
  deflateEnd(&z);
  if (rc != Z_STREAM_END) return Status::Failure(fmt::format("pprof: zlib deflate failed ({})", rc));
  return out;
}

}  // namespace mmap3
