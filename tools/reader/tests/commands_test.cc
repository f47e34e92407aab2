#include "commands.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "fixtures.h"
#include "perf_data.h"
#include "perf_event_fd.h"
#include <sys/wait.h>
#include "record_writer.h"

namespace mmap3 {
namespace {

using testing::Id;
using testing::kIdV1;
using testing::kIdV2;
using testing::TempDir;

const SampleFormat kFormat{PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_PERIOD,
                           0, true};

SampleId Sid(uint32_t pid, uint64_t time) {
  SampleId s;
  s.has_tid = s.has_time = true;
  s.pid = s.tid = pid;
  s.time = time;
  return s;
}

std::vector<uint8_t> Mmap(uint32_t pid, const std::string& path, const char* id, uint64_t time) {
  MmapRecord m;
  m.format = id ? MmapFormat::kMmap2BuildId : MmapFormat::kMmap2;
  m.pid = m.tid = pid;
  m.start = 0x10000000;
  m.len = 0x100000;
  if (id) m.build_id = Id(id);
  m.filename = path;
  m.sample_id = Sid(pid, time);
  return EncodeMmap(m, kFormat);
}

std::vector<uint8_t> Sample(uint32_t pid, uint64_t ip, uint64_t time) {
  SampleRecord s;
  s.misc = PERF_RECORD_MISC_USER;
  s.pid = s.tid = pid;
  s.ip = ip;
  s.time = time;
  return EncodeSample(s, {}, kFormat);
}

std::vector<uint8_t> Comm(uint32_t pid, const char* name, uint64_t time) {
  CommRecord c;
  c.pid = c.tid = pid;
  c.comm = name;
  c.exec = true;
  c.sample_id = Sid(pid, time);
  return EncodeComm(c, kFormat);
}

PerfFileAttr Attr() {
  PerfFileAttr a;
  a.attr.size = sizeof(a.attr);
  a.attr.sample_type = kFormat.sample_type;
  a.attr.sample_id_all = 1;
  return a;
}

const ReportRow* RowFor(const ReportModel& m, const std::string& comm) {
  for (const ReportRow& r : m.rows)
    if (r.comm == comm) return &r;
  return nullptr;
}

TEST(RunReportTest, ReplaysAFileInTimestampOrderAcrossRounds) {
  TempDir dir;
  const std::string lib = dir.File("libr.so");
  ASSERT_TRUE(testing::BuildSharedLibrary(lib, "report_fn", kIdV1));
  uint64_t off = testing::FunctionFileOffset(lib, "report_fn");
  const std::string file = dir.File("perf.data");
  {
    auto w = PerfDataWriter::Create(file, {Attr()});
    ASSERT_TRUE(w.ok());
    // Round 1 drained CPU 1 (the sample) before CPU 0 (comm + mmap).
    ASSERT_TRUE(w->Write(Sample(5, 0x10000000 + off, 30)).ok());
    ASSERT_TRUE(w->Write(Comm(5, "app", 10)).ok());
    ASSERT_TRUE(w->Write(Mmap(5, lib, kIdV1, 20)).ok());
    ASSERT_TRUE(w->Write(EncodeFinishedRound()).ok());
    ASSERT_TRUE(w->Write(Sample(5, 0x10000000 + off, 40)).ok());
    ASSERT_TRUE(w->Write(EncodeFinishedRound()).ok());
    ASSERT_TRUE(w->Finish({}, R"({"mode":"mmap2-build-id","event_lost":0})").ok());
  }
  ReportOptions o;
  o.input = file;
  auto m = RunReport(o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->mode, "mmap2-build-id");
  EXPECT_EQ(m->samples, 2u);
  ASSERT_EQ(m->rows.size(), 1u);
  EXPECT_EQ(m->rows[0].symbol, "report_fn");
  EXPECT_EQ(m->rows[0].comm, "app");
  EXPECT_EQ(m->event_lost, 0);
}

TEST(RunReportTest, PerfHeaderTableIsUsedOnlyForUnambiguousPaths) {
  TempDir dir;
  const std::string file = dir.File("perf.data");
  {
    auto w = PerfDataWriter::Create(file, {Attr()});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Write(Comm(1, "one", 1)).ok());
    ASSERT_TRUE(w->Write(Mmap(1, "/lib/unique.so", nullptr, 2)).ok());
    ASSERT_TRUE(w->Write(Sample(1, 0x10000010, 3)).ok());
    ASSERT_TRUE(w->Write(Comm(2, "two", 4)).ok());
    ASSERT_TRUE(w->Write(Mmap(2, "/lib/replaced.so", nullptr, 5)).ok());
    ASSERT_TRUE(w->Write(Sample(2, 0x10000010, 6)).ok());
    BuildIdEntry unique{-1, PERF_RECORD_MISC_USER, Id(kIdV1), "/lib/unique.so"};
    BuildIdEntry r1{-1, PERF_RECORD_MISC_USER, Id(kIdV1), "/lib/replaced.so"};
    BuildIdEntry r2{-1, PERF_RECORD_MISC_USER, Id(kIdV2), "/lib/replaced.so"};
    ASSERT_TRUE(w->Finish({unique, r1, r2}, "").ok());  // no meta: a perf-written file
  }
  ReportOptions o;
  o.input = file;
  auto m = RunReport(o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->mode, "perf.data");
  EXPECT_EQ(RowFor(*m, "one")->build_id, Id(kIdV1));
  EXPECT_EQ(RowFor(*m, "one")->source, BuildIdSource::kPerfHeader);
  EXPECT_TRUE(RowFor(*m, "two")->build_id.empty());  // which of two? neither
  EXPECT_EQ(RowFor(*m, "two")->source, BuildIdSource::kNone);
}

bool CanProfile() {
  perf_event_attr a{};
  a.size = sizeof(a);
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_DUMMY;
  a.disabled = 1;
  a.exclude_kernel = 1;
  auto fd = PerfEventFd::Open(a, 0, -1);
  return fd.ok();
}

TEST(RunRecordTest, RecordsACommandAndReportsIt) {
  if (!CanProfile()) GTEST_SKIP() << "perf_event_open not permitted here";
  RecordOptions o;
  o.capture.target = CaptureOptions::Target::kCommand;
  o.capture.command = {"/bin/sh", "-c", "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done"};
  o.capture.frequency = 2000;
  o.capture.data_pages = 16;
  auto r = RunRecord(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->stats.samples, 0u);
  EXPECT_EQ(r->stats.bad_size, 0u);
  EXPECT_EQ(r->report.samples, r->stats.samples);
  EXPECT_TRUE(WIFEXITED(r->command_status) && WEXITSTATUS(r->command_status) == 0);
  EXPECT_NE(RowFor(r->report, "sh"), nullptr);
  // The shell's own mapping carries a build-id, whichever way it was found.
  bool sh_with_id = std::any_of(r->report.mappings.begin(), r->report.mappings.end(),
                                [](const ReportMapping& m) {
                                  return m.path.find("sh") != std::string::npos && !m.build_id.empty();
                                });
  EXPECT_TRUE(sh_with_id);
}

TEST(RunRecordTest, CommandThatCannotRunIsAnErrorWithErrno) {
  if (!CanProfile()) GTEST_SKIP() << "perf_event_open not permitted here";
  RecordOptions o;
  o.capture.command = {"/nonexistent/program"};
  auto r = RunRecord(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().error_number(), ENOENT);
  EXPECT_NE(r.status().context().find("cannot run"), std::string::npos);
}

TEST(RunRecordTest, MissingPidIsAnError) {
  RecordOptions o;
  o.capture.target = CaptureOptions::Target::kPids;
  o.capture.pids = {0x3ffffff0};
  auto r = RunRecord(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().error_number(), ESRCH);
}

}  // namespace
}  // namespace mmap3

