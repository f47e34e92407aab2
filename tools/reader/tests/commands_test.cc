#include "commands.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <map>

#include <fmt/format.h>

#include "build_id_cache.h"
#include "fixtures.h"
#include "kallsyms.h"
#include "perf_data.h"
#include "linux/perf_event_mmap3.h"
#include "perf_event_fd.h"
#include "proc_maps.h"
#include "process_table.h"
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
    ASSERT_TRUE(w->Finish({}, R"({"mode":"mmap2-build-id","event_lost":0,
        "startup":{"processes":12,"seconds":0.25,"records_drained":30}})")
                    .ok());
  }
  ReportOptions o;
  o.input = file;
  auto m = RunReport(o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->mode, "mmap2-build-id");
  ASSERT_TRUE(m->startup.has_value());
  EXPECT_EQ(m->startup->processes, 12u);
  EXPECT_DOUBLE_EQ(m->startup->seconds, 0.25);
  EXPECT_EQ(m->startup->records_drained, 30u);
  EXPECT_EQ(m->samples, 2u);
  ASSERT_EQ(m->rows.size(), 1u);
  EXPECT_EQ(m->rows[0].symbol, "report_fn");
  EXPECT_EQ(m->rows[0].comm, "app");
  EXPECT_EQ(m->event_lost, 0);
}

TEST(RunReportTest, AStrayBuildIdBitInAPerfFileGivesNoId) {
  // perf record (no build-ids asked) on a kernel without the series' first
  // patch, beside another capture that asked: the kernel set the build-id
  // bit on perf's MMAP2 records, over a disk of major 8.  Read by the bit,
  // the library's "id" would be its minor and inode, which no file has.
  TempDir dir;
  const std::string file = dir.File("perf.data");
  MmapRecord lib;
  lib.format = MmapFormat::kMmap2;
  lib.pid = lib.tid = 5;
  lib.start = 0x10000000;
  lib.len = 0x100000;
  lib.maj = 8;
  lib.min = 3;
  lib.ino = 0x1234;
  lib.ino_generation = 0x9abc;
  lib.filename = "/nonexistent/libstray.so";
  lib.sample_id = Sid(5, 20);
  const uint16_t misc = PERF_RECORD_MISC_USER | kMiscMmapBuildId;
  auto stray = [&](const MmapRecord& m) {
    std::vector<uint8_t> r = EncodeMmap(m, kFormat);
    std::memcpy(r.data() + offsetof(perf_event_header, misc), &misc, sizeof(misc));
    return r;
  };
  // And a squashfs file on a loop device (major 7), whose inodes have
  // generation 0: a 7-byte "id" followed by zeroes.
  MmapRecord snap = lib;
  snap.pid = snap.tid = 6;
  snap.maj = 7;
  snap.ino_generation = 0;
  snap.filename = "/nonexistent/snap/libsnap.so";
  snap.sample_id = Sid(6, 21);
  {
    auto w = PerfDataWriter::Create(file, {Attr()});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Write(Comm(5, "app", 10)).ok());
    ASSERT_TRUE(w->Write(Comm(6, "snapapp", 11)).ok());
    ASSERT_TRUE(w->Write(stray(lib)).ok());
    ASSERT_TRUE(w->Write(stray(snap)).ok());
    ASSERT_TRUE(w->Write(Sample(5, 0x10000100, 30)).ok());
    ASSERT_TRUE(w->Write(Sample(6, 0x10000100, 31)).ok());
    // perf's table names both paths: a refused bit's mapping takes no id
    // from it (its bytes might have been another id, found by helper-56).
    BuildIdEntry e1, e2;
    e1.pid = e2.pid = -1;
    e1.build_id = e2.build_id = Id(kIdV2);
    e1.filename = "/nonexistent/libstray.so";
    e2.filename = "/nonexistent/snap/libsnap.so";
    ASSERT_TRUE(w->Finish({e1, e2}, "").ok());
  }
  ReportOptions o;
  o.input = file;
  auto m = RunReport(o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->bad_records, 0u);
  EXPECT_EQ(m->stray_build_id_bits, 2u);
  for (const char* comm : {"app", "snapapp"}) {
    const ReportRow* row = RowFor(*m, comm);
    ASSERT_NE(row, nullptr) << comm;
    EXPECT_NE(row->path.find("/nonexistent/"), std::string::npos) << row->path;
    EXPECT_TRUE(row->build_id.empty()) << comm << ": " << row->build_id.Hex();
  }
  std::ostringstream text;
  WriteTextReport(*m, text);
  EXPECT_NE(text.str().find("2 MMAP2 records said \"build-id\" over bytes that are not one"),
            std::string::npos)
      << text.str();
  std::ostringstream json;
  WriteJsonReport(*m, json);
  EXPECT_NE(json.str().find("\"stray_build_id_bits\": 2"), std::string::npos) << json.str();
}

