#include "perf_map.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fixtures.h"
#include "live_system.h"
#include "profile.h"
#include "record_writer.h"

namespace mmap3 {
namespace {

using testing::Id;
using testing::kIdV1;
using testing::TempDir;
using Outcome = PerfMapRead::Outcome;

// --- the parser -----------------------------------------------------------

TEST(ParsePerfMapTest, ReadsPerfsFormat) {
  const PerfMapText t = ParsePerfMap(
      "7f0000001000 40 LazyCompile:~fib /srv/app.js:12\n"
      "7f0000001040\t0x20\tInterpreter\n"
      "0x7F0000002000 ff  jit_stub  \r\n");
  ASSERT_EQ(t.entries.size(), 3u);
  EXPECT_EQ(t.entries[0].start, 0x7f0000001000u);
  EXPECT_EQ(t.entries[0].size, 0x40u);
  EXPECT_EQ(t.entries[0].name, "LazyCompile:~fib /srv/app.js:12");  // spaces are the name's
  EXPECT_EQ(t.entries[1].start, 0x7f0000001040u);
  EXPECT_EQ(t.entries[1].size, 0x20u);
  EXPECT_EQ(t.entries[1].name, "Interpreter");
  EXPECT_EQ(t.entries[2].start, 0x7f0000002000u);
  EXPECT_EQ(t.entries[2].size, 0xffu);
  EXPECT_EQ(t.entries[2].name, "jit_stub");  // trailing blanks and \r are not
  EXPECT_EQ(t.skipped_lines, 0u);
  EXPECT_FALSE(t.incomplete_last_line);
}

TEST(ParsePerfMapTest, MalformedLinesAreSkippedAndCounted) {
  const PerfMapText t = ParsePerfMap(
      "1000 10 good_one\n"
      "\n"                                 // empty: ignored, not counted
      "   \t \n"                           // blank: the same
      "garbage\n"                          // no numbers
      "1000\n"                             // no size
      "1000 10\n"                          // no name
      "1000 10    \n"                      // a name of blanks
      "1000 0 empty_range\n"               // size 0
      "ffffffffffffff00 200 wraps\n"       // start + size past 2^64
      "10000000000000000 10 too_wide\n"    // 17 digits
      "1000 1g0 bad_digit\n"               // not hex
      "1000  -10 negative\n"
      "zz 10 not_hex\n"
      "1000 10 good_two\n");
  ASSERT_EQ(t.entries.size(), 2u);
  EXPECT_EQ(t.entries[0].name, "good_one");
  EXPECT_EQ(t.entries[1].name, "good_two");
  EXPECT_EQ(t.skipped_lines, 10u);
}

TEST(ParsePerfMapTest, AnUnfinishedLastLineIsLeftOut) {
  // The JIT was writing it: its name may be cut short.
  const PerfMapText t = ParsePerfMap("1000 10 whole\n2000 10 half_writ");
  ASSERT_EQ(t.entries.size(), 1u);
  EXPECT_EQ(t.entries[0].name, "whole");
  EXPECT_TRUE(t.incomplete_last_line);
  EXPECT_EQ(t.skipped_lines, 0u);
}

TEST(ParsePerfMapTest, NamesArePrintableUtf8) {
  const PerfMapText t = ParsePerfMap("1000 10 caf\xc3\xa9 \x1b[2J\xff\n");
  ASSERT_EQ(t.entries.size(), 1u);
  EXPECT_EQ(t.entries[0].name, "caf\xc3\xa9 \\x1b[2J\\xff");
  // A NUL cannot be in a name a JIT meant.
  EXPECT_EQ(ParsePerfMap(std::string("1000 10 a\0b\n", 12)).skipped_lines, 1u);
}

TEST(ParsePerfMapTest, RandomBytesNeverCrashAndEveryEntryIsValid) {
  // What a hostile or corrupted file can hold: whatever the parser keeps
  // follows its rules.  (Each input is a function of the seed.)
  std::mt19937_64 rng(20261126);
  const std::string alphabet = "0123456789abcdefxX \t\n\r-zq\xff\xc3";
  for (int i = 0; i < 3000; ++i) {
    std::string text(rng() % 200, '\0');
    for (char& c : text) c = alphabet[rng() % alphabet.size()];
    const PerfMapText t = ParsePerfMap(text);
    for (const PerfMapEntry& e : t.entries) {
      ASSERT_GT(e.size, 0u) << "input " << i;
      ASSERT_GE(e.start + e.size, e.start) << "input " << i;
      ASSERT_FALSE(e.name.empty()) << "input " << i;
      ASSERT_EQ(e.name.find_first_of("\n\r\t"), std::string::npos) << "input " << i;
    }
    PerfMap map(t, PerfMapTaken::kRunning, text.size());
    for (int k = 0; k < 20; ++k) {
      const uint64_t a = rng() % 0x20000;
      const PerfMapEntry* e = map.Find(a);
      if (e != nullptr) {
        ASSERT_TRUE(a >= e->start && a - e->start < e->size) << "input " << i;
      }
    }
  }
}

// --- lookups ----------------------------------------------------------------

TEST(PerfMapTest, AnAddressCoveredByLinesOfSeveralNamesHasNone) {
  // A JIT frees code and reuses the memory: the new code's line comes
  // later, and which of the two ran at a given time the map cannot say.
  PerfMap map(ParsePerfMap("1000 100 old_big\n"
                           "1040 20 new_middle\n"
                           "10f0 20 new_across_the_end\n"
                           "3000 10 alone\n"
                           "3000 10 alone\n"),
              PerfMapTaken::kExit, 0);
  auto name = [&](uint64_t a) {
    const PerfMapEntry* e = map.Find(a);
    if (e != nullptr) {
      EXPECT_FALSE(map.SeveralNames(a)) << a;
    }
    return e != nullptr ? e->name : map.SeveralNames(a) ? "(several)" : "(none)";
  };
  EXPECT_EQ(name(0xfff), "(none)");
  EXPECT_EQ(name(0x1000), "old_big");
  EXPECT_EQ(name(0x103f), "old_big");
  EXPECT_EQ(name(0x1040), "(several)");
  EXPECT_EQ(name(0x105f), "(several)");
  EXPECT_EQ(name(0x1060), "old_big");  // only the old line ever covered it
  EXPECT_EQ(name(0x10ef), "old_big");
  EXPECT_EQ(name(0x10f0), "(several)");
  EXPECT_EQ(name(0x10ff), "(several)");
  EXPECT_EQ(name(0x1100), "new_across_the_end");
  EXPECT_EQ(name(0x110f), "new_across_the_end");
  EXPECT_EQ(name(0x1110), "(none)");
  EXPECT_EQ(name(0x3000), "alone");  // one name, twice
  EXPECT_EQ(name(0x3010), "(none)");
  // A later line covering several earlier ones.
  PerfMap over(ParsePerfMap("10 10 a\n20 10 b\n30 10 c\n18 20 d\n"), PerfMapTaken::kEnd, 0);
  auto over_name = [&](uint64_t a) {
    const PerfMapEntry* e = over.Find(a);
    return e != nullptr ? e->name : over.SeveralNames(a) ? "(several)" : "(none)";
  };
  EXPECT_EQ(over_name(0x17), "a");
  EXPECT_EQ(over_name(0x18), "(several)");
  EXPECT_EQ(over_name(0x2f), "(several)");
  EXPECT_EQ(over_name(0x37), "(several)");
  EXPECT_EQ(over_name(0x38), "c");
}

TEST(PerfMapTest, JsonRoundTripAndMistypedFieldsAreSkipped) {
  PerfMaps maps;
  maps.Set(42, PerfMap(ParsePerfMap("1000 10 f\nbad\n2000 20 g h\n"), PerfMapTaken::kExit, 33));
  maps.Refuse(43, "/tmp/perf-43.map: a symbolic link, not a regular file");
  maps.Refuse(43, "/tmp/perf-43.map: a symbolic link, not a regular file");  // once
  uint64_t bad = 0;
  const PerfMaps back = PerfMaps::FromJson(nlohmann::json::parse(maps.ToJson().dump()), &bad);
  EXPECT_EQ(bad, 0u);
  const PerfMap* m = back.Find(42);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->taken(), PerfMapTaken::kExit);
  EXPECT_EQ(m->bytes(), 33u);
  EXPECT_EQ(m->skipped_lines(), 1u);
  ASSERT_EQ(m->entries().size(), 2u);
  ASSERT_NE(m->Find(0x2010), nullptr);
  EXPECT_EQ(m->Find(0x2010)->name, "g h");
  ASSERT_EQ(back.refusals().size(), 1u);
  EXPECT_EQ(back.refusals()[0].pid, 43u);