namespace mmap3 {
namespace {

TEST(RunReportTest, EventsWithDifferentFormatsAreParsedByIdentifier) {
  // Like `perf record -a`: a sampling event and a side-band dummy event
  // with other sample types, both with IDENTIFIER.  The dummy comes first, so
  // parsing the sample with the first event's format would misread it.
  const SampleFormat fs{PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID |
                            PERF_SAMPLE_TIME | PERF_SAMPLE_PERIOD,
                        0, true};
  const SampleFormat fd{PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME, 0, true};
  PerfFileAttr sampling, dummy;
  sampling.attr.size = dummy.attr.size = sizeof(perf_event_attr);
  sampling.attr.sample_type = fs.sample_type;
  dummy.attr.sample_type = fd.sample_type;
  sampling.attr.sample_id_all = dummy.attr.sample_id_all = 1;
  sampling.ids = {11};
  dummy.ids = {22};
  TempDir dir;
  const std::string lib = dir.File("libm.so");
  ASSERT_TRUE(testing::BuildSharedLibrary(lib, "mixed_fn", kIdV2));
  uint64_t off = testing::FunctionFileOffset(lib, "mixed_fn");
  const std::string file = dir.File("perf.data");
  {
    auto w = PerfDataWriter::Create(file, {dummy, sampling});
    ASSERT_TRUE(w.ok());
    SampleId sid = Sid(9, 1);
    sid.has_id = true;
    sid.id = 22;
    CommRecord c;
    c.pid = c.tid = 9;
    c.comm = "mixed";
    c.sample_id = sid;
    ASSERT_TRUE(w->Write(EncodeComm(c, fd)).ok());
    MmapRecord m;
    m.format = MmapFormat::kMmap2BuildId;
    m.pid = m.tid = 9;
    m.start = 0x20000000;
    m.len = 0x100000;
    m.build_id = Id(kIdV2);
    m.filename = lib;
    m.sample_id = sid;
    m.sample_id.time = 2;
    ASSERT_TRUE(w->Write(EncodeMmap(m, fd)).ok());
    SampleRecord s;
    s.misc = PERF_RECORD_MISC_USER;
    s.id = 11;
    s.pid = s.tid = 9;
    s.ip = 0x20000000 + off;
    s.time = 3;
    ASSERT_TRUE(w->Write(EncodeSample(s, {}, fs)).ok());
    ASSERT_TRUE(w->Finish({}, "").ok());
  }
  ReportOptions o;
  o.input = file;
  auto rep = RunReport(o);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->bad_records, 0u);
  ASSERT_EQ(rep->rows.size(), 1u);
  EXPECT_EQ(rep->rows[0].comm, "mixed");
  EXPECT_EQ(rep->rows[0].symbol, "mixed_fn");
}

}  // namespace
}  // namespace mmap3

