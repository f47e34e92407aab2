#include "perf_data.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "files.h"
#include "fixtures.h"
#include "record_writer.h"

namespace mmap3 {
namespace {

using testing::TempDir;

const SampleFormat kFormat{PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME, 0, true};

PerfFileAttr Attr() {
  PerfFileAttr a;
  a.attr.size = sizeof(a.attr);
  a.attr.type = PERF_TYPE_SOFTWARE;
  a.attr.config = PERF_COUNT_SW_CPU_CLOCK;
  a.attr.sample_type = kFormat.sample_type;
  a.attr.sample_id_all = 1;
  a.attr.mmap2 = 1;
  a.ids = {101, 102};
  return a;
}

// COMM records of tasks 0 .. n-1, named "task<i>".
std::vector<std::vector<uint8_t>> Comms(uint32_t n) {
  std::vector<std::vector<uint8_t>> records;
  for (uint32_t i = 0; i < n; ++i) {
    CommRecord c;
    c.pid = c.tid = i;
    const std::string name = "task" + std::to_string(i);
    c.comm = name;
    records.push_back(EncodeComm(c, kFormat));
  }
  return records;
}

TEST(PerfDataTest, RoundTripsAttrsRecordsBuildIdsAndMeta) {
  TempDir dir;
  const std::string path = dir.File("perf.data");
  const std::vector<std::vector<uint8_t>> records = Comms(50);
  {
    auto w = PerfDataWriter::Create(path, {Attr()});
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (const auto& r : records) ASSERT_TRUE(w->Write(r).ok());
    BuildIdEntry lib;
    lib.build_id = *BuildId::FromHex("00112233445566778899aabbccddeeff");  // 16 bytes
    lib.filename = "/usr/lib/libx.so";
    BuildIdEntry kernel;
    kernel.misc = PERF_RECORD_MISC_KERNEL;
    kernel.build_id = *BuildId::FromHex(testing::kIdV1);
    kernel.filename = "[kernel.kallsyms]";
    ASSERT_TRUE(w->Finish({lib, kernel}, R"({"mode":"mmap2-build-id"})").ok());
  }
  auto r = PerfDataReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->attrs().size(), 1u);
  EXPECT_EQ(r->attrs()[0].attr.sample_type, kFormat.sample_type);
  EXPECT_EQ(r->attrs()[0].ids, (std::vector<uint64_t>{101, 102}));
  std::vector<std::vector<uint8_t>> read;
  EXPECT_EQ(r->ForEachRecord([&](Bytes b) { read.emplace_back(b.begin(), b.end()); }), 0u);
  EXPECT_EQ(read, records);
  ASSERT_EQ(r->build_ids().size(), 2u);
  EXPECT_EQ(r->build_ids()[0].filename, "/usr/lib/libx.so");
  EXPECT_EQ(r->build_ids()[0].build_id.size(), 16u);
  EXPECT_EQ(r->build_ids()[0].misc, PERF_RECORD_MISC_USER);
  EXPECT_EQ(r->build_ids()[1].misc, PERF_RECORD_MISC_KERNEL);
  EXPECT_EQ(r->build_ids()[1].build_id.Hex(), testing::kIdV1);
  EXPECT_TRUE(r->HasFeature(kFeatureBuildId));
  EXPECT_EQ(r->meta_json(), R"({"mode":"mmap2-build-id"})");
}

// Pages given back are only memory: the records read after it, and the
// sections parsed at Open, are what they were, and the resident set shrank.
TEST(PerfDataTest, DroppedPagesReadTheSameAndLeaveTheResidentSet) {
  TempDir dir;
  const std::string path = dir.File("perf.data");
  const std::vector<std::vector<uint8_t>> records = Comms(100000);  // about 4 MB
  {
    auto w = PerfDataWriter::Create(path, {Attr()});
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (const auto& r : records) ASSERT_TRUE(w->Write(r).ok());
    ASSERT_TRUE(w->Finish({}, R"({"mode":"mmap2"})").ok());
  }
  auto r = PerfDataReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto resident_kb = [] {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
      if (line.rfind("RssFile:", 0) == 0) return std::stol(line.substr(8));
    return -1L;
  };
  std::vector<std::vector<uint8_t>> read;
  r->ForEachRecord([&](Bytes b) { read.emplace_back(b.begin(), b.end()); });
  ASSERT_EQ(read, records);
  const long before = resident_kb();
  r->DropPagesBefore(r->data().data() + r->data().size());
  const long after = resident_kb();
  ASSERT_GE(before, 0) << "no RssFile in /proc/self/status";
  EXPECT_LT(after, before - 2048) << "about 4 MB of file pages given back";
  read.clear();
  r->ForEachRecord([&](Bytes b) { read.emplace_back(b.begin(), b.end()); });
  EXPECT_EQ(read, records);
  EXPECT_EQ(r->meta_json(), R"({"mode":"mmap2"})");
  EXPECT_EQ(r->attrs()[0].ids, (std::vector<uint64_t>{101, 102}));
  // Null is a no-op, and a second drop of the same pages only faults them in again.
  r->DropPagesBefore(nullptr);
  r->DropPagesBefore(r->data().data() + r->data().size());
  read.clear();
  r->ForEachRecord([&](Bytes b) { read.emplace_back(b.begin(), b.end()); });
  EXPECT_EQ(read, records);
}

// The data goes to the file in writes that end on its 2 MiB boundaries (so
// a filesystem with large folios can cache each 2 MiB as one), and records
// that straddle a boundary, up to the largest a header can frame, read
// back whole and in order.
TEST(PerfDataTest, DataIsWrittenUpToTwoMiBBoundariesAndReadsBackWhole) {
  TempDir dir;
  const std::string path = dir.File("perf.data");
  std::vector<std::vector<uint8_t>> records;
  uint32_t x = 12345;
  size_t total = 0;
  while (total < (size_t{9} << 20)) {
    x = x * 1103515245 + 12345;
    // 8 .. 65528 bytes, a multiple of 8; every 7th the largest.
    const size_t size = records.size() % 7 == 0 ? 65528 : 8 + 8 * ((x >> 8) % 8191);
    std::vector<uint8_t> r(size);
    perf_event_header h{};
    h.type = 0x7f00;  // framed by size only
    h.size = static_cast<uint16_t>(size);
    std::memcpy(r.data(), &h, sizeof(h));
    for (size_t i = sizeof(h); i < size; ++i) r[i] = static_cast<uint8_t>(x >> (i % 24));
    total += size;
    records.push_back(std::move(r));
  }
  std::set<uint64_t> sizes_seen;
  {
    auto w = PerfDataWriter::Create(path, {Attr()}, /*use_tmpfile=*/false);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    std::string hidden;
    for (const auto& e : std::filesystem::directory_iterator(dir.path()))
      hidden = e.path().string();
    ASSERT_FALSE(hidden.empty()) << "the writer's hidden file";
    size_t given = 0;
    for (const auto& r : records) {
      ASSERT_TRUE(w->Write(r).ok());
      given += r.size();
      EXPECT_EQ(w->data_size(), given);
      sizes_seen.insert(std::filesystem::file_size(hidden));
    }
    ASSERT_TRUE(w->Finish({}, R"({"mode":"mmap2"})").ok());
  }
  sizes_seen.erase(0);
  EXPECT_GE(sizes_seen.size(), 4u) << "at least 4 writes of data before Finish";
  for (uint64_t size : sizes_seen)
    EXPECT_EQ(size % (uint64_t{2} << 20), 0u) << "a write ended at " << size;
  auto r = PerfDataReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->data().size(), total);
  std::vector<std::vector<uint8_t>> read;
  EXPECT_EQ(r->ForEachRecord([&](Bytes b) { read.emplace_back(b.begin(), b.end()); }), 0u);
  EXPECT_EQ(read, records);
}

