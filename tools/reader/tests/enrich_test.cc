// The enrichment stage in isolation: records in, records out, with /proc
// and the clocks played by a fake whose "mapped files" are ELF fixtures.
#include "enrich.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "build_id_cache.h"
#include "elf_file.h"
#include "files.h"
#include "fixtures.h"
#include "linux/perf_event_mmap3.h"
#include "record_writer.h"

namespace mmap3 {
namespace {

using testing::Id;
using testing::kIdV1;
using testing::kIdV2;
using testing::kIdV3;
using testing::TempDir;

const SampleFormat kFormat{PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID |
                               PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD,
                           PERF_FORMAT_ID, true};
constexpr uint64_t kStep = 1'000'000;  // the fake clock's tick: far above StartupStamps' margin
constexpr uint32_t kPid = 4242;
constexpr uint64_t kLibStart = 0x7f0000001000;
constexpr uint64_t kLibEnd = 0x7f0000003000;
constexpr uint64_t kVdsoStart = 0x7fff00000000;
constexpr uint64_t kVdsoEnd = 0x7fff00002000;

// /proc as a test says it is.  OpenMapping() and OpenVdso() open the file
// the test put at (pid, start): that is what map_files would open.
class FakeSystem final : public LiveSystem {
 public:
  std::map<pid_t, std::vector<ProcMapping>> maps;
  std::map<pid_t, std::vector<pid_t>> threads;
  std::map<pid_t, std::string> comms;  // by tid
  std::map<std::pair<uint32_t, uint64_t>, std::string> mapped;  // (pid, start) -> file
  // Called at each open of a mapping, before it is opened.
  std::function<void(uint32_t pid, uint64_t start)> on_open;
  std::vector<uint64_t> clock_readings;
  timespec real_time{};  // 0: now
  int opens = 0;

  Result<std::vector<ProcMapping>> Maps(pid_t pid) override {
    auto it = maps.find(pid);
    if (it == maps.end()) return Status::FromErrno(ESRCH, "maps");
    return it->second;
  }
  std::vector<pid_t> Threads(pid_t pid) override {
    auto it = threads.find(pid);
    return it == threads.end() ? std::vector<pid_t>{} : it->second;
  }
  std::string Comm(pid_t, pid_t tid) override { return comms[tid]; }
  Result<UniqueFd> OpenMapping(uint32_t pid, uint64_t start, uint64_t) override {
    return Open(pid, start);
  }
  Result<UniqueFd> OpenVdso(uint32_t pid, uint64_t start, uint64_t) override {
    return Open(pid, start);
  }
  // The reader's own [vdso]: the file a test names (none: unreadable).
  std::string own_vdso;
  Result<UniqueFd> OpenOwnVdso() override {
    if (own_vdso.empty()) return Status::Failure("no [vdso] of our own");
    return OpenRegularFile(own_vdso);
  }
  uint64_t MonotonicNs() override {
    const uint64_t t = kStep * (clock_readings.size() + 1000);
    clock_readings.push_back(t);
    return t;
  }
  timespec RealTime() override {
    if (real_time.tv_sec != 0) return real_time;
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts;
  }
  // JIT maps: the owner a pid has (none: gone), and what reading its map
  // gives, in turn (the last one repeats; none: missing).
  std::map<pid_t, PerfMapOwner> owners;
  std::map<uint32_t, std::vector<PerfMapRead>> perf_map_reads;
  struct Ask {
    uint32_t pid;
    bool with_stamp;
    int64_t ruid;  // -1: not known
  };
  std::vector<Ask> perf_map_asks;
  std::optional<PerfMapOwner> ProcessOwner(pid_t pid) override {
    auto it = owners.find(pid);
    if (it == owners.end()) return std::nullopt;
    return it->second;
  }
  PerfMapRead ReadPerfMap(uint32_t pid, const std::optional<PerfMapOwner>& owner,
                          const PerfMapStamp* unchanged_from) override {
    perf_map_asks.push_back({pid, unchanged_from != nullptr, owner ? int64_t{owner->ruid} : -1});
    auto it = perf_map_reads.find(pid);
    if (it == perf_map_reads.end() || it->second.empty()) return PerfMapRead{};
    PerfMapRead r = it->second.front();
    if (it->second.size() > 1) it->second.erase(it->second.begin());
    if (r.outcome == PerfMapRead::Outcome::kRead && unchanged_from != nullptr &&
        r.stamp == *unchanged_from) {
      r.outcome = PerfMapRead::Outcome::kUnchanged;
      r.text.clear();
    }
    return r;
  }

 private:
  Result<UniqueFd> Open(uint32_t pid, uint64_t start) {
    ++opens;
    if (on_open) on_open(pid, start);
    auto it = mapped.find({pid, start});
    if (it == mapped.end()) return Status::FromErrno(ENOENT, "map_files");
    return OpenRegularFile(it->second);
  }
};

class CollectSink final : public CaptureSink {
 public:
  struct Item {
    std::vector<uint8_t> bytes;  // empty: a round end
  };
  std::vector<Item> items;
  void OnRecord(Bytes record) override { items.push_back({{record.begin(), record.end()}}); }
  void OnRoundEnd() override { items.push_back({}); }

  std::vector<Record> Records() const {
    std::vector<Record> out;
    for (const Item& i : items) {
      if (i.bytes.empty()) continue;
      Record r;
      EXPECT_EQ(DecodeRecord(i.bytes, kFormat, &r), DecodeStatus::kOk);
      out.push_back(r);
    }
    return out;
  }
  size_t round_ends() const {
    size_t n = 0;
    for (const Item& i : items) n += i.bytes.empty();
    return n;
  }
};

// The rings, as a list of records the "kernel" wrote, handed to the
// enricher at the next Drain().
class FakeRings final : public RingSource {
 public:
  explicit FakeRings(CaptureSink* to = nullptr) : to_(to) {}
  void set_to(CaptureSink* to) { to_ = to; }
  std::deque<std::vector<uint8_t>> pending;
  size_t drains = 0;
  size_t Drain() override {
    ++drains;
    size_t n = 0;
    while (!pending.empty()) {
      std::vector<uint8_t> r = std::move(pending.front());
      pending.pop_front();
      to_->OnRecord(r);
      ++n;
    }
    return n;
  }
  bool SidebandNearlyFull() override { return false; }
  std::optional<uint64_t> SidebandLost() override { return 0; }

