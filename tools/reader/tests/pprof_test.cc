// --format pprof: the written bytes are decoded with libprotobuf (the
// generated profile.pb.h) and checked against the report of the same
// profile: structure, build-ids, and that every sample is where the
// report's rows put it.
#include "pprof.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <fmt/format.h>

#include "build_id_cache.h"
#include "commands.h"
#include "files.h"
#include "fixtures.h"
#include "profile.h"
#include "proto/profile.pb.h"
#include "record_writer.h"

namespace mmap3 {
namespace {

namespace pb = perftools::profiles;
using testing::Id;
using testing::kIdV1;
using testing::kIdV2;
using testing::TempDir;

const char* kIdKernel = "4444444444444444444444444444444444444444";

const SampleFormat kFormat{PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU |
                               PERF_SAMPLE_PERIOD | PERF_SAMPLE_CALLCHAIN,
                           0, true};
constexpr uint64_t kBase = 0x7f0000000000;
constexpr uint64_t kText = 0xffffffff81000000;
const uint64_t kCtxKernel = static_cast<uint64_t>(PERF_CONTEXT_KERNEL);
const uint64_t kCtxUser = static_cast<uint64_t>(PERF_CONTEXT_USER);

using testing::Sid;

std::vector<uint8_t> Comm(uint32_t pid, const char* name, uint64_t time) {
  CommRecord c;
  c.pid = c.tid = pid;
  c.comm = name;
  c.exec = true;
  c.sample_id = Sid(pid, time);
  return EncodeComm(c, kFormat);
}

std::vector<uint8_t> Mmap(uint32_t pid, const std::string& path, const char* id, uint64_t time) {
  MmapRecord m;
  m.format = id ? MmapFormat::kMmap2BuildId : MmapFormat::kMmap2;
  m.misc = PERF_RECORD_MISC_USER;
  m.pid = m.tid = pid;
  m.start = kBase;
  m.len = 0x10000;
  if (id) m.build_id = Id(id);
  m.filename = path;
  m.sample_id = Sid(pid, time);
  return EncodeMmap(m, kFormat);
}

// The kernel image as record writes it: pgoff is where _text is.
std::vector<uint8_t> KernelMmap(uint64_t time) {
  MmapRecord m;
  m.format = MmapFormat::kMmap;
  m.misc = PERF_RECORD_MISC_KERNEL;
  m.pid = kKernelPid;
  m.start = kText;
  m.len = 0x2000;
  m.pgoff = kText;
  m.filename = "[kernel.kallsyms]_text";
  m.sample_id = Sid(kKernelPid, time);
  return EncodeMmap(m, kFormat);
}

std::vector<uint8_t> Sample(uint32_t pid, uint64_t ip, uint64_t time, std::vector<uint64_t> chain,
                            bool kernel, uint64_t period) {
  SampleRecord s;
  s.misc = kernel ? PERF_RECORD_MISC_KERNEL : PERF_RECORD_MISC_USER;
  s.pid = s.tid = pid;
  s.ip = ip;
  s.time = time;
  s.period = period;
  return EncodeSample(s, chain, kFormat);
}

std::string Gunzip(const std::string& gz) {
  z_stream z;
  std::memset(&z, 0, sizeof(z));
  EXPECT_EQ(inflateInit2(&z, 15 + 16), Z_OK);  // gzip only, not raw zlib
  std::string out;
  char buf[4096];
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof(buf) - z.avail_out);
  }
  EXPECT_EQ(rc, Z_STREAM_END) << "not a complete gzip stream";
  EXPECT_EQ(z.avail_in, 0u) << "bytes after the gzip stream";
  inflateEnd(&z);
  return out;
}

// The profile in `bytes` (a .pb.gz), decoded by libprotobuf.
pb::Profile Decode(const std::string& bytes) {
  pb::Profile p;
  EXPECT_GE(bytes.size(), 2u);
  EXPECT_EQ(bytes.substr(0, 2), std::string("\x1f\x8b")) << "no gzip magic";
  EXPECT_TRUE(p.ParseFromString(Gunzip(bytes)));
  return p;
}

const std::string& Str(const pb::Profile& p, int64_t i) {
  static const std::string kBad = "<bad string index>";
  return i >= 0 && i < p.string_table_size() ? p.string_table(static_cast<int>(i)) : kBad;
}

