#include "profile.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <random>

#include <fmt/format.h>

#include "build_id_cache.h"
#include "fixtures.h"
#include "linux/perf_event_mmap3.h"
#include "record_sorter.h"
#include "record_writer.h"

namespace mmap3 {
namespace {

using testing::Id;
using testing::kIdV1;
using testing::kIdV2;
using testing::kIdV3;
using testing::TempDir;

const SampleFormat kFormat{PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU |
                               PERF_SAMPLE_PERIOD | PERF_SAMPLE_CALLCHAIN,
                           0, true};
constexpr uint64_t kBase = 0x7f0000000000;

using testing::Sid;

std::vector<uint8_t> Comm(uint32_t pid, const char* name, uint64_t time, bool exec = true) {
  CommRecord c;
  c.pid = c.tid = pid;
  c.comm = name;
  c.exec = exec;
  c.sample_id = Sid(pid, time);
  return EncodeComm(c, kFormat);
}

std::vector<uint8_t> Mmap(uint32_t pid, const std::string& path, const char* id, uint64_t time,
                          uint64_t start = kBase) {
  MmapRecord m;
  m.format = id ? MmapFormat::kMmap2BuildId : MmapFormat::kMmap2;
  m.misc = PERF_RECORD_MISC_USER;
  m.pid = m.tid = pid;
  m.start = start;
  m.len = 0x10000;
  m.pgoff = 0;
  if (id) m.build_id = Id(id);
  m.filename = path;
  m.sample_id = Sid(pid, time);
  return EncodeMmap(m, kFormat);
}

std::vector<uint8_t> Sample(uint32_t pid, uint64_t ip, uint64_t time,
                            std::vector<uint64_t> chain = {}, bool kernel = false,
                            uint64_t period = 1) {
  SampleRecord s;
  s.misc = kernel ? PERF_RECORD_MISC_KERNEL : PERF_RECORD_MISC_USER;
  s.pid = s.tid = pid;
  s.ip = ip;
  s.time = time;
  s.period = period;
  return EncodeSample(s, chain, kFormat);
}

std::vector<uint8_t> Fork(uint32_t pid, uint32_t ppid, uint64_t time) {
  TaskRecord t;
  t.pid = t.tid = pid;
  t.ppid = t.ptid = ppid;
  t.time = time;
  t.sample_id = Sid(pid, time);
  return EncodeTask(t, kFormat);
}

const ReportRow* RowFor(const ReportModel& m, const std::string& comm) {
  for (const ReportRow& r : m.rows)
    if (r.comm == comm) return &r;
  return nullptr;
}

// The scenario perf gets wrong: one path, three versions over time.
//   A maps v1; the file is replaced by rename with v2; B maps it; then it is
//   rewritten in place with v3 and C maps it.  Every sample must land on its
//   own version, with that version's symbols.
// The report of `p` with symbols looked up as `search` says.
ReportModel ReportWith(const Profile& p, const SymbolSearch& search) {
  DsoStore store(search);
  Symbolizer sym(store);
  return p.BuildReport(sym, "t");
}

class ReplacedDsoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.File("libdemo.so");
    for (int v = 1; v <= 3; ++v) {
      std::string f = dir_.File(fmt::format("v{}.so", v));
      ASSERT_TRUE(testing::BuildSharedLibrary(f, fmt::format("demo_common demo_only_v{}", v),
                                              v == 1 ? kIdV1 : v == 2 ? kIdV2 : kIdV3));
      versions_.push_back(f);
    }
  }