 private:
  CaptureSink* to_;
};

MmapRecord KernelMmap2(uint32_t pid, uint64_t start, uint64_t end, std::string_view path,
                       uint64_t time) {
  MmapRecord m;
  m.format = MmapFormat::kMmap2;
  m.misc = PERF_RECORD_MISC_USER;
  m.pid = m.tid = pid;
  m.start = start;
  m.len = end - start;
  m.has_inode = true;
  m.maj = 8;
  m.min = 1;
  m.ino = 1234;
  m.prot = 5;
  m.flags = 2;
  m.filename = path;
  m.sample_id = {true, true, true, true, pid, pid, time, 77, 0};
  return m;
}

ProcMapping Mapping(uint64_t start, uint64_t end, std::string path, bool exec = true) {
  ProcMapping m;
  m.start = start;
  m.end = end;
  m.readable = true;
  m.executable = exec;
  m.maj = 8;
  m.min = 1;
  m.ino = 99;
  m.path = std::move(path);
  return m;
}

class EnricherTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    ASSERT_TRUE(testing::BuildSharedLibrary(dir_->File("v1.so"), "f", kIdV1));
    ASSERT_TRUE(testing::BuildSharedLibrary(dir_->File("v2.so"), "f", kIdV2));
    ASSERT_TRUE(testing::BuildSharedLibrary(dir_->File("vdso.so"), "g", kIdV3));
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string Fixture(const char* name) { return dir_->File(name); }

  Enricher& Make(CaptureMode mode = CaptureMode::kMmap2, BuildIdCache* cache = nullptr) {
    EnrichOptions o;
    o.mode = mode;
    o.format = kFormat;
    o.monotonic_clock = true;
    o.cache = cache;
    enricher_ = std::make_unique<Enricher>(o, system_, overrides_, out_);
    return *enricher_;
  }
  // An MMAP2 record as the kernel would write it for the file the test put
  // at (pid, start): its inode identity is that file's.
  MmapRecord Mmap2(uint32_t pid, uint64_t start, uint64_t end, std::string_view path,
                   uint64_t time) {
    MmapRecord m = KernelMmap2(pid, start, end, path, time);
    SetIdentity(pid, start, &m.maj, &m.min, &m.ino);
    return m;
  }
  void SetIdentity(uint32_t pid, uint64_t start, uint32_t* maj, uint32_t* min, uint64_t* ino) {
    auto it = system_.mapped.find({pid, start});
    struct stat st;
    if (it == system_.mapped.end() || stat(it->second.c_str(), &st) != 0) return;
    *maj = major(st.st_dev);
    *min = minor(st.st_dev);
    *ino = st.st_ino;
  }
  // One record through the stage: what came out.
  std::vector<Record> Feed(const std::vector<uint8_t>& record) {
    out_.items.clear();
    enricher_->OnRecord(record);
    return out_.Records();
  }

