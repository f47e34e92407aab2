// record's -e, -c, -C, -t (record_controls.h, EventOpenError), and the
// per-event report of a capture with two events: rows, text sections,
// JSON, script and pprof.
#include "record_controls.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "capture_events.h"
#include "commands.h"
#include "fixtures.h"
#include "perf_data.h"
#include "pprof.h"
#include "proto/profile.pb.h"
#include "record_writer.h"
#include "report.h"
#include "script_output.h"

namespace mmap3 {
namespace {

using testing::kIdV1;
using testing::TempDir;

// ---- -e

TEST(EventListTest, PerfsNamesAndAliases) {
  std::string error;
  auto events = ParseEventList({"cycles,instructions", "cpu-clock", "task-clock,faults,cs"}, &error);
  ASSERT_EQ(events.size(), 6u) << error;
  EXPECT_EQ(events[0], (EventSpec{"cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES}));
  EXPECT_EQ(events[1].config, uint64_t{PERF_COUNT_HW_INSTRUCTIONS});
  EXPECT_EQ(events[2], (EventSpec{"cpu-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK}));
  EXPECT_EQ(events[3].config, uint64_t{PERF_COUNT_SW_TASK_CLOCK});
  // An alias is reported under perf's name for the event.
  EXPECT_EQ(events[4].name, "page-faults");
  EXPECT_EQ(events[4].config, uint64_t{PERF_COUNT_SW_PAGE_FAULTS});
  EXPECT_EQ(events[5].name, "context-switches");
  EXPECT_EQ(events[5].config, uint64_t{PERF_COUNT_SW_CONTEXT_SWITCHES});
}

TEST(EventListTest, EveryEventOfTheIssue) {
  const struct {
    const char* name;
    uint32_t type;
    uint64_t config;
  } kWanted[] = {
      {"cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
      {"instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS},
      {"cache-references", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES},
      {"cache-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES},
      {"branches", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
      {"branch-instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
      {"branch-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES},
      {"cpu-cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
      {"cpu-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK},
      {"task-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK},
      {"page-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS},
      {"faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS},
      {"context-switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES},
      {"cs", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES},
      {"cpu-migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS},
      {"migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS},
      {"minor-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MIN},
      {"major-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MAJ},
  };
  for (const auto& w : kWanted) {
    auto e = FindEvent(w.name);
    ASSERT_TRUE(e.has_value()) << w.name;
    EXPECT_EQ(e->type, w.type) << w.name;
    EXPECT_EQ(e->config, w.config) << w.name;
    // The name reported is perf's (what perf report prints for the attr).
    EXPECT_EQ(e->name, EventName(w.type, w.config)) << w.name;
  }
  EXPECT_EQ(EventName(PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS), "branches");
  EXPECT_EQ(EventName(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_DUMMY), "");
  EXPECT_EQ(DefaultEvent().name, "cpu-clock");
}

TEST(EventListTest, UnknownRepeatedAndEmptyAreNamed) {
  std::string error;
  EXPECT_TRUE(ParseEventList({"cycles,bogus"}, &error).empty());
  EXPECT_EQ(error.rfind("unknown event 'bogus' (known: cycles (cpu-cycles), instructions, ", 0), 0u)
      << error;
  EXPECT_NE(error.find("page-faults (faults)"), std::string::npos);
  // perf's modifiers and raw events are not taken, and not guessed at.
  EXPECT_TRUE(ParseEventList({"cycles:u"}, &error).empty());
  EXPECT_EQ(error.rfind("unknown event 'cycles:u'", 0), 0u) << error;
  EXPECT_TRUE(ParseEventList({"r003c"}, &error).empty());
  EXPECT_EQ(error.rfind("unknown event 'r003c'", 0), 0u) << error;
  EXPECT_TRUE(ParseEventList({"page-faults", "faults"}, &error).empty());
  EXPECT_EQ(error, "event 'page-faults' given twice");
  EXPECT_TRUE(ParseEventList({"cycles,"}, &error).empty());
  EXPECT_EQ(error, "-e 'cycles,': an empty event name");
  EXPECT_TRUE(ParseEventList({"Cycles"}, &error).empty());  // names are exact, as perf's
  // One line: a message main.cc prints as it is.
  EXPECT_EQ(error.find('\n'), std::string::npos);
}

// ---- -C, -t, -p lists

TEST(CpuListTest, PerfsSyntax) {
  std::string error;
  EXPECT_EQ(ParseCpuListStrict("0", &error), std::vector<int>{0});
  EXPECT_EQ(ParseCpuListStrict("0,2-3", &error), (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(ParseCpuListStrict("3,1-2,2", &error), (std::vector<int>{1, 2, 3}));  // sorted, once
  EXPECT_EQ(ParseCpuListStrict("5-5", &error), std::vector<int>{5});
  EXPECT_TRUE(error.empty());
  EXPECT_EQ(CpuListText({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
  EXPECT_EQ(CpuListText({1}), "1");
}

TEST(CpuListTest, AnythingElseIsAnError) {
  for (const char* bad : {"", ",", "0,", "x", "1-", "-1", "0 ,1", "0x1", "1.5", "+1"}) {
    std::string error;
    EXPECT_TRUE(ParseCpuListStrict(bad, &error).empty()) << bad;
    EXPECT_EQ(error.rfind(std::string("-C '") + bad + "': ", 0), 0u) << error;
  }
  std::string error;
  EXPECT_TRUE(ParseCpuListStrict("3-1", &error).empty());
  EXPECT_EQ(error, "-C '3-1': the range '3-1' ends before it starts");
  EXPECT_TRUE(ParseCpuListStrict("0-99999999999", &error).empty());
  EXPECT_EQ(error, "-C '0-99999999999': CPU 99999999999 is out of range");
}

TEST(IdListTest, PositiveIdsOnce) {
  std::string error;
  EXPECT_EQ(ParseIdList("12,34,12", "TID", &error), (std::vector<pid_t>{12, 34}));
  EXPECT_TRUE(ParseIdList("12,x", "TID", &error).empty());
  EXPECT_EQ(error, "bad TID 'x'");
  EXPECT_TRUE(ParseIdList("0", "PID", &error).empty());
  EXPECT_EQ(error, "bad PID '0'");
  EXPECT_TRUE(ParseIdList("-3", "TID", &error).empty());
  EXPECT_TRUE(ParseIdList("", "TID", &error).empty());
}

// ---- combinations

std::optional<RecordTargets> Check(RecordArgs a, std::string* error) {
  error->clear();
  return CheckRecordArgs(a, error);
}

TEST(RecordArgsTest, DefaultsAreWhatRecordAlwaysDid) {
  RecordArgs a;
  a.has_command = true;
  std::string error;
  auto t = Check(a, &error);
  ASSERT_TRUE(t) << error;
  EXPECT_EQ(t->target, RecordTargets::Target::kCommand);
  EXPECT_EQ(t->events, std::vector<EventSpec>{DefaultEvent()});
  EXPECT_EQ(t->frequency, 4000u);
  EXPECT_EQ(t->period, 0u);
}

TEST(RecordArgsTest, FrequencyAndPeriodExcludeEachOther) {
  RecordArgs a;
  a.has_command = true;
  a.frequency = 100;
  a.period = 50000;
  std::string error;
  EXPECT_FALSE(Check(a, &error));
  EXPECT_EQ(error, "-F (samples per second) and -c (a sample every N events) exclude each other; give one");
  a.frequency.reset();
  auto t = Check(a, &error);
  ASSERT_TRUE(t) << error;
  EXPECT_EQ(t->period, 50000u);
  a.period = 0;
  EXPECT_FALSE(Check(a, &error));
  EXPECT_EQ(error, "-c 0: the period must be at least 1");
}

TEST(RecordArgsTest, AClockPeriodBelowTheKernelsTimerIsRefused) {
  // cpu-clock and task-clock sample from an hrtimer that the kernel fires
  // at most every 10000 ns (perf_swevent_start_hrtimer), yet it reports
  // the period asked for: -e task-clock -c 1000 over 200 ms of CPU gave
  // 20101 samples of period 1000, an event count of 20 ms.  Refused.
  RecordArgs a;
  a.has_command = true;
  a.period = 9999;
  std::string error;
  EXPECT_FALSE(Check(a, &error));  // cpu-clock, the default
  EXPECT_EQ(error,
            "-c 9999: cpu-clock's timer fires at most every 10000 ns, so each sample would stand "
            "for at least 10000 ns, not 9999: give -c 10000 or more");
  a.events = {"page-faults,task-clock"};
  EXPECT_FALSE(Check(a, &error));
  EXPECT_NE(error.find("task-clock's timer"), std::string::npos) << error;
  a.period = 10000;
  EXPECT_TRUE(Check(a, &error)) << error;
  // Other events are counted, not timed: any period.
  a.events = {"page-faults"};
  a.period = 1;
  EXPECT_TRUE(Check(a, &error)) << error;
  // The kernel takes no period with the top bit set (EINVAL): a usage error.
  a.period = uint64_t{1} << 63;
  EXPECT_FALSE(Check(a, &error));
  EXPECT_EQ(error, "-c 9223372036854775808: the period must be below 2^63");
}

TEST(RecordArgsTest, CpusAreSystemWideAsPerfs) {
  RecordArgs a;
  a.cpus = "0,2-3";
  std::string error;
  auto t = Check(a, &error);
  ASSERT_TRUE(t) << error;
  EXPECT_EQ(t->target, RecordTargets::Target::kSystemWide);
  EXPECT_EQ(t->cpus, (std::vector<int>{0, 2, 3}));
  // With -a, or bounded by a command (perf record -C 0 -- sleep 1).
  a.all_cpus = true;
  a.has_command = true;
  t = Check(a, &error);
  ASSERT_TRUE(t) << error;
  EXPECT_EQ(t->target, RecordTargets::Target::kSystemWide);
  // Not with -p or -t: perf would drop -C there ("PID/TID switch
  // overriding CPU"); a profile of other CPUs than asked is not given.
  RecordArgs p;
  p.cpus = "0";
  p.pids = "1";
  EXPECT_FALSE(Check(p, &error));
  EXPECT_EQ(error, "-C is system-wide on those CPUs (as -a); it cannot be combined with -p (perf would ignore -C)");
  RecordArgs t2;
  t2.cpus = "0";
  t2.tids = "1";
  EXPECT_FALSE(Check(t2, &error));
  EXPECT_EQ(error, "-C is system-wide on those CPUs (as -a); it cannot be combined with -t (perf would ignore -C)");
  RecordArgs bad;
  bad.cpus = "1-0";
  EXPECT_FALSE(Check(bad, &error));
  EXPECT_EQ(error, "-C '1-0': the range '1-0' ends before it starts");
}

TEST(RecordArgsTest, ThreadsAreATargetOfTheirOwn) {
  RecordArgs a;
  a.tids = "7,9";
  std::string error;
  auto t = Check(a, &error);
  ASSERT_TRUE(t) << error;
  EXPECT_EQ(t->target, RecordTargets::Target::kThreads);
  EXPECT_EQ(t->tids, (std::vector<pid_t>{7, 9}));
  a.pids = "3";
  EXPECT_FALSE(Check(a, &error));
  EXPECT_EQ(error, "-p and -t cannot be combined: -p PIDS profiles whole processes, -t TIDS only these threads");
  a.pids.clear();
  a.has_command = true;
  EXPECT_FALSE(Check(a, &error));
  EXPECT_EQ(error, "-t cannot be combined with a command");
  a.has_command = false;
  a.all_cpus = true;
  EXPECT_FALSE(Check(a, &error));
  EXPECT_EQ(error, "record needs exactly one of -a, -C CPUS, -p PID, -t TID or -- COMMAND");
  RecordArgs bad;
  bad.tids = "7,,9";
  EXPECT_FALSE(Check(bad, &error));
  EXPECT_EQ(error, "bad TID ''");
}

TEST(RecordArgsTest, TargetsAndEvents) {
  std::string error;
  EXPECT_FALSE(Check(RecordArgs{}, &error));
  EXPECT_EQ(error, "record needs one of -a, -C CPUS, -p PID, -t TID or -- COMMAND");
  RecordArgs a;
  a.pids = "5";
  a.has_command = true;
  EXPECT_FALSE(Check(a, &error));
  EXPECT_EQ(error, "-p cannot be combined with a command");
  RecordArgs e;
  e.has_command = true;
  e.events = {"task-clock,page-faults"};
  auto t = Check(e, &error);
  ASSERT_TRUE(t) << error;
  ASSERT_EQ(t->events.size(), 2u);
  EXPECT_EQ(t->events[1].name, "page-faults");
  e.events = {"task-clock", "nosuch"};
  EXPECT_FALSE(Check(e, &error));
  EXPECT_EQ(error.rfind("unknown event 'nosuch'", 0), 0u) << error;
}

// ---- an event the machine cannot count

TEST(EventOpenErrorTest, NamesTheEventAndWhy) {
  const EventSpec cycles = *FindEvent("cycles");
  Status s = EventOpenError(cycles, Status::FromErrno(ENOENT, "perf_event_open (pid 5, cpu 0)"));
  EXPECT_EQ(s.ToString(),
            "event 'cycles' cannot be counted on this machine: perf_event_open says ENOENT (No "
            "such file or directory): no performance monitoring unit here counts it (most "
            "virtual machines, QEMU TCG among them, have none); software events (cpu-clock, "
            "task-clock, page-faults, ...) work everywhere");
  s = EventOpenError(*FindEvent("branch-misses"),
                     Status::FromErrno(EOPNOTSUPP, "perf_event_open (pid 5, cpu 0)"));
  EXPECT_EQ(s.ToString().rfind("event 'branch-misses' cannot be sampled on this machine: "
                               "perf_event_open says EOPNOTSUPP",
                               0),
            0u)
      << s.ToString();
  EXPECT_NE(s.ToString().find("cannot interrupt on its overflow"), std::string::npos);
  // Other errors keep errno and the call's context (main.cc explains
  // EACCES from the context), with the event named.
  s = EventOpenError(cycles, Status::FromErrno(EACCES, "perf_event_open (pid -1, cpu 1)"));
  EXPECT_EQ(s.error_number(), EACCES);
  EXPECT_EQ(s.context(), "perf_event_open of event 'cycles' (pid -1, cpu 1)");
}

// ---- a capture of two events

const SampleFormat kFormat{PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID |
                               PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD,
                           0, true};
constexpr uint64_t kBase = 0x10000000;
constexpr uint64_t kTaskClockIds[] = {101, 102};  // one per CPU
constexpr uint64_t kFaultsId = 201;
constexpr uint64_t kSidebandId = 301;

SampleId Sid(uint32_t pid, uint64_t time) {
  SampleId s;
  s.has_tid = s.has_time = s.has_id = s.has_cpu = true;
  s.pid = s.tid = pid;
  s.time = time;
  s.id = kSidebandId;
  return s;
}

PerfFileAttr Attr(uint32_t type, uint64_t config, uint64_t period, std::vector<uint64_t> ids) {
  PerfFileAttr a;
  a.attr.size = sizeof(a.attr);
  a.attr.type = type;
  a.attr.config = config;
  a.attr.sample_period = period;
  a.attr.sample_type = kFormat.sample_type;
  a.attr.sample_id_all = 1;
  a.ids = std::move(ids);
  return a;
}

std::vector<uint8_t> Sample(uint64_t id, uint64_t ip, uint64_t period, uint64_t time, uint32_t cpu) {
  SampleRecord s;
  s.misc = PERF_RECORD_MISC_USER;
  s.pid = s.tid = 5;
  s.ip = ip;
  s.id = id;
  s.period = period;
  s.time = time;
  s.cpu = cpu;
  return EncodeSample(s, {}, kFormat);
}

class TwoEventsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lib_ = dir_.File("libtwo.so");
    ASSERT_TRUE(testing::BuildSharedLibrary(lib_, "spin touch", kIdV1));
    spin_ = kBase + testing::FunctionFileOffset(lib_, "spin");
    touch_ = kBase + testing::FunctionFileOffset(lib_, "touch");
  }

  // task-clock (period 1 ms): spin x3 on CPU 0, touch x1 on CPU 1;
  // page-faults (period 1): touch x2; one sample of an id no attr has.
  std::string Write(bool with_faults = true) {
    const std::string file = dir_.File("two.data");
    std::vector<PerfFileAttr> attrs{
        Attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, 1000000, {101, 102})};
    if (with_faults) attrs.push_back(Attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, 1, {kFaultsId}));
    attrs.push_back(Attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_DUMMY, 0, {kSidebandId}));
    auto w = PerfDataWriter::Create(file, attrs);
    EXPECT_TRUE(w.ok());
    uint64_t t = 1;
    CommRecord c;
    c.pid = c.tid = 5;
    c.comm = "app";
    c.exec = true;
    c.sample_id = Sid(5, t++);
    EXPECT_TRUE(w->Write(EncodeComm(c, kFormat)).ok());
    MmapRecord m;
    m.format = MmapFormat::kMmap2BuildId;
    m.pid = m.tid = 5;
    m.start = kBase;
    m.len = 0x100000;
    m.build_id = testing::Id(kIdV1);
    m.filename = lib_;
    m.sample_id = Sid(5, t++);
    EXPECT_TRUE(w->Write(EncodeMmap(m, kFormat)).ok());
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(w->Write(Sample(kTaskClockIds[0], spin_, 1000000, t++, 0)).ok());
    EXPECT_TRUE(w->Write(Sample(kTaskClockIds[1], touch_, 1000000, t++, 1)).ok());
    if (with_faults) {
      for (int i = 0; i < 2; ++i) EXPECT_TRUE(w->Write(Sample(kFaultsId, touch_, 1, t++, 0)).ok());
      EXPECT_TRUE(w->Write(Sample(999, touch_, 1, t++, 0)).ok());
    }
    EXPECT_TRUE(w->Write(EncodeFinishedRound()).ok());
    EXPECT_TRUE(w->Finish({}, R"({"mode":"mmap2-build-id"})").ok());
    return file;
  }

  ReportModel Report(const std::string& file, ReportControls controls = {}, bool script = false,
                     bool frames = false) {
    ReportOptions o;
    o.input = file;
    o.kernel_notes = "";
    o.controls = std::move(controls);
    o.script = script;
    o.sample_frames = frames;
    auto m = RunReport(o);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? std::move(*m) : ReportModel{};
  }

  TempDir dir_;
  std::string lib_;
  uint64_t spin_ = 0, touch_ = 0;
};

TEST_F(TwoEventsTest, EachEventIsReportedOnItsOwn) {
  ReportModel m = Report(Write());
  ASSERT_EQ(m.events.size(), 2u);
  EXPECT_EQ(m.events[0].name, "task-clock");
  EXPECT_EQ(m.events[0].samples, 4u);
  EXPECT_EQ(m.events[0].period, 4000000u);
  EXPECT_EQ(m.events[0].sampled.unit, "nanoseconds");
  EXPECT_EQ(m.events[1].name, "page-faults");
  EXPECT_EQ(m.events[1].samples, 2u);
  EXPECT_EQ(m.events[1].period, 2u);
  EXPECT_EQ(m.samples, 6u);
  // The sample of an id no attr has: of no event, counted as bad.
  EXPECT_EQ(m.bad_records, 1u);
  ASSERT_EQ(m.rows.size(), 3u);
  // task-clock first: spin 3 of 4 samples, touch 1; percentages of its own
  // periods, not of the page faults' (which would make them 3000000/4000002).
  EXPECT_EQ(m.rows[0].event, 0u);
  EXPECT_EQ(m.rows[0].symbol, "spin");
  EXPECT_EQ(m.rows[0].samples, 3u);
  EXPECT_DOUBLE_EQ(m.rows[0].percent, 75.0);
  EXPECT_EQ(m.rows[1].event, 0u);
  EXPECT_EQ(m.rows[1].symbol, "touch");
  EXPECT_DOUBLE_EQ(m.rows[1].percent, 25.0);
  // page-faults: touch, all of them, not added to task-clock's touch row.
  EXPECT_EQ(m.rows[2].event, 1u);
  EXPECT_EQ(m.rows[2].symbol, "touch");
  EXPECT_EQ(m.rows[2].samples, 2u);
  EXPECT_EQ(m.rows[2].period, 2u);
  EXPECT_DOUBLE_EQ(m.rows[2].percent, 100.0);
}

TEST_F(TwoEventsTest, FiltersAndLimitsCountPerEvent) {
  ReportControls c;
  c.symbols = {"touch"};
  c.relative = true;
  ReportModel m = Report(Write(), c);
  ASSERT_EQ(m.events.size(), 2u);
  EXPECT_EQ(m.events[0].matched_samples, 1u);
  EXPECT_EQ(m.events[1].matched_samples, 2u);
  EXPECT_EQ(m.matched_samples, 3u);
  ASSERT_EQ(m.rows.size(), 2u);
  EXPECT_DOUBLE_EQ(m.rows[0].percent, 100.0);  // of task-clock's matching samples
  EXPECT_DOUBLE_EQ(m.rows[1].percent, 100.0);
  ReportControls limit;
  limit.percent_limit = 50;
  m = Report(Write(), limit);
  ASSERT_EQ(m.rows.size(), 2u);  // spin (75%) and page-faults' touch (100%)
  EXPECT_EQ(m.events[0].rows_below_limit, 1u);
  EXPECT_EQ(m.events[1].rows_below_limit, 0u);
}

TEST_F(TwoEventsTest, TextHasASectionPerEvent) {
  std::ostringstream text;
  WriteTextReport(Report(Write()), text);
  const std::string t = text.str();
  const size_t first = t.find("# Samples: 4 of event 'task-clock'\n# Event count: 4000000 nanoseconds\n");
  const size_t second = t.find("\n# Samples: 2 of event 'page-faults'\n# Event count: 2\n");
  ASSERT_NE(first, std::string::npos) << t;
  ASSERT_NE(second, std::string::npos) << t;
  EXPECT_LT(first, second);
  EXPECT_NE(t.find("# events: task-clock (4 samples), page-faults (2 samples)"), std::string::npos) << t;
  // spin is in task-clock's section only; touch at 100% in page-faults'.
  const std::string task_clock = t.substr(first, second - first), faults = t.substr(second);
  EXPECT_NE(task_clock.find("75.00%         3  app      libtwo.so"), std::string::npos) << t;
  EXPECT_EQ(faults.find("spin"), std::string::npos) << t;
  EXPECT_NE(faults.find("100.00%         2  app      libtwo.so (111111111111)  touch"), std::string::npos)
      << t;
}

TEST_F(TwoEventsTest, OneEventKeepsTheReportItHad) {
  ReportModel m = Report(Write(/*with_faults=*/false));
  ASSERT_EQ(m.events.size(), 1u);
  EXPECT_EQ(m.events[0].name, "task-clock");
  std::ostringstream text, json_text;
  WriteTextReport(m, text);
  EXPECT_EQ(text.str().find("# Samples:"), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("# events:"), std::string::npos) << text.str();
  WriteJsonReport(m, json_text);
  auto doc = nlohmann::json::parse(json_text.str());
  ASSERT_TRUE(doc.contains("rows"));
  EXPECT_EQ(doc["rows"].size(), 2u);
  EXPECT_EQ(doc["events"][0]["rows"], doc["rows"]);
}

TEST_F(TwoEventsTest, JsonHasAnEntryPerEventWithItsRows) {
  std::ostringstream out;
  WriteJsonReport(Report(Write()), out);
  auto doc = nlohmann::json::parse(out.str());
  // No top-level rows: rows of different events must not be added up.
  EXPECT_FALSE(doc.contains("rows"));
  ASSERT_EQ(doc["events"].size(), 2u);
  const auto& tc = doc["events"][0];
  EXPECT_EQ(tc["name"], "task-clock");
  EXPECT_EQ(tc["unit"], "nanoseconds");
  EXPECT_EQ(tc["samples"], 4);
  EXPECT_EQ(tc["period"], 4000000);
  ASSERT_EQ(tc["rows"].size(), 2u);
  EXPECT_EQ(tc["rows"][0]["symbol"], "spin");
  EXPECT_EQ(tc["rows"][0]["percent"], 75.0);
  const auto& pf = doc["events"][1];
  EXPECT_EQ(pf["name"], "page-faults");
  EXPECT_EQ(pf["unit"], "count");
  ASSERT_EQ(pf["rows"].size(), 1u);
  EXPECT_EQ(pf["rows"][0]["symbol"], "touch");
  EXPECT_EQ(pf["rows"][0]["samples"], 2);
  EXPECT_EQ(pf["rows"][0]["percent"], 100.0);
}

TEST_F(TwoEventsTest, ScriptNamesEachSamplesEvent) {
  ReportModel m = Report(Write(), {}, /*script=*/true);
  std::ostringstream out;
  WriteScript(m, false, out);
  std::istringstream lines(out.str());
  std::string line;
  std::vector<std::string> all;
  while (std::getline(lines, line)) all.push_back(line);
  ASSERT_EQ(all.size(), 6u) << out.str();
  for (int i = 0; i < 3; ++i) EXPECT_NE(all[i].find("    1000000 task-clock: "), std::string::npos) << all[i];
  EXPECT_NE(all[0].find(" spin+0x2 ("), std::string::npos) << all[0];
  EXPECT_NE(all[3].find("[001]"), std::string::npos) << all[3];
  EXPECT_NE(all[3].find("task-clock:"), std::string::npos) << all[3];
  for (int i = 4; i < 6; ++i) {
    EXPECT_NE(all[i].find("          1 page-faults: "), std::string::npos) << all[i];
    EXPECT_NE(all[i].find(" touch+0x2 ("), std::string::npos) << all[i];
  }
}

TEST_F(TwoEventsTest, FoldedStacksStartWithTheirEvent) {
  ReportOptions o;
  o.input = Write();
  o.kernel_notes = "";
  o.callchains = true;
  auto m = RunReport(o);
  ASSERT_TRUE(m.ok());
  std::ostringstream out;
  WriteFoldedReport(*m, out);
  EXPECT_EQ(out.str(), "page-faults;app;touch 2\ntask-clock;app;spin 3\ntask-clock;app;touch 1\n");
}

TEST_F(TwoEventsTest, AFixedPeriodNotInTheSamplesIsTheAttrs) {
  // record -c (as perf record -c) leaves PERF_SAMPLE_PERIOD out: a software
  // event that records it is sampled on every occurrence.  Each sample
  // then stands for the attr's sample_period, not for 1.
  const SampleFormat no_period{kFormat.sample_type & ~uint64_t{PERF_SAMPLE_PERIOD}, 0, true};
  const std::string file = dir_.File("fixed.data");
  {
    PerfFileAttr faults = Attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, 8, {kFaultsId});
    PerfFileAttr clock = Attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, 250000, {101});
    PerfFileAttr sideband = Attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_DUMMY, 0, {kSidebandId});
    for (PerfFileAttr* a : {&faults, &clock, &sideband}) a->attr.sample_type = no_period.sample_type;
    auto w = PerfDataWriter::Create(file, {faults, clock, sideband});
    ASSERT_TRUE(w.ok());
    SampleRecord s;
    s.misc = PERF_RECORD_MISC_USER;
    s.pid = s.tid = 5;
    s.ip = touch_;
    uint64_t t = 1;
    for (uint64_t id : {kFaultsId, kFaultsId, uint64_t{101}}) {
      s.id = id;
      s.time = t++;
      ASSERT_TRUE(w->Write(EncodeSample(s, {}, no_period)).ok());
    }
    ASSERT_TRUE(w->Finish({}, "{}").ok());
  }
  ReportModel m = Report(file, {}, /*script=*/true);
  ASSERT_EQ(m.events.size(), 2u);
  EXPECT_EQ(m.events[0].name, "page-faults");
  EXPECT_EQ(m.events[0].samples, 2u);
  EXPECT_EQ(m.events[0].period, 16u);
  EXPECT_EQ(m.events[1].period, 250000u);
  EXPECT_EQ(m.events[0].sampled.note, "event page-faults sampled every 8 count");
  ASSERT_EQ(m.script.size(), 3u);
  EXPECT_EQ(m.script[0].period, 8u);
  EXPECT_EQ(m.script[2].period, 250000u);
}

TEST_F(TwoEventsTest, AGroupMemberThatDoesNotSampleIsNotReportedAsZero) {
  // perf record -e '{task-clock,page-faults}:S': only the leader samples;
  // page-faults has neither a period nor a frequency, and its counts are
  // in the leader's samples (PERF_SAMPLE_READ), which this report does not
  // attribute.  It is not an event with 0 samples and an event count of 0
  // (page faults there were): it is said to be unsampled.
  const std::string file = dir_.File("leader.data");
  {
    PerfFileAttr clock = Attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, 1000000, {101});
    PerfFileAttr faults = Attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, 0, {kFaultsId});
    PerfFileAttr sideband = Attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_DUMMY, 0, {kSidebandId});
    auto w = PerfDataWriter::Create(file, {clock, faults, sideband});
    ASSERT_TRUE(w.ok());
    uint64_t t = 1;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(w->Write(Sample(101, spin_, 1000000, t++, 0)).ok());
    ASSERT_TRUE(w->Finish({}, "{}").ok());
  }
  ReportModel m = Report(file);
  ASSERT_EQ(m.events.size(), 1u);
  EXPECT_EQ(m.events[0].name, "task-clock");
  EXPECT_EQ(m.events[0].samples, 3u);
  EXPECT_EQ(m.event.note, "event task-clock sampled every 1000000 nanoseconds");
  EXPECT_EQ(m.unsampled_events, std::vector<std::string>{"page-faults"});
  std::ostringstream text, json_text;
  WriteTextReport(m, text);
  EXPECT_EQ(text.str().find("of event 'page-faults'"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("# not sampled: page-faults (counted only, with no period or frequency "
                            "of their own, as perf record's :S makes a group's members; their "
                            "counts are not attributed here)\n"),
            std::string::npos)
      << text.str();
  WriteJsonReport(m, json_text);
  auto doc = nlohmann::json::parse(json_text.str());
  EXPECT_EQ(doc["capture"]["unsampled_events"], nlohmann::json::array({"page-faults"}));
}

TEST_F(TwoEventsTest, AClockPeriodBelowTheKernelsTimerIsSaid) {
  // perf record -e cpu-clock -c 1000: the kernel fires the timer every
  // 10000 ns but each sample says 1000 (200 ms of CPU gave an event count
  // of 20 ms).  The report cannot know the true count; it says so.
  const std::string file = dir_.File("clock.data");
  {
    PerfFileAttr clock = Attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, 1000, {101});
    auto w = PerfDataWriter::Create(file, {clock});
    ASSERT_TRUE(w.ok());
    uint64_t t = 1;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(w->Write(Sample(101, spin_, 1000, t++, 0)).ok());
    ASSERT_TRUE(w->Finish({}, "{}").ok());
  }
  std::ostringstream text;
  WriteTextReport(Report(file), text);
  EXPECT_NE(text.str().find("# event cpu-clock sampled every 1000 nanoseconds: the kernel fires "
                            "its timer at most every 10000 ns, so each sample stood for at least "
                            "that; its event count and periods are up to 10 times too small "
                            "(percentages hold: every sample has the same period)\n"),
            std::string::npos)
      << text.str();
  // At 10000 and above, nothing to say.
  const std::string ok_file = dir_.File("clock_ok.data");
  {
    PerfFileAttr clock = Attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, 10000, {101});
    auto w = PerfDataWriter::Create(ok_file, {clock});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Write(Sample(101, spin_, 10000, 1, 0)).ok());
    ASSERT_TRUE(w->Finish({}, "{}").ok());
  }
  std::ostringstream ok_text;
  WriteTextReport(Report(ok_file), ok_text);
  EXPECT_EQ(ok_text.str().find("timer"), std::string::npos) << ok_text.str();
}

TEST_F(TwoEventsTest, AnIdOfTwoEventsIsOfNeither) {
  // A file whose attrs both list id 101: its samples could be of either.
  // Not the first attr's silently (perf's lookup would find the last):
  // counted as bad records, which the report shows.
  const std::string file = dir_.File("dup.data");
  {
    PerfFileAttr clock = Attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, 1000000, {101, 102});
    PerfFileAttr faults = Attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, 1, {kFaultsId, 101});
    auto w = PerfDataWriter::Create(file, {clock, faults});
    ASSERT_TRUE(w.ok());
    uint64_t t = 1;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(w->Write(Sample(101, spin_, 1000000, t++, 0)).ok());
    ASSERT_TRUE(w->Write(Sample(102, spin_, 1000000, t++, 1)).ok());
    ASSERT_TRUE(w->Write(Sample(kFaultsId, touch_, 1, t++, 0)).ok());
    // And an id neither lists: of no event either.
    ASSERT_TRUE(w->Write(Sample(999, spin_, 1000000, t++, 0)).ok());
    ASSERT_TRUE(w->Finish({}, "{}").ok());
  }
  ReportModel m = Report(file);
  ASSERT_EQ(m.events.size(), 2u);
  EXPECT_EQ(m.events[0].samples, 1u);  // 102 only
  EXPECT_EQ(m.events[1].samples, 1u);
  EXPECT_EQ(m.bad_records, 4u);
  EXPECT_EQ(m.bad_samples_of_no_event, 4u);  // none malformed
}

TEST_F(TwoEventsTest, SamplesOfTwoEventsThatListOnlyTheSameIdsAreOfNeither) {
  // Every id both attrs list: no id is left to tell the events apart, and
  // the samples are still of neither (helper-61's review: they went to the
  // first event, "cycles 10, instructions 0", while the same samples were
  // bad records as soon as one other id was listed), in every way a report
  // counts them.
  const std::string file = dir_.File("alldup.data");
  {
    PerfFileAttr clock = Attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, 1000000, {101});
    PerfFileAttr faults = Attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, 1, {101});
    auto w = PerfDataWriter::Create(file, {clock, faults});
    ASSERT_TRUE(w.ok());
    uint64_t t = 1;
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(w->Write(Sample(101, spin_, 1000000, t++, 0)).ok());
    // And one malformed sample (too short for its fields): a bad record of
    // the other kind, which the report tells apart.
    std::vector<uint8_t> runt(16, 0);
    const perf_event_header h{PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, 16};
    std::memcpy(runt.data(), &h, sizeof(h));
    ASSERT_TRUE(w->Write(runt).ok());
    ASSERT_TRUE(w->Finish({}, "{}").ok());
  }
  for (bool frames : {false, true}) {
    ReportModel m = Report(file, {}, false, frames);
    ASSERT_EQ(m.events.size(), 2u);
    EXPECT_EQ(m.events[0].samples + m.events[1].samples, 0u) << "frames " << frames;
    EXPECT_EQ(m.bad_records, 5u) << "frames " << frames;
    EXPECT_EQ(m.bad_samples_of_no_event, 4u) << "frames " << frames;
    EXPECT_NE(ReportNotes(m)[0].find("bad records: 5 (4 samples of an id no single event lists)"),
              std::string::npos)
        << ReportNotes(m)[0];
  }
}

std::string Gunzip(const std::string& gz) {
  z_stream z;
  std::memset(&z, 0, sizeof(z));
  EXPECT_EQ(inflateInit2(&z, 15 + 16), Z_OK);
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
  EXPECT_EQ(rc, Z_STREAM_END);
  inflateEnd(&z);
  return out;
}

TEST_F(TwoEventsTest, PprofHasAValuePairPerEvent) {
  ReportModel m = Report(Write(), {}, false, /*frames=*/true);
  auto bytes = EncodePprof(m);
  ASSERT_TRUE(bytes.ok());
  perftools::profiles::Profile p;
  ASSERT_TRUE(p.ParseFromString(Gunzip(*bytes)));
  auto str = [&](int64_t i) { return p.string_table(static_cast<int>(i)); };
  ASSERT_EQ(p.sample_type_size(), 4);
  EXPECT_EQ(str(p.sample_type(0).type()), "task-clock-samples");
  EXPECT_EQ(str(p.sample_type(1).type()), "task-clock");
  EXPECT_EQ(str(p.sample_type(1).unit()), "nanoseconds");
  EXPECT_EQ(str(p.sample_type(2).type()), "page-faults-samples");
  EXPECT_EQ(str(p.sample_type(3).type()), "page-faults");
  EXPECT_EQ(str(p.sample_type(3).unit()), "count");
  EXPECT_EQ(str(p.default_sample_type()), "task-clock");
  // Per event, the values add up to its own counts, and each sample has
  // values in its event's pair only, labelled with it.
  int64_t sums[4] = {};
  std::map<std::string, int64_t> touch_faults;
  for (const auto& s : p.sample()) {
    ASSERT_EQ(s.value_size(), 4);
    for (int i = 0; i < 4; ++i) sums[i] += s.value(i);
    EXPECT_TRUE((s.value(0) == 0 && s.value(1) == 0) != (s.value(2) == 0 && s.value(3) == 0));
    std::string event;
    for (const auto& l : s.label())
      if (str(l.key()) == "event") event = str(l.str());
    EXPECT_EQ(event, s.value(0) != 0 ? "task-clock" : "page-faults");
  }
  EXPECT_EQ(sums[0], 4);
  EXPECT_EQ(sums[1], 4000000);
  EXPECT_EQ(sums[2], 2);
  EXPECT_EQ(sums[3], 2);
}

}  // namespace
}  // namespace mmap3