  auto doc = nlohmann::json::parse(R"({"maps": [
      {"pid": 1, "taken": "exit", "bytes": 1, "skipped_lines": 0,
       "entries": [[4096, 16, "ok"], [4096, 0, "empty"], ["x", 1, "y"], [1, 2], 7,
                   [18446744073709551615, 2, "wraps"]]},
      {"pid": -1, "taken": "exit", "bytes": 1, "skipped_lines": 0, "entries": []},
      {"pid": 2, "taken": "later", "bytes": 1, "skipped_lines": 0, "entries": []},
      "nonsense"],
    "refused": [{"pid": 3}, {"pid": 4, "reason": "r"}]})");
  bad = 0;
  const PerfMaps junk = PerfMaps::FromJson(doc, &bad);
  EXPECT_EQ(bad, 4u);  // pid -1, taken "later", "nonsense", refusal without a reason
  ASSERT_NE(junk.Find(1), nullptr);
  EXPECT_EQ(junk.Find(1)->entries().size(), 1u);
  EXPECT_EQ(junk.Find(1)->skipped_lines(), 5u);
  EXPECT_EQ(junk.Find(2), nullptr);
  ASSERT_EQ(junk.refusals().size(), 1u);
  bad = 0;
  EXPECT_TRUE(PerfMaps::FromJson(nlohmann::json::array(), &bad).empty());
  EXPECT_EQ(bad, 1u);
}