TEST(RunReportTest, BpfRecordsLongerThanTheirContentsKeepTheirTime) {
  // Beside another capture that follows BPF programs (perf's included),
  // the kernel serves KSYMBOL and BPF_EVENT records longer than their
  // contents, with the ring buffer's bytes after their trailer (see
  // SampleIdOffset()): here an older record's time.  Read from the end,
  // P1's unload would be at 5 and P2's load at 15, and both of P1's
  // samples would be put on P2.
  TempDir dir;
  const std::string file = dir.File("perf.data");
  const uint64_t at = 0xffffffffc0001000;
  auto ksym = [&](const std::string& name, bool unregister, uint64_t time, uint64_t stale) {
    KsymbolRecord k;
    k.addr = at;
    k.len = 0x100;
    k.ksym_type = PERF_RECORD_KSYMBOL_TYPE_BPF;
    k.unregister = unregister;
    k.name = name;
    k.sample_id = Sid(9, time);
    std::vector<uint8_t> r = EncodeKsymbol(k, kFormat);
    if (stale != 0) {
      KsymbolRecord old;
      old.sample_id = Sid(1234, stale);
      const std::vector<uint8_t> o = EncodeKsymbol(old, kFormat);
      r.insert(r.end(), o.end() - static_cast<ptrdiff_t>(SampleIdSize(kFormat)), o.end());
      reinterpret_cast<perf_event_header*>(r.data())->size = static_cast<uint16_t>(r.size());
    }
    return r;
  };
  auto sample = [&](uint64_t time) {
    SampleRecord s;
    s.misc = PERF_RECORD_MISC_KERNEL;
    s.pid = s.tid = 9;
    s.ip = at + 0x10;
    s.time = time;
    return EncodeSample(s, {}, kFormat);
  };
  const std::string p1 = "bpf_prog_1111111111111111_p1", p2 = "bpf_prog_2222222222222222_p2";
  {
    auto w = PerfDataWriter::Create(file, {Attr()});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Write(Comm(9, "app", 1)).ok());
    ASSERT_TRUE(w->Write(ksym(p1, false, 10, 0)).ok());
    ASSERT_TRUE(w->Write(ksym(p1, true, 30, 5)).ok());
    ASSERT_TRUE(w->Write(ksym(p2, false, 40, 15)).ok());
    ASSERT_TRUE(w->Write(sample(20)).ok());
    ASSERT_TRUE(w->Write(sample(25)).ok());
    ASSERT_TRUE(w->Write(sample(50)).ok());
    ASSERT_TRUE(w->Write(EncodeFinishedRound()).ok());
    // One of ours, system-wide, from before record cut such records; a
    // file of perf's is read alike, but names BPF code only with its
    // thread map.
    ASSERT_TRUE(w->Finish({}, R"({"mode":"mmap2","bpf_untracked":""})").ok());
  }
  ReportOptions o;
  o.input = file;
  auto m = RunReport(o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->samples, 3u);
  EXPECT_EQ(m->late_records, 0u);
  EXPECT_EQ(m->oversized_sideband, 2u);
  std::map<std::string, uint64_t> by_symbol;
  for (const ReportRow& r : m->rows) by_symbol[r.symbol] += r.samples;
  EXPECT_EQ(by_symbol[p1], 2u);
  EXPECT_EQ(by_symbol[p2], 1u);
  std::ostringstream text;
  WriteTextReport(*m, text);
  EXPECT_NE(text.str().find("2 KSYMBOL/BPF_EVENT records were longer than their contents"),
            std::string::npos)
      << text.str();
}

TEST(RunReportTest, LateRecordsAreReported) {
  // A record older than what was already attributed: the file's rounds
  // broke time order for it.
  TempDir dir;
  const std::string file = dir.File("perf.data");
  {
    auto w = PerfDataWriter::Create(file, {Attr()});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Write(Comm(5, "app", 10)).ok());
    ASSERT_TRUE(w->Write(Sample(5, 0x10, 20)).ok());
    ASSERT_TRUE(w->Write(EncodeFinishedRound()).ok());  // releases nothing
    ASSERT_TRUE(w->Write(Sample(5, 0x10, 30)).ok());
    ASSERT_TRUE(w->Write(EncodeFinishedRound()).ok());  // releases t <= 20
    ASSERT_TRUE(w->Write(Sample(5, 0x10, 15)).ok());    // late
    ASSERT_TRUE(w->Write(EncodeFinishedRound()).ok());
    ASSERT_TRUE(w->Finish({}, R"({"mode":"mmap2-build-id"})").ok());
  }
  ReportOptions o;
  o.input = file;
  auto m = RunReport(o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->samples, 3u);
  EXPECT_EQ(m->late_records, 1u);
  std::ostringstream text;
  WriteTextReport(*m, text);
  EXPECT_NE(text.str().find("late records: 1\n"), std::string::npos) << text.str();
  std::ostringstream json;
  WriteJsonReport(*m, json);
  EXPECT_NE(json.str().find("\"late_records\": 1"), std::string::npos) << json.str();
}

TEST(RunReportTest, MistypedMetadataIsIgnoredNotFatal) {
  // Our metadata section comes from a file like everything else.
  TempDir dir;
  const std::string file = dir.File("perf.data");
  {
    auto w = PerfDataWriter::Create(file, {Attr()});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Write(Comm(5, "app", 1)).ok());
    ASSERT_TRUE(w->Write(Sample(5, 0x10, 2)).ok());
    ASSERT_TRUE(w->Finish({}, R"({"mode": 7, "event_lost": "many", "bad_size": -1,
        "startup": {"processes": 3, "seconds": "slow", "records_drained": 1},
        "overrides": [{"pid": "x", "start": 1, "build_id": "11", "source": "map_files"},
                      {"pid": 5, "start": {}, "build_id": 3, "source": ["map_files"]}, 42]})")
                    .ok());
  }
  ReportOptions o;
  o.input = file;
  auto m = RunReport(o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->mode, "perf.data");  // the mistyped mode is not used
  EXPECT_EQ(m->event_lost, -1);
  EXPECT_FALSE(m->startup.has_value());
  EXPECT_EQ(m->samples, 1u);
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

// An MMAP2 inode record as perf's files have them: the file's identity,
// no build-id.
std::vector<uint8_t> MmapOf(uint32_t pid, const std::string& path, uint64_t ino,
                            uint64_t generation, uint64_t time) {
  MmapRecord m;
  m.format = MmapFormat::kMmap2;
  m.pid = m.tid = pid;
  m.start = 0x10000000;
  m.len = 0x100000;
  m.has_inode = true;
  m.maj = 8;
  m.min = 1;
  m.ino = ino;
  m.ino_generation = generation;
  m.filename = path;
  m.sample_id = Sid(pid, time);
  return EncodeMmap(m, kFormat);
}