TEST(PerfDataTest, BuildIdEntryWithANameTooLongForItsSizeIsLeftOut) {
  // An entry's size field is 16 bits; a longer name would wrap it.
  TempDir dir;
  const std::string path = dir.File("perf.data");
  {
    auto w = PerfDataWriter::Create(path, {Attr()});
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    CommRecord c;
    c.pid = c.tid = 1;
    c.comm = "x";
    ASSERT_TRUE(w->Write(EncodeComm(c, kFormat)).ok());
    BuildIdEntry huge, lib;
    huge.build_id = lib.build_id = *BuildId::FromHex(testing::kIdV1);
    huge.filename = "/" + std::string(70000, 'a');
    lib.filename = "/usr/lib/libx.so";
    ASSERT_TRUE(w->Finish({huge, lib}, "").ok());
  }
  auto r = PerfDataReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->build_ids().size(), 1u);
  EXPECT_EQ(r->build_ids()[0].filename, "/usr/lib/libx.so");
}

TEST(PerfDataTest, HeaderMatchesThePerfLayout) {
  TempDir dir;
  const std::string path = dir.File("perf.data");
  auto w = PerfDataWriter::Create(path, {Attr()});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Write(EncodeFinishedRound()).ok());
  ASSERT_TRUE(w->Finish({}, "").ok());
  std::ifstream in(path, std::ios::binary);
  char header[104];
  ASSERT_TRUE(in.read(header, sizeof(header)));
  EXPECT_EQ(std::string(header, 8), "PERFILE2");
  uint64_t size, attr_size;
  std::memcpy(&size, header + 8, 8);
  std::memcpy(&attr_size, header + 16, 8);
  EXPECT_EQ(size, 104u);
  // perf_file_attr: the attr followed by the ids section.
  EXPECT_EQ(attr_size, sizeof(perf_event_attr) + 16);
  uint64_t features;
  std::memcpy(&features, header + 72, 8);
  EXPECT_EQ(features, uint64_t{1} << kFeatureBuildId);
}