TEST(PerfMapTest, OnlyAnonymousMemoryAndMemfdsAreJitMappings) {
  for (const char* p : {"//anon", "", "[anon:v8 code]", "/memfd:jit (deleted)", "memfd:x"})
    EXPECT_TRUE(IsJitMappingPath(p)) << p;
  for (const char* p : {"/usr/lib/libc.so.6", "[heap]", "[stack]", "[vdso]", "[vsyscall]",
                        "/dev/zero (deleted)", "//anonymous", "/tmp/perf-1.map", "anon_inode:x"})
    EXPECT_FALSE(IsJitMappingPath(p)) << p;
}

// --- reading the file -------------------------------------------------------

class ReadPerfMapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_fd_ = open(dir_.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(dir_fd_, 0);
    // The file's owner, and who the process is: as root the file is given
    // to another user, since root's own files are always accepted.
    root_ = geteuid() == 0;
    file_uid_ = root_ ? 12345 : geteuid();
  }
  void TearDown() override { close(dir_fd_); }
  std::string Write(const std::string& name, const std::string& text, mode_t mode = 0644) {
    const std::string path = dir_.File(name);
    testing::WriteFile(path, text);
    EXPECT_EQ(chmod(path.c_str(), mode), 0);
    if (root_) {
      EXPECT_EQ(chown(path.c_str(), file_uid_, file_uid_), 0);
    }
    return path;
  }
  PerfMapRead Read(const std::string& name, std::optional<PerfMapOwner> owner,
                   uint64_t max = kPerfMapMaxBytes, const PerfMapStamp* stamp = nullptr) {
    return ReadPerfMapAt(dir_fd_, name, "/tmp/" + name, owner, max, stamp);
  }
  PerfMapOwner Owner() const { return {file_uid_, file_uid_}; }

  TempDir dir_;
  int dir_fd_ = -1;
  bool root_ = false;
  uint32_t file_uid_ = 0;
};