TEST(RunReportTest, PerfHeaderIdsAreNotGivenToPathsMappedFromSeveralFiles) {
  // perf record fills its build-id table by path when recording ends: a
  // library replaced during the capture is listed once, with the id of the
  // last version.  Its MMAP2 records tell the files apart.
  TempDir dir;
  const std::string file = dir.File("perf.data");
  struct Proc {
    uint32_t pid;
    const char* comm;
    const char* path;
    uint64_t ino, generation;
  };
  const Proc procs[] = {
      {1, "old", "/lib/replaced.so", 100, 5},   // v1, before a rename
      {2, "new", "/lib/replaced.so", 101, 7},   // v2/v3, the file the table read
      {3, "gen_a", "/lib/reused.so", 200, 5},   // an inode number freed and reused
      {4, "gen_b", "/lib/reused.so", 200, 6},
      {5, "synth", "/lib/shared.so", 300, 0},   // synthesized from /proc/PID/maps
      {6, "kern", "/lib/shared.so", 300, 9},    // the same file, from the kernel
      {7, "once", "/lib/once.so", 400, 3},
  };
  {
    auto w = PerfDataWriter::Create(file, {Attr()});
    ASSERT_TRUE(w.ok());
    uint64_t t = 1;
    for (const Proc& p : procs) {
      ASSERT_TRUE(w->Write(Comm(p.pid, p.comm, t++)).ok());
      ASSERT_TRUE(w->Write(MmapOf(p.pid, p.path, p.ino, p.generation, t++)).ok());
      ASSERT_TRUE(w->Write(Sample(p.pid, 0x10000010, t++)).ok());
    }
    std::vector<BuildIdEntry> table;
    for (const char* path : {"/lib/replaced.so", "/lib/reused.so", "/lib/shared.so", "/lib/once.so"})
      table.push_back({-1, PERF_RECORD_MISC_USER, Id(kIdV2), path});
    ASSERT_TRUE(w->Finish(table, "").ok());  // no meta: a perf-written file
  }
  ReportOptions o;
  o.input = file;
  auto m = RunReport(o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  for (const char* comm : {"old", "new", "gen_a", "gen_b"}) {
    const ReportRow* r = RowFor(*m, comm);
    ASSERT_NE(r, nullptr) << comm;
    EXPECT_TRUE(r->build_id.empty()) << comm << " got " << r->build_id.Hex();
    EXPECT_EQ(r->source, BuildIdSource::kNone) << comm;
  }
  for (const char* comm : {"synth", "kern", "once"}) {
    const ReportRow* r = RowFor(*m, comm);
    ASSERT_NE(r, nullptr) << comm;
    EXPECT_EQ(r->build_id, Id(kIdV2)) << comm;
    EXPECT_EQ(r->source, BuildIdSource::kPerfHeader) << comm;
  }
  EXPECT_STREQ(BuildIdSourceName(BuildIdSource::kPerfHeader), "perf_header_unverified");
  // The text says so next to the id, and why in the header.
  std::ostringstream text;
  WriteTextReport(*m, text);
  EXPECT_NE(text.str().find("once.so (" + Id(kIdV2).ShortHex() + ", unverified)"),
            std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("perf_header_unverified=3"), std::string::npos) << text.str();
  std::ostringstream json;
  WriteJsonReport(*m, json);
  EXPECT_NE(json.str().find("\"source\": \"perf_header_unverified\""), std::string::npos);
}

// kernel_notes names the running kernel's build-id: kernel samples of a
// capture with that id get /proc/kallsyms's names, and "" turns that off (a
// report that must not depend on the host, as the fuzzers').
TEST(RunReportTest, KernelNotesDecideWhetherKallsymsIsUsed) {
  // A capture of this boot: its _text record says where the kernel is.
  auto live = ReadSmallFile("/proc/kallsyms");
  const Kallsyms k = live.ok() ? ParseKallsyms(*live) : Kallsyms{};
  const auto text = k.Marker("_text");
  if (k.hidden || !text) GTEST_SKIP() << "/proc/kallsyms shows no addresses here (kptr_restrict)";
  uint64_t addr = 0;
  for (const ElfSymbol& sym : k.kernel) {
    if (sym.addr > *text && sym.addr < k.Marker("_etext").value_or(UINT64_MAX)) {
      addr = sym.addr;
      break;
    }
  }
  ASSERT_NE(addr, 0u);
  TempDir dir;
  std::string notes;  // as /sys/kernel/notes: one GNU build-id note
  auto put32 = [&](uint32_t v) { notes.append(reinterpret_cast<const char*>(&v), 4); };
  put32(4);
  put32(20);
  put32(3);
  notes.append("GNU\0", 4);
  const BuildId kid = Id(kIdV2);
  notes.append(reinterpret_cast<const char*>(kid.data()), kid.size());
  testing::WriteFile(dir.File("notes"), notes);
  const std::string file = dir.File("perf.data");
  {
    auto w = PerfDataWriter::Create(file, {Attr()});
    ASSERT_TRUE(w.ok());
    MmapRecord image;
    image.format = MmapFormat::kMmap;
    image.misc = PERF_RECORD_MISC_KERNEL;
    image.pid = kKernelPid;
    image.start = image.pgoff = *text;
    image.len = k.Marker("_etext").value_or(*text + (1u << 30)) - *text;
    image.filename = "[kernel.kallsyms]_text";
    image.sample_id = Sid(kKernelPid, 0);
    ASSERT_TRUE(w->Write(EncodeMmap(image, kFormat)).ok());
    ASSERT_TRUE(w->Write(Comm(1, "k", 1)).ok());
    SampleRecord s;
    s.misc = PERF_RECORD_MISC_KERNEL;
    s.pid = s.tid = 1;
    s.ip = addr;
    s.time = 2;
    ASSERT_TRUE(w->Write(EncodeSample(s, {}, kFormat)).ok());
    BuildIdEntry kernel{-1, PERF_RECORD_MISC_KERNEL, kid, "[kernel.kallsyms]"};
    ASSERT_TRUE(w->Finish({kernel}, "").ok());
  }
  ReportOptions o;
  o.input = file;
  o.kernel_notes = dir.File("notes");
  auto m = RunReport(o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->rows.size(), 1u);
  EXPECT_EQ(m->rows[0].symbol.rfind("[unknown", 0), std::string::npos) << m->rows[0].symbol;
  o.kernel_notes = "";
  m = RunReport(o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->rows.size(), 1u);
  EXPECT_EQ(m->rows[0].symbol.rfind("[unknown", 0), 0u) << m->rows[0].symbol;
}

// perf's own file after a reboot: the kernel image record (pgoff: _text in
// the capture's boot), a module by its .ko path, both build-ids only in the
// header table.  Symbols come from the cache, relocated; the module is an
// object of its own.
TEST(RunReportTest, PerfFilesKernelAndModuleSymbolsAreRelocated) {
  constexpr uint64_t kText = 0xffffffff9a200000, kModule = 0xffffffffc1230000;
  const std::string ko = "/lib/modules/6.1.0/kernel/fs/fakemod.ko";
  TempDir dir, cache;
  const std::string file = dir.File("perf.data");
  {
    auto w = PerfDataWriter::Create(file, {Attr()});
    ASSERT_TRUE(w.ok());
    MmapRecord m;
    m.format = MmapFormat::kMmap;
    m.misc = PERF_RECORD_MISC_KERNEL;
    m.pid = kKernelPid;
    m.start = m.pgoff = kText;
    m.len = 0x2000;
    m.filename = "[kernel.kallsyms]_text";
    m.sample_id = Sid(kKernelPid, 0);
    ASSERT_TRUE(w->Write(EncodeMmap(m, kFormat)).ok());
    m.start = kModule;
    m.pgoff = 0;
    m.len = 0x4000;
    m.filename = ko;
    ASSERT_TRUE(w->Write(EncodeMmap(m, kFormat)).ok());
    ASSERT_TRUE(w->Write(Comm(1, "app", 1)).ok());
    SampleRecord s;
    s.misc = PERF_RECORD_MISC_KERNEL;
    s.pid = s.tid = 1;
    s.ip = kText + testing::kScheduleOffset + 8;
    s.time = 2;
    ASSERT_TRUE(w->Write(EncodeSample(s, {}, kFormat)).ok());
    s.ip = kModule + 0x1008;
    s.time = 3;
    ASSERT_TRUE(w->Write(EncodeSample(s, {}, kFormat)).ok());
    BuildIdEntry image{-1, PERF_RECORD_MISC_KERNEL, Id(testing::kIdV3), "[kernel.kallsyms]"};
    BuildIdEntry module{-1, PERF_RECORD_MISC_KERNEL, Id(kIdV1), ko};
    ASSERT_TRUE(w->Finish({image, module}, "").ok());
  }
  const std::string kallsyms = BuildIdCache::KallsymsPath(cache.path(), Id(testing::kIdV3));
  std::filesystem::create_directories(std::filesystem::path(kallsyms).parent_path());
  testing::WriteFile(kallsyms, testing::FakeKallsyms(0xffffffff81000000, 0xffffffffc0000000));
  KernelModule fakemod;
  fakemod.name = "fakemod";
  fakemod.symbols = {{0x1000, 0, "mod_work"}};
  const std::string symbols = BuildIdCache::ModuleSymbolsPath(cache.path(), "fakemod", Id(kIdV1));
  std::filesystem::create_directories(std::filesystem::path(symbols).parent_path());
  testing::WriteFile(symbols, FormatModuleSymbols(fakemod));

  ReportOptions o;
  o.input = file;
  o.cache_dir = cache.path();
  auto r = RunReport(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->rows.size(), 2u);
  std::map<std::string, const ReportRow*> by_path;
  for (const ReportRow& row : r->rows) by_path[row.path] = &row;
  ASSERT_EQ(by_path.count("[kernel.kallsyms]"), 1u);
  EXPECT_EQ(by_path["[kernel.kallsyms]"]->symbol, "schedule");
  ASSERT_EQ(by_path.count(ko), 1u);
  EXPECT_EQ(by_path[ko]->symbol, "mod_work");
  EXPECT_EQ(by_path[ko]->build_id, Id(kIdV1));
  EXPECT_EQ(by_path[ko]->source, BuildIdSource::kPerfHeader);
}

// Our file whose metadata says that fakemod's range held other code by the
// end of the capture: its samples get no symbol of fakemod.
TEST(RunReportTest, ModulesThatChangedDuringTheCaptureGetNoSymbols) {
  constexpr uint64_t kModule = 0xffffffffc1230000;
  TempDir dir, cache;
  auto write = [&](const std::string& file, const std::string& meta) {
    auto w = PerfDataWriter::Create(file, {Attr()});
    ASSERT_TRUE(w.ok());
    MmapRecord m;
    m.format = MmapFormat::kMmap2BuildId;
    m.misc = PERF_RECORD_MISC_KERNEL;
    m.pid = kKernelPid;
    m.start = kModule;
    m.len = 0x4000;
    m.build_id = Id(kIdV1);
    m.filename = "[fakemod]";
    m.sample_id = Sid(kKernelPid, 0);
    ASSERT_TRUE(w->Write(EncodeMmap(m, kFormat)).ok());
    ASSERT_TRUE(w->Write(Comm(1, "app", 1)).ok());
    SampleRecord s;
    s.misc = PERF_RECORD_MISC_KERNEL;
    s.pid = s.tid = 1;
    s.ip = kModule + 0x1008;
    s.time = 2;
    ASSERT_TRUE(w->Write(EncodeSample(s, {}, kFormat)).ok());
    ASSERT_TRUE(w->Finish({}, meta).ok());
  };
  KernelModule fakemod;
  fakemod.name = "fakemod";
  fakemod.symbols = {{0x1000, 0, "mod_work"}};
  const std::string symbols = BuildIdCache::ModuleSymbolsPath(cache.path(), "fakemod", Id(kIdV1));
  std::filesystem::create_directories(std::filesystem::path(symbols).parent_path());
  testing::WriteFile(symbols, FormatModuleSymbols(fakemod));
  auto report = [&](const std::string& file) {
    ReportOptions o;
    o.input = file;
    o.cache_dir = cache.path();
    o.kernel_notes = "";
    return RunReport(o);
  };

  write(dir.File("same.data"), fmt::format(R"({{"mode":"mmap2-build-id",
      "kernel_modules_changed":[{{"path":"[other]","start":{}}}]}})", kModule));
  auto same = report(dir.File("same.data"));
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  ASSERT_EQ(same->rows.size(), 1u);
  EXPECT_EQ(same->rows[0].symbol, "mod_work");
  EXPECT_TRUE(same->changed_kernel_modules.empty());

  write(dir.File("changed.data"), fmt::format(R"({{"mode":"mmap2-build-id",
      "kernel_modules_changed":[{{"path":"[fakemod]","start":{}}}, 7, {{"path":1}}]}})", kModule));
  auto changed = report(dir.File("changed.data"));
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  ASSERT_EQ(changed->rows.size(), 1u);
  EXPECT_EQ(changed->rows[0].path, "[fakemod]");
  EXPECT_EQ(changed->rows[0].symbol, "[unknown]+0x1008");
  EXPECT_TRUE(changed->rows[0].build_id.empty());
  EXPECT_EQ(changed->changed_kernel_modules, std::vector<std::string>{"[fakemod]"});
  std::ostringstream text;
  WriteTextReport(*changed, text);
  EXPECT_NE(text.str().find("their samples are [unknown]): [fakemod]"), std::string::npos)
      << text.str();
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