// What a sample's leaf is, as the report's rows key it: comm, path,
// build-id, and the symbol when one was found ("" otherwise).
using LeafKey = std::tuple<std::string, std::string, std::string, std::string>;

// Checks the structure every profile must have (ids unique and nonzero,
// every reference resolves, strings in range) and returns the samples per
// leaf.  `p` must be well formed or the test fails.
std::map<LeafKey, std::pair<int64_t, int64_t>> CheckAndSumLeaves(const pb::Profile& p) {
  std::map<LeafKey, std::pair<int64_t, int64_t>> sums;
  EXPECT_GE(p.string_table_size(), 1);
  if (p.string_table_size() > 0) {
    EXPECT_EQ(p.string_table(0), "");
  }
  EXPECT_EQ(p.sample_type_size(), 2);
  std::map<uint64_t, const pb::Mapping*> mappings;
  for (const pb::Mapping& m : p.mapping()) {
    EXPECT_NE(m.id(), 0u);
    EXPECT_TRUE(mappings.emplace(m.id(), &m).second) << "mapping id " << m.id() << " twice";
  }
  std::map<uint64_t, const pb::Function*> functions;
  for (const pb::Function& f : p.function()) {
    EXPECT_NE(f.id(), 0u);
    EXPECT_TRUE(functions.emplace(f.id(), &f).second) << "function id " << f.id() << " twice";
  }
  std::map<uint64_t, const pb::Location*> locations;
  std::set<std::pair<uint64_t, uint64_t>> mapping_addresses;
  for (const pb::Location& l : p.location()) {
    EXPECT_NE(l.id(), 0u);
    EXPECT_TRUE(locations.emplace(l.id(), &l).second) << "location id " << l.id() << " twice";
    EXPECT_TRUE(mapping_addresses.insert({l.mapping_id(), l.address()}).second)
        << "two locations for mapping " << l.mapping_id() << " address " << l.address();
    if (l.mapping_id() != 0) {
      EXPECT_TRUE(mappings.count(l.mapping_id())) << l.mapping_id();
    }
    for (const pb::Line& line : l.line()) EXPECT_TRUE(functions.count(line.function_id()));
  }
  for (const pb::Sample& s : p.sample()) {
    EXPECT_EQ(s.value_size(), 2);
    EXPECT_GE(s.location_id_size(), 1);
    std::string comm;
    for (const pb::Label& label : s.label())
      if (Str(p, label.key()) == "comm") comm = Str(p, label.str());
    for (uint64_t id : s.location_id()) EXPECT_TRUE(locations.count(id)) << "location " << id;
    if (s.location_id_size() < 1 || s.value_size() != 2 || !locations.count(s.location_id(0)))
      continue;
    const pb::Location& leaf = *locations[s.location_id(0)];
    std::string path, id, symbol;
    if (leaf.mapping_id() != 0 && mappings.count(leaf.mapping_id())) {
      path = Str(p, mappings[leaf.mapping_id()]->filename());
      id = Str(p, mappings[leaf.mapping_id()]->build_id());
    }
    if (leaf.line_size() > 0 && functions.count(leaf.line(0).function_id()))
      symbol = Str(p, functions[leaf.line(0).function_id()]->name());
    auto& sum = sums[{comm, path, id, symbol}];
    sum.first += s.value(0);
    sum.second += s.value(1);
  }
  return sums;
}

// The same per leaf, from the report's rows.
std::map<LeafKey, std::pair<int64_t, int64_t>> RowLeaves(const ReportModel& m) {
  std::map<LeafKey, std::pair<int64_t, int64_t>> sums;
  for (const ReportRow& r : m.rows) {
    const bool mapped = r.symbol_status != SymbolStatus::kNoMapping;
    auto& sum = sums[{r.comm, mapped ? r.path : "", r.build_id.Hex(),
                      r.symbol_status == SymbolStatus::kFound ? r.symbol : ""}];
    sum.first += static_cast<int64_t>(r.samples);
    sum.second += static_cast<int64_t>(r.period);
  }
  return sums;
}