TEST_F(ReadPerfMapTest, TheProcesssOwnFileIsRead) {
  Write("perf-1.map", "1000 10 f\n");
  const PerfMapRead r = Read("perf-1.map", Owner());
  ASSERT_EQ(r.outcome, Outcome::kRead) << r.reason;
  EXPECT_EQ(r.text, "1000 10 f\n");
  EXPECT_EQ(r.stamp.size, 10u);
  // Its effective uid will do too (a setuid program's file).
  EXPECT_EQ(Read("perf-1.map", PerfMapOwner{file_uid_ + 1, file_uid_}).outcome, Outcome::kRead);
  EXPECT_EQ(Read("perf-2.map", Owner()).outcome, Outcome::kMissing);
}

TEST_F(ReadPerfMapTest, AnotherUsersFileIsRefused) {
  Write("perf-1.map", "1000 10 planted\n");
  const PerfMapRead r = Read("perf-1.map", PerfMapOwner{file_uid_ + 1, file_uid_ + 1});
  EXPECT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_TRUE(r.text.empty());
  EXPECT_NE(r.reason.find(fmt::format("owned by uid {}", file_uid_)), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("/tmp/perf-1.map"), std::string::npos) << r.reason;
  // And any file when the process's uid is not known.
  EXPECT_EQ(Read("perf-1.map", std::nullopt).outcome, Outcome::kRefused);
}

TEST_F(ReadPerfMapTest, AMapLastWrittenBeforeTheProcessStartedIsRefused) {
  // An earlier process with the same pid and uid left its map in /tmp: its
  // names are of other code.  A file the process has not written since it
  // started is not its map.
  const std::string path = Write("perf-1.map", "1000 10 earlier_process\n");
  const timespec times[2] = {{1000000, 0}, {1000000, 0}};  // 1970-01-12
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  PerfMapOwner owner = Owner();
  owner.started_sec = 2000000;
  const PerfMapRead r = Read("perf-1.map", owner);
  EXPECT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_TRUE(r.text.empty());
  EXPECT_NE(r.reason.find("before the process started"), std::string::npos) << r.reason;
  // Written after the start (or the start not known): read.
  owner.started_sec = 1000000;
  EXPECT_EQ(Read("perf-1.map", owner).outcome, Outcome::kRead);
  owner.started_sec.reset();
  EXPECT_EQ(Read("perf-1.map", owner).outcome, Outcome::kRead);
}

TEST(ProcessOwnerTest, ThisProcessStartedBeforeNowAndAfterThisTestBinaryWasBuilt) {
  ProcLiveSystem system;
  const auto owner = system.ProcessOwner(getpid());
  ASSERT_TRUE(owner.has_value());
  EXPECT_EQ(owner->ruid, getuid());
  ASSERT_TRUE(owner->started_sec.has_value());
  struct stat exe;
  ASSERT_EQ(stat("/proc/self/exe", &exe), 0);
  const int64_t now = time(nullptr);
  EXPECT_LE(*owner->started_sec, now);
  // Rounded down by at most 2 s; the binary was linked before it ran.
  EXPECT_GE(*owner->started_sec + 3, static_cast<int64_t>(exe.st_mtim.tv_sec));
}

TEST_F(ReadPerfMapTest, ASymlinkIsRefusedAndNotFollowed) {
  // Pointing at a file the process's owner may read: still refused, and
  // the target's contents are not read (they could be anything root reads).
  Write("target", "1000 10 secret\n");
  ASSERT_EQ(symlink(dir_.File("target").c_str(), dir_.File("perf-1.map").c_str()), 0);
  const PerfMapRead r = Read("perf-1.map", Owner());
  EXPECT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_TRUE(r.text.empty());
  EXPECT_NE(r.reason.find("symbolic link"), std::string::npos) << r.reason;
  // The same through the unchanged-stamp path (a poll).
  PerfMapStamp stamp;
  EXPECT_EQ(Read("perf-1.map", Owner(), kPerfMapMaxBytes, &stamp).outcome, Outcome::kRefused);
  // A dangling one too (not "missing": someone put it there).
  ASSERT_EQ(symlink("/nonexistent/x", dir_.File("perf-2.map").c_str()), 0);
  EXPECT_EQ(Read("perf-2.map", Owner()).outcome, Outcome::kRefused);
}