  // Each version is cached while "mapped", the way the capture does it.
  void InstallAndCache(int v, bool rename_into_place) {
    const std::string& src = versions_[static_cast<size_t>(v - 1)];
    if (rename_into_place) {
      std::filesystem::copy_file(src, path_ + ".new");
      std::filesystem::rename(path_ + ".new", path_);
    } else {
      // Rewrite in place: same inode, new contents.
      std::filesystem::copy_file(src, path_, std::filesystem::copy_options::overwrite_existing);
    }
    UniqueFd fd(open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    const char* ids[] = {kIdV1, kIdV2, kIdV3};
    BuildIdCache cache(cache_.path());
    ASSERT_TRUE(cache.Insert(Id(ids[v - 1]), path_, fd.get()).ok());
  }

  ReportModel Run(bool with_cache) {
    ProfileOptions opts;
    Profile profile(opts);
    profile.SetFormat(kFormat);
    const char* ids[] = {kIdV1, kIdV2, kIdV3};
    const char* comms[] = {"procA", "procB", "procC"};
    uint64_t t = 100;
    for (int v = 1; v <= 3; ++v) {
      uint32_t pid = 100 * static_cast<uint32_t>(v);
      uint64_t off = testing::FunctionFileOffset(versions_[static_cast<size_t>(v - 1)],
                                                 fmt::format("demo_only_v{}", v));
      profile.Process(Comm(pid, comms[v - 1], t++));
      profile.Process(Mmap(pid, path_, ids[v - 1], t++));
      for (int i = 0; i < 10 * v; ++i) profile.Process(Sample(pid, kBase + off, t++));
    }
    SymbolSearch search;
    search.debug_dir = "";
    search.cache_dir = with_cache ? cache_.path() : "";
    return ReportWith(profile, search);
  }

  TempDir dir_, cache_;
  std::string path_;
  std::vector<std::string> versions_;
};

TEST_F(ReplacedDsoTest, EverySampleGetsItsOwnVersionAndSymbols) {
  InstallAndCache(1, true);
  InstallAndCache(2, true);
  InstallAndCache(3, false);
  ReportModel m = Run(/*with_cache=*/true);
  EXPECT_EQ(m.samples, 60u);
  ASSERT_EQ(m.rows.size(), 3u);
  const char* ids[] = {kIdV1, kIdV2, kIdV3};
  const char* comms[] = {"procA", "procB", "procC"};
  for (int v = 1; v <= 3; ++v) {
    const ReportRow* r = RowFor(m, comms[v - 1]);
    ASSERT_NE(r, nullptr) << comms[v - 1];
    EXPECT_EQ(r->build_id, Id(ids[v - 1]));
    EXPECT_EQ(r->symbol, fmt::format("demo_only_v{}", v));
    EXPECT_EQ(r->samples, 10u * static_cast<uint64_t>(v));
    EXPECT_EQ(r->path, path_);
  }
  // Sorted by samples.
  EXPECT_EQ(m.rows[0].comm, "procC");
  EXPECT_DOUBLE_EQ(m.rows[0].percent, 50.0);
}

TEST_F(ReplacedDsoTest, WithoutCopiesOldVersionsAreRefusedNotMisattributed) {
  std::filesystem::copy_file(versions_[2], path_);  // only v3 on disk
  ReportModel m = Run(/*with_cache=*/false);
  ASSERT_EQ(m.rows.size(), 3u);
  EXPECT_EQ(RowFor(m, "procC")->symbol, "demo_only_v3");
  for (const char* comm : {"procA", "procB"}) {
    const ReportRow* r = RowFor(m, comm);
    EXPECT_EQ(r->symbol.rfind("[unknown ", 0), 0u) << r->symbol;
    EXPECT_EQ(r->symbol_status, SymbolStatus::kNoFile);
    EXPECT_EQ(r->symbol.find("demo_"), std::string::npos);
  }
  EXPECT_NE(RowFor(m, "procA")->symbol.find("111111111111"), std::string::npos);
}

TEST(ProfileTest, ABuildIdUnderTwoPathsGetsOneAnswerWhateverTheOrder) {
  // One libc build-id mapped by a container (under a path the host does
  // not have) and by the host.  Whichever location is symbolized first,
  // both get the host file's symbols: every path is a candidate.
  TempDir dir;
  const std::string host = dir.File("libc.so.6");
  const std::string container = dir.File("container-root/usr/lib/libc.so.6");  // no such file
  ASSERT_TRUE(testing::BuildSharedLibrary(host, "lib_fn other_fn", kIdV1));
  const uint64_t fn = testing::FunctionFileOffset(host, "lib_fn");
  SymbolSearch search;
  search.debug_dir = "";
  std::vector<std::string> reports;
  for (int variant = 0; variant < 32; ++variant) {
    // The order of the records and the locations' offsets (hence where
    // the location table keeps them) change with the variant.
    Profile p({});
    p.SetFormat(kFormat);
    uint64_t t = 1;
    const uint64_t off = fn + static_cast<uint64_t>(variant % 8);
    auto run = [&](uint32_t pid, const char* comm, const std::string& path) {
      p.Process(Comm(pid, comm, t++));
      p.Process(Mmap(pid, path, kIdV1, t++));
      p.Process(Sample(pid, kBase + off, t++));
    };
    if (variant % 2 == 0) {
      run(10, "in_container", container);
      run(20, "on_host", host);
    } else {
      run(20, "on_host", host);
      run(10, "in_container", container);
    }
    ReportModel m = ReportWith(p, search);
    std::string rows;
    for (const ReportRow& r : m.rows) {
      rows += r.comm + " " + r.path + " " + r.symbol + " " + SymbolStatusName(r.symbol_status) +
              "\n";
    }
    reports.push_back(rows);
  }
  const std::string want = "in_container " + container + " lib_fn found\n" + "on_host " + host +
                           " lib_fn found\n";
  for (size_t i = 0; i < reports.size(); ++i) EXPECT_EQ(reports[i], want) << "variant " << i;
}

// A row that several objects reach (one build-id the kernel gave in one
// process and map_files in another, rows by build-id only) is described
// the same way whatever order the location table hands its locations out
// in: the report of one file must not change from run to run (the
// table's order follows the objects' heap addresses).
TEST(ProfileTest, ARowReachedByTwoObjectsIsDescribedTheSameWhateverTheOrder) {
  std::set<std::string> reports;
  for (int variant = 0; variant < 32; ++variant) {
    SourceOverrides overrides;
    overrides.Add(20, kBase, Id(kIdV1), BuildIdSource::kMapFiles);
    ProfileOptions o;
    o.overrides = &overrides;
    o.controls.sort = {SortKey::kBuildId};
    // Objects allocated apart by a variable amount: their addresses, and
    // so the location table's order, change with the variant.
    std::vector<std::unique_ptr<char[]>> spacers;
    for (int i = 0; i < variant; ++i) spacers.emplace_back(new char[64 + 32 * (variant % 7)]);
    Profile p(o);
    p.SetFormat(kFormat);
    uint64_t t = 1;
    const uint64_t off = 0x100 + static_cast<uint64_t>(variant % 8) * 0x10;
    auto run = [&](uint32_t pid, const char* comm) {
      p.Process(Comm(pid, comm, t++));
      p.Process(Mmap(pid, "/x/libc.so.6", kIdV1, t++));
      for (int i = 0; i < 1 + variant % 3; ++i) p.Process(Sample(pid, kBase + off + i, t++));
    };
    if (variant % 2 == 0) {
      run(10, "a");
      run(20, "b");
    } else {
      run(20, "b");
      run(10, "a");
    }
    SymbolSearch search;
    search.debug_dir = "";
    ReportModel m = ReportWith(p, search);
    ASSERT_EQ(m.rows.size(), 1u) << "variant " << variant;
    reports.insert(BuildIdSourceName(m.rows[0].source));
  }
  EXPECT_EQ(reports.size(), 1u) << "described " << reports.size() << " ways: " << *reports.begin()
                                << " ... " << *reports.rbegin();
}

TEST(ProfileTest, ForkCopiesMappingsAndExecResetsThem) {
  Profile p({});
  p.SetFormat(kFormat);
  p.Process(Comm(10, "parent", 1));
  p.Process(Mmap(10, "/x/lib.so", kIdV1, 2));
  p.Process(Fork(11, 10, 3));
  p.Process(Sample(11, kBase + 0x100, 4));    // child: inherited mapping
  p.Process(Comm(11, "child", 5, /*exec=*/true));
  p.Process(Sample(11, kBase + 0x100, 6));    // after exec: gone
  SymbolSearch s;
  s.debug_dir = "";
  s.use_recorded_paths = false;
  ReportModel m = ReportWith(p, s);
  ASSERT_EQ(m.rows.size(), 2u);
  const ReportRow* parent = RowFor(m, "parent");  // the forked child kept its parent's name
  ASSERT_NE(parent, nullptr);
  EXPECT_EQ(parent->build_id, Id(kIdV1));
  const ReportRow* child = RowFor(m, "child");
  ASSERT_NE(child, nullptr);
  EXPECT_TRUE(child->build_id.empty());
  EXPECT_EQ(child->symbol, "[unknown]");
  EXPECT_EQ(child->symbol_status, SymbolStatus::kNoMapping);
  EXPECT_EQ(parent->symbol_status, SymbolStatus::kNoFile);
  EXPECT_EQ(p.unattributed(), 1u);
}

TEST(ProfileTest, RecordsFromTwoCpusAreMatchedInTimeOrder) {
  // CPU 1's buffer holds the sample (t=20); CPU 0's holds the mmap (t=10).
  // Drained CPU 1 first, the sample would precede its mapping.
  RecordSorter sorter;
  Profile p({});
  p.SetFormat(kFormat);
  auto push = [&](const std::vector<uint8_t>& r) { sorter.Push(RecordTime(r, kFormat), r); };
  push(Sample(10, kBase + 0x10, 20));  // CPU 1
  push(Comm(10, "app", 5));            // CPU 0
  push(Mmap(10, "/x/lib.so", kIdV2, 10));
  sorter.FinishRound([&](Bytes r) { p.Process(r); });
  sorter.Flush([&](Bytes r) { p.Process(r); });
  EXPECT_EQ(p.samples(), 1u);
  EXPECT_EQ(p.unattributed(), 0u);

  // The same records unsorted lose the attribution: the test can fail.
  Profile unsorted({});
  unsorted.SetFormat(kFormat);
  unsorted.Process(Sample(10, kBase + 0x10, 20));
  unsorted.Process(Comm(10, "app", 5));
  unsorted.Process(Mmap(10, "/x/lib.so", kIdV2, 10));
  EXPECT_EQ(unsorted.unattributed(), 1u);
}

TEST(ProfileTest, ARoundReleasesOnlyWhatNoBufferCanStillPrecede) {
  // perf's finished-round rule through the profile.  Round 1 drains CPU 0
  // (comm t=5, mmap v1 t=10, sample t=30) then CPU 1 (sample t=20).  While
  // we drained, CPU 1 wrote a remapping with v2 at t=25 that arrives in
  // round 2.  Releasing round 1 up to its own maximum (30) would put the
  // t=30 sample on v1; the rule releases only up to round 0's maximum
  // (nothing), then after round 2 up to 30, in time order.
  RecordSorter sorter;
  Profile p({});
  p.SetFormat(kFormat);
  auto push = [&](const std::vector<uint8_t>& r) { sorter.Push(RecordTime(r, kFormat), r); };
  auto process = [&](Bytes r) { p.Process(r); };
  push(Comm(10, "app", 5));
  push(Mmap(10, "/x/lib.so", kIdV1, 10));
  push(Sample(10, kBase + 0x10, 30));
  push(Sample(10, kBase + 0x10, 20));
  EXPECT_EQ(sorter.FinishRound(process), 0u);  // nothing is safe yet
  push(Mmap(10, "/x/lib.so", kIdV2, 25));      // CPU 1, round 2
  EXPECT_EQ(sorter.FinishRound(process), 5u);  // everything up to t=30
  sorter.Flush(process);
  SymbolSearch s;
  s.debug_dir = "";
  ReportModel m = ReportWith(p, s);
  ASSERT_EQ(m.rows.size(), 2u);
  std::map<std::string, uint64_t> by_id;
  for (const ReportRow& r : m.rows) by_id[r.build_id.Hex()] += r.samples;
  EXPECT_EQ(by_id[kIdV1], 1u);  // t=20: before the remap
  EXPECT_EQ(by_id[kIdV2], 1u);  // t=30: after it
}

TEST(ProfileTest, KernelSamplesGoToTheKernelObject) {
  ProfileOptions o;
  o.kernel_build_id = Id(kIdV3);
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(Sample(1, 0xffffffff81000123, 1, {}, /*kernel=*/true));
  SymbolSearch s;
  s.kernel_notes = "/nonexistent";
  ReportModel m = ReportWith(p, s);
  ASSERT_EQ(m.rows.size(), 1u);
  EXPECT_EQ(m.rows[0].path, "[kernel.kallsyms]");
  EXPECT_EQ(m.rows[0].build_id, Id(kIdV3));
  EXPECT_EQ(m.rows[0].source, BuildIdSource::kKernelNotes);
}

// Kernel image and module records as record synthesizes them (and perf).
std::vector<uint8_t> KernelMmap(const std::string& name, uint64_t start, uint64_t len,
                                uint64_t pgoff, const char* id) {
  MmapRecord m;
  m.format = id ? MmapFormat::kMmap2BuildId : MmapFormat::kMmap;
  m.misc = PERF_RECORD_MISC_KERNEL;
  m.pid = kKernelPid;
  m.tid = 0;
  m.start = start;
  m.len = len;
  m.pgoff = pgoff;
  if (id) m.build_id = Id(id);
  m.filename = name;
  m.sample_id = Sid(kKernelPid, 0);
  return EncodeMmap(m, kFormat);
}

TEST(ProfileTest, TheKernelImagesRecordGivesItsIdWhereNoTableDid) {
  // perf record --buildid-mmap: no build-id table, so no kernel id from it;
  // its image record has the id (perf read /sys/kernel/notes).
  constexpr uint64_t kText = 0xffffffff81000000;
  for (const bool table : {false, true}) {
    SCOPED_TRACE(table ? "with a table's id" : "without a table");
    ProfileOptions o;
    if (table) o.kernel_build_id = Id(kIdV3);
    Profile p(o);
    p.SetFormat(kFormat);
    p.Process(KernelMmap("[kernel.kallsyms]_text", kText, 0x2000, kText, kIdV2));
    p.Process(Sample(1, kText + 0x123, 1, {}, /*kernel=*/true));
    SymbolSearch s;
    s.kernel_notes = "/nonexistent";
    ReportModel m = ReportWith(p, s);
    ASSERT_EQ(m.rows.size(), 1u);
    EXPECT_EQ(m.rows[0].path, "[kernel.kallsyms]");
    // The table's, where there is one (as before); else the record's.
    EXPECT_EQ(m.rows[0].build_id, Id(table ? kIdV3 : kIdV2));
    EXPECT_EQ(m.rows[0].source, table ? BuildIdSource::kKernelNotes : BuildIdSource::kMmap2);
  }
}

// A module's load or unload as the kernel reports it (MMAP3 ABI version 2).
std::vector<uint8_t> ModuleMmap3(const std::string& name, uint64_t start, uint64_t len,
                                 const char* id, bool unloaded, uint64_t time) {
  MmapRecord m;
  m.format = MmapFormat::kMmap3;
  m.misc = PERF_RECORD_MISC_KERNEL;
  m.pid = m.tid = kKernelPid;
  m.start = start;
  m.len = len;
  m.prot = 5;
  m.build_id = Id(id);
  m.build_id_status = PERF_MMAP3_BUILD_ID_FOUND;
  m.mmap3_flags = unloaded ? PERF_MMAP3_UNLOADED : 0;
  m.filename = name;
  m.sample_id = Sid(kKernelPid, time);
  return EncodeMmap(m, kFormat);
}

class KernelAttributionTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kBootA = 0xffffffff81000000;  // the running kernel's offset
  static constexpr uint64_t kBootB = 0xffffffff9a200000;  // the capture's
  static constexpr uint64_t kModuleB = 0xffffffffc1230000;

