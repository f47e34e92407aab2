// report's controls (--sort, filters, --children, --percent-limit) and the
// script and buildid-list outputs, on profiles built from synthetic records
// against real ELF files compiled at test time.
#include "report_controls.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fixtures.h"
#include "profile.h"
#include "record_writer.h"
#include "script_output.h"

namespace mmap3 {
namespace {

using testing::Id;
using testing::kIdV1;
using testing::kIdV2;
using testing::TempDir;

const SampleFormat kFormat{PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU |
                               PERF_SAMPLE_PERIOD | PERF_SAMPLE_CALLCHAIN,
                           0, true};
constexpr uint64_t kBase = 0x7f0000000000;

SampleId Sid(uint32_t pid, uint32_t tid, uint64_t time) {
  SampleId s;
  s.has_tid = s.has_time = s.has_cpu = true;
  s.pid = pid;
  s.tid = tid;
  s.time = time;
  return s;
}

std::vector<uint8_t> Comm(uint32_t pid, uint32_t tid, const char* name, uint64_t time) {
  CommRecord c;
  c.pid = pid;
  c.tid = tid;
  c.comm = name;
  c.exec = pid == tid;
  c.sample_id = Sid(pid, tid, time);
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
  m.sample_id = Sid(pid, pid, time);
  return EncodeMmap(m, kFormat);
}

std::vector<uint8_t> Sample(uint32_t pid, uint32_t tid, uint64_t ip, uint64_t time,
                            std::vector<uint64_t> chain = {}, uint64_t period = 1,
                            uint32_t cpu = 0) {
  SampleRecord s;
  s.misc = PERF_RECORD_MISC_USER;
  s.pid = pid;
  s.tid = tid;
  s.ip = ip;
  s.time = time;
  s.cpu = cpu;
  s.period = period;
  return EncodeSample(s, chain, kFormat);
}

// Two versions of libctl.so at one path: v1 (fa fb fc) and v2 (fa fd).
class ReportControlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    v1_ = dir_.File("v1/libctl.so");
    v2_ = dir_.File("v2/libctl.so");
    std::filesystem::create_directories(dir_.File("v1"));
    std::filesystem::create_directories(dir_.File("v2"));
    ASSERT_TRUE(testing::BuildSharedLibrary(v1_, "fa fb fc", kIdV1));
    ASSERT_TRUE(testing::BuildSharedLibrary(v2_, "fa fd", kIdV2));
    // The capture's path for both: the symbols come from the files found
    // by build-id under their own paths (declared as mapped elsewhere too).
    for (const char* f : {"fa", "fb", "fc"}) off1_[f] = testing::FunctionFileOffset(v1_, f);
    for (const char* f : {"fa", "fd"}) off2_[f] = testing::FunctionFileOffset(v2_, f);
  }

  // A user ip in `fn` of version 1 (2 bytes into it), and the return
  // address of a call from it (looked up one byte back: still in it).
  uint64_t In1(const char* fn) { return kBase + off1_[fn]; }
  uint64_t Ret1(const char* fn) { return kBase + off1_[fn] + 1; }
  uint64_t In2(const char* fn) { return kBase + off2_[fn]; }

  ReportModel Report(const Profile& p) {
    SymbolSearch s;
    s.debug_dir = "";
    s.kernel_notes = "/nonexistent";
    DsoStore store(s);
    Symbolizer sym(store);
    return p.BuildReport(sym, "t");
  }