// A capture of a shell counting to 30,000 (a few hundred samples at 2 kHz).
RecordOptions CountingShell() {
  RecordOptions o;
  o.capture.target = CaptureOptions::Target::kCommand;
  o.capture.command = {"/bin/sh", "-c", "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done"};
  o.capture.frequency = 2000;
  o.capture.data_pages = 16;
  return o;
}

TEST(RunRecordTest, RecordsACommandAndReportsIt) {
  if (!CanProfile()) GTEST_SKIP() << "perf_event_open not permitted here";
  RecordOptions o = CountingShell();
  auto r = RunRecord(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->stats.samples, 0u);
  EXPECT_EQ(r->stats.bad_size, 0u);
  EXPECT_EQ(r->report.samples, r->stats.samples);
  EXPECT_EQ(r->samples_attributed, r->stats.samples);
  EXPECT_TRUE(WIFEXITED(r->command_status) && WEXITSTATUS(r->command_status) == 0);
  EXPECT_NE(RowFor(r->report, "sh"), nullptr);
  // The shell's own mapping carries a build-id, whichever way it was found.
  bool sh_with_id = std::any_of(r->report.mappings.begin(), r->report.mappings.end(),
                                [](const ReportMapping& m) {
                                  return m.path.find("sh") != std::string::npos && !m.build_id.empty();
                                });
  EXPECT_TRUE(sh_with_id);
}