  void SetUp() override {
    search_.debug_dir = "";
    search_.kernel_notes = dir_.File("notes");
    search_.kallsyms = dir_.File("kallsyms");
    search_.modules_dir = "";
    testing::WriteFile(search_.kernel_notes, testing::BuildIdNotes(Id(kIdV3)));
    testing::WriteFile(search_.kallsyms, testing::FakeKallsyms(kBootA, 0xffffffffc0000000));
  }
  // A capture made in boot B: the image record, fakemod (build-id v1) at
  // kModuleB, and kernel samples in schedule, in the module and elsewhere.
  ReportModel Capture(const std::vector<KernelModuleMapping>& changed = {}) {
    std::unique_ptr<Profile> profile = BootB();
    Profile& p = *profile;
    p.Process(KernelMmap("[fakemod]", kModuleB, 0x3000, 0, kIdV1));
    p.Process(Comm(5, "app", 1));
    uint64_t t = 2;
    for (int i = 0; i < 3; ++i)
      p.Process(Sample(5, kBootB + testing::kScheduleOffset + 0x10, t++, {}, /*kernel=*/true));
    for (int i = 0; i < 2; ++i) p.Process(Sample(5, kModuleB + 0x1010, t++, {}, true));
    p.Process(Sample(5, 0xffffffffc9000000, t++, {}, true));  // BPF, or a later module
    p.SetChangedKernelModules(changed);
    return ReportWith(p, search_);
  }
  // A profile of a capture in boot B, after the image's record.
  static std::unique_ptr<Profile> BootB() {
    ProfileOptions o;
    o.kernel_build_id = Id(kIdV3);
    auto p = std::make_unique<Profile>(o);
    p->SetFormat(kFormat);
    p->Process(KernelMmap("[kernel.kallsyms]_text", kBootB, 0x2000, kBootB, nullptr));
    return p;
  }
  void CacheModuleSymbols() {
    KernelModule fakemod;
    fakemod.name = "fakemod";
    fakemod.symbols = {{0, 0, "mod_init"}, {0x1000, 0, "mod_work"}};
    const std::string mod = BuildIdCache::ModuleSymbolsPath(cache_.path(), "fakemod", Id(kIdV1));
    std::filesystem::create_directories(std::filesystem::path(mod).parent_path());
    testing::WriteFile(mod, FormatModuleSymbols(fakemod));
  }
  static const ReportRow* Row(const ReportModel& m, const std::string& path, uint64_t samples) {
    for (const ReportRow& r : m.rows)
      if (r.path == path && r.samples == samples) return &r;
    return nullptr;
  }

  TempDir dir_, cache_;
  SymbolSearch search_;
};

TEST_F(KernelAttributionTest, AfterARebootNoSampleLandsOnAnotherSymbol) {
  // Only the running kernel: right build-id, other KASLR offset.  Read
  // unrelocated, the schedule sample would land on _etext.
  ReportModel m = Capture();
  for (const ReportRow& r : m.rows) {
    EXPECT_EQ(r.symbol.rfind("[unknown", 0), 0u) << r.path << " " << r.symbol;
  }
}

TEST_F(KernelAttributionTest, TheCapturesSnapshotPutsScheduleOnSchedule) {
  // What record keeps: kallsyms by kernel build-id (here from yet another
  // boot, A) and the module's symbols by its build-id.
  search_.cache_dir = cache_.path();
  const std::string kallsyms = BuildIdCache::KallsymsPath(cache_.path(), Id(kIdV3));
  std::filesystem::create_directories(std::filesystem::path(kallsyms).parent_path());
  testing::WriteFile(kallsyms, testing::FakeKallsyms(kBootA, 0xffffffffc0000000));
  CacheModuleSymbols();

  ReportModel m = Capture();
  ASSERT_EQ(m.rows.size(), 3u);
  const ReportRow* image = Row(m, "[kernel.kallsyms]", 3);
  ASSERT_NE(image, nullptr);
  EXPECT_EQ(image->symbol, "schedule");
  EXPECT_EQ(image->build_id, Id(kIdV3));
  // The module is an object of its own, with its own build-id.
  const ReportRow* module = Row(m, "[fakemod]", 2);
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(module->symbol, "mod_work");
  EXPECT_EQ(module->build_id, Id(kIdV1));
  EXPECT_EQ(module->source, BuildIdSource::kKernelNotes);
  // Neither the image nor a module: the kernel, without a symbol.
  const ReportRow* other = Row(m, "[kernel.kallsyms]", 1);
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->symbol, "[no symbol 333333333333]+0xffffffffc9000000");
  // The kernel's mappings are listed, under pid -1.
  ASSERT_EQ(m.mappings.size(), 2u);
  EXPECT_EQ(m.mappings[1].pid, -1);
  EXPECT_EQ(m.mappings[1].path, "[fakemod]");
  EXPECT_EQ(m.mappings[1].build_id, Id(kIdV1));
}

// The kernel reports no module loads: when record finds other code in a
// module's range at the end (a module loaded where it was, another build of
// it, BPF), samples there may not be the module's, and get no symbol of it.
TEST_F(KernelAttributionTest, AModuleWithOtherCodeInItsPlaceGetsNoSymbols) {
  search_.cache_dir = cache_.path();
  CacheModuleSymbols();
  ASSERT_EQ(Row(Capture(), "[fakemod]", 2)->symbol, "mod_work");

  // Another module's listing at the same address, and a module that was
  // not recorded: only the module recorded there is affected.
  ReportModel m = Capture({{"[fakemod]", kModuleB}, {"[fakemod]", kModuleB + 0x1000},
                           {"[other]", kModuleB}});
  const ReportRow* module = Row(m, "[fakemod]", 2);
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(module->symbol, "[unknown]+0x1010");
  EXPECT_EQ(module->symbol_status, SymbolStatus::kNoBuildId);
  EXPECT_TRUE(module->build_id.empty());
  EXPECT_EQ(m.changed_kernel_modules, std::vector<std::string>{"[fakemod]"});
  ASSERT_EQ(m.mappings.size(), 2u);
  EXPECT_TRUE(m.mappings[1].build_id.empty());
  EXPECT_EQ(m.mappings[1].source, BuildIdSource::kNone);
  // The image is not a module.
  EXPECT_EQ(Row(m, "[kernel.kallsyms]", 3)->build_id, Id(kIdV3));
}