// procA runs version 1 of libdemo.so and procB version 2, at the same path
// and the same address; procA also spends time in the kernel under
// demo_only_v1, and procB at an address in no mapping.
class PprofTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.File("libdemo.so");
    for (int v = 1; v <= 2; ++v) {
      const std::string f = dir_.File(fmt::format("v{}.so", v));
      ASSERT_TRUE(testing::BuildSharedLibrary(f, fmt::format("demo_common demo_only_v{}", v),
                                              v == 1 ? kIdV1 : kIdV2));
      UniqueFd fd(open(f.c_str(), O_RDONLY | O_CLOEXEC));
      ASSERT_TRUE(fd.valid());
      BuildIdCache cache(cache_.path());
      ASSERT_TRUE(cache.Insert(Id(v == 1 ? kIdV1 : kIdV2), path_, fd.get()).ok());
      only_[v] = testing::FunctionFileOffset(f, fmt::format("demo_only_v{}", v));
      common_[v] = testing::FunctionFileOffset(f, "demo_common");
      ASSERT_NE(only_[v], 0u);
      ASSERT_NE(common_[v], 0u);
    }
    // Neither version is at the path: only the cache has them.
    search_.debug_dir = "";
    search_.cache_dir = cache_.path();
    search_.kernel_notes = dir_.File("notes");
    search_.kallsyms = dir_.File("kallsyms");
    search_.modules_dir = "";
    testing::WriteFile(search_.kernel_notes, testing::BuildIdNotes(Id(kIdKernel)));
    testing::WriteFile(search_.kallsyms, testing::FakeKallsyms(kText, 0xffffffffc0000000));
  }

  // extra: also 5 samples in version 2's demo_common, and 4 in the kernel
  // with the kernel's part of the chain left out (--user-callchains).
  ReportModel Report(bool extra = false) {
    ProfileOptions o;
    o.sample_frames = true;
    o.kernel_build_id = Id(kIdKernel);
    Profile p(o);
    p.SetFormat(kFormat);
    uint64_t t = 1;
    p.Process(KernelMmap(t++));
    p.Process(Comm(100, "procA", t++));
    p.Process(Mmap(100, path_, kIdV1, t++));
    p.Process(Comm(200, "procB", t++));
    p.Process(Mmap(200, path_, kIdV2, t++));
    // 10 in demo_only_v1 called from demo_common (a return address there).
    for (int i = 0; i < 10; ++i) {
      const uint64_t ip = kBase + only_[1];
      p.Process(Sample(100, ip, t++, {kCtxUser, ip, kBase + common_[1] + 1}, false, 1000));
    }
    // 3 in the kernel's schedule, entered from demo_only_v1.
    for (int i = 0; i < 3; ++i) {
      const uint64_t ip = kText + testing::kScheduleOffset + 0x10;
      p.Process(
          Sample(100, ip, t++, {kCtxKernel, ip, kCtxUser, kBase + only_[1]}, true, 2000));
    }
    // 20 in demo_only_v2, no call chain.
    for (int i = 0; i < 20; ++i) p.Process(Sample(200, kBase + only_[2], t++, {}, false, 1000));
    // 2 in no mapping.
    for (int i = 0; i < 2; ++i) p.Process(Sample(200, 0x1234, t++, {}, false, 500));
    if (extra) {
      for (int i = 0; i < 5; ++i)
        p.Process(Sample(200, kBase + common_[2], t++, {}, false, 1000));
      // exclude_callchain_kernel: the chain starts with the user ip the
      // kernel was entered from, not with the sample's ip.
      for (int i = 0; i < 4; ++i) {
        const uint64_t ip = kText + testing::kScheduleOffset + 0x10;
        p.Process(Sample(100, ip, t++, {kCtxUser, kBase + only_[1], kBase + common_[1] + 1}, true,
                         2000));
      }
    }
    DsoStore store(search_);
    Symbolizer symbolizer(store);
    ReportModel m = p.BuildReport(symbolizer, "mmap2-build-id");
    m.event = SampledEvent{"cpu", "nanoseconds", 250000, false, ""};
    return m;
  }

  TempDir dir_, cache_;
  std::string path_;
  SymbolSearch search_;
  uint64_t only_[3] = {}, common_[3] = {};
};