namespace mmap3 {
namespace {

RecordOptions ShellLoop() {
  RecordOptions o;
  o.capture.target = CaptureOptions::Target::kCommand;
  // Long enough (tens of ms) for the side-band wakeup to reach us while the
  // shell still runs: map_files exists only as long as the mapping does.
  o.capture.command = {"/bin/sh", "-c", "i=0; while [ $i -lt 40000 ]; do i=$((i+1)); done"};
  o.capture.frequency = 1000;
  o.capture.data_pages = 8;
  return o;
}

TEST(ModeDetectionTest, UnknownMmap3AbiVersionIsNotUsed) {
  if (!CanProfile()) GTEST_SKIP() << "perf_event_open not permitted here";
  // A capability file with a version we do not speak: the MMAP3 bit must not
  // be set (it is not even probed), and the capture still works.
  TempDir dir;
  testing::WriteFile(dir.File("cap"), "2\n");
  RecordOptions o = ShellLoop();
  o.capture.mmap3_cap_path = dir.File("cap");
  auto r = RunRecord(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->mode, CaptureMode::kMmap3);
  EXPECT_NE(r->mode_reason.find("version 2"), std::string::npos) << r->mode_reason;
}

TEST(ModeDetectionTest, MissingCapabilityFileMeansNoMmap3) {
  if (!CanProfile()) GTEST_SKIP() << "perf_event_open not permitted here";
  RecordOptions o = ShellLoop();
  o.capture.mmap3_cap_path = "/nonexistent/perf_event_mmap3";
  auto r = RunRecord(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->mode, CaptureMode::kMmap3);
  EXPECT_NE(r->mode_reason.find("does not advertise"), std::string::npos) << r->mode_reason;
}

TEST(ModeDetectionTest, PlainMmap2FillsBuildIdsFromMapFiles) {
  if (!CanProfile()) GTEST_SKIP() << "perf_event_open not permitted here";
  if (geteuid() != 0) GTEST_SKIP() << "map_files needs CAP_SYS_ADMIN";
  RecordOptions o = ShellLoop();
  o.capture.max_mode = CaptureMode::kMmap2;
  auto r = RunRecord(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->mode, CaptureMode::kMmap2);
  EXPECT_GT(r->stats.filled_build_ids, 0u);
  EXPECT_GT(r->report.mappings_by_source[static_cast<int>(BuildIdSource::kMapFiles)], 0u);
  EXPECT_EQ(r->report.mappings_by_source[static_cast<int>(BuildIdSource::kMmap2)], 0u);
}

}  // namespace
}  // namespace mmap3