// The kernel reports module loads and unloads (MMAP3 ABI version 2): a
// module unloaded and another build of it loaded at the same address are
// two objects, each with its own samples and build-id; between them the
// range is nobody's.  That the range held other code at the end is then no
// reason to doubt either.
TEST_F(KernelAttributionTest, AModuleUnloadedAndLoadedAgainIsTwoObjects) {
  search_.cache_dir = cache_.path();
  CacheModuleSymbols();
  std::unique_ptr<Profile> profile = BootB();
  Profile& p = *profile;
  p.Process(KernelMmap("[fakemod]", kModuleB, 0x3000, 0, kIdV1));  // synthesized at the start
  p.Process(Comm(5, "app", 1));
  for (uint64_t t = 2; t < 4; ++t) p.Process(Sample(5, kModuleB + 0x1010, t, {}, true));
  // The kernel's unload names the module's text, shorter than the range
  // recorded at the start: the rest of that range goes too.
  p.Process(ModuleMmap3("[fakemod]", kModuleB, 0x2000, kIdV1, /*unloaded=*/true, 4));
  p.Process(Sample(5, kModuleB + 0x1010, 5, {}, true));
  p.Process(Sample(5, kModuleB + 0x2010, 5, {}, true));
  p.Process(ModuleMmap3("[fakemod]", kModuleB, 0x4000, kIdV2, /*unloaded=*/false, 6));
  for (uint64_t t = 7; t < 10; ++t) p.Process(Sample(5, kModuleB + 0x1010, t, {}, true));
  p.Process(ModuleMmap3("[fakemod]", kModuleB, 0x4000, kIdV2, /*unloaded=*/true, 10));
  p.Process(Sample(5, kModuleB + 0x3010, 11, {}, true));
  p.SetChangedKernelModules({{"[fakemod]", kModuleB}});
  ReportModel m = ReportWith(p, search_);

  const ReportRow* first = Row(m, "[fakemod]", 2);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->build_id, Id(kIdV1));
  EXPECT_EQ(first->symbol, "mod_work");
  const ReportRow* second = Row(m, "[fakemod]", 3);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->build_id, Id(kIdV2));
  EXPECT_EQ(second->source, BuildIdSource::kKernelNotes);
  EXPECT_NE(second->symbol, "mod_work");  // v1's symbols are not v2's
  // Between the loads and after the last unload: the kernel, no symbol.
  uint64_t nobody = 0;
  for (const ReportRow& r : m.rows)
    if (r.path == "[kernel.kallsyms]") {
      EXPECT_EQ(r.symbol.rfind("[unknown", 0), 0u) << r.symbol;
      nobody += r.samples;
    }
  EXPECT_EQ(nobody, 3u);
  EXPECT_TRUE(m.changed_kernel_modules.empty());
}

// A per-task capture gets only its own tasks' module records: here the
// task loaded build v1, another task swapped in build v2 unseen, and the
// task's unload names v2.  The samples at that address since the load may
// be either build's: none keeps v1's build-id or symbols.
TEST_F(KernelAttributionTest, AnUnloadOfAnotherBuildMakesTheLoadDoubtful) {
  search_.cache_dir = cache_.path();
  CacheModuleSymbols();
  std::unique_ptr<Profile> profile = BootB();
  Profile& p = *profile;
  p.Process(Comm(5, "app", 1));
  p.Process(ModuleMmap3("[fakemod]", kModuleB, 0x3000, kIdV1, /*unloaded=*/false, 2));
  for (uint64_t t = 3; t < 6; ++t) p.Process(Sample(5, kModuleB + 0x1010, t, {}, true));
  p.Process(ModuleMmap3("[fakemod]", kModuleB, 0x3000, kIdV2, /*unloaded=*/true, 6));
  p.SetChangedKernelModules({});
  ReportModel m = ReportWith(p, search_);
  const ReportRow* module = Row(m, "[fakemod]", 3);
  ASSERT_NE(module, nullptr);
  EXPECT_TRUE(module->build_id.empty());
  EXPECT_EQ(module->symbol, "[unknown]+0x1010");
  EXPECT_EQ(m.changed_kernel_modules, std::vector<std::string>{"[fakemod]"});
}

// A kernel chain with an interrupt in it: the unwinder gives the
// interrupted context's ip unmarked, among the return addresses.  Here a
// timer interrupt hit entered_fn's first instruction, after its call
// padding __pfx_entered_fn: one byte back is padding, where no call is,
// so the frame is entered_fn.  A return address just after a noreturn
// call that ends noreturn_caller is still noreturn_caller's, not
// next_fn's: one byte back is a function, not padding.
// Where the kernel's symbols come from in the tests below: its notes
// (build-id v3) and `kallsyms`, in `dir`.
SymbolSearch KernelSymbols(const TempDir& dir, const std::string& kallsyms) {
  SymbolSearch s;
  s.debug_dir = "";
  s.kernel_notes = dir.File("notes");
  s.kallsyms = dir.File("kallsyms");
  s.modules_dir = "";
  testing::WriteFile(s.kernel_notes, testing::BuildIdNotes(Id(kIdV3)));
  testing::WriteFile(s.kallsyms, kallsyms);
  return s;
}

TEST(ProfileTest, AnInterruptedIpAtAFunctionsStartIsThatFunctionsNotItsPadding) {
  constexpr uint64_t kText = 0xffffffff81000000;
  TempDir dir;
  const SymbolSearch s = KernelSymbols(
      dir, fmt::format("{:016x} T _stext\n{:016x} T _text\n"
                       "{:016x} T caller_fn\n"
                       "{:016x} t __pfx_entered_fn\n{:016x} T entered_fn\n"
                       "{:016x} T noreturn_caller\n{:016x} T next_fn\n"
                       "{:016x} T irq_entry\n{:016x} T leaf_fn\n"
                       "{:016x} T _etext\n",
                       kText, kText, kText + 0x100, kText + 0x1f0, kText + 0x200, kText + 0x300,
                       kText + 0x400, kText + 0x480, kText + 0x500, kText + 0x2000));
  ProfileOptions o;
  o.kernel_build_id = Id(kIdV3);
  o.callchains = true;
  o.sample_frames = true;
  o.script = true;
  o.controls.children = true;
  o.controls.sort = {SortKey::kSym};
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(KernelMmap("[kernel.kallsyms]_text", kText, 0x2000, kText, nullptr));
  p.Process(Comm(5, "app", 1));
  const uint64_t kernel = static_cast<uint64_t>(PERF_CONTEXT_KERNEL);
  // leaf_fn <- irq_entry <- (interrupted) entered_fn+0 <- noreturn_caller
  // (returns to next_fn+0) <- caller_fn.
  p.Process(Sample(5, kText + 0x510, 2,
                   {kernel, kText + 0x510, kText + 0x490, kText + 0x200, kText + 0x400,
                    kText + 0x120},
                   /*kernel=*/true));
  // A leaf in leaf_fn whose chain returns into entered_fn (one byte back is
  // entered_fn): unchanged.
  p.Process(Sample(5, kText + 0x520, 3, {kernel, kText + 0x520, kText + 0x211}, true));
  // A leaf on the padding's last byte (call-depth tracking runs padding):
  // it is the padding's, and it changes nothing for the frame above.
  p.Process(Sample(5, kText + 0x1ff, 4, {kernel, kText + 0x1ff}, true));
  ReportModel m = ReportWith(p, s);
  std::map<std::string, uint64_t> children;
  for (const ReportRow& r : m.rows) children[r.symbol] = r.children_period;
  EXPECT_EQ(children["entered_fn"], 2u);
  EXPECT_EQ(children["__pfx_entered_fn"], 1u);  // the leaf on the padding
  EXPECT_EQ(children["noreturn_caller"], 1u);
  EXPECT_EQ(children["caller_fn"], 1u);
  EXPECT_EQ(children["leaf_fn"], 2u);
  EXPECT_FALSE(children.contains("next_fn"));
  bool found = false;
  for (const auto& st : m.stacks)
    if (st.folded == "app;caller_fn;noreturn_caller;entered_fn;irq_entry;leaf_fn") found = true;
  EXPECT_TRUE(found) << m.stacks[0].folded;
  ASSERT_EQ(m.script.size(), 3u);
  std::vector<std::string> frames;
  for (uint32_t id : m.script[0].locations) {
    const ScriptLocation& l = m.script_locations[id];
    frames.push_back(fmt::format("{}+{:#x}", l.symbol, l.symbol_offset));
  }
  EXPECT_EQ(frames, (std::vector<std::string>{"leaf_fn+0x10", "irq_entry+0x10", "entered_fn+0x0",
                                              "noreturn_caller+0x100", "caller_fn+0x20"}))
      << "script prints the recorded address's offset";
  // pprof's locations: the interrupted frame is at the address recorded,
  // named entered_fn; the leaf on the padding's last byte is a location of
  // its own, named for the padding.
  std::map<uint64_t, std::string> frame_symbols;
  for (const FrameLocation& l : m.frame_locations) frame_symbols[l.address] = l.symbol;
  EXPECT_EQ(frame_symbols[kText + 0x200], "entered_fn");
  EXPECT_EQ(frame_symbols[kText + 0x1ff], "__pfx_entered_fn");
  EXPECT_EQ(frame_symbols[kText + 0x3ff], "noreturn_caller");
  for (const auto& [address, symbol] : frame_symbols) EXPECT_NE(symbol, "next_fn");
}