TEST_F(ReadPerfMapTest, AFifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(mkfifo(dir_.File("perf-1.map").c_str(), 0644), 0);
  const PerfMapRead r = Read("perf-1.map", Owner());
  EXPECT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_NE(r.reason.find("FIFO"), std::string::npos) << r.reason;
}

TEST_F(ReadPerfMapTest, HardLinksWorldWritableAndOversizedFilesAreRefused) {
  Write("perf-1.map", "1000 10 f\n");
  ASSERT_EQ(link(dir_.File("perf-1.map").c_str(), dir_.File("other").c_str()), 0);
  PerfMapRead r = Read("perf-1.map", Owner());
  EXPECT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_NE(r.reason.find("hard links"), std::string::npos) << r.reason;

  Write("perf-2.map", "1000 10 f\n", 0666);
  r = Read("perf-2.map", Owner());
  EXPECT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_NE(r.reason.find("writable by every user"), std::string::npos) << r.reason;

  Write("perf-3.map", std::string(100, 'x'));
  r = Read("perf-3.map", Owner(), 99);
  EXPECT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_NE(r.reason.find("more than the 99"), std::string::npos) << r.reason;
  EXPECT_EQ(Read("perf-3.map", Owner(), 100).outcome, Outcome::kRead);
}

TEST_F(ReadPerfMapTest, AnUnchangedFileIsNotReadAgain) {
  Write("perf-1.map", "1000 10 f\n");
  const PerfMapRead first = Read("perf-1.map", Owner());
  ASSERT_EQ(first.outcome, Outcome::kRead);
  EXPECT_EQ(Read("perf-1.map", Owner(), kPerfMapMaxBytes, &first.stamp).outcome, Outcome::kUnchanged);
  // Appended to (the JIT compiled more): read again.
  FILE* f = std::fopen(dir_.File("perf-1.map").c_str(), "a");
  ASSERT_NE(f, nullptr);
  std::fputs("2000 10 g\n", f);
  std::fclose(f);
  const PerfMapRead again = Read("perf-1.map", Owner(), kPerfMapMaxBytes, &first.stamp);
  ASSERT_EQ(again.outcome, Outcome::kRead);
  EXPECT_EQ(again.text, "1000 10 f\n2000 10 g\n");
  ASSERT_EQ(unlink(dir_.File("perf-1.map").c_str()), 0);
  EXPECT_EQ(Read("perf-1.map", Owner(), kPerfMapMaxBytes, &again.stamp).outcome, Outcome::kMissing);
}

// --- what the report makes of them -------------------------------------------

const SampleFormat kFormat{PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_PERIOD,
                           0, true};

std::vector<uint8_t> Comm(uint32_t pid, const char* name) {
  CommRecord c;
  c.pid = c.tid = pid;
  c.comm = name;
  c.sample_id = {true, true, false, false, pid, pid, 1, 0, 0};
  return EncodeComm(c, kFormat);
}

std::vector<uint8_t> Mmap(uint32_t pid, uint64_t start, uint64_t len, const std::string& path,
                          const char* id = nullptr) {
  MmapRecord m;
  m.format = id ? MmapFormat::kMmap2BuildId : MmapFormat::kMmap2;
  m.misc = PERF_RECORD_MISC_USER;
  m.pid = m.tid = pid;
  m.start = start;
  m.len = len;
  m.pgoff = 0;
  if (id) m.build_id = Id(id);
  m.filename = path;
  m.sample_id = {true, true, false, false, pid, pid, 2, 0, 0};
  return EncodeMmap(m, kFormat);
}

std::vector<uint8_t> Sample(uint32_t pid, uint64_t ip) {
  SampleRecord s;
  s.misc = PERF_RECORD_MISC_USER;
  s.pid = s.tid = pid;
  s.ip = ip;
  s.time = 3;
  s.period = 1;
  return EncodeSample(s, {}, kFormat);
}