  static TempDir* dir_;
  FakeSystem system_;
  SourceOverrides overrides_;
  CollectSink out_;
  std::unique_ptr<Enricher> enricher_;
};
TempDir* EnricherTest::dir_ = nullptr;

const MmapRecord& AsMmap(const Record& r) {
  EXPECT_TRUE(std::holds_alternative<MmapRecord>(r));
  static const MmapRecord kNone;
  return std::holds_alternative<MmapRecord>(r) ? std::get<MmapRecord>(r) : kNone;
}

TEST_F(EnricherTest, AnMmap2WithoutBuildIdGetsTheMappedFilesId) {
  // The record's path holds nothing: the id must come from the mapping.
  system_.mapped[{kPid, kLibStart}] = Fixture("v1.so");
  Make();
  auto out = Feed(EncodeMmap(Mmap2(kPid, kLibStart, kLibEnd, "/gone/libx.so", 5), kFormat));
  ASSERT_EQ(out.size(), 1u);
  const MmapRecord& m = AsMmap(out[0]);
  EXPECT_EQ(m.format, MmapFormat::kMmap2BuildId);
  EXPECT_EQ(m.build_id, Id(kIdV1));
  EXPECT_EQ(m.start, kLibStart);
  EXPECT_EQ(m.filename, "/gone/libx.so");
  EXPECT_EQ(m.sample_id.time, 5u);  // still where the kernel put it in time
  const BuildIdSource* source = overrides_.Find(kPid, kLibStart, Id(kIdV1));
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(*source, BuildIdSource::kMapFiles);
  EXPECT_EQ(enricher_->stats().filled_build_ids, 1u);
  EXPECT_EQ(enricher_->stats().mmaps, 1u);
}

TEST_F(EnricherTest, AnMmap3WhoseIdWasUnavailableGetsItWithStatusFound) {
  system_.mapped[{kPid, kLibStart}] = Fixture("v1.so");
  Make(CaptureMode::kMmap3);
  MmapRecord in = Mmap2(kPid, kLibStart, kLibEnd, "/lib/libx.so", 5);
  in.format = MmapFormat::kMmap3;
  in.build_id_status = PERF_MMAP3_BUILD_ID_UNAVAILABLE;
  auto out = Feed(EncodeMmap(in, kFormat));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(AsMmap(out[0]).format, MmapFormat::kMmap3);
  EXPECT_EQ(AsMmap(out[0]).build_id, Id(kIdV1));
  EXPECT_EQ(AsMmap(out[0]).build_id_status, PERF_MMAP3_BUILD_ID_FOUND);
  EXPECT_EQ(AsMmap(out[0]).ino, in.ino);  // both identities kept
  EXPECT_NE(in.ino, 0u);
}

TEST_F(EnricherTest, RecordsThatNeedNothingPassUnchangedWithoutOpeningAnything) {
  system_.mapped[{kPid, kLibStart}] = Fixture("v2.so");
  Make(CaptureMode::kMmap3);
  std::vector<std::vector<uint8_t>> inputs;
  MmapRecord with_id = Mmap2(kPid, kLibStart, kLibEnd, "/lib/libx.so", 5);
  with_id.format = MmapFormat::kMmap2BuildId;
  with_id.build_id = Id(kIdV1);  // the kernel's word stands
  inputs.push_back(EncodeMmap(with_id, kFormat));
  MmapRecord no_note = Mmap2(kPid, kLibStart, kLibEnd, "/lib/libx.so", 6);
  no_note.format = MmapFormat::kMmap3;
  no_note.build_id_status = PERF_MMAP3_BUILD_ID_NO_NOTE;  // final
  inputs.push_back(EncodeMmap(no_note, kFormat));
  inputs.push_back(EncodeMmap(Mmap2(kPid, kLibStart, kLibEnd, "//anon", 7), kFormat));
  CommRecord c;
  c.pid = c.tid = kPid;
  c.comm = "prog";
  c.sample_id = {true, true, true, true, kPid, kPid, 8, 77, 0};
  inputs.push_back(EncodeComm(c, kFormat));
  for (const auto& in : inputs) {
    out_.items.clear();
    enricher_->OnRecord(in);
    ASSERT_EQ(out_.items.size(), 1u);
    EXPECT_EQ(out_.items[0].bytes, in);
  }
  EXPECT_EQ(system_.opens, 0);
  EXPECT_EQ(overrides_.size(), 0u);
}

TEST_F(EnricherTest, TheVdsoGetsTheIdOfItsImage) {
  system_.mapped[{kPid, kVdsoStart}] = Fixture("vdso.so");
  Make();
  auto out = Feed(EncodeMmap(Mmap2(kPid, kVdsoStart, kVdsoEnd, "[vdso]", 5), kFormat));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(AsMmap(out[0]).build_id, Id(kIdV3));
  const BuildIdSource* source = overrides_.Find(kPid, kVdsoStart, Id(kIdV3));
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(*source, BuildIdSource::kVdso);
}

TEST_F(EnricherTest, AMappingThatCannotBeReadIsPassedOnWithoutAnIdAndCounted) {
  Make();  // nothing mapped: the process is gone
  const auto in = EncodeMmap(Mmap2(kPid, kLibStart, kLibEnd, "/lib/libx.so", 5), kFormat);
  out_.items.clear();
  enricher_->OnRecord(in);
  ASSERT_EQ(out_.items.size(), 1u);
  EXPECT_EQ(out_.items[0].bytes, in);
  EXPECT_EQ(enricher_->stats().fill_failures, 1u);
  EXPECT_EQ(enricher_->stats().filled_build_ids, 0u);
}

// A kernel without the series' first patch sets PERF_RECORD_MISC_MMAP_BUILD_ID
// on the MMAP2 records of every side-band event served after one that asked
// for build-ids (another capture's), over the inode layout.  Read by the
// bit, maj 8 (sd) is an 8-byte "build-id" of the minor and the inode: a
// wrong id.  Where this capture asked for none, the bit is dropped.
std::vector<uint8_t> WithStrayBuildIdBit(std::vector<uint8_t> record) {
  perf_event_header h;
  std::memcpy(&h, record.data(), sizeof(h));
  h.misc |= kMiscMmapBuildId;
  std::memcpy(record.data(), &h, sizeof(h));
  return record;
}

TEST_F(EnricherTest, AStrayBuildIdBitOnAnInodeRecordIsDropped) {
  Make();  // mmap2 mode: no build-ids asked of the kernel; nothing readable
  const auto plain = EncodeMmap(Mmap2(kPid, kLibStart, kLibEnd, "/lib/libx.so", 5), kFormat);
  const auto stray = WithStrayBuildIdBit(plain);
  {
    // What the bit alone says: a build-id of 8 bytes, which no file has.
    Record r;
    ASSERT_EQ(DecodeRecord(stray, SampleLayout(kFormat), &r), DecodeStatus::kOk);
    EXPECT_EQ(AsMmap(r).format, MmapFormat::kMmap2BuildId);
    EXPECT_EQ(AsMmap(r).build_id.size(), 8u);
  }
  out_.items.clear();
  enricher_->OnRecord(stray);
  ASSERT_EQ(out_.items.size(), 1u);
  EXPECT_EQ(out_.items[0].bytes, plain);  // the inode record, as the event asked
  EXPECT_EQ(enricher_->stats().stray_build_id_bits, 1u);
  EXPECT_EQ(enricher_->stats().fill_failures, 1u);  // and its id was looked for
}

TEST_F(EnricherTest, AStrayBuildIdBitDoesNotKeepTheMappedFilesIdAway) {
  system_.mapped[{kPid, kLibStart}] = Fixture("v1.so");
  Make();
  auto out = Feed(WithStrayBuildIdBit(
      EncodeMmap(Mmap2(kPid, kLibStart, kLibEnd, "/lib/libx.so", 5), kFormat)));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(AsMmap(out[0]).format, MmapFormat::kMmap2BuildId);
  EXPECT_EQ(AsMmap(out[0]).build_id, Id(kIdV1));
  EXPECT_EQ(enricher_->stats().filled_build_ids, 1u);
}

TEST_F(EnricherTest, BpfRecordsLongerThanTheirContentsAreCutToThem) {
  // The kernel serves KSYMBOL and BPF_EVENT records to each side-band event
  // in turn, growing them by each one's trailer (see SampleIdOffset()):
  // what is handed on is the record as written, which perf reads right.
  Make();
  KsymbolRecord k;
  k.addr = 0xffffffffc0001000;
  k.len = 64;
  k.ksym_type = PERF_RECORD_KSYMBOL_TYPE_BPF;
  k.name = "bpf_prog_644f6979c2faccb2_e2e_bpf_a";
  k.sample_id.has_tid = k.sample_id.has_time = true;
  k.sample_id.pid = k.sample_id.tid = kPid;
  k.sample_id.time = 500;
  BpfEventRecord b;
  b.type = PERF_BPF_EVENT_PROG_LOAD;
  b.id = 0;  // not read: no such program
  b.sample_id = k.sample_id;
  for (const std::vector<uint8_t>& exact : {EncodeKsymbol(k, kFormat), EncodeBpfEvent(b, kFormat)}) {
    std::vector<uint8_t> longer = exact;
    for (int i = 0; i < 40; ++i) longer.push_back(static_cast<uint8_t>(0x80 + i));
    reinterpret_cast<perf_event_header*>(longer.data())->size =
        static_cast<uint16_t>(longer.size());
    out_.items.clear();
    enricher_->OnRecord(exact);
    enricher_->OnRecord(longer);
    ASSERT_EQ(out_.items.size(), 2u);
    EXPECT_EQ(out_.items[0].bytes, exact);
    EXPECT_EQ(out_.items[1].bytes, exact);
  }
  EXPECT_EQ(enricher_->stats().oversized_sideband, 2u);
}

TEST_F(EnricherTest, InMmap2BuildIdModeTheBitIsTheKernelsAndStays) {
  Make(CaptureMode::kMmap2BuildId);
  MmapRecord m = KernelMmap2(kPid, kLibStart, kLibEnd, "/lib/libx.so", 5);
  m.format = MmapFormat::kMmap2BuildId;
  m.build_id = Id(kIdV2);
  const auto in = EncodeMmap(m, kFormat);
  out_.items.clear();
  enricher_->OnRecord(in);
  ASSERT_EQ(out_.items.size(), 1u);
  EXPECT_EQ(out_.items[0].bytes, in);
  EXPECT_EQ(enricher_->stats().stray_build_id_bits, 0u);
}

// A path replaced by rename() (another inode), and a file rewritten in
// place (same inode): a later mapping of it must get the new contents' id,
// though the old one was read (and remembered) first.
TEST_F(EnricherTest, AFileReplacedByRenameIsNotGivenTheOldId) {
  TempDir work;
  const std::string lib = work.File("libx.so");
  ASSERT_EQ(std::system(("cp " + Fixture("v1.so") + " " + lib).c_str()), 0);
  // Long unchanged as far as the memo can tell: an hour later.
  system_.real_time = {time(nullptr) + 3600, 0};
  system_.mapped[{kPid, kLibStart}] = lib;
  Make();
  auto a = Feed(EncodeMmap(Mmap2(kPid, kLibStart, kLibEnd, "/lib/libx.so", 5), kFormat));
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(AsMmap(a[0]).build_id, Id(kIdV1));

  ASSERT_EQ(std::system(("cp " + Fixture("v2.so") + " " + lib + ".new && mv " + lib + ".new " +
                         lib).c_str()), 0);
  system_.mapped[{kPid + 1, kLibStart}] = lib;
  auto b = Feed(EncodeMmap(Mmap2(kPid + 1, kLibStart, kLibEnd, "/lib/libx.so", 6), kFormat));
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(AsMmap(b[0]).build_id, Id(kIdV2));
}

TEST_F(EnricherTest, AFileRewrittenInPlaceIsNotGivenTheOldId) {
  TempDir work;
  const std::string lib = work.File("libx.so");
  auto write_as = [&](const char* fixture, time_t mtime) {
    // In place: the same inode, truncated and rewritten.
    ASSERT_EQ(std::system(("cat " + Fixture(fixture) + " > " + lib).c_str()), 0);
    const timespec times[2] = {{mtime, 0}, {mtime, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, lib.c_str(), times, 0), 0);
  };
  const time_t now = time(nullptr);
  write_as("v1.so", now - 100);
  struct stat v1;
  ASSERT_EQ(stat(lib.c_str(), &v1), 0);
  system_.real_time = {now + 3600, 0};
  system_.mapped[{kPid, kLibStart}] = lib;
  Make();
  auto a = Feed(EncodeMmap(Mmap2(kPid, kLibStart, kLibEnd, "/lib/libx.so", 5), kFormat));
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(AsMmap(a[0]).build_id, Id(kIdV1));

  write_as("v2.so", now - 50);
  struct stat v2;
  ASSERT_EQ(stat(lib.c_str(), &v2), 0);
  ASSERT_EQ(v2.st_ino, v1.st_ino);  // really in place
  system_.mapped[{kPid + 1, kLibStart}] = lib;
  auto b = Feed(EncodeMmap(Mmap2(kPid + 1, kLibStart, kLibEnd, "/lib/libx.so", 6), kFormat));
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(AsMmap(b[0]).build_id, Id(kIdV2));
}

// The mapping a record describes was replaced at the same addresses before
// map_files was opened (a process that mmap()s another file there with
// MAP_FIXED): the file found is another inode, whose id is not this
// mapping's.
TEST_F(EnricherTest, AMappingReplacedBeforeMapFilesIsOpenedIsNotGivenTheOtherFilesId) {
  system_.mapped[{kPid, kLibStart}] = Fixture("v1.so");
  Make();
  const MmapRecord in = Mmap2(kPid, kLibStart, kLibEnd, "/lib/libx.so", 5);  // v1's inode
  system_.mapped[{kPid, kLibStart}] = Fixture("v2.so");
  auto out = Feed(EncodeMmap(in, kFormat));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(AsMmap(out[0]).build_id.empty()) << AsMmap(out[0]).build_id.Hex();
  EXPECT_EQ(enricher_->stats().fill_failures, 1u);
  EXPECT_EQ(enricher_->stats().filled_build_ids, 0u);
}

// Stores through a shared writable mapping stamp the file's times only when
// they dirty a clean page: once the page is dirty, the file can be
// rewritten with its size, mtime and ctime unchanged.  An id remembered for
// that inode must not be served for the new contents.
TEST_F(EnricherTest, AFileRewrittenThroughASharedMappingIsNotServedTheRememberedId) {
  TempDir work;
  const std::string lib = work.File("libx.so");
  ASSERT_EQ(std::system(("cp " + Fixture("v1.so") + " " + lib).c_str()), 0);
  std::string v2;
  {
    auto fd = OpenRegularFile(Fixture("v2.so"));
    ASSERT_TRUE(fd.ok());
    auto bytes = ReadAllFd(fd->get(), 1 << 24, "v2.so");
    ASSERT_TRUE(bytes.ok());
    v2 = *bytes;
  }
  const int fd = open(lib.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  struct stat st;
  ASSERT_EQ(fstat(fd, &st), 0);
  ASSERT_EQ(static_cast<size_t>(st.st_size), v2.size()) << "v1 and v2 must be the same size";
  void* p = mmap(nullptr, v2.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(p, MAP_FAILED);
  auto* bytes = static_cast<volatile char*>(p);
  for (size_t i = 0; i < v2.size(); i += 4096) bytes[i] = bytes[i];  // dirty every page now
  struct stat before;
  ASSERT_EQ(stat(lib.c_str(), &before), 0);

  system_.real_time = {time(nullptr) + 3600, 0};  // long unchanged, as far as the memo can tell
  system_.mapped[{kPid, kLibStart}] = lib;
  system_.mapped[{kPid + 1, kLibStart}] = lib;
  Make();
  auto a = Feed(EncodeMmap(Mmap2(kPid, kLibStart, kLibEnd, "/lib/libx.so", 5), kFormat));
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(AsMmap(a[0]).build_id, Id(kIdV1));

  std::memcpy(p, v2.data(), v2.size());
  struct stat after;
  ASSERT_EQ(stat(lib.c_str(), &after), 0);
  munmap(p, v2.size());
  ASSERT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  ASSERT_EQ(after.st_ctim.tv_sec, before.st_ctim.tv_sec);
  ASSERT_EQ(after.st_ctim.tv_nsec, before.st_ctim.tv_nsec) << "the rewrite moved ctime";
  auto b = Feed(EncodeMmap(Mmap2(kPid + 1, kLibStart, kLibEnd, "/lib/libx.so", 6), kFormat));
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(AsMmap(b[0]).build_id, Id(kIdV2));
}

TEST(BuildIdStillInTest, SaysOnlyWhatTheFileSaysNow) {
  TempDir work;
  const std::string lib = work.File("lib.so");
  ASSERT_TRUE(testing::BuildSharedLibrary(lib, "f", kIdV1));
  auto fd = OpenRegularFile(lib);
  ASSERT_TRUE(fd.ok());
  EXPECT_TRUE(BuildIdStillIn(fd->get(), Id(kIdV1)));
  EXPECT_FALSE(BuildIdStillIn(fd->get(), Id(kIdV2)));
  EXPECT_FALSE(BuildIdStillIn(fd->get(), BuildId()));
  const std::string text = work.File("text");
  ASSERT_EQ(std::system(("echo not an ELF file > " + text).c_str()), 0);
  auto tfd = OpenRegularFile(text);
  ASSERT_TRUE(tfd.ok());
  EXPECT_FALSE(BuildIdStillIn(tfd->get(), Id(kIdV1)));
}

TEST_F(EnricherTest, AFilledFileGoesToTheBuildIdCacheFromItsMapping) {
  TempDir cache_dir;
  BuildIdCache cache(cache_dir.path());
  cache.Start();
  // The path in the record no longer holds the file: the copy is of the
  // mapped inode.
  system_.mapped[{kPid, kLibStart}] = Fixture("v1.so");
  Make(CaptureMode::kMmap2, &cache);
  auto out = Feed(EncodeMmap(Mmap2(kPid, kLibStart, kLibEnd, "/gone/libx.so", 5), kFormat));
  ASSERT_EQ(out.size(), 1u);
  cache.Stop();
  EXPECT_EQ(cache.stats().copied, 1u);
  struct stat st;
  EXPECT_EQ(stat(BuildIdCache::ElfPath(cache_dir.path(), "/gone/libx.so", Id(kIdV1)).c_str(), &st),
            0);
}

// A copy of a library that another user can write claims the library's
// build-id with its owner's symbols: it is not stored under that id, and
// does not stop the library itself, mapped later, from being stored.
TEST_F(EnricherTest, AFileAnotherUserCanWriteIsNotCachedButTheLibraryIs) {
  TempDir cache_dir, theirs;
  const std::string copy = theirs.File("libx.so");
  {
    auto bytes = ReadAllFd(OpenRegularFile(Fixture("v1.so"))->get(), 1 << 24, "v1.so");
    ASSERT_TRUE(bytes.ok());
    ASSERT_TRUE(ReplaceFile(copy, *bytes).ok());
  }
  ASSERT_EQ(chmod(copy.c_str(), 0666), 0);  // anyone can write it
  BuildIdCache cache(cache_dir.path());
  cache.Start();
  system_.mapped[{kPid, kLibStart}] = copy;
  system_.mapped[{kPid + 1, kLibStart}] = Fixture("v1.so");
  Make(CaptureMode::kMmap2, &cache);
  auto out = Feed(EncodeMmap(Mmap2(kPid, kLibStart, kLibEnd, "/home/them/libx.so", 5), kFormat));
  ASSERT_EQ(out.size(), 1u);
  out = Feed(EncodeMmap(Mmap2(kPid + 1, kLibStart, kLibEnd, "/usr/lib/libx.so", 5), kFormat));
  ASSERT_EQ(out.size(), 1u);
  cache.Stop();
  EXPECT_EQ(cache.stats().copied, 1u);
  struct stat st;
  EXPECT_NE(
      stat(BuildIdCache::ElfPath(cache_dir.path(), "/home/them/libx.so", Id(kIdV1)).c_str(), &st),
      0);
  EXPECT_EQ(
      stat(BuildIdCache::ElfPath(cache_dir.path(), "/usr/lib/libx.so", Id(kIdV1)).c_str(), &st), 0);
}

// A process can rewrite its own [vdso] (build-id note included): only an
// image that is byte for byte the reader's own vDSO is stored.
TEST_F(EnricherTest, OnlyTheReadersOwnVdsoImageIsCached) {
  for (const char* own : {"v2.so", "vdso.so"}) {
    SCOPED_TRACE(own);
    TempDir cache_dir;
    BuildIdCache cache(cache_dir.path());
    cache.Start();
    system_.mapped[{kPid, kVdsoStart}] = Fixture("vdso.so");
    system_.own_vdso = Fixture(own);
    Make(CaptureMode::kMmap2, &cache);
    auto out = Feed(EncodeMmap(Mmap2(kPid, kVdsoStart, kVdsoEnd, "[vdso]", 5), kFormat));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(AsMmap(out[0]).build_id, Id(kIdV3)) << "the process's own samples keep its id";
    cache.Stop();
    EXPECT_EQ(cache.stats().copied, std::string(own) == "vdso.so" ? 1u : 0u);
  }
}

// JIT maps (/tmp/perf-PID.map) of processes with anonymous executable memory.
class PerfMapWatchTest : public EnricherTest {
 protected:
  void MakeWatching(CaptureMode mode = CaptureMode::kMmap2, bool monotonic_clock = false) {
    EnrichOptions o;
    o.mode = mode;
    o.format = kFormat;
    o.monotonic_clock = monotonic_clock;
    o.perf_maps = &maps_;
    enricher_ = std::make_unique<Enricher>(o, system_, overrides_, out_);
  }
  static PerfMapRead Read(const std::string& text) {
    PerfMapRead r;
    r.outcome = PerfMapRead::Outcome::kRead;
    r.text = text;
    r.stamp.size = text.size();  // the fake's version of the file
    return r;
  }
  static PerfMapRead Outcome(PerfMapRead::Outcome outcome, std::string reason = "") {
    PerfMapRead r;
    r.outcome = outcome;
    r.reason = std::move(reason);
    return r;
  }
  std::vector<uint8_t> Exit(uint32_t pid, uint32_t tid) {
    TaskRecord t;
    t.exit = true;
    t.pid = t.ppid = pid;
    t.tid = t.ptid = tid;
    t.time = 50;
    t.sample_id = {true, true, true, true, pid, tid, 50, 77, 0};
    return EncodeTask(t, kFormat);
  }
  std::vector<uint8_t> Anon(uint32_t pid, std::string_view path = "//anon") {
    MmapRecord m = KernelMmap2(pid, 0x10000, 0x11000, path, 5);
    m.maj = m.min = 0;
    m.ino = 0;
    return EncodeMmap(m, kFormat);
  }
  size_t Asks() const { return system_.perf_map_asks.size(); }
  // The name the capture's map of `pid` has for `address` ("(none)").
  std::string NameAt(uint32_t pid, uint64_t address) const {
    const PerfMap* map = maps_.Find(pid);
    const PerfMapEntry* e = map != nullptr ? map->Find(address) : nullptr;
    return e != nullptr ? e->name : "(none)";
  }

  PerfMaps maps_;
};

TEST_F(PerfMapWatchTest, TheLastVersionSeenWinsAndADeletedMapIsKept) {
  system_.owners[kPid] = {1000, 1000};
  system_.perf_map_reads[kPid] = {Read("10000 10 first\n"), Read("10000 10 first\n"),
                                  Read("10000 10 first\n10000 20 second\n"),
                                  Outcome(PerfMapRead::Outcome::kMissing)};
  MakeWatching();
  enricher_->PollPerfMaps();
  EXPECT_EQ(Asks(), 0u);  // no JIT code seen yet: nothing to watch
  Feed(Anon(kPid));
  EXPECT_EQ(Asks(), 0u);  // read on the tick, not on the record's path
  enricher_->PollPerfMaps();
  ASSERT_NE(maps_.Find(kPid), nullptr);
  EXPECT_EQ(NameAt(kPid, 0x10000), "first");
  EXPECT_EQ(maps_.Find(kPid)->taken(), PerfMapTaken::kRunning);
  enricher_->PollPerfMaps();  // unchanged: not read again
  ASSERT_EQ(Asks(), 2u);
  EXPECT_TRUE(system_.perf_map_asks[1].with_stamp);  // asked with the stamp of the version read
  enricher_->PollPerfMaps();  // the JIT appended
  EXPECT_EQ(NameAt(kPid, 0x10010), "second");
  EXPECT_EQ(NameAt(kPid, 0x10000), "(none)");  // first's or second's: not known
  EXPECT_EQ(enricher_->stats().perf_map_reads, 2u);
  // Another thread's exit is not the process's.
  auto out = Feed(Exit(kPid, kPid + 1));
  EXPECT_EQ(out.size(), 1u);  // handed on
  EXPECT_EQ(Asks(), 3u);
  // The main thread's: read once more; the JIT deleted the file, and what
  // was read while it ran stays.
  out = Feed(Exit(kPid, kPid));
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(Asks(), 4u);
  ASSERT_NE(maps_.Find(kPid), nullptr);
  EXPECT_EQ(NameAt(kPid, 0x10010), "second");
  EXPECT_EQ(maps_.Find(kPid)->taken(), PerfMapTaken::kRunning);
  // Exited: neither polled nor read at the end.
  enricher_->PollPerfMaps();
  enricher_->FinishPerfMaps();
  EXPECT_EQ(Asks(), 4u);
}

TEST_F(PerfMapWatchTest, TakenAtExitOrAtTheEnd) {
  system_.owners[kPid] = {1000, 1000};
  system_.owners[kPid + 1] = {1000, 1000};
  system_.perf_map_reads[kPid] = {Read("10000 10 at_exit\n")};
  system_.perf_map_reads[kPid + 1] = {Read("10000 10 at_end\n")};
  MakeWatching();
  Feed(Anon(kPid));
  Feed(Anon(kPid + 1, "/memfd:jit (deleted)"));
  Feed(Exit(kPid, kPid));
  enricher_->FinishPerfMaps();
  ASSERT_NE(maps_.Find(kPid), nullptr);
  EXPECT_EQ(maps_.Find(kPid)->taken(), PerfMapTaken::kExit);
  ASSERT_NE(maps_.Find(kPid + 1), nullptr);
  EXPECT_EQ(maps_.Find(kPid + 1)->taken(), PerfMapTaken::kEnd);
  EXPECT_EQ(NameAt(kPid + 1, 0x10000), "at_end");
}

TEST_F(PerfMapWatchTest, FileBackedMappingsAndMappingsWithABuildIdAreNotWatched) {
  system_.mapped[{kPid, kLibStart}] = Fixture("v1.so");
  MakeWatching(CaptureMode::kMmap2BuildId);  // where the kernel's MMAP2 has build-ids
  Feed(EncodeMmap(Mmap2(kPid, kLibStart, kLibEnd, "/lib/libx.so", 5), kFormat));
  MmapRecord memfd_elf = KernelMmap2(kPid + 1, 0x10000, 0x11000, "/memfd:elf (deleted)", 5);
  memfd_elf.format = MmapFormat::kMmap2BuildId;
  memfd_elf.build_id = Id(kIdV2);  // an ELF file loaded from memory, not JIT code
  Feed(EncodeMmap(memfd_elf, kFormat));
  Feed(Anon(kPid + 2, "[heap]"));
  enricher_->PollPerfMaps();
  enricher_->FinishPerfMaps();
  EXPECT_EQ(Asks(), 0u);
}

TEST_F(PerfMapWatchTest, RefusalsAreKeptOnceAndWhatWasReadStays) {
  system_.owners[kPid] = {1000, 1000};
  const std::string why = "/tmp/perf-4242.map: a symbolic link, not a regular file";
  system_.perf_map_reads[kPid] = {Read("10000 10 good\n"),
                                  Outcome(PerfMapRead::Outcome::kRefused, why)};
  MakeWatching();
  Feed(Anon(kPid));
  enricher_->PollPerfMaps();
  enricher_->PollPerfMaps();
  enricher_->PollPerfMaps();
  ASSERT_EQ(maps_.refusals().size(), 1u);
  EXPECT_EQ(maps_.refusals()[0].reason, why);
  ASSERT_NE(maps_.Find(kPid), nullptr);
  EXPECT_EQ(NameAt(kPid, 0x10000), "good");
}

TEST_F(PerfMapWatchTest, APidInUseAgainAfterItsExitNamesTheJitCodeOfNeither) {
  // One map per pid in the capture: the first process's samples would be
  // named by the second's map (or the second's by the first's).
  system_.owners[kPid] = {1000, 1000};
  system_.perf_map_reads[kPid] = {Read("10000 10 old\n"), Read("10000 10 new\n")};
  MakeWatching();
  Feed(Anon(kPid));
  enricher_->PollPerfMaps();
  EXPECT_EQ(NameAt(kPid, 0x10000), "old");
  Feed(Exit(kPid, kPid));
  system_.owners[kPid] = {2000, 2000};
  Feed(Anon(kPid));  // another process, the same pid
  enricher_->PollPerfMaps();
  enricher_->FinishPerfMaps();
  EXPECT_EQ(maps_.Find(kPid), nullptr);
  EXPECT_EQ(NameAt(kPid, 0x10000), "(none)");
  ASSERT_EQ(maps_.refusals().size(), 1u);
  EXPECT_NE(maps_.refusals()[0].reason.find("two processes"), std::string::npos)
      << maps_.refusals()[0].reason;
  EXPECT_EQ(Asks(), 2u);  // the first process's poll and exit; nothing after the reuse
}

// An exec after the JIT code was mapped: the map at the pid's name was the
// old program's, and the new one's code at the same addresses would take
// its names (helper-57's review).  Neither gets any.
TEST_F(PerfMapWatchTest, AnExecAfterJitCodeNamesTheJitCodeOfNeitherProgram) {
  system_.owners[kPid] = {1000, 1000};
  system_.perf_map_reads[kPid] = {Read("10000 10 before_exec\n")};
  MakeWatching();
  Feed(Anon(kPid));
  enricher_->PollPerfMaps();
  EXPECT_EQ(NameAt(kPid, 0x10000), "before_exec");
  CommRecord c;
  c.pid = c.tid = kPid;
  c.exec = true;
  c.comm = "next";
  c.sample_id = {true, true, true, true, kPid, kPid, 40, 77, 0};
  Feed(EncodeComm(c, kFormat));
  Feed(Anon(kPid));  // the new program's JIT code
  enricher_->PollPerfMaps();
  enricher_->FinishPerfMaps();
  EXPECT_EQ(maps_.Find(kPid), nullptr);
  EXPECT_EQ(NameAt(kPid, 0x10000), "(none)");
  ASSERT_EQ(maps_.refusals().size(), 1u);
  EXPECT_NE(maps_.refusals()[0].reason.find("ran exec"), std::string::npos)
      << maps_.refusals()[0].reason;
  EXPECT_EQ(Asks(), 1u);  // the poll before the exec; nothing after it
  // A comm change that is not an exec changes nothing.
  system_.perf_map_reads[kPid + 1] = {Read("10000 10 renamed_thread_ok\n")};
  system_.owners[kPid + 1] = {1000, 1000};
  Feed(Anon(kPid + 1));
  c.pid = c.tid = kPid + 1;
  c.exec = false;
  Feed(EncodeComm(c, kFormat));
  enricher_->PollPerfMaps();
  EXPECT_EQ(NameAt(kPid + 1, 0x10000), "renamed_thread_ok");
}

// The owner is read when the JIT mapping is handled: if the pid was used
// again by then, /proc shows the new process, whose user's map would name
// the old one's code (helper-57's review).  A process that started after
// the mapping was made (the record's time, on the events' monotonic clock)
// is not the one that made it: its map is refused and not read.
TEST_F(PerfMapWatchTest, APidTakenByAProcessStartedAfterTheMappingIsNotRead) {
  system_.owners[kPid] = {1001, 1001, std::nullopt, uint64_t{5} + 1'000'000'000};  // 1 s later
  system_.perf_map_reads[kPid] = {Read("10000 10 attackers_name\n")};
  system_.owners[kPid + 1] = {1000, 1000, std::nullopt, uint64_t{4}};  // before: its own
  system_.perf_map_reads[kPid + 1] = {Read("10000 10 its_own_name\n")};
  MakeWatching(CaptureMode::kMmap2, /*monotonic_clock=*/true);
  Feed(Anon(kPid));  // mapped at time 5
  Feed(Anon(kPid + 1));
  enricher_->PollPerfMaps();
  enricher_->FinishPerfMaps();
  EXPECT_EQ(NameAt(kPid, 0x10000), "(none)");
  EXPECT_EQ(NameAt(kPid + 1, 0x10000), "its_own_name");
  ASSERT_EQ(maps_.refusals().size(), 1u);
  EXPECT_NE(maps_.refusals()[0].reason.find("started after its JIT code was mapped"),
            std::string::npos)
      << maps_.refusals()[0].reason;
  EXPECT_EQ(Asks(), 2u);  // kPid + 1's poll and end; kPid's map never read
}

// -a and -p: a process that existed before the capture.
class SynthesisTest : public EnricherTest {
 protected:
  void SetUp() override {
    system_.maps[kPid] = {Mapping(kLibStart, kLibEnd, "/lib/libx.so"),
                          Mapping(kLibEnd, kLibEnd + 0x1000, "/lib/libx.so", /*exec=*/false),
                          Mapping(kVdsoStart, kVdsoEnd, "[vdso]")};
    system_.threads[kPid] = {kPid, kPid + 1};
    system_.comms[kPid] = "prog";
    system_.comms[kPid + 1] = "worker";
    system_.mapped[{kPid, kLibStart}] = Fixture("v1.so");
    system_.mapped[{kPid, kVdsoStart}] = Fixture("vdso.so");
    // /proc/PID/maps shows the mapped inode
    for (ProcMapping& m : system_.maps[kPid]) SetIdentity(kPid, m.start, &m.maj, &m.min, &m.ino);
  }
  // The times the enricher read the clock: [0] before /proc was read, [1]
  // after, [2] after the build-ids were read.
  uint64_t Reading(size_t i) const { return system_.clock_readings.at(i); }
  void Synthesize(FakeRings& rings) {
    rings.set_to(enricher_.get());
    enricher_->SynthesizeProcesses({kPid}, rings);
  }
};

TEST_F(SynthesisTest, CommsThenMappingsWithIdsThenOneRoundEnd) {
  Make();
  FakeRings rings;
  Synthesize(rings);
  ASSERT_EQ(out_.items.size(), 5u);
  ASSERT_TRUE(out_.items.back().bytes.empty());  // the round ends after them, once
  EXPECT_EQ(out_.round_ends(), 1u);
  auto records = out_.Records();
  ASSERT_EQ(records.size(), 4u);
  const auto& c0 = std::get<CommRecord>(records[0]);
  const auto& c1 = std::get<CommRecord>(records[1]);
  EXPECT_EQ(c0.tid, kPid);
  EXPECT_EQ(c0.comm, "prog");
  EXPECT_EQ(c1.tid, kPid + 1);
  EXPECT_EQ(c1.comm, "worker");
  const MmapRecord& lib = AsMmap(records[2]);
  EXPECT_EQ(lib.format, MmapFormat::kMmap2BuildId);
  EXPECT_EQ(lib.build_id, Id(kIdV1));
  EXPECT_EQ(lib.filename, "/lib/libx.so");
  const MmapRecord& vdso = AsMmap(records[3]);
  EXPECT_EQ(vdso.filename, "[vdso]");
  EXPECT_EQ(vdso.build_id, Id(kIdV3));
  // Nothing changed while they were read: they held before the capture.
  for (const Record& r : records) {
    const SampleId& sid = std::holds_alternative<CommRecord>(r) ? std::get<CommRecord>(r).sample_id
                                                                : std::get<MmapRecord>(r).sample_id;
    EXPECT_EQ(sid.time, 0u);
    EXPECT_EQ(sid.pid, kPid);
  }
  EXPECT_EQ(enricher_->stats().synthesized, 4u);
  ASSERT_TRUE(enricher_->stats().startup.has_value());
  EXPECT_EQ(enricher_->stats().startup->processes, 1u);
  EXPECT_EQ(enricher_->stats().startup->changed_during_read, 0u);
  EXPECT_GE(rings.drains, 1u);  // the kernel's records are taken in before deciding
}

TEST_F(SynthesisTest, InMmap3ModeBothIdentitiesAreKept) {
  Make(CaptureMode::kMmap3);
  FakeRings rings;
  Synthesize(rings);
  auto records = out_.Records();
  ASSERT_EQ(records.size(), 4u);
  const MmapRecord& lib = AsMmap(records[2]);
  EXPECT_EQ(lib.format, MmapFormat::kMmap3);
  EXPECT_EQ(lib.build_id_status, PERF_MMAP3_BUILD_ID_FOUND);
  struct stat st;
  ASSERT_EQ(stat(Fixture("v1.so").c_str(), &st), 0);
  EXPECT_EQ(lib.ino, st.st_ino);  // as /proc/PID/maps showed it
}

TEST_F(SynthesisTest, AMappingChangedBeforeTheReadHoldsFromThatChange) {
  Make();
  FakeRings rings;
  // The kernel reported a remap of the library's range long before /proc
  // was read (the fake clock starts at 1000 steps).
  const uint64_t change = 10 * kStep;
  rings.pending.push_back(
      EncodeMmap(Mmap2(kPid, kLibStart, kLibEnd, "/lib/libx.so", change), kFormat));
  Synthesize(rings);
  auto records = out_.Records();
  // The kernel's record is handed on first (no round ended before the
  // synthesized ones), then the synthesized ones.
  ASSERT_EQ(records.size(), 5u);
  EXPECT_EQ(AsMmap(records[0]).sample_id.time, change);
  EXPECT_EQ(out_.round_ends(), 1u);
  EXPECT_TRUE(out_.items.back().bytes.empty());
  const MmapRecord& lib = AsMmap(records[3]);
  EXPECT_EQ(lib.filename, "/lib/libx.so");
  EXPECT_EQ(lib.sample_id.time, change);
  EXPECT_EQ(AsMmap(records[4]).sample_id.time, 0u);  // [vdso] untouched
}

TEST_F(SynthesisTest, AMappingChangedWhileItWasReadIsLeftToTheKernelsRecord) {
  Make();
  FakeRings rings;
  // Queued when the build-ids are read; timed between the clock readings
  // around the /proc read.
  bool queued = false;
  system_.on_open = [&](uint32_t, uint64_t start) {
    if (start != kLibStart || queued) return;
    queued = true;
    const uint64_t during = (Reading(0) + Reading(1)) / 2;
    rings.pending.push_back(
        EncodeMmap(Mmap2(kPid, kLibStart, kLibEnd, "/lib/other.so", during), kFormat));
  };
  Synthesize(rings);
  auto records = out_.Records();
  // The kernel's record, two comms, the [vdso]; not the library as read.
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(AsMmap(records[0]).filename, "/lib/other.so");
  EXPECT_EQ(AsMmap(records[3]).filename, "[vdso]");
  EXPECT_EQ(enricher_->stats().startup->changed_during_read, 1u);
}

TEST_F(SynthesisTest, AMappingRemappedAfterTheReadIsNotGivenTheNewFilesId) {
  // Remapped after /proc/PID/maps was read, before map_files was opened:
  // map_files shows the new file, whose id must not be lent to the mapping
  // that was read.
  Make(CaptureMode::kMmap3);
  FakeRings rings;
  bool queued = false;
  system_.on_open = [&](uint32_t, uint64_t start) {
    if (start != kLibStart || queued) return;
    queued = true;
    system_.mapped[{kPid, kLibStart}] = Fixture("v2.so");
    const uint64_t after_read = Reading(1) + kStep / 2;  // before the next reading
    rings.pending.push_back(
        EncodeMmap(Mmap2(kPid, kLibStart, kLibEnd, "/lib/libx.so", after_read), kFormat));
  };
  Synthesize(rings);
  auto records = out_.Records();
  ASSERT_EQ(records.size(), 5u);  // the kernel's record, 2 comms, the library, the [vdso]
  ASSERT_EQ(system_.clock_readings.size(), 3u);
  EXPECT_LT(AsMmap(records[0]).sample_id.time, Reading(2));
  const MmapRecord& lib = AsMmap(records[3]);
  EXPECT_EQ(lib.filename, "/lib/libx.so");
  EXPECT_TRUE(lib.build_id.empty()) << lib.build_id.Hex();
  EXPECT_EQ(lib.build_id_status, PERF_MMAP3_BUILD_ID_UNAVAILABLE);
  EXPECT_EQ(lib.sample_id.time, 0u);  // what was read held until the remap
  EXPECT_GE(enricher_->stats().fill_failures, 1u);
}

TEST_F(SynthesisTest, AnonymousExecutableMemoryIsSynthesizedAsJitCodeAndWatched) {
  // JIT code in a process that ran before the capture (-p on a JVM): as
  // perf, a "//anon" mapping without a build-id (nothing is opened for it),
  // and the process's perf map is taken.
  system_.maps[kPid].push_back(Mapping(0x10000, 0x11000, "", /*exec=*/true));
  system_.maps[kPid].push_back(Mapping(0x20000, 0x21000, "[anon:jit]", /*exec=*/true));
  system_.maps[kPid].push_back(Mapping(0x30000, 0x31000, "[heap]", /*exec=*/true));  // not JIT
  system_.owners[kPid] = {1000, 1000};
  PerfMapRead read;
  read.outcome = PerfMapRead::Outcome::kRead;
  read.text = "10000 100 jit_hot\n";
  read.stamp.size = read.text.size();
  system_.perf_map_reads[kPid] = {read};
  PerfMaps maps;
  EnrichOptions o;
  o.format = kFormat;
  o.monotonic_clock = true;
  o.perf_maps = &maps;
  enricher_ = std::make_unique<Enricher>(o, system_, overrides_, out_);
  FakeRings rings;
  Synthesize(rings);
  auto records = out_.Records();
  ASSERT_EQ(records.size(), 6u);  // 2 comms, the library, the [vdso], 2 JIT mappings
  const MmapRecord& anon = AsMmap(records[4]);
  EXPECT_EQ(anon.filename, "//anon");  // the kernel's name for it
  EXPECT_EQ(anon.start, 0x10000u);
  EXPECT_TRUE(anon.build_id.empty());
  EXPECT_EQ(AsMmap(records[5]).filename, "[anon:jit]");
  EXPECT_EQ(system_.opens, 2);  // the library and the [vdso], nothing for JIT code
  EXPECT_EQ(maps.Find(kPid), nullptr);  // not taken before the capture's tick or end
  enricher_->FinishPerfMaps();
  ASSERT_NE(maps.Find(kPid), nullptr);
  EXPECT_EQ(maps.Find(kPid)->taken(), PerfMapTaken::kEnd);
  ASSERT_NE(maps.Find(kPid)->Find(0x10010), nullptr);
  EXPECT_EQ(maps.Find(kPid)->Find(0x10010)->name, "jit_hot");
}

TEST_F(SynthesisTest, AProcessGoneBeforeItsReadIsSkipped) {
  Make();
  FakeRings rings;
  rings.set_to(enricher_.get());
  enricher_->SynthesizeProcesses({kPid + 100}, rings);
  EXPECT_EQ(out_.round_ends(), 1u);
  EXPECT_TRUE(out_.Records().empty());
  EXPECT_EQ(enricher_->stats().startup->processes, 0u);
}

}  // namespace
}  // namespace mmap3