// The padding rule is the kernel's: a user program may name a function
// __pfx_work and end it with a call to a noreturn function, whose return
// address is then the first byte of the function after it.  That frame is
// __pfx_work's, not after's.
TEST(ProfileTest, AUserFunctionNamedLikePaddingKeepsItsCalls) {
  TempDir dir;
  const std::string lib = dir.File("libpfx.so");
  ASSERT_TRUE(testing::CompileC(
      "__attribute__((noreturn, noinline)) void die(void) { for (;;) __asm__ volatile(\"\"); }\n"
      "__attribute__((noinline)) void __pfx_work(int x) { if (x) die(); die(); }\n"
      "__attribute__((noinline)) int after(int x) { return x * 3 + 1; }\n",
      lib, std::string("-shared -fPIC -O1 -falign-functions=1 -fno-reorder-functions ") +
               "-fno-optimize-sibling-calls -Wl,--build-id=0x" + kIdV1));
  const uint64_t after = testing::FunctionFileOffset(lib, "after") - 2;
  const uint64_t in_die = testing::FunctionFileOffset(lib, "die") - 2;  // die is 2 bytes long
  ProfileOptions o;
  o.callchains = true;
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(Comm(7, "app", 1));
  p.Process(Mmap(7, lib, kIdV1, 2));
  // Only meaningful if __pfx_work's call is its last instruction, right
  // before after: one byte back from after's start is __pfx_work.
  {
    ProfileOptions flat;
    Profile q(flat);
    q.SetFormat(kFormat);
    q.Process(Comm(7, "app", 1));
    q.Process(Mmap(7, lib, kIdV1, 2));
    q.Process(Sample(7, kBase + after - 1, 3));
    SymbolSearch s;
    s.debug_dir = "";
    ReportModel m = ReportWith(q, s);
    ASSERT_EQ(m.rows.size(), 1u);
    ASSERT_EQ(m.rows[0].symbol, "__pfx_work") << "the layout this test needs was not built";
  }
  const uint64_t user = static_cast<uint64_t>(PERF_CONTEXT_USER);
  p.Process(Sample(7, kBase + in_die, 3, {user, kBase + in_die, kBase + after}));
  SymbolSearch s;
  s.debug_dir = "";
  ReportModel m = ReportWith(p, s);
  ASSERT_EQ(m.stacks.size(), 1u);
  EXPECT_EQ(m.stacks[0].folded, "app;__pfx_work;die");
}

TEST(ProfileTest, FoldedStacksRunFromOutermostToLeaf) {
  ProfileOptions o;
  o.callchains = true;
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(Comm(7, "app", 1));
  p.Process(Mmap(7, "/x/lib.so", nullptr, 2));
  const uint64_t user = static_cast<uint64_t>(PERF_CONTEXT_USER);
  for (int i = 0; i < 3; ++i)
    p.Process(Sample(7, kBase + 0x30, 3 + i, {user, kBase + 0x30, kBase + 0x21, kBase + 0x11}));
  SymbolSearch s;
  s.debug_dir = "";
  ReportModel m = ReportWith(p, s);
  ASSERT_EQ(m.stacks.size(), 1u);
  // Callers are looked up at return address - 1.
  EXPECT_EQ(m.stacks[0].folded, "app;[unknown]+0x10;[unknown]+0x20;[unknown]+0x30");
  EXPECT_EQ(m.stacks[0].samples, 3u);
}

// A chain seen before is counted without being resolved again
// (ChainMemo): only while nothing could have changed what it resolves to,
// and only in the process it was seen in.
TEST(ProfileTest, TheSameChainAfterAMappingChangeOrInAnotherProcessIsResolvedAgain) {
  ProfileOptions o;
  o.callchains = true;
  Profile p(o);
  p.SetFormat(kFormat);
  const uint64_t user = static_cast<uint64_t>(PERF_CONTEXT_USER);
  const std::vector<uint64_t> chain = {user, kBase + 0x30, kBase + 0x21, kBase + 0x11};
  p.Process(Comm(7, "app", 1));
  p.Process(Comm(8, "app", 2));
  p.Process(Mmap(7, "/x/lib.so", nullptr, 3));
  // The same chain in another process of the same name, whose file is
  // mapped 0x2000 lower: other offsets.
  p.Process(Mmap(8, "/x/lib.so", nullptr, 4, kBase - 0x2000));
  p.Process(Sample(7, kBase + 0x30, 5, chain));
  p.Process(Sample(8, kBase + 0x30, 6, chain));
  p.Process(Sample(7, kBase + 0x30, 7, chain));
  // Another file over the first, 0x1000 lower: the same addresses are now
  // other offsets in it.
  p.Process(Mmap(7, "/x/other.so", nullptr, 8, kBase - 0x1000));
  for (int i = 0; i < 3; ++i) p.Process(Sample(7, kBase + 0x30, 9 + i, chain));
  SymbolSearch s;
  s.debug_dir = "";
  ReportModel m = ReportWith(p, s);
  std::map<std::string, uint64_t> got;
  for (const auto& st : m.stacks) got[st.folded] += st.samples;
  const std::map<std::string, uint64_t> want = {
      {"app;[unknown]+0x10;[unknown]+0x20;[unknown]+0x30", 2},
      {"app;[unknown]+0x1010;[unknown]+0x1020;[unknown]+0x1030", 3},
      {"app;[unknown]+0x2010;[unknown]+0x2020;[unknown]+0x2030", 1}};
  EXPECT_EQ(got, want);
}

// A capture's records in time order: samples with chains seen again and
// again (memo hits), first seen, and bad, with mappings, forks, exits and
// renames between them, each of which changes what the next samples
// resolve to.
std::vector<std::vector<uint8_t>> MixedRecords(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const uint64_t user = static_cast<uint64_t>(PERF_CONTEXT_USER);
  const uint64_t kernel = static_cast<uint64_t>(PERF_CONTEXT_KERNEL);
  // A few chains, seen again and again until a record other than a
  // sample changes what they resolve to.
  std::vector<std::vector<uint64_t>> chains;
  for (int i = 0; i < 12; ++i) {
    std::vector<uint64_t> c;
    if (i % 4 == 3) {
      c.push_back(kernel);
      c.push_back(0xffffffff81000000ull + rng() % 0x1000);
    }
    if (i % 3 != 2) {
      c.push_back(user);
      for (size_t d = rng() % 20; d > 0; --d) c.push_back(kBase + rng() % 0x30000);
    }
    chains.push_back(c);
  }
  std::vector<std::vector<uint8_t>> records;
  uint64_t t = 1;
  for (uint32_t pid = 10; pid < 16; ++pid) records.push_back(Comm(pid, pid % 2 ? "a" : "b", t++));
  for (int i = 0; i < 4000; ++i) {
    const uint32_t pid = 10 + static_cast<uint32_t>(rng() % 6);
    const uint64_t r = rng() % 100;
    if (r < 3) {
      records.push_back(Mmap(pid, fmt::format("/x/lib{}.so", rng() % 3), rng() % 2 ? kIdV1 : nullptr,
                             t++, kBase + (rng() % 4) * 0x8000));
    } else if (r < 4) {
      records.push_back(Fork(pid, 10 + static_cast<uint32_t>(rng() % 6), t++));
    } else if (r < 5) {
      TaskRecord e;
      e.exit = true;
      e.pid = e.tid = e.ppid = e.ptid = pid;
      e.time = t;
      e.sample_id = Sid(pid, t++);
      records.push_back(EncodeTask(e, kFormat));
    } else if (r < 6) {
      records.push_back(Comm(pid, rng() % 2 ? "a" : "c", t++, rng() % 2 != 0));
    } else if (r < 7) {
      auto bad = Sample(pid, kBase + 0x40, t++, chains[rng() % chains.size()]);
      bad.resize(bad.size() - 8);  // shorter than its header says
      records.push_back(bad);
    } else {
      const auto& chain = chains[rng() % chains.size()];
      const bool in_kernel = !chain.empty() && chain[0] == kernel;
      const uint64_t ip = chain.size() > 1 ? chain[1] : kBase + rng() % 0x30000;
      records.push_back(Sample(pid, ip, t++, chain, in_kernel, 1 + rng() % 5));
    }
  }
  return records;
}

// What a Profile of `o` makes of `records` (of `format`), counted record by
// record with Process() or, with `batches`, in batches of 1 to 80 records
// (ProcessBatch()): its reports in every format, and its counts.
struct Counted {
  std::string reports;
  uint64_t samples = 0, period = 0;  // the first event's
};
Counted CountRecords(const std::vector<std::vector<uint8_t>>& records, const SampleFormat& format,
                     const ProfileOptions& o, bool batches) {
  Profile p(o);
  p.SetFormat(format);
  std::vector<Bytes> views(records.begin(), records.end());
  std::mt19937_64 split(5);
  for (size_t i = 0; i < views.size();) {
    const size_t n = batches ? std::min<size_t>(views.size() - i, 1 + split() % 80) : 1;
    if (batches)
      p.ProcessBatch(std::span<const Bytes>(views).subspan(i, n));
    else
      p.Process(views[i]);
    i += n;
  }
  SymbolSearch s;
  s.debug_dir = "";
  const ReportModel m = ReportWith(p, s);
  std::ostringstream out;
  WriteTextReport(m, out);
  WriteFoldedReport(m, out);
  WriteJsonReport(m, out);
  out << p.samples() << " " << p.bad_records() << " " << p.unattributed() << " " << p.locations();
  return Counted{out.str(), p.samples(), m.events.at(0).period};
}