// With an output file the drain thread only writes samples: none is
// attributed, and the file has every one, reported from it as before.
TEST(RunRecordTest, ToAFileSamplesAreWrittenNotAttributed) {
  if (!CanProfile()) GTEST_SKIP() << "perf_event_open not permitted here";
  TempDir dir;
  RecordOptions o = CountingShell();
  o.output = dir.path() + "/perf.data";
  auto r = RunRecord(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_GT(r->stats.samples, 0u);
  EXPECT_EQ(r->samples_attributed, 0u);
  // Every record in the file is counted, the synthesized ones too.
  auto file = PerfDataReader::Open(o.output);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  uint64_t in_file = 0;
  file->ForEachRecord([&](Bytes) { ++in_file; });
  EXPECT_EQ(r->records_written, in_file);
  EXPECT_GT(r->records_written, r->stats.records);
  ReportOptions ro;
  ro.input = o.output;
  auto report = RunReport(ro);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->samples, r->stats.samples);
  EXPECT_NE(RowFor(*report, "sh"), nullptr);
}

TEST(RunRecordTest, AFullBuildIdCacheIsReportedAndTheCaptureGoesOn) {
  if (!CanProfile()) GTEST_SKIP() << "perf_event_open not permitted here";
  TempDir cache;
  RecordOptions o = CountingShell();
  o.cache_dir = cache.path();
  o.cache_limits.max_bytes = 1;  // full at the first copy
  std::mutex mu;
  std::vector<std::string> warnings;
  o.on_cache_warning = [&](const std::string& w) {
    std::lock_guard lock(mu);
    warnings.push_back(w);
  };
  auto r = RunRecord(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  if (r->cache.skipped == 0 && r->cache.copied == 0)
    GTEST_SKIP() << "no build-id known for the shell's mappings here (map_files needs root)";
  EXPECT_GT(r->stats.samples, 0u);
  EXPECT_EQ(r->cache.copied, 0u);
  EXPECT_GE(r->cache.skipped, 1u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("--buildid-cache-max"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find(cache.path()), std::string::npos) << warnings[0];
  EXPECT_NE(RowFor(r->report, "sh"), nullptr);
}

TEST(RunRecordTest, AnOutputThatCannotBeWrittenIsSaidWhileTheCaptureRuns) {
  // A full filesystem must not be news at the end of a long capture.  The
  // command runs until the error has been said (at most 120 s), then marks
  // that it ended: the error must come before that mark.
  if (!CanProfile()) GTEST_SKIP() << "perf_event_open not permitted here";
  if (access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full here";
  TempDir dir;
  const std::string said = dir.File("said"), ended = dir.File("ended");
  RecordOptions o;
  o.capture.target = CaptureOptions::Target::kCommand;
  o.capture.command = {"/bin/sh", "-c",
                       "timeout 120 sh -c 'while [ ! -e \"$0\" ]; do :; done' \"$0\"; : >\"$1\"",
                       said, ended};
  // As often as the kernel allows, up to 4 kHz: the output fills sooner.
  auto max_rate = ReadSmallFile("/proc/sys/kernel/perf_event_max_sample_rate");
  o.capture.frequency =
      std::min<uint64_t>(4000, max_rate.ok() ? std::strtoull(max_rate->c_str(), nullptr, 10) : 1000);
  o.capture.callchains = true;  // larger samples: the writer's buffer fills sooner
  o.capture.data_pages = 16;
  o.output = "/dev/full";  // every write: ENOSPC
  int errors = 0;
  bool ended_first = false;
  o.on_output_error = [&](const Status& s) {
    ++errors;
    EXPECT_EQ(s.error_number(), ENOSPC) << s.ToString();
    ended_first = access(ended.c_str(), F_OK) == 0;
    testing::WriteFile(said, "");
  };
  auto r = RunRecord(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("/dev/full"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(errors, 1);  // once, not once per record
  EXPECT_FALSE(ended_first) << "the error was said only after the command had ended";
}

TEST(RunRecordTest, AnOutputThatCannotBeWrittenEndsTheCapture) {
  // Going on after the output failed only costs the profiled system: the
  // capture must end and stop its command.  The command busy-loops for 120 s
  // and then leaves a mark; a capture that went on until the command ended
  // finds the mark.
  if (!CanProfile()) GTEST_SKIP() << "perf_event_open not permitted here";
  if (access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full here";
  TempDir dir;
  const std::string ended = dir.File("ended");
  RecordOptions o;
  o.capture.target = CaptureOptions::Target::kCommand;
  o.capture.command = {"/bin/sh", "-c",
                       "end=$(($(date +%s) + 120)); "
                       "while [ \"$(date +%s)\" -lt $end ]; do :; done; : >\"$0\"",
                       ended};
  auto max_rate = ReadSmallFile("/proc/sys/kernel/perf_event_max_sample_rate");
  o.capture.frequency =
      std::min<uint64_t>(4000, max_rate.ok() ? std::strtoull(max_rate->c_str(), nullptr, 10) : 1000);
  o.capture.callchains = true;
  o.capture.data_pages = 16;
  o.output = "/dev/full";
  int errors = 0;
  o.on_output_error = [&](const Status&) { ++errors; };
  auto r = RunRecord(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().error_number(), ENOSPC) << r.status().ToString();
  EXPECT_EQ(errors, 1);
  EXPECT_NE(access(ended.c_str(), F_OK), 0)
      << "the capture went on after its output failed, until its command ended";
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
  // Samples from the loop (tens of ms), then half a second more during
  // which the shell's mappings, or those of the sleep it may exec into,
  // stay: map_files exists only as long as the mapping does, and a loaded
  // machine can keep us from reading it for longer than the loop runs.
  o.capture.command = {"/bin/sh", "-c",
                       "i=0; while [ $i -lt 40000 ]; do i=$((i+1)); done; sleep 0.5"};
  o.capture.frequency = 1000;
  o.capture.data_pages = 8;
  return o;
}

TEST(ModeDetectionTest, UnknownMmap3AbiVersionIsNotUsed) {
  if (!CanProfile()) GTEST_SKIP() << "perf_event_open not permitted here";
  // A capability file with a version we do not speak: the MMAP3 bit must not
  // be set (it is not even probed), and the capture still works.
  TempDir dir;
  testing::WriteFile(dir.File("cap"), "3\n");
  RecordOptions o = ShellLoop();
  o.capture.mmap3_cap_path = dir.File("cap");
  auto r = RunRecord(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->mode, CaptureMode::kMmap3);
  EXPECT_NE(r->mode_reason.find("version 3"), std::string::npos) << r->mode_reason;
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
  // map_files exists only while a mapping does: the command must outlive
  // the capture's last drain, however late the reader gets to run (a sleep
  // after the loop once lost that race on a loaded machine).  So the
  // command stops the capture itself, through --control, and then sleeps
  // until the capture ends it (SIGINT, after its last drain): the sleep's
  // mappings are there for every read.
  TempDir dir;
  const std::string ctl = dir.File("ctl");
  ASSERT_EQ(mkfifo(ctl.c_str(), 0600), 0) << std::strerror(errno);
  RecordOptions o = ShellLoop();
  o.capture.command = {"/bin/sh", "-c",
                       "i=0; while [ $i -lt 40000 ]; do i=$((i+1)); done; echo stop > " + ctl +
                           "; exec sleep 60"};
  o.capture.control = "fifo:" + ctl;
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

namespace mmap3 {
namespace {

// An MMAP3-mode capture as `record -o` writes it: a sampling event and a
// side-band event with the mmap3 bit and another sample format (with a
// STREAM_ID the encoder does not model, so only a byte-for-byte copy of the
// trailer keeps it).
class InjectTest : public ::testing::Test {
 protected:
  const SampleFormat fs_{PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID |
                             PERF_SAMPLE_TIME | PERF_SAMPLE_PERIOD,
                         0, true};
  const SampleFormat fd_{PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                             PERF_SAMPLE_STREAM_ID,
                         0, true};

  void SetUp() override {
    lib_ = dir_.File("libinj.so");
    ASSERT_TRUE(testing::BuildSharedLibrary(lib_, "inject_fn", kIdV1));
    off_ = testing::FunctionFileOffset(lib_, "inject_fn");
    input_ = dir_.File("in.data");
  }

  PerfFileAttr Sampling() const {
    PerfFileAttr a;
    a.attr.size = sizeof(perf_event_attr);
    a.attr.sample_type = fs_.sample_type;
    a.attr.sample_id_all = 1;
    a.ids = {11};
    return a;
  }
  PerfFileAttr Sideband() const {
    PerfFileAttr a;
    a.attr.size = sizeof(perf_event_attr);
    a.attr.sample_type = fd_.sample_type;
    a.attr.sample_id_all = 1;
    a.attr.comm = 1;
    a.attr.task = 1;
    perf_mmap3_attr_set(&a.attr);
    a.ids = {22};
    return a;
  }

  // An MMAP3 record from the side-band event, with a recognizable stream id.
  std::vector<uint8_t> Mmap3(uint64_t start, const std::string& path, const char* id,
                             uint8_t status, uint64_t time) const {
    MmapRecord m;
    m.format = MmapFormat::kMmap3;
    m.misc = PERF_RECORD_MISC_USER;
    m.pid = m.tid = 9;
    m.start = start;
    m.len = 0x100000;
    m.maj = 8;
    m.min = 1;
    m.ino = 4242;
    m.ino_generation = 7;
    m.prot = PROT_READ | PROT_EXEC;
    m.flags = MAP_PRIVATE;
    if (id) m.build_id = Id(id);
    m.build_id_status = status;
    m.filename = path;
    m.sample_id.has_tid = m.sample_id.has_time = m.sample_id.has_id = true;
    m.sample_id.pid = m.sample_id.tid = 9;
    m.sample_id.time = time;
    m.sample_id.id = 22;
    std::vector<uint8_t> rec = EncodeMmap(m, fd_);
    // STREAM_ID is the u64 before IDENTIFIER at the end of the trailer.
    const uint64_t stream = 0x5eed5eed5eed5eedULL;
    std::memcpy(rec.data() + rec.size() - 16, &stream, 8);
    return rec;
  }

  std::vector<uint8_t> SampleAt(uint64_t ip, uint64_t time) const {
    SampleRecord s;
    s.misc = PERF_RECORD_MISC_USER;
    s.id = 11;
    s.pid = s.tid = 9;
    s.ip = ip;
    s.time = time;
    return EncodeSample(s, {}, fs_);
  }

  void WriteInput(const std::vector<std::vector<uint8_t>>& records, const std::string& meta) {
    auto w = PerfDataWriter::Create(input_, {Sampling(), Sideband()});
    ASSERT_TRUE(w.ok());
    for (const auto& r : records) ASSERT_TRUE(w->Write(r).ok());
    BuildIdEntry e{-1, PERF_RECORD_MISC_USER, Id(kIdV1), lib_};
    ASSERT_TRUE(w->Finish({e}, meta).ok());
  }

  testing::TempDir dir_;
  std::string lib_, input_;
  uint64_t off_ = 0;
};

TEST_F(InjectTest, RewritesMmap3AsMmap2AndKeepsEverythingElse) {
  const auto found = Mmap3(0x20000000, lib_, kIdV1, PERF_MMAP3_BUILD_ID_FOUND, 2);
  const auto no_note = Mmap3(0x40000000, "/data/blob", nullptr, PERF_MMAP3_BUILD_ID_NO_NOTE, 3);
  const auto sample = SampleAt(0x20000000 + off_, 4);
  CommRecord c;
  c.pid = c.tid = 9;
  c.comm = "inj";
  c.sample_id.pid = c.sample_id.tid = 9;
  c.sample_id.time = 1;
  c.sample_id.id = 22;
  const auto comm = EncodeComm(c, fd_);
  WriteInput({comm, found, no_note, sample, EncodeFinishedRound()},
             R"({"tool":"mmap3-reader","mode":"mmap3"})");

  InjectOptions o{input_, dir_.File("out.data")};
  auto res = RunInject(o);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->records, 5u);
  EXPECT_EQ(res->converted, 2u);
  EXPECT_EQ(res->with_build_id, 1u);
  EXPECT_EQ(res->dropped, 0u);
  for (const auto& e : std::filesystem::directory_iterator(dir_.path()))  // no temporary left
    EXPECT_EQ(e.path().filename().string().find("out.data."), std::string::npos) << e.path();

  auto out = PerfDataReader::Open(o.output);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->attrs().size(), 2u);
  const perf_event_attr& sb = out->attrs()[1].attr;
  EXPECT_FALSE(perf_mmap3_attr_test(&sb));
  EXPECT_TRUE(sb.mmap && sb.mmap2 && sb.build_id);
  EXPECT_EQ(out->attrs()[1].ids, std::vector<uint64_t>{22});
  EXPECT_FALSE(out->attrs()[0].attr.mmap2);  // only the attr that had the bit
  ASSERT_EQ(out->build_ids().size(), 1u);
  EXPECT_EQ(out->build_ids()[0].build_id, Id(kIdV1));
  EXPECT_NE(out->meta_json().find("\"mode\":\"mmap3\""), std::string::npos);
  EXPECT_NE(out->meta_json().find("\"injected\""), std::string::npos);

  std::vector<std::vector<uint8_t>> recs;
  out->ForEachRecord([&](Bytes r) { recs.emplace_back(r.begin(), r.end()); });
  ASSERT_EQ(recs.size(), 5u);
  EXPECT_EQ(recs[0], comm);
  EXPECT_EQ(recs[3], sample);
  EXPECT_EQ(recs[4], EncodeFinishedRound());
  const size_t trailer = SampleIdSize(fd_);
  for (int i : {1, 2}) {
    const auto& orig = i == 1 ? found : no_note;
    perf_event_header h;
    ASSERT_TRUE(ReadHeader(recs[i], &h));
    EXPECT_EQ(h.type, PERF_RECORD_MMAP2);
    EXPECT_EQ(h.size, recs[i].size());
    EXPECT_TRUE(std::equal(orig.end() - trailer, orig.end(), recs[i].end() - trailer))
        << "sample_id trailer of record " << i << " not kept byte for byte";
    Record d;
    ASSERT_EQ(DecodeRecord(recs[i], fd_, &d), DecodeStatus::kOk);
    const MmapRecord& m = std::get<MmapRecord>(d);
    EXPECT_EQ(m.pid, 9u);
    EXPECT_EQ(m.len, 0x100000u);
    EXPECT_EQ(m.prot, uint32_t{PROT_READ | PROT_EXEC});
    EXPECT_EQ(m.flags, uint32_t{MAP_PRIVATE});
    EXPECT_EQ(m.sample_id.time, i == 1 ? 2u : 3u);
    EXPECT_EQ(m.misc & PERF_RECORD_MISC_CPUMODE_MASK, PERF_RECORD_MISC_USER);
    if (i == 1) {
      EXPECT_EQ(m.format, MmapFormat::kMmap2BuildId);
      EXPECT_EQ(m.build_id, Id(kIdV1));
      EXPECT_EQ(m.filename, lib_);
    } else {  // no build-id: perf gets the inode identity instead
      EXPECT_EQ(m.format, MmapFormat::kMmap2);
      EXPECT_EQ(m.ino, 4242u);
      EXPECT_EQ(m.maj, 8u);
      EXPECT_EQ(m.ino_generation, 7u);
      EXPECT_EQ(m.filename, "/data/blob");
    }
  }

  // Both files give the same report.
  for (const std::string& f : {input_, o.output}) {
    ReportOptions ro;
    ro.input = f;
    auto rep = RunReport(ro);
    ASSERT_TRUE(rep.ok()) << rep.status().ToString();
    EXPECT_EQ(rep->bad_records, 0u) << f;
    ASSERT_EQ(rep->rows.size(), 1u) << f;
    EXPECT_EQ(rep->rows[0].symbol, "inject_fn") << f;
    EXPECT_EQ(rep->rows[0].build_id, Id(kIdV1)) << f;
    EXPECT_EQ(rep->mode, "mmap3") << f;
  }
}

// A module's unload (MMAP3 ABI version 2) cannot be an MMAP2 record: it
// becomes a KSYMBOL unregister of the module's range, at which perf drops
// the map there, with the sample_id trailer kept.
TEST_F(InjectTest, ModuleUnloadBecomesAKsymbolUnregister) {
  auto module = [&](bool unloaded, uint64_t time) {
    auto rec = Mmap3(0xffffffffc0100000, "[mod]", kIdV2, PERF_MMAP3_BUILD_ID_FOUND, time);
    auto* r = reinterpret_cast<perf_mmap3_record*>(rec.data());
    r->header.misc = PERF_RECORD_MISC_KERNEL;
    r->pid = r->tid = UINT32_MAX;
    r->maj = r->min = 0;
    r->ino = r->ino_generation = 0;
    r->len = 0x3000;
    if (unloaded) r->mmap3_flags = PERF_MMAP3_UNLOADED;
    return rec;
  };
  const auto load = module(false, 2), unload = module(true, 3);
  WriteInput({load, unload, SampleAt(0x20000000, 4)}, R"({"mode":"mmap3"})");
  InjectOptions o{input_, dir_.File("out.data")};
  auto res = RunInject(o);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->records, 3u);
  EXPECT_EQ(res->converted, 1u);
  EXPECT_EQ(res->with_build_id, 1u);
  EXPECT_EQ(res->unloads, 1u);
  auto out = PerfDataReader::Open(o.output);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<std::vector<uint8_t>> recs;
  out->ForEachRecord([&](Bytes r) { recs.emplace_back(r.begin(), r.end()); });
  ASSERT_EQ(recs.size(), 3u);
  Record d;
  ASSERT_EQ(DecodeRecord(recs[0], fd_, &d), DecodeStatus::kOk);
  EXPECT_EQ(std::get<MmapRecord>(d).format, MmapFormat::kMmap2BuildId);
  ASSERT_EQ(DecodeRecord(recs[1], fd_, &d), DecodeStatus::kOk);
  const KsymbolRecord& k = std::get<KsymbolRecord>(d);
  EXPECT_TRUE(k.unregister);
  EXPECT_EQ(k.addr, 0xffffffffc0100000u);
  EXPECT_EQ(k.len, 0x3000u);
  EXPECT_EQ(k.name, "[mod]");
  EXPECT_EQ(k.sample_id.time, 3u);
  const size_t trailer = SampleIdSize(fd_);
  EXPECT_TRUE(std::equal(unload.end() - trailer, unload.end(), recs[1].end() - trailer));
}

TEST_F(InjectTest, BpfRecordsLongerThanTheirContentsAreCutForPerf) {
  // A capture made before record cut them (see SampleIdOffset()): a grown
  // KSYMBOL of the side-band event, and one as long as its contents.
  KsymbolRecord k;
  k.addr = 0xffffffffc0001000;
  k.len = 64;
  k.ksym_type = PERF_RECORD_KSYMBOL_TYPE_BPF;
  k.name = "bpf_prog_644f6979c2faccb2_e2e_bpf_a";
  k.sample_id.has_tid = k.sample_id.has_time = k.sample_id.has_id = true;
  k.sample_id.pid = k.sample_id.tid = 9;
  k.sample_id.time = 2;
  k.sample_id.id = 22;
  const std::vector<uint8_t> exact = EncodeKsymbol(k, fd_);
  std::vector<uint8_t> grown = exact;
  grown.insert(grown.end(), 32, 0);  // a fresh ring buffer's zeroes
  reinterpret_cast<perf_event_header*>(grown.data())->size = static_cast<uint16_t>(grown.size());
  WriteInput({grown, exact, SampleAt(0x20000000, 4)}, R"({"mode":"mmap3"})");
  InjectOptions o{input_, dir_.File("out.data")};
  auto res = RunInject(o);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->records, 3u);
  auto out = PerfDataReader::Open(o.output);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<std::vector<uint8_t>> recs;
  out->ForEachRecord([&](Bytes r) { recs.emplace_back(r.begin(), r.end()); });
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[0], exact);  // perf finds its trailer at its end again
  EXPECT_EQ(recs[1], exact);
}

TEST_F(InjectTest, UndecodableMmap3IsDroppedAndCounted) {
  auto bad = Mmap3(0x20000000, lib_, nullptr, PERF_MMAP3_BUILD_ID_NO_NOTE, 2);
  bad[offsetof(perf_mmap3_record, build_id_size)] = 5;  // a size without FOUND
  WriteInput({bad, SampleAt(0x20000000 + off_, 3)}, R"({"mode":"mmap3"})");
  auto res = RunInject({input_, dir_.File("out.data")});
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->dropped, 1u);
  EXPECT_EQ(res->converted, 0u);
  EXPECT_EQ(res->records, 1u);
}

TEST_F(InjectTest, InPlaceConversionWorks) {
  WriteInput({Mmap3(0x20000000, lib_, kIdV1, PERF_MMAP3_BUILD_ID_FOUND, 2),
              SampleAt(0x20000000 + off_, 3)},
             R"({"mode":"mmap3"})");
  auto res = RunInject({input_, input_});
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->converted, 1u);
  auto out = PerfDataReader::Open(input_);
  ASSERT_TRUE(out.ok());
  int mmap2 = 0;
  out->ForEachRecord([&](Bytes r) {
    perf_event_header h;
    ReadHeader(r, &h);
    mmap2 += h.type == PERF_RECORD_MMAP2;
  });
  EXPECT_EQ(mmap2, 1);
}

TEST_F(InjectTest, NeverTruncatesAnExistingFile) {
  // The temporary beside the output must not be a name that exists: an
  // input called <output>.tmp was truncated while mapped (SIGBUS).
  WriteInput({Mmap3(0x20000000, lib_, kIdV1, PERF_MMAP3_BUILD_ID_FOUND, 2)},
             R"({"mode":"mmap3"})");
  const std::string input = dir_.File("z.tmp");
  std::filesystem::rename(input_, input);
  const auto size = std::filesystem::file_size(input);
  auto res = RunInject({input, dir_.File("z")});
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(std::filesystem::file_size(input), size);
  EXPECT_EQ(res->converted, 1u);
}

TEST_F(InjectTest, RefusesFilesThatAreNotOurs) {
  WriteInput({SampleAt(0x20000000, 3)}, "");  // no metadata: perf wrote it
  const std::string output = dir_.File("out.data");
  auto res = RunInject({input_, output});
  ASSERT_FALSE(res.ok());
  EXPECT_NE(res.status().ToString().find("not an mmap3-reader capture"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(output));
  auto missing = RunInject({dir_.File("missing.data"), output});
  EXPECT_FALSE(missing.ok());
}

}  // namespace
}  // namespace mmap3