const ReportRow* Row(const ReportModel& m, const std::string& symbol) {
  for (const ReportRow& r : m.rows)
    if (r.symbol == symbol) return &r;
  return nullptr;
}

constexpr uint64_t kFile = 0x7f0000000000;   // a file-backed mapping
constexpr uint64_t kAnon = 0x7f1000000000;   // anonymous executable memory
constexpr uint64_t kHeap = 0x560000000000;

TEST(PerfMapReportTest, CodeRewrittenAtOneAddressIsNotNamedByTheLastLine) {
  // The JIT replaced the code at kAnon (its map says so with a second line):
  // one map, no times, so a sample there may be the old code or the new.
  // Neither name is given; the code only the new line covers is named.
  PerfMaps maps;
  maps.Set(10, PerfMap(ParsePerfMap(fmt::format("{:x} 100 old_code\n"
                                                "{:x} 200 new_code\n"
                                                "{:x} 100 same_name\n"
                                                "{:x} 100 same_name\n",
                                                kAnon, kAnon, kAnon + 0x400, kAnon + 0x400)),
                       PerfMapTaken::kExit, 100));
  Profile p({});
  p.SetFormat(kFormat);
  p.Process(Comm(10, "java"));
  p.Process(Mmap(10, kAnon, 0x1000, "//anon"));
  p.Process(Sample(10, kAnon + 0x10));   // before or after the rewrite: not known
  p.Process(Sample(10, kAnon + 0x110));  // only new_code ever covered it
  p.Process(Sample(10, kAnon + 0x410));  // the same line twice: one name
  DsoStore store(SymbolSearch{});
  Symbolizer symbolizer(store);
  symbolizer.SetPerfMaps(&maps);
  const ReportModel m = p.BuildReport(symbolizer, "t");
  const ReportRow* rewritten =
      Row(m, fmt::format("[unknown: several names in perf map]+{:#x}", kAnon + 0x10));
  ASSERT_NE(rewritten, nullptr);
  EXPECT_EQ(rewritten->symbol_status, SymbolStatus::kPerfMapAmbiguous);
  ASSERT_NE(Row(m, "new_code"), nullptr);
  EXPECT_EQ(Row(m, "new_code")->samples, 1u);
  EXPECT_EQ(Row(m, "old_code"), nullptr);
  ASSERT_NE(Row(m, "same_name"), nullptr);
  EXPECT_STREQ(SymbolStatusName(SymbolStatus::kPerfMapAmbiguous), "perf_map_ambiguous");
}