TEST(PerfDataTest, RejectsGarbageAndUnfinishedFiles) {
  TempDir dir;
  testing::WriteFile(dir.File("garbage"), std::string(200, 'x'));
  EXPECT_FALSE(PerfDataReader::Open(dir.File("garbage")).ok());
  testing::WriteFile(dir.File("short"), "PERFILE2");
  EXPECT_FALSE(PerfDataReader::Open(dir.File("short")).ok());
  {
    auto w = PerfDataWriter::Create(dir.File("unfinished"), {Attr()});
    ASSERT_TRUE(w.ok());
  }
  EXPECT_FALSE(PerfDataReader::Open(dir.File("unfinished")).ok());
  EXPECT_EQ(PerfDataReader::Open(dir.File("missing")).status().error_number(), ENOENT);
}

// The names in `dir`, sorted.
std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// What `path` holds, or a description of it when that is not short text.
std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string s{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (s.size() > 64 || s.find('\0') != std::string::npos)
    return std::to_string(s.size()) + " bytes, " + (s.starts_with("PERFILE2") ? "a header" : "no header");
  return s;
}

// A capture that is never finished (a write failed: a full filesystem; an
// error; the recorder killed) leaves no file with a zeroed header, and an
// existing output keeps what it had.  Finished, the file takes the name.
class PerfDataOutputTest : public ::testing::TestWithParam<bool> {};

TEST_P(PerfDataOutputTest, OnlyAFinishedFileEverHasTheOutputsName) {
  const bool use_tmpfile = GetParam();
  TempDir dir;
  const std::string path = dir.File("perf.data");
  std::vector<uint8_t> big(4096, 0);
  perf_event_header h{PERF_RECORD_MMAP2 + 100, 0, static_cast<uint16_t>(big.size())};
  std::memcpy(big.data(), &h, sizeof(h));
  {
    auto w = PerfDataWriter::Create(path, {Attr()}, use_tmpfile);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    // More than the writer buffers: some of it is on disk.
    for (int i = 0; i < 600; ++i) ASSERT_TRUE(w->Write(big).ok());
  }
  EXPECT_EQ(Names(dir.path()), std::vector<std::string>{}) << "an unfinished capture left a file";

  testing::WriteFile(path, "an earlier capture");
  {
    auto w = PerfDataWriter::Create(path, {Attr()}, use_tmpfile);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (int i = 0; i < 600; ++i) ASSERT_TRUE(w->Write(big).ok());
    EXPECT_EQ(Contents(path), "an earlier capture");
  }
  EXPECT_EQ(Contents(path), "an earlier capture");
  EXPECT_EQ(Names(dir.path()), std::vector<std::string>{"perf.data"});

  {
    auto w = PerfDataWriter::Create(path, {Attr()}, use_tmpfile);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Write(big).ok());
    EXPECT_EQ(Contents(path), "an earlier capture");
    ASSERT_TRUE(w->Finish({}, "{}").ok());
  }
  EXPECT_EQ(Names(dir.path()), std::vector<std::string>{"perf.data"});
  auto r = PerfDataReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->data().size(), big.size());
}

TEST_P(PerfDataOutputTest, ASymlinkAtTheOutputIsReplacedNotWrittenThrough) {
  TempDir dir;
  const std::string victim = dir.File("victim");
  testing::WriteFile(victim, "precious");
  std::filesystem::create_symlink(victim, dir.File("perf.data"));
  auto w = PerfDataWriter::Create(dir.File("perf.data"), {Attr()}, GetParam());
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Finish({}, "{}").ok());
  EXPECT_EQ(Contents(victim), "precious");
  EXPECT_TRUE(std::filesystem::is_regular_file(
      std::filesystem::symlink_status(dir.File("perf.data"))));
}