TEST_F(PprofTest, EverySampleIsWhereTheReportPutsIt) {
  ReportModel m = Report();
  ASSERT_EQ(m.samples, 35u);
  auto bytes = EncodePprof(m);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  pb::Profile p = Decode(*bytes);
  auto leaves = CheckAndSumLeaves(p);
  EXPECT_EQ(leaves, RowLeaves(m));
  int64_t samples = 0, period = 0;
  for (const pb::Sample& s : p.sample()) {
    samples += s.value(0);
    period += s.value(1);
  }
  EXPECT_EQ(samples, 35);
  EXPECT_EQ(period, static_cast<int64_t>(m.period));
  EXPECT_EQ(period, 10 * 1000 + 3 * 2000 + 20 * 1000 + 2 * 500);
  // The ones the report could not attribute are on no mapping.
  const LeafKey unknown{"procB", "", "", ""};
  ASSERT_TRUE(leaves.count(unknown));
  EXPECT_EQ(leaves[unknown].first, 2);
}

TEST_F(PprofTest, EveryMappingHasItsBuildIdAndAReplacedLibraryIsTwoMappings) {
  ReportModel m = Report();
  auto bytes = EncodePprof(m);
  ASSERT_TRUE(bytes.ok());
  pb::Profile p = Decode(*bytes);
  std::map<std::string, std::set<std::string>> ids_by_path;
  for (const pb::Mapping& mp : p.mapping()) {
    const std::string path = Str(p, mp.filename());
    const std::string id = Str(p, mp.build_id());
    // Every mapping the report knows a build-id for carries it, in full.
    EXPECT_EQ(id.size(), 40u) << path;
    ids_by_path[path].insert(id);
    EXPECT_TRUE(mp.has_functions()) << path;  // a symbol was found in each
  }
  EXPECT_EQ(ids_by_path[path_], (std::set<std::string>{kIdV1, kIdV2}));
  EXPECT_EQ(ids_by_path["[kernel.kallsyms]"], std::set<std::string>{kIdKernel});
  int lib_mappings = 0;
  for (const pb::Mapping& mp : p.mapping()) {
    if (Str(p, mp.filename()) != path_) continue;
    ++lib_mappings;
    EXPECT_EQ(mp.memory_start(), kBase);
    EXPECT_EQ(mp.memory_limit(), kBase + 0x10000);
  }
  EXPECT_EQ(lib_mappings, 2);
  // Each version's samples on its own mapping, with its own symbols.
  auto leaves = CheckAndSumLeaves(p);
  EXPECT_EQ((leaves[{"procA", path_, kIdV1, "demo_only_v1"}].first), 10);
  EXPECT_EQ((leaves[{"procB", path_, kIdV2, "demo_only_v2"}].first), 20);
  EXPECT_EQ((leaves[{"procA", "[kernel.kallsyms]", kIdKernel, "schedule"}].first), 3);
}

TEST_F(PprofTest, CallChainsAreLeafFirstWithOneLocationPerMappingAndAddress) {
  ReportModel m = Report();
  auto bytes = EncodePprof(m);
  ASSERT_TRUE(bytes.ok());
  pb::Profile p = Decode(*bytes);
  std::map<uint64_t, std::string> fn;
  for (const pb::Function& f : p.function()) fn[f.id()] = Str(p, f.name());
  std::map<uint64_t, std::string> name;
  std::map<uint64_t, uint64_t> address;
  for (const pb::Location& l : p.location()) {
    name[l.id()] = l.line_size() ? fn[l.line(0).function_id()] : "";
    address[l.id()] = l.address();
  }
  std::set<std::vector<std::string>> stacks;
  for (const pb::Sample& s : p.sample()) {
    std::vector<std::string> names;
    for (uint64_t id : s.location_id()) names.push_back(name[id]);
    stacks.insert(names);
    if (names.size() == 2 && names[0] == "demo_only_v1") {
      // The caller's location is the return address less one, as looked up.
      EXPECT_EQ(address[s.location_id(0)], kBase + only_[1]);
      EXPECT_EQ(address[s.location_id(1)], kBase + common_[1]);
    }
  }
  EXPECT_TRUE(stacks.count({"demo_only_v1", "demo_common"}));
  EXPECT_TRUE(stacks.count({"schedule", "demo_only_v1"}));
  EXPECT_TRUE(stacks.count({"demo_only_v2"}));
  EXPECT_TRUE(stacks.count({""}));  // the unmapped address: no function
  // demo_only_v1 is a leaf in one stack and a caller (the user ip the
  // kernel was entered from, looked up as it is) in another: one location.
  int v1_locations = 0;
  for (const auto& [id, n] : name) v1_locations += n == "demo_only_v1";
  EXPECT_EQ(v1_locations, 1);
}