// ProcessBatch() overlaps the work of a run of samples; what it counts must
// be what Process() counts record by record, whatever the batches: with
// mappings, forks, exits and renames between the samples (each of which
// changes what the next samples resolve to), bad samples, chains seen
// again and first seen, in every mode a report has.
TEST(ProfileTest, BatchesCountWhatRecordByRecordCounts) {
  const std::vector<std::vector<uint8_t>> records = MixedRecords(11);
  auto report = [&](const ProfileOptions& o, bool batches) {
    return CountRecords(records, kFormat, o, batches).reports;
  };
  for (int mode = 0; mode < 6; ++mode) {
    ProfileOptions o;
    o.callchains = mode == 1 || mode == 3;
    o.controls.children = mode == 2 || mode == 3;
    o.script = mode == 4;
    o.sample_frames = mode == 5;
    const std::string one = report(o, false), batched = report(o, true);
    // The first line that differs, not two whole reports.
    std::istringstream a(one), b(batched);
    std::string la, lb;
    int line = 0;
    while (std::getline(a, la) && std::getline(b, lb) && la == lb) ++line;
    EXPECT_TRUE(one == batched) << "mode " << mode << ", line " << line << ":\n  one by one: " << la
                                << "\n  batched:    " << lb;
    EXPECT_NE(one.find("[unknown]"), std::string::npos) << "mode " << mode;
  }
}

// The flat report of a capture with one event has a loop of its own
// (ProcessFlatBatch()); it too must count what Process() counts: here the
// samples of MixedRecords() written again without a period or a chain,
// under a fixed period (perf record -c), and with their own.
TEST(ProfileTest, FlatBatchesOfOneEventCountWhatRecordByRecordCounts) {
  const SampleFormat plain{PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU,
                           0, true};
  std::vector<std::vector<uint8_t>> records;
  for (const std::vector<uint8_t>& r : MixedRecords(12)) {
    SampleRecord s;
    if (DecodeSampleRecord(r, kFormat, &s) == DecodeStatus::kOk)
      records.push_back(EncodeSample(s, {}, plain));
    else
      records.push_back(r);  // the trailers do not depend on the bits dropped
  }
  for (uint64_t fixed : {uint64_t{0}, uint64_t{4000}}) {
    ProfileOptions o;
    o.events.emplace_back();
    o.events[0].fixed_period = fixed;
    const Counted one = CountRecords(records, plain, o, false);
    const Counted batched = CountRecords(records, plain, o, true);
    EXPECT_EQ(one.reports, batched.reports) << "fixed period " << fixed;
    EXPECT_NE(one.reports.find("[unknown]"), std::string::npos);
    // The premise: a fixed period is what each sample counts.
    if (fixed != 0) {
      EXPECT_EQ(one.period, one.samples * fixed);
    }
  }
}

// A chain seen again in the same epoch is counted through its memo entry,
// its counts kept there until a report reads them or the entry is filled in
// again: what it counts must be what resolving every sample counts (the
// memo is off with sample_frames), whenever the report is read, and each
// hit must stay with what its chain resolved to when it was taken, not
// with what it resolves to after the next mapping.
TEST(ProfileTest, MemoHitsCountWhatResolvingEverySampleCounts) {
  for (uint64_t seed : {11, 12, 13}) {
    const std::vector<std::vector<uint8_t>> records = MixedRecords(seed);
    // `read_at`: a report is also read there, mid-way, and is part of what
    // is compared.
    auto report = [&](ProfileOptions o, size_t read_at) {
      Profile p(o);
      p.SetFormat(kFormat);
      SymbolSearch s;
      s.debug_dir = "";
      std::ostringstream out;
      auto read = [&] {
        const ReportModel m = ReportWith(p, s);
        WriteTextReport(m, out);
        WriteFoldedReport(m, out);
        out << p.samples() << " " << p.bad_records() << " " << p.unattributed() << " "
            << p.locations() << "\n";
        EXPECT_EQ(p.CountedSamples(), p.samples());
      };
      std::vector<Bytes> views(records.begin(), records.end());
      for (size_t i = 0; i < views.size(); i += 50) {
        if (i == read_at) read();
        const size_t n = std::min<size_t>(50, views.size() - i);
        p.ProcessBatch(std::span<const Bytes>(views).subspan(i, n));
      }
      read();
      return out.str();
    };
    for (int mode = 0; mode < 3; ++mode) {
      ProfileOptions o;
      o.callchains = mode != 1;
      o.controls.children = mode != 0;
      ProfileOptions resolved = o;
      resolved.sample_frames = true;
      for (size_t read_at : {size_t{SIZE_MAX}, size_t{1000}, size_t{2500}}) {
        const std::string want = report(resolved, read_at), got = report(o, read_at);
        EXPECT_NE(want.find("[unknown]"), std::string::npos);
        std::istringstream a(want), b(got);
        std::string la, lb;
        int line = 0;
        while (std::getline(a, la) && std::getline(b, lb) && la == lb) ++line;
        EXPECT_TRUE(want == got) << "seed " << seed << ", mode " << mode << ", read at "
                                 << read_at << ", line " << line << ":\n  resolved: " << la
                                 << "\n  memo:     " << lb;
      }
    }
  }
}

// Chains a capture crafted to share the memo's hash (CRC32C is linear: a
// caller's word changed by words whose CRC32C is 0), more of them than a
// lookup reads slots, each in a mapped range of its own: those past the
// probe limit are resolved without the memo, and every sample is counted
// on its own chain's frames, as when every sample is resolved.
TEST(ProfileTest, ChainsThatShareTheMemosHashAreCountedOnTheirOwnFrames) {
  // Bits 4 to 43: the changed callers stay in one mapping of 2^44 bytes.
  const std::vector<uint64_t> kernel = testing::Crc32cKernel(4, 43);
  if (kernel.empty()) GTEST_SKIP() << "no CRC32C: the memo hashes otherwise";
  ASSERT_GE(kernel.size(), 7u);
  constexpr uint64_t kStart = 0x100000000000, kCaller = kStart + 0x1000;
  const uint64_t user = static_cast<uint64_t>(PERF_CONTEXT_USER);
  std::vector<std::vector<uint64_t>> chains;
  for (uint64_t i = 0; i < 100; ++i) {
    uint64_t x = 0;
    for (size_t j = 0; j < 7; ++j)
      if (i >> j & 1) x ^= kernel[j];
    chains.push_back({user, kStart + 0x100, kCaller ^ x, kStart + 0x2000});
  }
  // The premise: one hash for all, whatever the key's head.
  const uint64_t head[] = {7, 1, kStart + 0x100};
  auto hash = [&](const std::vector<uint64_t>& c) {
    return ChainMemo::Hash(head, std::span<const uint8_t>(
                                     reinterpret_cast<const uint8_t*>(c.data()), c.size() * 8));
  };
  for (const auto& c : chains) ASSERT_EQ(hash(c), hash(chains[0]));

  std::vector<std::vector<uint8_t>> records;
  uint64_t t = 1;
  records.push_back(Comm(7, "app", t++));
  MmapRecord m;
  m.format = MmapFormat::kMmap2;
  m.misc = PERF_RECORD_MISC_USER;
  m.pid = m.tid = 7;
  m.start = kStart;
  m.len = uint64_t{1} << 44;
  m.filename = "/x/big.so";
  m.sample_id = Sid(7, t++);
  records.push_back(EncodeMmap(m, kFormat));
  // Chain i gets 1 + i % 3 samples, in rounds over all chains: a chain's
  // later samples come after every other chain has been looked up.
  for (uint64_t round = 0; round < 3; ++round)
    for (size_t i = 0; i < chains.size(); ++i)
      if (round <= i % 3) records.push_back(Sample(7, kStart + 0x100, t++, chains[i], false, 1 + i));

  auto report = [&](bool resolve_every_sample) {
    ProfileOptions o;
    o.callchains = true;
    o.controls.children = true;
    o.sample_frames = resolve_every_sample;
    Profile p(o);
    p.SetFormat(kFormat);
    std::vector<Bytes> views(records.begin(), records.end());
    p.ProcessBatch(views);
    SymbolSearch s;
    s.debug_dir = "";
    const ReportModel model = ReportWith(p, s);
    std::ostringstream out;
    WriteTextReport(model, out);
    WriteFoldedReport(model, out);
    std::map<std::string, uint64_t> stacks;
    for (const auto& st : model.stacks) stacks[st.folded] += st.samples;
    return std::make_pair(out.str(), stacks);
  };
  const auto [want, want_stacks] = report(true);
  const auto [got, got_stacks] = report(false);
  ASSERT_EQ(want_stacks.size(), chains.size()) << "each chain is a stack of its own";
  std::map<uint64_t, size_t> stacks_of_samples;  // samples -> how many stacks have that many
  for (const auto& [folded, samples] : got_stacks) ++stacks_of_samples[samples];
  EXPECT_EQ(stacks_of_samples, (std::map<uint64_t, size_t>{{1, 34}, {2, 33}, {3, 33}}));
  EXPECT_EQ(got_stacks, want_stacks);
  EXPECT_TRUE(got == want) << "memo:\n" << got << "\nresolved:\n" << want;
}