// A perf.data file is written at offsets from its start: through the
// caller's descriptor of a regular file (/dev/stdout, /dev/fd/N), others
// write to the same descriptor (the reader's summary, the command's
// output) or it is open to append, and the capture would not be readable.
// Refused, and nothing is written; a device (/dev/null) still is written.
TEST(PerfDataOutputInPlaceTest, TheCallersDescriptorOfARegularFileIsRefused) {
  TempDir dir;
  const std::string log = dir.File("log");
  testing::WriteFile(log, "header\n");
  for (int flags : {O_WRONLY | O_APPEND, O_WRONLY | O_TRUNC}) {
    UniqueFd fd(open(log.c_str(), flags | O_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    auto w = PerfDataWriter::Create("/dev/fd/" + std::to_string(fd.get()), {Attr()});
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.status().ToString().find("write the capture to a file by name"),
              std::string::npos)
        << w.status().ToString();
  }
  auto w = PerfDataWriter::Create("/dev/null", {Attr()});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_TRUE(w->Finish({}, "{}").ok());
}

INSTANTIATE_TEST_SUITE_P(TmpfileAndHiddenName, PerfDataOutputTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("O_TMPFILE") : std::string("HiddenName");
                         });

TEST(PerfDataTest, CorruptRecordSizeStopsIterationAndIsReported) {
  TempDir dir;
  const std::string path = dir.File("perf.data");
  auto w = PerfDataWriter::Create(path, {Attr()});
  ASSERT_TRUE(w.ok());
  CommRecord c;
  c.comm = "ok";
  ASSERT_TRUE(w->Write(EncodeComm(c, kFormat)).ok());
  std::vector<uint8_t> bad(16, 0);
  perf_event_header h{PERF_RECORD_COMM, 0, 4000};  // runs past the data section
  std::memcpy(bad.data(), &h, sizeof(h));
  ASSERT_TRUE(w->Write(bad).ok());
  ASSERT_TRUE(w->Finish({}, "").ok());
  auto r = PerfDataReader::Open(path);
  ASSERT_TRUE(r.ok());
  int n = 0;
  EXPECT_EQ(r->ForEachRecord([&](Bytes) { ++n; }), 1u);
  EXPECT_EQ(n, 1);
}

TEST(PerfDataTest, CompressedFilesAreRefusedWithAWayOut) {
  TempDir dir;
  const std::string path = dir.File("perf.data");
  {
    auto w = PerfDataWriter::Create(path, {Attr()});
    ASSERT_TRUE(w.ok());
    CommRecord c;
    c.comm = "x";
    ASSERT_TRUE(w->Write(EncodeComm(c, kFormat)).ok());
    ASSERT_TRUE(w->Finish({}, "").ok());
  }
  // HEADER_COMPRESSED is bit 27 of the first features word (offset 72).
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t features;
  f.seekg(72);
  f.read(reinterpret_cast<char*>(&features), 8);
  features |= uint64_t{1} << kFeatureCompressed;
  f.seekp(72);
  f.write(reinterpret_cast<const char*>(&features), 8);
  f.close();
  auto r = PerfDataReader::Open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("perf record -z off"), std::string::npos)
      << r.status().ToString();
}

// A BPF function's KSYMBOL record with every trailer field set.
KsymbolRecord BpfKsymbol(const char* name, uint32_t tid, uint64_t time, uint32_t cpu,
                         uint64_t id) {
  KsymbolRecord k;
  k.addr = 0xffffffffc0001000;
  k.len = 64;
  k.ksym_type = PERF_RECORD_KSYMBOL_TYPE_BPF;
  k.name = name;
  k.sample_id.has_tid = k.sample_id.has_time = k.sample_id.has_cpu = k.sample_id.has_id = true;
  k.sample_id.pid = k.sample_id.tid = tid;
  k.sample_id.time = time;
  k.sample_id.cpu = cpu;
  k.sample_id.id = id;
  return k;
}