TEST_F(PprofTest, ASymbolOfTwoVersionsIsTwoFunctionsWithTwoNames) {
  // demo_common is in both versions of the library: pprof adds up
  // functions by name, so one name would put both versions' samples on one
  // row of go tool pprof -top.
  ReportModel m = Report(/*extra=*/true);
  auto bytes = EncodePprof(m);
  ASSERT_TRUE(bytes.ok());
  pb::Profile p = Decode(*bytes);
  std::map<uint64_t, const pb::Function*> fn;
  for (const pb::Function& f : p.function()) fn[f.id()] = &f;
  std::map<uint64_t, std::string> id_of_mapping;
  for (const pb::Mapping& mp : p.mapping()) id_of_mapping[mp.id()] = Str(p, mp.build_id());
  std::map<std::string, std::set<std::string>> names_by_version;
  for (const pb::Location& l : p.location()) {
    if (!l.line_size()) continue;
    const pb::Function* f = fn[l.line(0).function_id()];
    ASSERT_NE(f, nullptr);
    if (Str(p, f->system_name()) == "demo_common")
      names_by_version[id_of_mapping[l.mapping_id()]].insert(Str(p, f->name()));
  }
  ASSERT_EQ(names_by_version.size(), 2u);
  const std::set<std::string> v1 = names_by_version[kIdV1], v2 = names_by_version[kIdV2];
  ASSERT_EQ(v1.size(), 1u);
  ASSERT_EQ(v2.size(), 1u);
  EXPECT_NE(*v1.begin(), *v2.begin());
  EXPECT_NE(v1.begin()->find(std::string(kIdV1).substr(0, 12)), std::string::npos) << *v1.begin();
  EXPECT_NE(v2.begin()->find(std::string(kIdV2).substr(0, 12)), std::string::npos) << *v2.begin();
  // A name only one object has stays as it is.
  bool plain_v2_only = false;
  for (const pb::Function& f : p.function())
    plain_v2_only |= Str(p, f.name()) == "demo_only_v2";
  EXPECT_TRUE(plain_v2_only);
}

TEST_F(PprofTest, AChainWithoutItsKernelPartKeepsTheFrameTheKernelWasEnteredFrom) {
  ReportModel m = Report(/*extra=*/true);
  auto bytes = EncodePprof(m);
  ASSERT_TRUE(bytes.ok());
  pb::Profile p = Decode(*bytes);
  std::map<uint64_t, std::string> fn;
  for (const pb::Function& f : p.function()) fn[f.id()] = Str(p, f.system_name());
  std::map<uint64_t, std::string> name;
  for (const pb::Location& l : p.location())
    name[l.id()] = l.line_size() ? fn[l.line(0).function_id()] : "";
  std::map<std::vector<std::string>, int64_t> stacks;
  for (const pb::Sample& s : p.sample()) {
    std::vector<std::string> names;
    for (uint64_t id : s.location_id()) names.push_back(name[id]);
    stacks[names] += s.value(0);
  }
  // 3 with the kernel's part (its first ip is the sample's: not repeated),
  // 4 without it (the user ip is a frame of its own).
  EXPECT_EQ((stacks[{"schedule", "demo_only_v1"}]), 3);
  EXPECT_EQ((stacks[{"schedule", "demo_only_v1", "demo_common"}]), 4);
  EXPECT_EQ((stacks[{"schedule", "demo_common"}]), 0);
}