  // pid 10 "app" (threads 10 and 11) maps v1; pid 20 "app" maps v2; pid 30
  // "other" maps v1.  Samples (period 1 each): 10/10 fa x2, 10/11 fb x3,
  // 20/20 fa x4, 30/30 fc x1.
  Profile Standard(ReportControls c) {
    ProfileOptions o;
    o.controls = std::move(c);
    Profile p(o);
    p.SetFormat(kFormat);
    uint64_t t = 1;
    p.Process(Comm(10, 10, "app", t++));
    p.Process(Comm(10, 11, "app", t++));
    p.Process(Mmap(10, v1_, kIdV1, t++));
    p.Process(Comm(20, 20, "app", t++));
    p.Process(Mmap(20, v2_, kIdV2, t++));
    p.Process(Comm(30, 30, "other", t++));
    p.Process(Mmap(30, v1_, kIdV1, t++));
    for (int i = 0; i < 2; ++i) p.Process(Sample(10, 10, In1("fa"), t++));
    for (int i = 0; i < 3; ++i) p.Process(Sample(10, 11, In1("fb"), t++));
    for (int i = 0; i < 4; ++i) p.Process(Sample(20, 20, In2("fa"), t++));
    p.Process(Sample(30, 30, In1("fc"), t++));
    return p;
  }

  TempDir dir_;
  std::string v1_, v2_;
  std::map<std::string, uint64_t> off1_, off2_;
};

TEST(ParseSortKeysTest, PerfsNamesAndOurs) {
  std::string error;
  EXPECT_EQ(ParseSortKeys("comm,pid,tid,dso,sym,build_id", &error),
            (std::vector<SortKey>{SortKey::kComm, SortKey::kPid, SortKey::kTid, SortKey::kDso,
                                  SortKey::kSym, SortKey::kBuildId}));
  EXPECT_EQ(ParseSortKeys("symbol", &error), std::vector<SortKey>{SortKey::kSym});
  EXPECT_TRUE(error.empty());
}

TEST(ParseSortKeysTest, ABadKeyIsNamedWithTheKnownOnes) {
  std::string error;
  EXPECT_TRUE(ParseSortKeys("comm,cpu", &error).empty());
  EXPECT_EQ(error, "unknown --sort key 'cpu' (known: comm, pid, tid, dso, sym, build_id)");
  EXPECT_TRUE(ParseSortKeys("dso,dso", &error).empty());
  EXPECT_EQ(error, "--sort key 'dso' given twice");
  EXPECT_TRUE(ParseSortKeys(",", &error).empty());
  EXPECT_NE(error.find("at least one key"), std::string::npos);
}