TEST(FileFormatsTest, ARecordLongerThanItsContentsFindsItsEvent) {
  // Two events with trailers of two sizes.  A KSYMBOL record of the second
  // one, served after the first got it (see SampleIdOffset()), carries the
  // first one's trailer after its own: found by its end, it would be the
  // first event's, and its time read from the wrong bytes.
  const SampleFormat short_trailer{
      PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME, 0, true};
  SampleFormat long_trailer = short_trailer;
  long_trailer.sample_type |= PERF_SAMPLE_CPU;
  std::vector<PerfFileAttr> attrs(2);
  for (size_t i = 0; i < 2; ++i) {
    attrs[i].attr.size = sizeof(attrs[i].attr);
    attrs[i].attr.sample_type = (i == 0 ? short_trailer : long_trailer).sample_type;
    attrs[i].attr.sample_id_all = 1;
    attrs[i].ids = {10 + i};
  }
  auto formats = FileFormats::Create(attrs);
  ASSERT_TRUE(formats.ok()) << formats.status().ToString();
  KsymbolRecord k = BpfKsymbol("bpf_prog_644f6979c2faccb2_e2e_bpf_a", 5, 700, 1, 11);
  std::vector<uint8_t> record = EncodeKsymbol(k, long_trailer);
  ASSERT_EQ(formats->For(record).trailer_size, SampleLayout(long_trailer).trailer_size);
  k.sample_id.time = 100;
  k.sample_id.id = 10;
  const std::vector<uint8_t> first = EncodeKsymbol(k, short_trailer);
  const size_t first_trailer = SampleLayout(short_trailer).trailer_size;
  record.insert(record.end(), first.end() - static_cast<ptrdiff_t>(first_trailer), first.end());
  reinterpret_cast<perf_event_header*>(record.data())->size = static_cast<uint16_t>(record.size());
  const SampleLayout& l = formats->For(record);
  EXPECT_EQ(l.trailer_size, SampleLayout(long_trailer).trailer_size);
  EXPECT_EQ(RecordTime(record, l), 700u);
  Record r;
  ASSERT_EQ(DecodeRecord(record, l, &r), DecodeStatus::kOk);
  EXPECT_EQ(std::get<KsymbolRecord>(r).sample_id.id, 11u);
  EXPECT_EQ(std::get<KsymbolRecord>(r).excess, first_trailer);
}

TEST(FileFormatsTest, ARecordAsLongAsItsContentsIsItsEvents) {
  // Two layouts: the first's trailer ends 8 bytes before the second's, at
  // the second's cpu field.  A KSYMBOL of the second event on cpu 1, event
  // 1 being the first's: tried as the shorter trailer, its cpu would read
  // as event 1, its time from its pid and tid (found by helper-55).
  const SampleFormat first{PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TIME |
                               PERF_SAMPLE_CPU,
                           0, true};
  const SampleFormat second{PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                                PERF_SAMPLE_CPU,
                            0, true};
  std::vector<PerfFileAttr> attrs(2);
  attrs[0].attr.sample_type = first.sample_type;
  attrs[0].ids = {1, 2};
  attrs[1].attr.sample_type = second.sample_type;
  attrs[1].ids = {3, 4};
  for (PerfFileAttr& a : attrs) {
    a.attr.size = sizeof(a.attr);
    a.attr.sample_id_all = 1;
  }
  auto formats = FileFormats::Create(attrs);
  ASSERT_TRUE(formats.ok()) << formats.status().ToString();
  const KsymbolRecord k = BpfKsymbol("bpf_prog_2222222222222222_p2", 9, 10, 1, 3);
  const std::vector<uint8_t> record = EncodeKsymbol(k, second);
  const SampleLayout& l = formats->For(record);
  EXPECT_EQ(l.trailer_size, SampleLayout(second).trailer_size);
  EXPECT_EQ(RecordTime(record, l), 10u);
  Record r;
  ASSERT_EQ(DecodeRecord(record, l, &r), DecodeStatus::kOk);
  EXPECT_EQ(std::get<KsymbolRecord>(r).excess, 0u);
  EXPECT_EQ(std::get<KsymbolRecord>(r).sample_id.id, 3u);
}

TEST(PerfDataTest, OverlappingIdSectionsAreRejected) {
  // Every attr pointing its ids at the whole file: valid sections add up to
  // at most the file, these to (attrs x file size).  Refused, not copied.
  TempDir dir;
  const std::string path = dir.File("perf.data");
  {
    auto w = PerfDataWriter::Create(path, {Attr(), Attr(), Attr()});
    ASSERT_TRUE(w.ok());
    CommRecord c;
    c.comm = "x";
    ASSERT_TRUE(w->Write(EncodeComm(c, kFormat)).ok());
    ASSERT_TRUE(w->Finish({}, "").ok());
  }
  ASSERT_TRUE(PerfDataReader::Open(path).ok());
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t attrs[2], attr_size, file_size = std::filesystem::file_size(path);
  f.seekg(16);
  f.read(reinterpret_cast<char*>(&attr_size), 8);
  f.read(reinterpret_cast<char*>(attrs), 16);
  for (uint64_t off = attrs[0]; off + attr_size <= attrs[0] + attrs[1]; off += attr_size) {
    const uint64_t whole[2] = {0, file_size / 8 * 8};
    f.seekp(static_cast<std::streamoff>(off + attr_size - 16));
    f.write(reinterpret_cast<const char*>(whole), 16);
  }
  f.close();
  auto r = PerfDataReader::Open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("overlap"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace mmap3