TEST(ProfileTest, OverheadIsTheShareOfThePeriod) {
  // A frequency-mode event: samples stand for different amounts of the
  // event.  perf's Overhead weights them by period; so do we.
  Profile p({});
  p.SetFormat(kFormat);
  p.Process(Comm(1, "many", 1));
  p.Process(Comm(2, "heavy", 2));
  for (uint64_t t = 3; t < 6; ++t) p.Process(Sample(1, 0x1000, t, {}, false, /*period=*/100));
  p.Process(Sample(2, 0x1000, 6, {}, false, /*period=*/900));
  SymbolSearch s;
  ReportModel m = ReportWith(p, s);
  EXPECT_EQ(m.samples, 4u);
  EXPECT_EQ(m.period, 1200u);
  ASSERT_EQ(m.rows.size(), 2u);
  EXPECT_EQ(m.rows[0].comm, "heavy");  // sorted by overhead, as perf does
  EXPECT_DOUBLE_EQ(m.rows[0].percent, 75.0);
  EXPECT_EQ(m.rows[0].samples, 1u);
  EXPECT_EQ(m.rows[1].comm, "many");
  EXPECT_EQ(m.rows[1].samples, 3u);
  EXPECT_EQ(m.rows[1].period, 300u);
  EXPECT_DOUBLE_EQ(m.rows[1].percent, 25.0);
}

TEST(ProfileTest, FoldedStacksCrossFromKernelToUser) {
  ProfileOptions o;
  o.callchains = true;
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(Comm(7, "app", 1));
  p.Process(Mmap(7, "/x/lib.so", nullptr, 2));
  const uint64_t kernel = static_cast<uint64_t>(PERF_CONTEXT_KERNEL);
  const uint64_t user = static_cast<uint64_t>(PERF_CONTEXT_USER);
  // A syscall: two kernel frames, then the user frames that made it.
  p.Process(Sample(7, 0xffffffff81000040, 3,
                   {kernel, 0xffffffff81000040, 0xffffffff81000031, user, kBase + 0x21, kBase + 0x11},
                   /*kernel=*/true));
  SymbolSearch s;
  s.debug_dir = "";
  s.kernel_notes = "/nonexistent";
  ReportModel m = ReportWith(p, s);
  ASSERT_EQ(m.stacks.size(), 1u);
  // The first user ip is where the kernel was entered, not a return address.
  EXPECT_EQ(m.stacks[0].folded,
            "app;[unknown]+0x10;[unknown]+0x21;[unknown]+0xffffffff81000030;"
            "[unknown]+0xffffffff81000040");
}

TEST(ProfileTest, TheUserIpUnderKernelFramesIsLookedUpAsItIs) {
  // A page fault on the first instruction of a function: the user ip is
  // that instruction, and one byte before it is another function (or
  // padding).
  TempDir dir;
  const std::string lib = dir.File("libfault.so");
  ASSERT_TRUE(testing::BuildSharedLibrary(lib, "caller_fn faulting_fn", kIdV1));
  // FunctionFileOffset() is 2 bytes into the function.
  const uint64_t entry = testing::FunctionFileOffset(lib, "faulting_fn") - 2;
  const uint64_t in_caller = testing::FunctionFileOffset(lib, "caller_fn") + 4;
  ASSERT_GT(entry, 0u);
  ProfileOptions o;
  o.callchains = true;
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(Comm(7, "app", 1));
  p.Process(Mmap(7, lib, kIdV1, 2));
  const uint64_t kernel = static_cast<uint64_t>(PERF_CONTEXT_KERNEL);
  const uint64_t user = static_cast<uint64_t>(PERF_CONTEXT_USER);
  p.Process(Sample(7, 0xffffffff81000040, 3,
                   {kernel, 0xffffffff81000040, user, kBase + entry, kBase + in_caller + 1},
                   /*kernel=*/true));
  SymbolSearch s;
  s.debug_dir = "";
  s.kernel_notes = "/nonexistent";
  ReportModel m = ReportWith(p, s);
  ASSERT_EQ(m.stacks.size(), 1u);
  EXPECT_EQ(m.stacks[0].folded, "app;caller_fn;faulting_fn;[unknown]+0xffffffff81000040");
}

std::vector<uint8_t> SampleIn(uint16_t cpumode, uint32_t pid, uint64_t ip, uint64_t time,
                              std::vector<uint64_t> chain = {}) {
  SampleRecord s;
  s.misc = cpumode;
  s.pid = s.tid = pid;
  s.ip = ip;
  s.time = time;
  return EncodeSample(s, chain, kFormat);
}

TEST(ProfileTest, GuestAndHypervisorSamplesAreNeverPutOnHostObjects) {
  // A vCPU thread (pid 7) has a host library at kBase; the guest's
  // addresses may fall anywhere in it, and the host kernel's build-id is
  // known.  None of that applies to the guest's or the hypervisor's ips.
  ProfileOptions o;
  o.callchains = true;
  o.kernel_build_id = Id(kIdV3);
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(Comm(7, "vcpu", 1));
  p.Process(Mmap(7, "/x/lib.so", kIdV1, 2));
  p.Process(SampleIn(PERF_RECORD_MISC_GUEST_USER, 7, kBase + 0x10, 3));
  p.Process(SampleIn(PERF_RECORD_MISC_GUEST_USER, 7, kBase + 0x20, 4));
  p.Process(SampleIn(PERF_RECORD_MISC_GUEST_KERNEL, 7, 0xffffffff81000123, 5));
  p.Process(SampleIn(PERF_RECORD_MISC_HYPERVISOR, 7, kBase + 0x30, 6));
  p.Process(SampleIn(PERF_RECORD_MISC_CPUMODE_UNKNOWN, 7, kBase + 0x30, 6));  // whose: not said
  const uint64_t guest_kernel = static_cast<uint64_t>(PERF_CONTEXT_GUEST_KERNEL);
  const uint64_t guest_user = static_cast<uint64_t>(PERF_CONTEXT_GUEST_USER);
  p.Process(SampleIn(PERF_RECORD_MISC_GUEST_KERNEL, 7, 0xffffffff81000123, 7,
                     {guest_kernel, 0xffffffff81000123, guest_user, kBase + 0x40, kBase + 0x51}));
  SymbolSearch s;
  s.debug_dir = "";
  s.kernel_notes = "/nonexistent";
  ReportModel m = ReportWith(p, s);
  EXPECT_EQ(p.unattributed(), 1u);  // the unknown cpumode
  std::map<std::string, const ReportRow*> by_path;
  for (const ReportRow& r : m.rows) {
    EXPECT_NE(r.path, "/x/lib.so") << r.symbol;
    EXPECT_NE(r.path, "[kernel.kallsyms]") << r.symbol;
    EXPECT_TRUE(r.build_id.empty()) << r.path;
    by_path[r.path] = &r;
  }
  ASSERT_EQ(by_path.size(), 4u);
  ASSERT_TRUE(by_path.count("[unknown]"));
  EXPECT_EQ(by_path["[unknown]"]->symbol_status, SymbolStatus::kNoMapping);
  ASSERT_TRUE(by_path.count("[guest.user]"));
  EXPECT_EQ(by_path["[guest.user]"]->samples, 2u);  // one row, whatever the ips
  EXPECT_EQ(by_path["[guest.user]"]->symbol, "[guest.user]");
  EXPECT_EQ(by_path["[guest.user]"]->symbol_status, SymbolStatus::kGuest);
  ASSERT_TRUE(by_path.count("[guest.kernel]"));
  EXPECT_EQ(by_path["[guest.kernel]"]->samples, 2u);
  ASSERT_TRUE(by_path.count("[hypervisor]"));
  EXPECT_EQ(by_path["[hypervisor]"]->symbol_status, SymbolStatus::kHypervisor);
  bool chain_seen = false;
  for (const ReportStack& st : m.stacks) {
    EXPECT_EQ(st.folded.find("lib.so"), std::string::npos) << st.folded;
    EXPECT_EQ(st.folded.find("111111111111"), std::string::npos) << st.folded;
    chain_seen |= st.folded == "vcpu;[guest.user];[guest.user];[guest.kernel]";
  }
  EXPECT_TRUE(chain_seen);
}

// `record` with its header's cpumode set to `cpumode` (other misc bits kept).
std::vector<uint8_t> InSpace(std::vector<uint8_t> record, uint16_t cpumode) {
  perf_event_header h;
  std::memcpy(&h, record.data(), sizeof(h));
  h.misc = static_cast<uint16_t>((h.misc & ~PERF_RECORD_MISC_CPUMODE_MASK) | cpumode);
  std::memcpy(record.data(), &h, sizeof(h));
  return record;
}

TEST(ProfileTest, AGuestsTaskAndMappingRecordsNeverChangeAHostProcess) {
  // perf kvm and perf inject --guest-data write a guest's side-band records
  // with a guest cpumode and the guest's own pids and addresses: pid 7 in
  // the guest is not host process 7.  Applied to the host's process table
  // they would rename host process 7, empty its address space (exec) or put
  // the guest's library where the host's is.
  Profile p({});
  p.SetFormat(kFormat);
  p.Process(Comm(7, "host", 1));
  p.Process(Mmap(7, "/host/lib.so", kIdV1, 2));
  for (uint16_t guest : {PERF_RECORD_MISC_GUEST_USER, PERF_RECORD_MISC_GUEST_KERNEL}) {
    p.Process(InSpace(Mmap(7, "/guest/lib.so", kIdV2, 3), guest));
    p.Process(InSpace(Comm(7, "guestexec", 4), guest));
    p.Process(InSpace(Fork(7, 1, 5), guest));
  }
  p.Process(Sample(7, kBase + 0x10, 6));
  SymbolSearch s;
  s.debug_dir = "";
  ReportModel m = ReportWith(p, s);
  ASSERT_EQ(m.rows.size(), 1u);
  EXPECT_EQ(m.rows[0].comm, "host");
  EXPECT_EQ(m.rows[0].path, "/host/lib.so");
  EXPECT_EQ(m.rows[0].build_id, Id(kIdV1));
  for (const ReportMapping& mp : m.mappings) EXPECT_NE(mp.path, "/guest/lib.so");
}