TEST_F(PprofTest, HeaderSaysWhatTheValuesAreAndWhereBuildIdsCameFrom) {
  ReportModel m = Report();
  auto bytes = EncodePprof(m);
  ASSERT_TRUE(bytes.ok());
  pb::Profile p = Decode(*bytes);
  ASSERT_EQ(p.sample_type_size(), 2);
  EXPECT_EQ(Str(p, p.sample_type(0).type()), "samples");
  EXPECT_EQ(Str(p, p.sample_type(0).unit()), "count");
  EXPECT_EQ(Str(p, p.sample_type(1).type()), "cpu");
  EXPECT_EQ(Str(p, p.sample_type(1).unit()), "nanoseconds");
  EXPECT_EQ(Str(p, p.default_sample_type()), "cpu");
  EXPECT_EQ(Str(p, p.period_type().type()), "cpu");
  EXPECT_EQ(p.period(), 250000);
  std::vector<std::string> comments;
  for (int64_t c : p.comment()) comments.push_back(Str(p, c));
  EXPECT_NE(std::find(comments.begin(), comments.end(),
                      "mmap3-reader capture mode: mmap2-build-id"),
            comments.end());
  int sources = 0;
  for (const pb::Mapping& mp : p.mapping()) {
    const std::string want =
        fmt::format("build-id of {}: {} (source {})", Str(p, mp.filename()), Str(p, mp.build_id()),
                    Str(p, mp.filename()) == path_ ? "mmap2" : "kernel_notes");
    sources += std::find(comments.begin(), comments.end(), want) != comments.end();
  }
  EXPECT_EQ(sources, p.mapping_size());
}

TEST_F(PprofTest, EveryWarningOfTheTextReportIsAComment) {
  // A pprof file must not look cleaner than the text report of the same
  // capture: its warnings (here late records and an overlaid module) are
  // comments, word for word.
  ReportModel m = Report();
  m.late_records = 3;
  m.changed_kernel_modules = {"[mod_x]"};
  auto bytes = EncodePprof(m);
  ASSERT_TRUE(bytes.ok());
  pb::Profile p = Decode(*bytes);
  std::set<std::string> comments;
  for (int64_t c : p.comment()) comments.insert(Str(p, c));
  std::ostringstream text;
  WriteTextReport(m, text);
  int warnings = 0;
  std::string line;
  std::istringstream lines(text.str());
  while (std::getline(lines, line) && line != "#") {  // "#" ends the notes
    if (line.rfind("# ", 0) != 0) continue;
    ++warnings;
    EXPECT_TRUE(comments.count(line.substr(2))) << "not in the pprof comments: " << line;
  }
  EXPECT_GE(warnings, 4);  // counts, late records, sources, the module
}

TEST(PprofEncodeTest, AnEmptyReportIsAValidProfile) {
  ReportModel m;
  auto bytes = EncodePprof(m);
  ASSERT_TRUE(bytes.ok());
  pb::Profile p = Decode(*bytes);
  EXPECT_EQ(p.sample_size(), 0);
  CheckAndSumLeaves(p);
}

TEST(PprofEncodeTest, AMappingWithoutBuildIdHasNoneAndSymbolsOnlyWhereFound) {
  ReportModel m;
  m.frame_mappings.push_back({0x1000, 0x2000, 0, "/anon/jit", BuildId(), BuildIdSource::kNone,
                              false, false});
  m.frame_locations.push_back({1, 0x1010, "[unknown]+0x10", SymbolStatus::kNoBuildId});
  m.frame_stacks.push_back({"jit", {0}, 4, 4});
  m.samples = m.period = 4;
  auto bytes = EncodePprof(m);
  ASSERT_TRUE(bytes.ok());
  pb::Profile p = Decode(*bytes);
  ASSERT_EQ(p.mapping_size(), 1);
  EXPECT_EQ(p.mapping(0).build_id(), 0);  // "": no build-id claimed
  EXPECT_FALSE(p.mapping(0).has_functions());
  ASSERT_EQ(p.location_size(), 1);
  EXPECT_EQ(p.location(0).line_size(), 0);  // the address is all that is known
  EXPECT_EQ(p.location(0).address(), 0x1010u);
  EXPECT_EQ(p.function_size(), 0);
}