TEST(SplitListTest, EmptyItemsAreDropped) {
  EXPECT_EQ(SplitList("a,,b,"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(SplitList("").empty());
}

TEST_F(ReportControlsTest, DefaultIsCommDsoSymAsBefore) {
  ReportModel m = Report(Standard({}));
  // app's fa of v1 and of v2 are two rows (two versions); threads merge.
  ASSERT_EQ(m.rows.size(), 4u);
  EXPECT_EQ(m.rows[0].symbol, "fa");
  EXPECT_EQ(m.rows[0].build_id, Id(kIdV2));
  EXPECT_EQ(m.rows[0].samples, 4u);
  EXPECT_EQ(m.rows[1].symbol, "fb");
  EXPECT_EQ(m.rows[1].samples, 3u);
  EXPECT_EQ(m.rows[1].pid, -1);
  EXPECT_DOUBLE_EQ(m.rows[1].percent, 30.0);
  EXPECT_EQ(m.matched_samples, 10u);
}

TEST_F(ReportControlsTest, SortByPidSplitsProcessesAndTidThreads) {
  ReportControls c;
  c.sort = {SortKey::kPid};
  ReportModel m = Report(Standard(c));
  ASSERT_EQ(m.rows.size(), 3u);  // pids 10 (5), 20 (4), 30 (1)
  EXPECT_EQ(m.rows[0].pid, 10);
  EXPECT_EQ(m.rows[0].samples, 5u);
  EXPECT_EQ(m.rows[0].tid, -1);
  EXPECT_TRUE(m.rows[0].comm.empty());
  EXPECT_TRUE(m.rows[0].symbol.empty());
  c.sort = {SortKey::kComm, SortKey::kTid};
  m = Report(Standard(c));
  ASSERT_EQ(m.rows.size(), 4u);  // threads 20 (4), 11 (3), 10 (2), 30 (1)
  EXPECT_EQ(m.rows[0].tid, 20);
  EXPECT_EQ(m.rows[1].tid, 11);
  EXPECT_EQ(m.rows[1].comm, "app");
  EXPECT_EQ(m.rows[2].tid, 10);
}

TEST_F(ReportControlsTest, SortByDsoKeepsVersionsApartAndBuildIdMergesProcesses) {
  ReportControls c;
  c.sort = {SortKey::kDso};
  ReportModel m = Report(Standard(c));
  ASSERT_EQ(m.rows.size(), 2u);  // v1: 6 samples (app and other), v2: 4
  EXPECT_EQ(m.rows[0].build_id, Id(kIdV1));
  EXPECT_EQ(m.rows[0].samples, 6u);
  EXPECT_EQ(m.rows[1].build_id, Id(kIdV2));
  c.sort = {SortKey::kBuildId, SortKey::kSym};
  m = Report(Standard(c));
  ASSERT_EQ(m.rows.size(), 4u);  // v2 fa 4, v1 fb 3, v1 fa 2, v1 fc 1
  EXPECT_EQ(m.rows[0].build_id, Id(kIdV2));
  EXPECT_TRUE(m.rows[0].path.empty());  // not a key
  EXPECT_EQ(m.rows[3].symbol, "fc");
}

TEST_F(ReportControlsTest, FiltersCountOnlyMatchingSamplesOfAllByDefault) {
  ReportControls c;
  c.comms = {"app"};
  c.symbols = {"fa"};
  ReportModel m = Report(Standard(c));
  ASSERT_EQ(m.rows.size(), 2u);  // fa of v2 (4), fa of v1 (2)
  EXPECT_EQ(m.matched_samples, 6u);
  EXPECT_DOUBLE_EQ(m.rows[0].percent, 40.0);  // absolute: of all 10, as perf's default
  c.relative = true;
  m = Report(Standard(c));
  EXPECT_NEAR(m.rows[0].percent, 100.0 * 4 / 6, 1e-9);
  EXPECT_EQ(m.samples, 10u);  // the capture's count is unchanged
}

TEST_F(ReportControlsTest, DsoFilterTakesTheBaseNameOrTheFullPathButNotAPrefix) {
  ReportControls c;
  c.dsos = {"libctl.so"};
  EXPECT_EQ(Report(Standard(c)).matched_samples, 10u);
  c.dsos = {v2_};
  EXPECT_EQ(Report(Standard(c)).matched_samples, 4u);
  c.dsos = {"libctl"};
  EXPECT_EQ(Report(Standard(c)).matched_samples, 0u);
}

TEST_F(ReportControlsTest, AFilterNothingMatchesSaysSo) {
  ReportControls c;
  c.comms = {"nosuch"};
  ReportModel m = Report(Standard(c));
  EXPECT_TRUE(m.rows.empty());
  EXPECT_EQ(m.matched_samples, 0u);
  EXPECT_EQ(m.samples, 10u);
  std::ostringstream out;
  WriteTextReport(m, out);
  EXPECT_NE(out.str().find("# no samples match --comms nosuch (of 10 samples)\n"),
            std::string::npos);
}

TEST_F(ReportControlsTest, ChildrenCountARecursiveChainOncePerSample) {
  // fa -> fb -> fa -> fb (leaf), and a sample on fc called from fa.
  ReportControls c;
  c.children = true;
  c.sort = {SortKey::kSym};
  ProfileOptions o;
  o.controls = c;
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(Comm(10, 10, "app", 1));
  p.Process(Mmap(10, v1_, kIdV1, 2));
  p.Process(Sample(10, 10, In1("fb"), 3, {In1("fb"), Ret1("fa"), Ret1("fb"), Ret1("fa")}));
  p.Process(Sample(10, 10, In1("fc"), 4, {In1("fc"), Ret1("fa")}));
  ReportModel m = Report(p);
  ASSERT_EQ(m.rows.size(), 3u);
  // Sorted by Children: fa (2 samples of 2), fb (1), fc (1).
  EXPECT_EQ(m.rows[0].symbol, "fa");
  EXPECT_EQ(m.rows[0].children_period, 2u);
  EXPECT_DOUBLE_EQ(m.rows[0].children_percent, 100.0);
  EXPECT_EQ(m.rows[0].samples, 0u);  // never the leaf
  EXPECT_DOUBLE_EQ(m.rows[0].percent, 0.0);
  const ReportRow& fb = m.rows[1].symbol == "fb" ? m.rows[1] : m.rows[2];
  EXPECT_EQ(fb.children_period, 1u);  // twice in the chain, once counted
  EXPECT_EQ(fb.period, 1u);
}

TEST_F(ReportControlsTest, ChildrenFollowTheLeafFilter) {
  ReportControls c;
  c.children = true;
  c.sort = {SortKey::kSym};
  c.symbols = {"fc"};
  ProfileOptions o;
  o.controls = c;
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(Comm(10, 10, "app", 1));
  p.Process(Mmap(10, v1_, kIdV1, 2));
  p.Process(Sample(10, 10, In1("fb"), 3, {In1("fb"), Ret1("fa")}));
  p.Process(Sample(10, 10, In1("fc"), 4, {In1("fc"), Ret1("fa")}));
  ReportModel m = Report(p);
  ASSERT_EQ(m.rows.size(), 2u);  // fa (as fc's caller) and fc; not fb
  EXPECT_EQ(m.rows[0].children_period, 1u);
  EXPECT_EQ(m.rows[1].children_period, 1u);
  for (const ReportRow& r : m.rows) EXPECT_NE(r.symbol, "fb");
}

TEST_F(ReportControlsTest, PercentLimitKeepsARowExactlyAtIt) {
  // Rows of 40%, 30%, 20%, 10% (default keys).
  ReportControls c;
  c.percent_limit = 20;
  ReportModel m = Report(Standard(c));
  ASSERT_EQ(m.rows.size(), 3u);
  EXPECT_DOUBLE_EQ(m.rows.back().percent, 20.0);
  EXPECT_EQ(m.rows_below_limit, 1u);
  c.percent_limit = 20.0001;
  EXPECT_EQ(Report(Standard(c)).rows.size(), 2u);
  c.percent_limit = 100;
  EXPECT_TRUE(Report(Standard(c)).rows.empty());
}

TEST_F(ReportControlsTest, PercentLimitWithChildrenIsOnChildren) {
  ReportControls c;
  c.children = true;
  c.sort = {SortKey::kSym};
  c.percent_limit = 50;
  ProfileOptions o;
  o.controls = c;
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(Comm(10, 10, "app", 1));
  p.Process(Mmap(10, v1_, kIdV1, 2));
  p.Process(Sample(10, 10, In1("fb"), 3, {In1("fb"), Ret1("fa")}));
  p.Process(Sample(10, 10, In1("fc"), 4, {In1("fc"), Ret1("fa")}));
  ReportModel m = Report(p);
  // fa: self 0%, children 100%: shown; fb and fc: 50% each: shown.
  ASSERT_EQ(m.rows.size(), 3u);
  EXPECT_EQ(m.rows[0].symbol, "fa");
}

TEST_F(ReportControlsTest, TextAndJsonShowTheSortKeysColumnsOnly) {
  ReportControls c;
  c.sort = {SortKey::kPid, SortKey::kSym};
  c.children = true;
  ReportModel m = Report(Standard(c));
  std::ostringstream text;
  WriteTextReport(m, text);
  EXPECT_NE(text.str().find("# Children      Self   Samples  Pid  Symbol\n"), std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("   40.00%    40.00%         4  20   fa\n"), std::string::npos)
      << text.str();
  std::ostringstream js;
  WriteJsonReport(m, js);
  auto doc = nlohmann::json::parse(js.str());
  const auto& row = doc["rows"][0];
  EXPECT_EQ(row["pid"], 20);
  EXPECT_EQ(row["symbol"], "fa");
  EXPECT_FALSE(row.contains("comm"));
  EXPECT_FALSE(row.contains("build_id"));
  EXPECT_EQ(row["children_percent"], 40.0);
  EXPECT_EQ(doc["controls"]["sort"], (nlohmann::json{"pid", "sym"}));
}

TEST_F(ReportControlsTest, FoldedAndPprofStacksAreFilteredOnTheirLeaf) {
  ReportControls c;
  c.symbols = {"fc"};
  ProfileOptions o;
  o.controls = c;
  o.callchains = true;
  o.sample_frames = true;
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(Comm(10, 10, "app", 1));
  p.Process(Mmap(10, v1_, kIdV1, 2));
  p.Process(Sample(10, 10, In1("fb"), 3, {In1("fb"), Ret1("fa")}));
  p.Process(Sample(10, 10, In1("fc"), 4, {In1("fc"), Ret1("fa")}));
  ReportModel m = Report(p);
  ASSERT_EQ(m.stacks.size(), 1u);
  EXPECT_EQ(m.stacks[0].folded, "app;fa;fc");
  ASSERT_EQ(m.frame_stacks.size(), 1u);
  EXPECT_EQ(m.frame_locations[m.frame_stacks[0].locations[0]].symbol, "fc");
}

TEST_F(ReportControlsTest, ScriptPrintsEverySampleInTimeOrderWithOffsets) {
  ProfileOptions o;
  o.script = true;
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(Comm(10, 11, "app", 1));
  p.Process(Mmap(10, v1_, kIdV1, 2));
  p.Process(Sample(10, 11, In1("fb"), 1500000000, {In1("fb"), Ret1("fa")}, 250000, 3));
  p.Process(Sample(10, 11, kBase + 0x20000, 2000001000, {}, 250000, 1));  // in no mapping
  ReportModel m = Report(p);
  std::ostringstream flat, chains;
  WriteScript(m, false, flat);
  WriteScript(m, true, chains);
  const std::string hex = Id(kIdV1).Hex();
  EXPECT_EQ(flat.str(),
            fmt::format("             app      10/11      [003]     1.500000:     250000 {:>16x} "
                        "fb+0x2 ({}) {}\n"
                        "             app      10/11      [001]     2.000001:     250000 {:>16x} "
                        "[unknown] ([unknown]) [no build-id]\n",
                        In1("fb"), v1_, hex, kBase + 0x20000));
  EXPECT_EQ(chains.str(),
            fmt::format("             app      10/11      [003]     1.500000:     250000\n"
                        "\t{:>16x} fb+0x2 ({}) {}\n"
                        "\t{:>16x} fa+0x3 ({}) {}\n\n"
                        "             app      10/11      [001]     2.000001:     250000\n"
                        "\t{:>16x} [unknown] ([unknown]) [no build-id]\n\n",
                        In1("fb"), v1_, hex, Ret1("fa"), v1_, hex, kBase + 0x20000));
}

TEST_F(ReportControlsTest, BuildIdListHasEveryVersionAndSaysWhatItLacks) {
  ProfileOptions o;
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(Comm(10, 10, "app", 1));
  p.Process(Mmap(10, "/lib/libctl.so", kIdV1, 2));
  p.Process(Comm(20, 20, "app", 3));
  p.Process(Mmap(20, "/lib/libctl.so", kIdV2, 4));
  p.Process(Mmap(20, "/lib/libctl.so", kIdV2, 5));  // mapped twice: one line
  p.Process(Mmap(20, "/lib/plain.so", nullptr, 6));
  p.Process(Mmap(20, "//anon", nullptr, 7));
  ReportModel m = Report(p);
  m.mode = "mmap2-build-id";
  std::ostringstream out;
  WriteBuildIdList(m, out);
  EXPECT_EQ(out.str(), fmt::format("{} /lib/libctl.so\n{} /lib/libctl.so\n"
                                   "[no build-id] /lib/plain.so (none in its MMAP2 record and "
                                   "none read from /proc/PID/map_files)\n",
                                   kIdV1, kIdV2));
}

}  // namespace
}  // namespace mmap3