TEST(ProfileTest, BadRecordsAndLostCountsAreCounted) {
  Profile p({});
  p.SetFormat(kFormat);
  auto bad = Mmap(1, "/x", kIdV1, 1);
  bad.resize(bad.size() - 8);  // span shorter than header.size
  p.Process(bad);
  LostRecord l;
  l.lost = 17;
  p.Process(EncodeLost(l, kFormat));
  l.samples = true;
  l.lost = 3;
  p.Process(EncodeLost(l, kFormat));
  EXPECT_EQ(p.bad_records(), 1u);
  EXPECT_EQ(p.lost_records(), 17u);
  EXPECT_EQ(p.lost_samples(), 3u);
}

TEST(ProfileTest, SourcesComeFromRecordsOverridesAndPerfHeader) {
  SourceOverrides overrides;
  overrides.Add(2, kBase, Id(kIdV2), BuildIdSource::kMapFiles);
  ProfileOptions o;
  o.overrides = &overrides;
  o.path_build_id = [](std::string_view path) {
    return path == "/from/header" ? Id(kIdV3) : BuildId();
  };
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(Mmap(1, "/kernel/gave", kIdV1, 1));
  p.Process(Mmap(2, "/we/read", kIdV2, 2));
  p.Process(Mmap(3, "/from/header", nullptr, 3));
  p.Process(Mmap(4, "/nothing", nullptr, 4));
  SymbolSearch s;
  ReportModel m = ReportWith(p, s);
  EXPECT_EQ(m.mappings_by_source[static_cast<int>(BuildIdSource::kMmap2)], 1u);
  EXPECT_EQ(m.mappings_by_source[static_cast<int>(BuildIdSource::kMapFiles)], 1u);
  EXPECT_EQ(m.mappings_by_source[static_cast<int>(BuildIdSource::kPerfHeader)], 1u);
  EXPECT_EQ(m.mappings_by_source[static_cast<int>(BuildIdSource::kNone)], 1u);
  ASSERT_EQ(m.mappings.size(), 4u);
  EXPECT_EQ(m.mappings[2].build_id, Id(kIdV3));
}


// pprof's stacks are lists of locations, and two frame lists can name one:
// a kernel return address whose call would be in a function's padding is
// an interrupted ip, located at the function it returns into, where a
// return address one byte further is located too.  They are one stack
// (before, two stacks alike, in an order the heap chose).
TEST(ProfileTest, FrameListsThatNameTheSameLocationsAreOneStack) {
  constexpr uint64_t kText = 0xffffffff81000000;
  TempDir dir;
  const SymbolSearch s = KernelSymbols(
      dir, fmt::format("{:016x} T _stext\n{:016x} T _text\n{:016x} t __pfx_entered_fn\n"
                       "{:016x} T entered_fn\n{:016x} T leaf_fn\n{:016x} T _etext\n",
                       kText, kText, kText + 0x1f0, kText + 0x200, kText + 0x500, kText + 0x2000));
  ProfileOptions o;
  o.kernel_build_id = Id(kIdV3);
  o.callchains = true;
  o.sample_frames = true;
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(KernelMmap("[kernel.kallsyms]_text", kText, 0x2000, kText, nullptr));
  p.Process(Comm(5, "app", 1));
  const uint64_t kernel = static_cast<uint64_t>(PERF_CONTEXT_KERNEL);
  p.Process(Sample(5, kText + 0x510, 2, {kernel, kText + 0x510, kText + 0x200}, true));
  p.Process(Sample(5, kText + 0x510, 3, {kernel, kText + 0x510, kText + 0x201}, true, 7));
  const ReportModel m = ReportWith(p, s);
  ASSERT_EQ(m.frame_stacks.size(), 1u);
  EXPECT_EQ(m.frame_stacks[0].samples, 2u);
  EXPECT_EQ(m.frame_stacks[0].period, 8u);
  ASSERT_EQ(m.frame_stacks[0].locations.size(), 2u);
  EXPECT_EQ(m.frame_locations[m.frame_stacks[0].locations[1]].symbol, "entered_fn");
  EXPECT_EQ(m.frame_locations[m.frame_stacks[0].locations[1]].address, kText + 0x200);
}

// A kernel mapping's pgoff is not written (the image's is where _text was),
// so a module recorded twice at one range with two pgoffs is one mapping:
// two written alike fell to the heap's order.
TEST(ProfileTest, AModuleRecordedTwiceWithTwoPgoffsIsOneFrameMapping) {
  constexpr uint64_t kModule = 0xffffffffc0100000;
  ProfileOptions o;
  o.callchains = true;
  o.sample_frames = true;
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(Comm(5, "app", 1));
  const uint64_t kernel = static_cast<uint64_t>(PERF_CONTEXT_KERNEL);
  p.Process(KernelMmap("[m4]", kModule, 0x3000, 0, kIdV1));
  p.Process(Sample(5, kModule + 0x100, 2, {kernel, kModule + 0x100, kModule + 0x300}, true));
  p.Process(KernelMmap("[m4]", kModule, 0x3000, 0x1000, kIdV1));
  p.Process(Sample(5, kModule + 0x400, 3, {kernel, kModule + 0x400, kModule + 0x300}, true));
  const ReportModel m = ReportWith(p, SymbolSearch{});
  size_t modules = 0;
  for (const FrameMapping& fm : m.frame_mappings) {
    if (fm.path != "[m4]") continue;
    ++modules;
    EXPECT_EQ(fm.start, kModule);
    EXPECT_EQ(fm.file_offset, 0u);
  }
  EXPECT_EQ(modules, 1u);
  for (const FrameStack& st : m.frame_stacks)
    for (uint32_t l : st.locations) EXPECT_EQ(m.frame_locations[l].mapping, 1u);
}

// pprof's mappings are sorted by what is written of them.  The JIT code of
// processes at one address is written alike (its objects differ in whose
// perf map names it), and such ties once fell to the objects' heap
// addresses: the same capture gave other bytes under another allocator's
// layout.  Here blocks of the objects' size are freed, highest first,
// before each process maps, so that each object lands below the one
// recorded before it (glibc hands a size's freed blocks out last-freed
// first); without the tie-break by record order the mappings came out
// reversed.
TEST(ProfileTest, FrameMappingsWrittenAlikeKeepTheOrderTheyWereRecordedIn) {
  constexpr uint32_t kProcesses = 12, kFreedEach = 4;
  std::vector<std::shared_ptr<const MappedObject>> pool;
  for (uint32_t i = 0; i < kProcesses * kFreedEach; ++i)
    pool.push_back(std::make_shared<const MappedObject>());
  std::sort(pool.begin(), pool.end(),
            [](const auto& a, const auto& b) { return a.get() < b.get(); });
  ProfileOptions o;
  o.callchains = true;
  o.sample_frames = true;
  Profile p(o);
  p.SetFormat(kFormat);
  uint64_t t = 1;
  std::vector<const MappedObject*> objects;
  for (uint32_t i = 0; i < kProcesses; ++i) {
    p.Process(Comm(10 + i, "w", t++));  // one task: the report's rows are by comm
    for (uint32_t k = 0; k < kFreedEach; ++k) pool.pop_back();
    p.Process(Mmap(10 + i, "//anon", nullptr, t++));
    objects.push_back(p.processes().FindUser(10 + i, kBase)->object.get());
  }
  const uint64_t user = static_cast<uint64_t>(PERF_CONTEXT_USER);
  for (uint32_t i = 0; i < kProcesses; ++i)
    p.Process(Sample(10 + i, kBase + 0x10 * (i + 1), t++, {user, kBase + 0x10 * (i + 1)}));
#if !defined(__SANITIZE_ADDRESS__)
  // What makes this a test: the heap's order is not the records'.  (ASan's
  // allocator does not reuse blocks at once; there only the order is checked.)
  EXPECT_GT(objects.front(), objects.back());
#endif
  const ReportModel m = ReportWith(p, SymbolSearch{});
  ASSERT_EQ(m.frame_mappings.size(), kProcesses);
  for (const FrameMapping& fm : m.frame_mappings) {
    EXPECT_EQ(fm.path, "//anon");
    EXPECT_EQ(fm.start, kBase);
  }
  std::map<uint64_t, uint32_t> mapping_of_address;
  for (const FrameLocation& l : m.frame_locations) mapping_of_address[l.address] = l.mapping;
  for (uint32_t i = 0; i < kProcesses; ++i)
    EXPECT_EQ(mapping_of_address[kBase + 0x10 * (i + 1)], i + 1) << "pid " << 10 + i;
}
}  // namespace
}  // namespace mmap3