TEST(PerfMapReportTest, OnlyJitMappingsOfTheMapsOwnProcessAreNamedFromIt) {
  // Process 10's map covers its file-backed mapping, its [heap] and a
  // memfd with a build-id (an ELF loaded from memory) as well as its JIT
  // code: only the JIT code may take the map's names.  Process 11 has JIT
  // code at the same addresses and no map; process 12 runs the same JIT
  // function as 10 under the same command name.
  PerfMaps maps;
  maps.Set(10, PerfMap(ParsePerfMap(fmt::format("{:x} 100 map_names_file\n"
                                                "{:x} 100 map_names_heap\n"
                                                "{:x} 100 map_names_elf_memfd\n"
                                                "{:x} 100 jit_hot\n"
                                                "{:x} 100 jit_in_named_anon\n"
                                                "{:x} 100 jit_in_memfd\n",
                                                kFile, kHeap, kFile + 0x100000, kAnon,
                                                kAnon + 0x100000, kAnon + 0x200000)),
                       PerfMapTaken::kExit, 100));
  maps.Set(12, PerfMap(ParsePerfMap(fmt::format("{:x} 100 jit_hot\n", kAnon)), PerfMapTaken::kEnd, 20));

  Profile p({});
  p.SetFormat(kFormat);
  for (uint32_t pid : {10u, 11u, 12u}) {
    p.Process(Comm(pid, pid == 11 ? "other" : "java"));
    p.Process(Mmap(pid, kAnon, 0x1000, "//anon"));
  }
  p.Process(Mmap(10, kFile, 0x1000, "/usr/lib/libfoo.so"));  // no build-id
  p.Process(Mmap(10, kHeap, 0x1000, "[heap]"));
  p.Process(Mmap(10, kFile + 0x100000, 0x1000, "/memfd:elf (deleted)", kIdV1));
  p.Process(Mmap(10, kAnon + 0x100000, 0x1000, "[anon:jit]"));
  p.Process(Mmap(10, kAnon + 0x200000, 0x1000, "/memfd:code (deleted)"));
  p.Process(Sample(10, kFile + 0x10));
  p.Process(Sample(10, kHeap + 0x10));
  p.Process(Sample(10, kFile + 0x100010));
  p.Process(Sample(10, kAnon + 0x10));
  p.Process(Sample(10, kAnon + 0x100010));
  p.Process(Sample(10, kAnon + 0x200010));
  p.Process(Sample(10, kAnon + 0x800));  // JIT code no line covers
  p.Process(Sample(11, kAnon + 0x10));   // pid 10's map covers it: not 11's
  p.Process(Sample(12, kAnon + 0x20));

  DsoStore store(SymbolSearch{});
  Symbolizer symbolizer(store);
  symbolizer.SetPerfMaps(&maps);
  const ReportModel m = p.BuildReport(symbolizer, "t");

  for (const ReportRow& r : m.rows)
    EXPECT_EQ(r.symbol.find("map_names_"), std::string::npos) << r.path << " named " << r.symbol;
  const ReportRow* file = Row(m, "[unknown]+0x10");
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->path, "/usr/lib/libfoo.so");
  EXPECT_EQ(file->symbol_status, SymbolStatus::kNoBuildId);
  ASSERT_NE(Row(m, fmt::format("[unknown {}]+0x10", Id(kIdV1).ShortHex())), nullptr);

  // One row for both processes' jit_hot: JIT code is one DSO per path and
  // source, as a file is, though each process's own map names it.
  const ReportRow* hot = Row(m, "jit_hot");
  ASSERT_NE(hot, nullptr);
  EXPECT_EQ(hot->samples, 2u);
  EXPECT_EQ(hot->comm, "java");
  EXPECT_EQ(hot->path, "//anon");
  EXPECT_EQ(hot->source, BuildIdSource::kPerfMap);
  EXPECT_EQ(hot->symbol_status, SymbolStatus::kFound);
  EXPECT_EQ(DsoLabel(hot->path, hot->build_id, hot->source), "anon (perf-map)");
  ASSERT_NE(Row(m, "jit_in_named_anon"), nullptr);
  EXPECT_EQ(Row(m, "jit_in_named_anon")->source, BuildIdSource::kPerfMap);
  ASSERT_NE(Row(m, "jit_in_memfd"), nullptr);

  const ReportRow* uncovered = Row(m, fmt::format("[unknown: not in perf map]+{:#x}", kAnon + 0x800));
  ASSERT_NE(uncovered, nullptr);
  EXPECT_EQ(uncovered->symbol_status, SymbolStatus::kNoPerfMapEntry);
  EXPECT_EQ(uncovered->source, BuildIdSource::kPerfMap);  // the process has a map

  const ReportRow* no_map = Row(m, fmt::format("[unknown: no perf map]+{:#x}", kAnon + 0x10));
  ASSERT_NE(no_map, nullptr);
  EXPECT_EQ(no_map->comm, "other");
  EXPECT_EQ(no_map->symbol_status, SymbolStatus::kNoPerfMap);
  EXPECT_EQ(no_map->source, BuildIdSource::kNone);

  // The mappings: JIT ones of a process with a map say so.
  EXPECT_EQ(m.mappings_by_source[static_cast<int>(BuildIdSource::kPerfMap)], 4u);  // 10: 3, 12: 1
  EXPECT_STREQ(SymbolStatusName(SymbolStatus::kNoPerfMap), "no_perf_map");
  EXPECT_STREQ(SymbolStatusName(SymbolStatus::kNoPerfMapEntry), "no_perf_map_entry");
  EXPECT_STREQ(BuildIdSourceName(BuildIdSource::kPerfMap), "perf-map");
}

}  // namespace
}  // namespace mmap3