TEST(PprofEncodeTest, StringsThatAreNotUtf8AreEscapedAndStayDistinct) {
  // UTF-8 passes unchanged, backslashes included.
  for (const std::string ok : {"", "malloc", "/usr/lib/caf\xc3\xa9.so", "\xf0\x9f\x94\xa5",
                               "\xef\xbf\xbf", "a\\b"})
    EXPECT_EQ(PprofString(ok), ok);
  // Overlong, surrogate, above U+10FFFF, truncated, stray continuation.
  EXPECT_EQ(PprofString("a\xc0\xaf"), "a\\xc0\\xaf");
  EXPECT_EQ(PprofString("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(PprofString("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");
  EXPECT_EQ(PprofString("x\xe2\x82"), "x\\xe2\\x82");
  EXPECT_EQ(PprofString("\x80\xc3\xa9"), "\\x80\xc3\xa9");
  // Once escaping, a backslash is escaped too: "\\xff" (text) and "\xff"
  // (a byte) in one name with another stray byte do not meet.
  EXPECT_NE(PprofString("\\xff\xfe"), PprofString("\xff\xfe"));

  ReportModel m;
  m.frame_mappings.push_back({0x1000, 0x2000, 0, "/tmp/lib\xff.so", BuildId(),
                              BuildIdSource::kNone, false, false});
  m.frame_locations.push_back({1, 0x1010, "f\xfe", SymbolStatus::kFound});
  m.frame_locations.push_back({1, 0x1020, "f\xff", SymbolStatus::kFound});
  m.frame_stacks.push_back({"comm\xff", {0}, 3, 3});
  m.frame_stacks.push_back({"comm\xff", {1}, 1, 1});
  m.samples = m.period = 4;
  auto bytes = EncodePprof(m);
  ASSERT_TRUE(bytes.ok());
  pb::Profile p = Decode(*bytes);
  for (const std::string& s : p.string_table()) EXPECT_EQ(PprofString(s), s) << s;
  ASSERT_EQ(p.mapping_size(), 1);
  EXPECT_EQ(p.string_table(p.mapping(0).filename()), "/tmp/lib\\xff.so");
  std::set<std::string> names;
  for (const auto& f : p.function()) names.insert(p.string_table(f.name()));
  EXPECT_EQ(names, (std::set<std::string>{"f\\xfe", "f\\xff"}));
}

perf_event_attr Attr(uint32_t type, uint64_t config, bool freq, uint64_t period_or_freq,
                     uint64_t sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_PERIOD) {
  perf_event_attr a{};
  a.type = type;
  a.config = config;
  a.freq = freq;
  a.sample_period = period_or_freq;  // a union with sample_freq
  a.sample_type = sample_type;
  return a;
}

TEST(SampledEventTest, NamesWhatThePeriodCounts) {
  const perf_event_attr dummy = Attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_DUMMY, false, 0);
  SampledEvent cpu = SampledEventOf({Attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, true, 4000),
                                     dummy});
  EXPECT_EQ(cpu.name, "cpu");
  EXPECT_EQ(cpu.unit, "nanoseconds");
  EXPECT_EQ(cpu.period, 250000u);
  SampledEvent cycles = SampledEventOf({Attr(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, false,
                                             100000)});
  EXPECT_EQ(cycles.name, "cycles");
  EXPECT_EQ(cycles.unit, "count");
  EXPECT_EQ(cycles.period, 100000u);
  SampledEvent two = SampledEventOf({Attr(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, true, 99),
                                     Attr(PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, true, 99)});
  EXPECT_EQ(two.name, "events");
  EXPECT_NE(two.note, "");
  // A frequency (the kernel varies the period) without recorded periods:
  // each sample counted 1, not nanoseconds.
  SampledEvent no_period = SampledEventOf(
      {Attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, true, 4000, PERF_SAMPLE_IP)});
  EXPECT_EQ(no_period.name, "events");
  EXPECT_EQ(no_period.unit, "count");
  // A fixed period without recorded periods (perf record -c, record -c):
  // every sample stands for the attr's period, as perf takes it.
  SampledEvent fixed = SampledEventOf(
      {Attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, false, 100000, PERF_SAMPLE_IP)});
  EXPECT_EQ(fixed.name, "cpu");
  EXPECT_EQ(fixed.unit, "nanoseconds");
  EXPECT_EQ(fixed.period, 100000u);
}

TEST(ReplaceFileTest, ReplacesWholeAndLeavesNothingBeside) {
  TempDir dir;
  const std::string out = dir.File("p.pb.gz");
  ASSERT_TRUE(ReplaceFile(out, "first, longer contents").ok());
  ASSERT_TRUE(ReplaceFile(out, "second").ok());
  std::ifstream in(out, std::ios::binary);
  std::stringstream got;
  got << in.rdbuf();
  EXPECT_EQ(got.str(), "second");
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
  Status missing = ReplaceFile(dir.File("no/such/dir/p.pb.gz"), "x");
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.ToString().find("no/such/dir/p.pb.gz"), std::string::npos);
  EXPECT_TRUE(ReplaceFile("/dev/null", "x").ok());  // a device: written, not replaced
}

}  // namespace
}  // namespace mmap3
