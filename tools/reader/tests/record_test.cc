#include "record.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <optional>
#include <vector>

#include "enrich.h"
#include "linux/perf_event_mmap3.h"
#include "record_writer.h"

namespace mmap3 {
namespace {

constexpr uint64_t kTypeNoCallchain = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                                      PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD;
const SampleFormat kFormat{kTypeNoCallchain | PERF_SAMPLE_CALLCHAIN, 0, true};

SampleId Sid(uint32_t pid, uint64_t time, uint32_t cpu = 0) {
  SampleId s;
  s.has_tid = s.has_time = s.has_cpu = true;
  s.pid = s.tid = pid;
  s.time = time;
  s.cpu = cpu;
  return s;
}

template <typename T>
T DecodeAs(const std::vector<uint8_t>& bytes, const SampleFormat& f = kFormat) {
  Record r;
  EXPECT_EQ(DecodeRecord(bytes, f, &r), DecodeStatus::kOk);
  EXPECT_TRUE(std::holds_alternative<T>(r));
  return std::holds_alternative<T>(r) ? std::get<T>(r) : T{};
}

// Decoded records hold views into their bytes: temporaries are parked here so
// the views stay valid for the rest of the test program.
template <typename T>
T DecodeAs(std::vector<uint8_t>&& bytes, const SampleFormat& f = kFormat) {
  static std::deque<std::vector<uint8_t>> kept;
  kept.push_back(std::move(bytes));
  return DecodeAs<T>(kept.back(), f);
}

DecodeStatus StatusOf(const std::vector<uint8_t>& bytes, const SampleFormat& f = kFormat) {
  Record r;
  return DecodeRecord(bytes, f, &r);
}

void SetSize(std::vector<uint8_t>& bytes, uint16_t size) { std::memcpy(&bytes[6], &size, 2); }

MmapRecord SampleMmap(MmapFormat format) {
  MmapRecord m;
  m.format = format;
  m.misc = PERF_RECORD_MISC_USER;
  m.pid = 42;
  m.tid = 43;
  m.start = 0x7f0000001000;
  m.len = 0x5000;
  m.pgoff = 0x1000;
  m.maj = 8;
  m.min = 1;
  m.ino = 123456;
  m.ino_generation = 7;
  m.prot = 5;
  m.flags = 2;
  m.filename = "/usr/lib/libfoo.so";
  m.sample_id = Sid(42, 1000, 1);
  return m;
}

TEST(RecordTest, DecodesPlainMmap) {
  auto bytes = EncodeMmap(SampleMmap(MmapFormat::kMmap), kFormat);
  perf_event_header h;
  ASSERT_TRUE(ReadHeader(bytes, &h));
  EXPECT_EQ(h.type, PERF_RECORD_MMAP);
  MmapRecord m = DecodeAs<MmapRecord>(bytes);
  EXPECT_EQ(m.format, MmapFormat::kMmap);
  EXPECT_EQ(m.start, 0x7f0000001000u);
  EXPECT_EQ(m.len, 0x5000u);
  EXPECT_EQ(m.pgoff, 0x1000u);
  EXPECT_EQ(m.filename, "/usr/lib/libfoo.so");
  EXPECT_FALSE(m.has_inode);
  EXPECT_TRUE(m.build_id.empty());
  EXPECT_EQ(m.sample_id.time, 1000u);
  EXPECT_EQ(m.sample_id.cpu, 1u);
}

TEST(RecordTest, DecodesMmap2WithInode) {
  MmapRecord m = DecodeAs<MmapRecord>(EncodeMmap(SampleMmap(MmapFormat::kMmap2), kFormat));
  EXPECT_EQ(m.format, MmapFormat::kMmap2);
  EXPECT_TRUE(m.has_inode);
  EXPECT_EQ(m.maj, 8u);
  EXPECT_EQ(m.min, 1u);
  EXPECT_EQ(m.ino, 123456u);
  EXPECT_EQ(m.ino_generation, 7u);
  EXPECT_EQ(m.prot, 5u);
  EXPECT_EQ(m.flags, 2u);
  EXPECT_TRUE(m.build_id.empty());
  EXPECT_EQ(m.pid, 42u);
  EXPECT_EQ(m.tid, 43u);
}

TEST(RecordTest, DecodesMmap2BuildIdVariantByMiscBit) {
  MmapRecord in = SampleMmap(MmapFormat::kMmap2BuildId);
  uint8_t id[16];
  for (int i = 0; i < 16; ++i) id[i] = static_cast<uint8_t>(0xa0 + i);
  in.build_id = BuildId(id, 16);
  auto bytes = EncodeMmap(in, kFormat);
  perf_event_header h;
  ASSERT_TRUE(ReadHeader(bytes, &h));
  EXPECT_TRUE(h.misc & PERF_RECORD_MISC_MMAP_BUILD_ID);
  // Same size as the inode variant: the union changes meaning, not length.
  EXPECT_EQ(bytes.size(), EncodeMmap(SampleMmap(MmapFormat::kMmap2), kFormat).size());
  MmapRecord m = DecodeAs<MmapRecord>(bytes);
  EXPECT_EQ(m.format, MmapFormat::kMmap2BuildId);
  EXPECT_FALSE(m.has_inode);
  EXPECT_EQ(m.build_id, BuildId(id, 16));
  EXPECT_EQ(m.prot, 5u);
  EXPECT_EQ(m.filename, "/usr/lib/libfoo.so");
}

// An MMAP2 record in the inode layout with PERF_RECORD_MISC_MMAP_BUILD_ID
// set, as a kernel without the series' first patch writes it for an event
// that did not ask for build-ids.
std::vector<uint8_t> StrayBitMmap2(uint32_t maj, uint64_t ino, uint64_t ino_generation) {
  MmapRecord in = SampleMmap(MmapFormat::kMmap2);
  in.maj = maj;
  in.ino = ino;
  in.ino_generation = ino_generation;
  auto bytes = EncodeMmap(in, kFormat);
  const uint16_t misc = in.misc | kMiscMmapBuildId;
  std::memcpy(bytes.data() + offsetof(perf_event_header, misc), &misc, sizeof(misc));
  return bytes;
}

void ExpectReadAsInode(const MmapRecord& m, uint32_t maj, uint64_t ino, uint64_t ino_generation) {
  EXPECT_EQ(m.format, MmapFormat::kMmap2);
  EXPECT_TRUE(m.stray_build_id_bit);
  EXPECT_TRUE(m.build_id.empty()) << m.build_id.Hex();
  EXPECT_TRUE(m.has_inode);
  EXPECT_EQ(m.maj, maj);
  EXPECT_EQ(m.min, 1u);
  EXPECT_EQ(m.ino, ino);
  EXPECT_EQ(m.ino_generation, ino_generation);
  EXPECT_EQ(m.prot, 5u);
  EXPECT_EQ(m.filename, "/usr/lib/libfoo.so");
}

SampleFormat WithBuildIds(Mmap2BuildIds writers) {
  SampleFormat f = kFormat;
  f.mmap2_build_ids = writers;
  return f;
}

const char* WritersName(Mmap2BuildIds writers) {
  switch (writers) {
    case Mmap2BuildIds::kZeroPadded: return "zero-padded (live, ours)";
    case Mmap2BuildIds::kAsked: return "an event asked";
    case Mmap2BuildIds::kUnasked: return "perf's, none asked";
  }
  return "?";
}

constexpr Mmap2BuildIds kAllWriters[] = {Mmap2BuildIds::kZeroPadded, Mmap2BuildIds::kAsked,
                                         Mmap2BuildIds::kUnasked};

TEST(RecordTest, AStrayBuildIdBitOverTheInodeLayoutIsReadAsInode) {
  for (Mmap2BuildIds writers : kAllWriters) {
    const SampleFormat f = WithBuildIds(writers);
    SCOPED_TRACE(WritersName(writers));
    // maj 254 (device mapper): a "size" of 254.
    ExpectReadAsInode(DecodeAs<MmapRecord>(StrayBitMmap2(254, 123456, 7), f), 254, 123456, 7);
    // maj 259 (NVMe partitions): size 3, a reserved byte of 1.
    ExpectReadAsInode(DecodeAs<MmapRecord>(StrayBitMmap2(259, 123456, 7), f), 259, 123456, 7);
    // maj 256: size 0.
    ExpectReadAsInode(DecodeAs<MmapRecord>(StrayBitMmap2(256, 9, 0), f), 256, 9, 0);
  }
  for (Mmap2BuildIds writers : {Mmap2BuildIds::kZeroPadded, Mmap2BuildIds::kUnasked}) {
    const SampleFormat f = WithBuildIds(writers);
    SCOPED_TRACE(WritersName(writers));
    // maj 8 (sd): 8 bytes of minor and inode would pass as a build-id.
    // Unless an event asked, what follows them (the inode's high half,
    // ino_generation) is not the zeroes that follow a kernel's 8-byte id.
    ExpectReadAsInode(DecodeAs<MmapRecord>(StrayBitMmap2(8, 123456, 7), f), 8, 123456, 7);
    ExpectReadAsInode(DecodeAs<MmapRecord>(StrayBitMmap2(8, uint64_t{5} << 32, 0), f), 8,
                      uint64_t{5} << 32, 0);
  }
  // maj 7 (loop) with ino_generation 0 (squashfs, as every snap is): in
  // perf's files, where no event asked, 7 bytes is no size an id has.
  ExpectReadAsInode(DecodeAs<MmapRecord>(StrayBitMmap2(7, 0x1234, 0),
                                         WithBuildIds(Mmap2BuildIds::kUnasked)),
                    7, 0x1234, 0);
  // maj 8 (sd) with ino_generation 0 (vfat, iso9660): the padding is all
  // zeroes, but an id does not begin with a minor number's zero bytes.
  ExpectReadAsInode(DecodeAs<MmapRecord>(StrayBitMmap2(8, 0x4523, 0),
                                         WithBuildIds(Mmap2BuildIds::kUnasked)),
                    8, 0x4523, 0);
  // The same in a live capture or one of ours passes (the kernel writes
  // the bit over ids of any size there; record drops a stray one in mmap2
  // mode before this).
  EXPECT_EQ(DecodeAs<MmapRecord>(StrayBitMmap2(7, 0x1234, 0)).build_id.size(), 7u);
  // Where an event asked (perf's own synthesized records may leave bytes
  // after a short id), such a record is read as an id: the kernel sets the
  // bit stray only where no event of the capture asked.
  const MmapRecord m =
      DecodeAs<MmapRecord>(StrayBitMmap2(8, 123456, 7), WithBuildIds(Mmap2BuildIds::kAsked));
  EXPECT_EQ(m.format, MmapFormat::kMmap2BuildId);
  EXPECT_EQ(m.build_id.size(), 8u);
  EXPECT_FALSE(m.stray_build_id_bit);
}

TEST(RecordTest, BuildIdsOfEveryLengthAreReadAsIds) {
  for (Mmap2BuildIds writers : kAllWriters) {
    const SampleFormat f = WithBuildIds(writers);
    for (size_t size : {size_t{1}, size_t{7}, size_t{8}, size_t{16}, size_t{20}}) {
      SCOPED_TRACE(fmt::format("{} bytes, {}", size, WritersName(writers)));
      MmapRecord in = SampleMmap(MmapFormat::kMmap2BuildId);
      uint8_t id[BuildId::kMaxSize];
      for (size_t i = 0; i < size; ++i) id[i] = static_cast<uint8_t>(0xf0 - i);
      in.build_id = BuildId(id, size);
      const MmapRecord m = DecodeAs<MmapRecord>(EncodeMmap(in, f), f);
      // In perf's files where no event asked, only the sizes tools write.
      if (writers == Mmap2BuildIds::kUnasked && size != 8 && size != 16 && size != 20) {
        EXPECT_TRUE(m.stray_build_id_bit);
        EXPECT_TRUE(m.build_id.empty());
        continue;
      }
      EXPECT_EQ(m.format, MmapFormat::kMmap2BuildId);
      EXPECT_EQ(m.build_id, BuildId(id, size));
      EXPECT_FALSE(m.stray_build_id_bit);
      EXPECT_FALSE(m.has_inode);
    }
  }
  // A short id with bytes after it, as perf's synthesized records can have
  // them: an id where an event asked for build-ids, not one where none did.
  MmapRecord in = SampleMmap(MmapFormat::kMmap2BuildId);
  const uint8_t id[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  in.build_id = BuildId(id, 8);
  auto bytes = EncodeMmap(in, kFormat);
  bytes[sizeof(perf_event_header) + 32 + 4 + 12] = 0x5a;  // id[12]
  const MmapRecord m = DecodeAs<MmapRecord>(bytes, WithBuildIds(Mmap2BuildIds::kAsked));
  EXPECT_EQ(m.format, MmapFormat::kMmap2BuildId);
  EXPECT_EQ(m.build_id, BuildId(id, 8));
  EXPECT_TRUE(DecodeAs<MmapRecord>(bytes).stray_build_id_bit);
  EXPECT_TRUE(DecodeAs<MmapRecord>(bytes, WithBuildIds(Mmap2BuildIds::kUnasked)).stray_build_id_bit);
}

// Builds an MMAP3 record straight from the uapi struct, independent of our
// encoder, so the decoder is checked against the ABI definition.
std::vector<uint8_t> RawMmap3(uint8_t status, uint8_t size, const char* filename,
                              const SampleFormat& f) {
  perf_mmap3_record rec{};
  rec.header.type = PERF_MMAP3_RECORD_TYPE;
  rec.header.misc = PERF_RECORD_MISC_USER;
  rec.pid = 7;
  rec.tid = 8;
  rec.addr = 0x400000;
  rec.len = 0x2000;
  rec.pgoff = 0;
  rec.maj = 253;
  rec.min = 3;
  rec.ino = 99;
  rec.ino_generation = 5;
  rec.prot = 5;
  rec.flags = 2;
  rec.build_id_size = size;
  rec.build_id_status = status;
  for (int i = 0; i < size && i < PERF_MMAP3_BUILD_ID_MAX; ++i) rec.build_id[i] = static_cast<uint8_t>(i + 1);
  std::vector<uint8_t> out;
  out.reserve(256);
  const auto* raw = reinterpret_cast<const uint8_t*>(&rec);
  out.insert(out.end(), raw, raw + sizeof(rec));
  size_t name_len = std::strlen(filename) + 1;
  out.insert(out.end(), filename, filename + name_len);
  while (out.size() % 8) out.push_back(0);
  // sample_id: TID, TIME, CPU
  uint32_t pid = 7, tid = 8, cpu = 1, res = 0;
  uint64_t time = 5555;
  auto put = [&](const void* p, size_t n) {
    out.insert(out.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  if (f.sample_id_all) {
    put(&pid, 4);
    put(&tid, 4);
    put(&time, 8);
    put(&cpu, 4);
    put(&res, 4);
  }
  SetSize(out, static_cast<uint16_t>(out.size()));
  return out;
}

TEST(RecordTest, DecodesMmap3FromUapiLayout) {
  const SampleFormat f{kTypeNoCallchain, 0, true};
  MmapRecord m = DecodeAs<MmapRecord>(RawMmap3(PERF_MMAP3_BUILD_ID_FOUND, 20, "/bin/x", f), f);
  EXPECT_EQ(m.format, MmapFormat::kMmap3);
  EXPECT_TRUE(m.has_inode);  // MMAP3 keeps the inode identity alongside the build-id
  EXPECT_EQ(m.maj, 253u);
  EXPECT_EQ(m.min, 3u);
  EXPECT_EQ(m.ino, 99u);
  EXPECT_EQ(m.ino_generation, 5u);
  EXPECT_EQ(m.prot, 5u);
  EXPECT_EQ(m.flags, 2u);
  EXPECT_EQ(m.start, 0x400000u);
  EXPECT_EQ(m.len, 0x2000u);
  ASSERT_EQ(m.build_id.size(), 20u);
  EXPECT_EQ(m.build_id.data()[0], 1);
  EXPECT_EQ(m.build_id.data()[19], 20);
  EXPECT_EQ(m.build_id_status, PERF_MMAP3_BUILD_ID_FOUND);
  EXPECT_EQ(m.filename, "/bin/x");
  EXPECT_EQ(m.sample_id.time, 5555u);
  EXPECT_EQ(RecordTime(RawMmap3(0, 20, "/bin/x", f), f), 5555u);
}

TEST(RecordTest, DecodesMmap3ShortBuildIdAndStatuses) {
  const SampleFormat f{kTypeNoCallchain, 0, true};
  MmapRecord md5 = DecodeAs<MmapRecord>(RawMmap3(PERF_MMAP3_BUILD_ID_FOUND, 16, "/a", f), f);
  EXPECT_EQ(md5.build_id.size(), 16u);
  MmapRecord none = DecodeAs<MmapRecord>(RawMmap3(PERF_MMAP3_BUILD_ID_NO_NOTE, 0, "/a", f), f);
  EXPECT_TRUE(none.build_id.empty());
  EXPECT_EQ(none.build_id_status, PERF_MMAP3_BUILD_ID_NO_NOTE);
}

TEST(RecordTest, RejectsInconsistentMmap3) {
  const SampleFormat f{kTypeNoCallchain, 0, true};
  EXPECT_EQ(StatusOf(RawMmap3(PERF_MMAP3_BUILD_ID_FOUND, 0, "/a", f), f), DecodeStatus::kMalformed);
  EXPECT_EQ(StatusOf(RawMmap3(PERF_MMAP3_BUILD_ID_FOUND, 21, "/a", f), f), DecodeStatus::kMalformed);
  EXPECT_EQ(StatusOf(RawMmap3(PERF_MMAP3_BUILD_ID_IO_ERROR, 20, "/a", f), f),
            DecodeStatus::kMalformed);
}

TEST(RecordTest, Mmap3EncoderMatchesUapiLayout) {
  const SampleFormat f{kTypeNoCallchain, 0, true};
  std::vector<uint8_t> raw = RawMmap3(PERF_MMAP3_BUILD_ID_FOUND, 20, "/bin/x", f);
  MmapRecord m = DecodeAs<MmapRecord>(raw, f);
  m.sample_id = Sid(7, 5555, 1);
  m.sample_id.tid = 8;
  EXPECT_EQ(EncodeMmap(m, f), raw);
}

// ABI version 2: a module's load and unload.  The unload flag is read and
// written back; a flag this reader does not know, or an unload of anything
// but the kernel's (pid -1), is not trusted.
TEST(RecordTest, Mmap3ModuleUnloadFlag) {
  const SampleFormat f{kTypeNoCallchain, 0, true};
  std::vector<uint8_t> raw = RawMmap3(PERF_MMAP3_BUILD_ID_FOUND, 20, "[mod]", f);
  auto* rec = reinterpret_cast<perf_mmap3_record*>(raw.data());
  rec->pid = rec->tid = UINT32_MAX;
  rec->mmap3_flags = PERF_MMAP3_UNLOADED;
  MmapRecord m = DecodeAs<MmapRecord>(raw, f);
  EXPECT_EQ(m.mmap3_flags, PERF_MMAP3_UNLOADED);
  EXPECT_EQ(m.pid, UINT32_MAX);
  m.sample_id = Sid(7, 5555, 1);
  m.sample_id.tid = 8;
  EXPECT_EQ(EncodeMmap(m, f), raw);

  rec->mmap3_flags = PERF_MMAP3_UNLOADED << 1;
  EXPECT_EQ(StatusOf(raw, f), DecodeStatus::kMalformed);
  rec->mmap3_flags = PERF_MMAP3_UNLOADED;
  rec->pid = 7;
  EXPECT_EQ(StatusOf(raw, f), DecodeStatus::kMalformed);
  rec->mmap3_flags = 0;
  EXPECT_EQ(StatusOf(raw, f), DecodeStatus::kOk);
}

TEST(RecordTest, DecodesCommWithExecBit) {
  CommRecord c;
  c.pid = 10;
  c.tid = 11;
  c.comm = "worker";
  c.exec = true;
  c.sample_id = Sid(10, 77);
  CommRecord d = DecodeAs<CommRecord>(EncodeComm(c, kFormat));
  EXPECT_EQ(d.pid, 10u);
  EXPECT_EQ(d.tid, 11u);
  EXPECT_EQ(d.comm, "worker");
  EXPECT_TRUE(d.exec);
  EXPECT_EQ(d.sample_id.time, 77u);
  c.exec = false;
  EXPECT_FALSE(DecodeAs<CommRecord>(EncodeComm(c, kFormat)).exec);
}

TEST(RecordTest, DecodesForkAndExit) {
  TaskRecord t;
  t.pid = 20;
  t.ppid = 10;
  t.tid = 21;
  t.ptid = 11;
  t.time = 999;
  t.sample_id = Sid(20, 999);
  TaskRecord fork = DecodeAs<TaskRecord>(EncodeTask(t, kFormat));
  EXPECT_FALSE(fork.exit);
  EXPECT_EQ(fork.pid, 20u);
  EXPECT_EQ(fork.ppid, 10u);
  EXPECT_EQ(fork.tid, 21u);
  EXPECT_EQ(fork.ptid, 11u);
  EXPECT_EQ(fork.time, 999u);
  t.exit = true;
  EXPECT_TRUE(DecodeAs<TaskRecord>(EncodeTask(t, kFormat)).exit);
}

TEST(RecordTest, DecodesLostAndLostSamples) {
  LostRecord l;
  l.id = 5;
  l.lost = 1234;
  l.sample_id = Sid(0, 1);
  LostRecord d = DecodeAs<LostRecord>(EncodeLost(l, kFormat));
  EXPECT_FALSE(d.samples);
  EXPECT_EQ(d.id, 5u);
  EXPECT_EQ(d.lost, 1234u);
  l.samples = true;
  LostRecord s = DecodeAs<LostRecord>(EncodeLost(l, kFormat));
  EXPECT_TRUE(s.samples);
  EXPECT_EQ(s.lost, 1234u);
}

TEST(RecordTest, DecodesSampleWithCallchain) {
  SampleRecord s;
  s.misc = PERF_RECORD_MISC_USER;
  s.ip = 0x401234;
  s.pid = 3;
  s.tid = 4;
  s.time = 5;
  s.cpu = 1;
  s.period = 250000;
  std::vector<uint64_t> chain = {static_cast<uint64_t>(PERF_CONTEXT_USER), 0x401234, 0x401000};
  auto bytes = EncodeSample(s, chain, kFormat);
  SampleRecord d = DecodeAs<SampleRecord>(bytes);
  EXPECT_EQ(d.ip, 0x401234u);
  EXPECT_EQ(d.pid, 3u);
  EXPECT_EQ(d.tid, 4u);
  EXPECT_EQ(d.time, 5u);
  EXPECT_EQ(d.cpu, 1u);
  EXPECT_EQ(d.period, 250000u);
  ASSERT_EQ(d.callchain.size(), 3u);
  EXPECT_EQ(d.callchain[0], static_cast<uint64_t>(PERF_CONTEXT_USER));
  EXPECT_EQ(d.callchain[2], 0x401000u);
  EXPECT_EQ(RecordTime(bytes, kFormat), 5u);
}

// RecordTime() reads a sample's time inline and leaves everything else to
// RecordTimeOutOfLine(): the two agree on every record, and the inline part
// makes all of the out-of-line checks (the header's size is the span's, the
// record reaches past the time, the format has one, it is a sample).
TEST(RecordTest, RecordTimeInlineAgreesWithTheFullCheck) {
  const SampleLayout timed(kFormat);
  const SampleLayout untimed(SampleFormat{PERF_SAMPLE_IP | PERF_SAMPLE_TID, 0, true});
  SampleRecord s;
  s.misc = PERF_RECORD_MISC_USER;
  s.ip = 0x401234;
  s.pid = s.tid = 3;
  s.time = 77;
  const std::vector<uint8_t> sample = EncodeSample(s, {}, kFormat);
  CommRecord c;
  c.pid = c.tid = 3;
  c.comm = "x";
  c.sample_id = Sid(3, 88);
  const std::vector<uint8_t> comm = EncodeComm(c, kFormat);
  auto both = [&](Bytes bytes, const SampleLayout& l, std::optional<uint64_t> want) {
    EXPECT_EQ(RecordTime(bytes, l), want);
    EXPECT_EQ(RecordTimeOutOfLine(bytes, l), want);
  };
  both(sample, timed, 77u);
  both(comm, timed, 88u);  // the trailer's, not a load at the sample's offset
  both(EncodeSample(s, {}, untimed.format), untimed, std::nullopt);
  // The header says 16 bytes, the span has the whole sample: the time lies
  // past the record the header describes.
  std::vector<uint8_t> framing = sample;
  const uint16_t sixteen = 16;
  std::memcpy(framing.data() + 6, &sixteen, 2);
  both(framing, timed, std::nullopt);
  // Header and span agree, but end before the time.
  std::vector<uint8_t> cut(sample.begin(), sample.begin() + timed.time);
  const uint16_t cut_size = static_cast<uint16_t>(cut.size());
  std::memcpy(cut.data() + 6, &cut_size, 2);
  both(cut, timed, std::nullopt);
  both(Bytes(sample.data(), 4), timed, std::nullopt);
  both(Bytes(sample.data(), 0), timed, std::nullopt);
}

TEST(RecordTest, SampleFastPathAgreesAndChecksFraming) {
  SampleRecord s;
  s.misc = PERF_RECORD_MISC_USER;
  s.ip = 0x401234;
  s.pid = 3;
  s.tid = 4;
  s.time = 5;
  s.cpu = 1;
  std::vector<uint64_t> chain = {0x401234, 0x401000};
  auto bytes = EncodeSample(s, chain, kFormat);
  SampleRecord d;
  ASSERT_EQ(DecodeSampleRecord(bytes, kFormat, &d), DecodeStatus::kOk);
  EXPECT_EQ(d.ip, 0x401234u);
  EXPECT_EQ(d.tid, 4u);
  EXPECT_EQ(d.time, 5u);
  ASSERT_EQ(d.callchain.size(), 2u);
  EXPECT_EQ(d.callchain[1], 0x401000u);
  // A record cut short, one with a size that is not the span's, and one that
  // is not a sample.
  EXPECT_EQ(DecodeSampleRecord(Bytes(bytes.data(), bytes.size() - 8), kFormat, &d),
            DecodeStatus::kTruncated);
  std::vector<uint8_t> longer = bytes;
  longer.resize(bytes.size() + 8);
  EXPECT_EQ(DecodeSampleRecord(longer, kFormat, &d), DecodeStatus::kBadSize);
  CommRecord c;
  c.pid = c.tid = 1;
  c.comm = "x";
  EXPECT_EQ(DecodeSampleRecord(EncodeComm(c, kFormat), kFormat, &d), DecodeStatus::kIgnored);
}

// The inline decoder (record.h) accepts a sample only where the full one
// does, with the same fields, and hands every other case to it: checked
// over every subset of the fixed fields, with and without a chain, for
// every size a record of up to 12 words can claim, every chain length
// around what fits, and misaligned sizes.
TEST(RecordTest, InlineSampleDecodeAgreesWithTheFullDecoder) {
  const uint64_t kFixed[] = {PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP,   PERF_SAMPLE_TID,
                             PERF_SAMPLE_TIME,       PERF_SAMPLE_ADDR, PERF_SAMPLE_ID,
                             PERF_SAMPLE_CPU,        PERF_SAMPLE_PERIOD};
  uint64_t accepted = 0, rejected = 0;
  for (uint32_t mask = 0; mask < (1u << 8); ++mask) {
    for (bool chain : {false, true}) {
      uint64_t type = chain ? PERF_SAMPLE_CALLCHAIN : 0;
      for (int b = 0; b < 8; ++b)
        if (mask & (1u << b)) type |= kFixed[b];
      const SampleLayout l(SampleFormat{type, 0, true});
      for (uint16_t size = 8; size <= 12 * 8 + 4; size += 4) {
        for (uint64_t nr = 0; nr <= (chain ? 13u : 0u); ++nr) {
          // Every word distinct, so a field read from the wrong place shows.
          std::vector<uint8_t> bytes(size);
          for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 1);
          const perf_event_header h{PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, size};
          std::memcpy(bytes.data(), &h, sizeof(h));
          if (chain && l.fixed_end + 8u <= size) std::memcpy(bytes.data() + l.fixed_end, &nr, 8);
          SampleRecord fast, full;
          fast.callchain = U64Array(bytes.data(), 99);  // stale: must be replaced
          const DecodeStatus a = DecodeSampleRecord(bytes, l, &fast);
          const DecodeStatus want = DecodeSampleRecordFull(bytes, l, &full);
          ASSERT_EQ(a, want) << "type " << type << " size " << size << " nr " << nr;
          if (want != DecodeStatus::kOk) {
            ++rejected;
            continue;
          }
          ++accepted;
          EXPECT_EQ(fast.misc, full.misc);
          EXPECT_EQ(fast.ip, full.ip);
          EXPECT_EQ(fast.pid, full.pid);
          EXPECT_EQ(fast.tid, full.tid);
          EXPECT_EQ(fast.time, full.time);
          EXPECT_EQ(fast.id, full.id) << "type " << type;
          EXPECT_EQ(fast.cpu, full.cpu);
          EXPECT_EQ(fast.period, full.period);
          EXPECT_EQ(fast.callchain.size(), full.callchain.size());
          EXPECT_EQ(fast.callchain.bytes().data(), full.callchain.bytes().data());
        }
      }
    }
  }
  // Both kinds were seen in numbers (the loops above are not vacuous).
  EXPECT_GT(accepted, 5000u);
  EXPECT_GT(rejected, 5000u);
}

TEST(RecordTest, DecodesSampleWithIdentifierAndRead) {
  const SampleFormat f{PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID |
                           PERF_SAMPLE_TIME | PERF_SAMPLE_READ | PERF_SAMPLE_CALLCHAIN,
                       PERF_FORMAT_ID, true};
  // Hand-built: identifier, ip, pid/tid, time, read{value,id}, nr, ips.
  std::vector<uint64_t> words = {0, 77, 0x1000, (uint64_t{9} << 32) | 8, 1234, 100, 77, 1, 0x1000};
  std::vector<uint8_t> bytes(words.size() * 8);
  std::memcpy(bytes.data(), words.data(), bytes.size());
  perf_event_header h{PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER,
                      static_cast<uint16_t>(bytes.size())};
  std::memcpy(bytes.data(), &h, sizeof(h));
  SampleRecord d = DecodeAs<SampleRecord>(bytes, f);
  EXPECT_EQ(d.id, 77u);
  EXPECT_EQ(d.ip, 0x1000u);
  EXPECT_EQ(d.pid, 8u);
  EXPECT_EQ(d.tid, 9u);
  EXPECT_EQ(d.time, 1234u);
  ASSERT_EQ(d.callchain.size(), 1u);
  EXPECT_EQ(d.callchain[0], 0x1000u);
  EXPECT_EQ(RecordTime(bytes, f), 1234u);
}

TEST(RecordTest, EveryTruncationIsRejected) {
  SampleRecord s;
  s.ip = 1;
  std::vector<uint64_t> chain = {1, 2, 3};
  CommRecord c;
  c.comm = "x";
  TaskRecord t;
  LostRecord l;
  std::vector<std::vector<uint8_t>> records = {
      EncodeMmap(SampleMmap(MmapFormat::kMmap), kFormat),
      EncodeMmap(SampleMmap(MmapFormat::kMmap2), kFormat),
      EncodeMmap(SampleMmap(MmapFormat::kMmap2BuildId), kFormat),
      EncodeMmap(SampleMmap(MmapFormat::kMmap3), kFormat),
      EncodeComm(c, kFormat),
      EncodeTask(t, kFormat),
      EncodeLost(l, kFormat),
      EncodeSample(s, chain, kFormat),
  };
  for (const auto& full : records) {
    ASSERT_EQ(StatusOf(full), DecodeStatus::kOk);
    for (size_t cut = 0; cut < full.size(); cut += 4) {
      // The span ends early but the header still claims the full size.
      std::vector<uint8_t> partial(full.begin(), full.begin() + cut);
      EXPECT_NE(StatusOf(partial), DecodeStatus::kOk) << "cut at " << cut;
      // The header agrees with the short span: fields run past the end.
      if (cut >= sizeof(perf_event_header)) {
        SetSize(partial, static_cast<uint16_t>(cut));
        EXPECT_NE(StatusOf(partial), DecodeStatus::kOk) << "consistent cut at " << cut;
      }
    }
  }
}

TEST(RecordTest, OversizedAndUndersizedHeadersAreRejected) {
  auto bytes = EncodeMmap(SampleMmap(MmapFormat::kMmap2), kFormat);
  auto bigger = bytes;
  bigger.resize(bytes.size() + 8, 0);  // span larger than header.size
  EXPECT_EQ(StatusOf(bigger), DecodeStatus::kBadSize);
  auto tiny = bytes;
  SetSize(tiny, 4);  // smaller than a header
  EXPECT_EQ(StatusOf(tiny), DecodeStatus::kBadSize);
  auto claims_more = bytes;
  SetSize(claims_more, static_cast<uint16_t>(bytes.size() + 64));
  EXPECT_EQ(StatusOf(claims_more), DecodeStatus::kTruncated);
}

TEST(RecordTest, PerfsUnalignedBuildIdRecordIsIgnoredNotBad) {
  // perf inject -b writes PERF_RECORD_HEADER_BUILD_ID (67) records of 8 +
  // 4 + 24 bytes and a name padded to 64: 100 or 164 bytes, not u64
  // aligned.  A record perf writes is not a framing error: the report of
  // an injected file said "bad records: 5" for its five.
  std::vector<uint8_t> bytes(100, 0);
  perf_event_header h{};
  h.type = 67;
  h.size = 100;
  std::memcpy(bytes.data(), &h, sizeof(h));
  Record d;
  EXPECT_EQ(DecodeRecord(bytes, kFormat, &d), DecodeStatus::kIgnored);
  SampleRecord s;
  EXPECT_EQ(DecodeSampleRecord(bytes, kFormat, &s), DecodeStatus::kIgnored);
  // A kernel record so framed is still bad.
  h.type = PERF_RECORD_COMM;
  std::memcpy(bytes.data(), &h, sizeof(h));
  EXPECT_EQ(DecodeRecord(bytes, kFormat, &d), DecodeStatus::kBadSize);
}

TEST(RecordTest, UnterminatedFilenameIsMalformed) {
  const SampleFormat no_trailer{kTypeNoCallchain, 0, false};
  auto bytes = EncodeMmap(SampleMmap(MmapFormat::kMmap2), no_trailer);
  // Overwrite the filename and its padding with non-NUL bytes.
  for (size_t i = sizeof(perf_event_header) + 64; i < bytes.size(); ++i) bytes[i] = 'A';
  EXPECT_EQ(StatusOf(bytes, no_trailer), DecodeStatus::kMalformed);
}

TEST(RecordTest, CallchainLongerThanRecordIsTruncated) {
  SampleRecord s;
  std::vector<uint64_t> chain = {1, 2};
  auto bytes = EncodeSample(s, chain, kFormat);
  uint64_t nr = 1000;
  // nr sits right after ip, pid/tid, time, cpu, period.
  std::memcpy(bytes.data() + sizeof(perf_event_header) + 40, &nr, 8);
  EXPECT_EQ(StatusOf(bytes), DecodeStatus::kTruncated);
}

TEST(RecordTest, UnknownTypesAreIgnoredNotErrors) {
  std::vector<uint8_t> bytes(16, 0);
  perf_event_header h{PERF_RECORD_THROTTLE, 0, 16};
  std::memcpy(bytes.data(), &h, sizeof(h));
  EXPECT_EQ(StatusOf(bytes), DecodeStatus::kIgnored);
  EXPECT_EQ(StatusOf(EncodeFinishedRound()), DecodeStatus::kIgnored);
  EXPECT_FALSE(RecordTime(EncodeFinishedRound(), kFormat).has_value());
}

// Every combination of the sample_type bits a layout places (with each
// read_format the decoder knows, with and without sample_id_all): a sample
// and a COMM record are encoded, each field is checked in the bytes at the
// offset this test computes on its own, by the order the kernel's
// perf_output_sample() and perf_event__output_id_sample() write them in,
// and the decoder and RecordTime() must give every value back.
TEST(RecordTest, SampleLayoutPlacesEveryFieldWhereTheKernelWritesIt) {
  const uint64_t fixed[] = {PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP,     PERF_SAMPLE_TID,
                            PERF_SAMPLE_TIME,       PERF_SAMPLE_ADDR,   PERF_SAMPLE_ID,
                            PERF_SAMPLE_STREAM_ID,  PERF_SAMPLE_CPU,    PERF_SAMPLE_PERIOD};
  const uint64_t trailer_order[] = {PERF_SAMPLE_TID,       PERF_SAMPLE_TIME, PERF_SAMPLE_ID,
                                    PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_CPU,
                                    PERF_SAMPLE_IDENTIFIER};
  const uint64_t read_formats[] = {0, PERF_FORMAT_ID | PERF_FORMAT_TOTAL_TIME_ENABLED,
                                   PERF_FORMAT_GROUP | PERF_FORMAT_ID | PERF_FORMAT_LOST |
                                       PERF_FORMAT_TOTAL_TIME_RUNNING};
  size_t checked = 0;
  for (uint32_t bits = 0; bits < (1u << 11); ++bits) {
    uint64_t type = 0;
    for (size_t i = 0; i < 9; ++i)
      if (bits & (1u << i)) type |= fixed[i];
    const bool read = bits & (1u << 9), chain = bits & (1u << 10);
    if (read) type |= PERF_SAMPLE_READ;
    if (chain) type |= PERF_SAMPLE_CALLCHAIN;
    for (uint64_t rf : read_formats) {
      if (!read && rf != 0) continue;
      for (bool id_all : {false, true}) {
        const SampleFormat f{type, rf, id_all};
        SCOPED_TRACE(testing::Message() << "sample_type " << type << " read_format " << rf
                                        << " sample_id_all " << id_all);
        SampleRecord s;
        s.misc = PERF_RECORD_MISC_USER;
        s.id = 0x1d1d;
        s.ip = 0x401000;
        s.pid = 11;
        s.tid = 12;
        s.time = 0x7777;
        s.cpu = 3;
        s.period = 4000;
        const std::vector<uint64_t> ips = {static_cast<uint64_t>(PERF_CONTEXT_USER), 0x401000};
        const std::vector<uint8_t> bytes = EncodeSample(s, ips, f);
        // The oracle: 8 bytes per present fixed field, from the header on.
        auto word = [&](size_t off) {
          uint64_t v = 0;
          if (off + 8 <= bytes.size()) std::memcpy(&v, bytes.data() + off, 8);
          return v;
        };
        size_t off = 8;
        for (uint64_t bit : fixed) {
          if (!(type & bit)) continue;
          uint64_t want = 0;  // ADDR and STREAM_ID: written as 0
          if (bit == PERF_SAMPLE_IDENTIFIER || bit == PERF_SAMPLE_ID) want = s.id;
          if (bit == PERF_SAMPLE_IP) want = s.ip;
          if (bit == PERF_SAMPLE_TID) want = uint64_t{12} << 32 | 11;
          if (bit == PERF_SAMPLE_TIME) want = s.time;
          if (bit == PERF_SAMPLE_CPU) want = 3;
          if (bit == PERF_SAMPLE_PERIOD) want = s.period;
          EXPECT_EQ(word(off), want) << "sample field " << bit;
          off += 8;
        }
        if (read) {
          const size_t value = 8 + (rf & PERF_FORMAT_ID ? 8 : 0) + (rf & PERF_FORMAT_LOST ? 8 : 0);
          const size_t times = (rf & PERF_FORMAT_TOTAL_TIME_ENABLED ? 8 : 0) +
                               (rf & PERF_FORMAT_TOTAL_TIME_RUNNING ? 8 : 0);
          // The encoder writes a group of no counters, or one zero value.
          off += rf & PERF_FORMAT_GROUP ? 8 + times : value + times;
        }
        if (chain) {
          EXPECT_EQ(word(off), 2u);
          EXPECT_EQ(word(off + 16), 0x401000u);
          off += 24;
        }
        EXPECT_EQ(bytes.size(), off);
        SampleRecord d;
        ASSERT_EQ(DecodeSampleRecord(bytes, f, &d), DecodeStatus::kOk);
        EXPECT_EQ(d.ip, type & PERF_SAMPLE_IP ? s.ip : 0);
        EXPECT_EQ(d.tid, type & PERF_SAMPLE_TID ? s.tid : 0);
        EXPECT_EQ(d.pid, type & PERF_SAMPLE_TID ? s.pid : 0);
        EXPECT_EQ(d.time, type & PERF_SAMPLE_TIME ? s.time : 0);
        EXPECT_EQ(d.id, type & (PERF_SAMPLE_ID | PERF_SAMPLE_IDENTIFIER) ? s.id : 0);
        EXPECT_EQ(d.cpu, type & PERF_SAMPLE_CPU ? s.cpu : 0);
        EXPECT_EQ(d.period, type & PERF_SAMPLE_PERIOD ? s.period : 1);
        ASSERT_EQ(d.callchain.size(), chain ? 2u : 0u);
        if (chain) {
          EXPECT_EQ(d.callchain[1], 0x401000u);
        }
        EXPECT_EQ(RecordTime(bytes, f),
                  type & PERF_SAMPLE_TIME ? std::optional<uint64_t>(s.time) : std::nullopt);
        // One byte short of the fixed part, or of the chain, is truncated.
        if (bytes.size() > 8) {
          EXPECT_NE(DecodeSampleRecord(Bytes(bytes.data(), bytes.size() - 8), SampleLayout(f), &d),
                    DecodeStatus::kOk);
        }

        // The trailer of another record, in its own order, at the end.
        CommRecord c;
        c.pid = c.tid = 5;
        c.comm = "x";
        c.sample_id = Sid(11, 0x9999, 3);
        c.sample_id.tid = 12;
        c.sample_id.id = 0x2e2e;
        const std::vector<uint8_t> comm = EncodeComm(c, f);
        size_t toff = comm.size() - SampleIdSize(f);
        size_t n = 0;
        auto cword = [&](size_t o) {
          uint64_t v = 0;
          std::memcpy(&v, comm.data() + o, 8);
          return v;
        };
        for (uint64_t bit : trailer_order) {
          if (!id_all || !(type & bit)) continue;
          uint64_t want = 0;
          if (bit == PERF_SAMPLE_TID) want = uint64_t{12} << 32 | 11;
          if (bit == PERF_SAMPLE_TIME) want = 0x9999;
          if (bit == PERF_SAMPLE_ID || bit == PERF_SAMPLE_IDENTIFIER) want = 0x2e2e;
          if (bit == PERF_SAMPLE_CPU) want = 3;
          EXPECT_EQ(cword(toff), want) << "trailer field " << bit;
          toff += 8;
          ++n;
        }
        EXPECT_EQ(toff, comm.size());
        EXPECT_EQ(SampleIdSize(f), n * 8);
        const CommRecord dc = DecodeAs<CommRecord>(comm, f);
        EXPECT_EQ(dc.comm, "x");
        EXPECT_EQ(dc.sample_id.has_time, id_all && (type & PERF_SAMPLE_TIME));
        EXPECT_EQ(dc.sample_id.time, dc.sample_id.has_time ? 0x9999u : 0u);
        EXPECT_EQ(dc.sample_id.tid, dc.sample_id.has_tid ? 12u : 0u);
        EXPECT_EQ(dc.sample_id.id, dc.sample_id.has_id ? 0x2e2eu : 0u);
        EXPECT_EQ(dc.sample_id.cpu, dc.sample_id.has_cpu ? 3u : 0u);
        EXPECT_EQ(RecordTime(comm, f), id_all && (type & PERF_SAMPLE_TIME)
                                           ? std::optional<uint64_t>(0x9999)
                                           : std::nullopt);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, (1u << 10) * 2 + (1u << 10) * 3 * 2);  // without READ, with it
}

TEST(RecordTest, SampleIdSizeFollowsSampleType) {
  EXPECT_EQ(SampleIdSize(kFormat), 24u);  // TID, TIME, CPU
  EXPECT_EQ(SampleIdSize({kTypeNoCallchain | PERF_SAMPLE_IDENTIFIER, 0, true}), 32u);
  EXPECT_EQ(SampleIdSize({kTypeNoCallchain, 0, false}), 0u);
}

}  // namespace
}  // namespace mmap3

namespace mmap3 {
namespace {

TEST(WithBuildIdTest, Mmap2InodeRecordBecomesTheBuildIdVariant) {
  auto in = EncodeMmap(SampleMmap(MmapFormat::kMmap2), kFormat);
  BuildId id = *BuildId::FromHex("abcdefabcdefabcdefabcdefabcdefabcdefabcd");
  auto out = WithBuildId(DecodeAs<MmapRecord>(in), id, kFormat);
  EXPECT_EQ(out.size(), in.size());
  MmapRecord m = DecodeAs<MmapRecord>(out);
  EXPECT_EQ(m.format, MmapFormat::kMmap2BuildId);
  EXPECT_EQ(m.build_id, id);
  EXPECT_EQ(m.start, 0x7f0000001000u);
  EXPECT_EQ(m.filename, "/usr/lib/libfoo.so");
  EXPECT_EQ(m.sample_id.time, 1000u);  // the trailer survives: ordering unchanged
}

TEST(WithBuildIdTest, Mmap3WithoutIdGetsItWithStatusFound) {
  const SampleFormat f{kTypeNoCallchain, 0, true};
  auto in = RawMmap3(PERF_MMAP3_BUILD_ID_UNAVAILABLE, 0, "/bin/x", f);
  BuildId id = *BuildId::FromHex("00112233445566778899aabbccddeeff");
  MmapRecord m = DecodeAs<MmapRecord>(WithBuildId(DecodeAs<MmapRecord>(in, f), id, f), f);
  EXPECT_EQ(m.format, MmapFormat::kMmap3);
  EXPECT_EQ(m.build_id, id);
  EXPECT_EQ(m.build_id_status, PERF_MMAP3_BUILD_ID_FOUND);
  EXPECT_EQ(m.ino, 99u);  // the inode identity is kept
}

}  // namespace
}  // namespace mmap3

namespace mmap3 {
namespace {

TEST(RecordTest, ZeroedMmap3NeverClaimsABuildId) {
  // The ABI makes status 0 "unavailable", so a zero-filled record (or one
  // from a kernel that never set the field) cannot pass for FOUND.
  const SampleFormat f{kTypeNoCallchain, 0, true};
  MmapRecord m = DecodeAs<MmapRecord>(RawMmap3(0, 0, "/z", f), f);
  EXPECT_TRUE(m.build_id.empty());
  EXPECT_EQ(m.build_id_status, PERF_MMAP3_BUILD_ID_UNAVAILABLE);
  EXPECT_EQ(StatusOf(RawMmap3(0, 20, "/z", f), f), DecodeStatus::kMalformed);
}

TEST(RecordTest, Mmap3StatusNewerThanThisHeaderIsKeptWithoutId) {
  const SampleFormat f{kTypeNoCallchain, 0, true};
  MmapRecord m = DecodeAs<MmapRecord>(RawMmap3(PERF_MMAP3_BUILD_ID_STATUS_MAX + 1, 0, "/n", f), f);
  EXPECT_TRUE(m.build_id.empty());
  EXPECT_EQ(m.build_id_status, PERF_MMAP3_BUILD_ID_STATUS_MAX + 1);
}

}  // namespace
}  // namespace mmap3
