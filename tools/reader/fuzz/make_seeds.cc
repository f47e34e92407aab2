// Writes the synthetic part of the fuzzers' seed corpus (make_corpus.sh adds
// real captures and ELF files):
//   OUT/perf_data/synthetic.data  a capture as `record -o` writes it in MMAP3
//       mode, with every record type the reader models, a build-id table and
//       our metadata, whose mappings name LIB with its real build-id so
//       reports reach the symbolizer
//   OUT/records/*  each record kind under several sample formats, in the
//       input layout of FuzzRecords, and one stream of several records
// Usage: mmap3_fuzz_seeds OUT LIB
#include <linux/perf_event.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "elf_file.h"
#include "fuzz_targets.h"
#include "linux/perf_event_mmap3.h"
#include "perf_data.h"
#include "record.h"
#include "record_writer.h"

namespace mmap3 {
namespace {

constexpr uint64_t kIdAll = PERF_SAMPLE_IDENTIFIER;

void Write(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::vector<uint8_t> RecordsInput(const SampleFormat& f, uint8_t ring_start,
                                  const std::vector<uint8_t>& records) {
  std::vector<uint8_t> out(fuzz::kRecordsPrefix, 0);
  std::memcpy(out.data(), &f.sample_type, 8);
  std::memcpy(out.data() + 8, &f.read_format, 8);
  out[16] = f.sample_id_all ? 1 : 0;
  out[17] = ring_start;
  out.insert(out.end(), records.begin(), records.end());
  return out;
}

int WriteRecordSeeds(const std::filesystem::path& dir) {
  const std::vector<SampleFormat> formats = {
      {PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_PERIOD, 0, true},
      {kIdAll | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_PERIOD |
           PERF_SAMPLE_CALLCHAIN,
       0, true},
      {kIdAll | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_CPU, 0,
       true},
      {PERF_SAMPLE_IP | PERF_SAMPLE_CALLCHAIN, 0, false},
  };
  SampleId sid;
  sid.pid = sid.tid = 42;
  sid.time = 1000;
  sid.id = 7;
  sid.cpu = 3;
  int n = 0;
  for (size_t fi = 0; fi < formats.size(); ++fi) {
    const SampleFormat& f = formats[fi];
    std::vector<std::pair<std::string, std::vector<uint8_t>>> recs;
    for (MmapFormat format :
         {MmapFormat::kMmap, MmapFormat::kMmap2, MmapFormat::kMmap2BuildId, MmapFormat::kMmap3}) {
      MmapRecord m;
      m.format = format;
      m.pid = m.tid = 42;
      m.start = 0x7f0000001000;
      m.len = 0x5000;
      m.pgoff = 0x1000;
      m.ino = 123456;
      m.filename = "/usr/lib/libfoo.so.1";
      m.sample_id = sid;
      if (format == MmapFormat::kMmap2BuildId || format == MmapFormat::kMmap3) {
        const uint8_t id[20] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
        m.build_id = BuildId(id, sizeof(id));
        m.build_id_status = PERF_MMAP3_BUILD_ID_FOUND;
      }
      recs.emplace_back(fmt::format("mmap{}", static_cast<int>(format)), EncodeMmap(m, f));
    }
    CommRecord c;
    c.pid = c.tid = 42;
    c.exec = true;
    c.comm = "workload";
    c.sample_id = sid;
    recs.emplace_back("comm", EncodeComm(c, f));
    recs.emplace_back("fork", EncodeTask({false, 43, 42, 43, 42, 1001, sid}, f));
    recs.emplace_back("exit", EncodeTask({true, 43, 42, 43, 42, 1002, sid}, f));
    recs.emplace_back("lost", EncodeLost({false, 7, 3, sid}, f));
    recs.emplace_back("lost_samples", EncodeLost({true, 0, 2, sid}, f));
    SampleRecord s;
    s.misc = PERF_RECORD_MISC_USER;
    s.ip = 0x7f0000001234;
    s.pid = s.tid = 42;
    s.time = 1003;
    s.id = 7;
    s.cpu = 1;
    s.period = 1000;
    const std::vector<uint64_t> chain = {static_cast<uint64_t>(PERF_CONTEXT_USER), 0x7f0000001234,
                                         0x7f0000002345};
    recs.emplace_back("sample", EncodeSample(s, chain, f));
    recs.emplace_back("finished_round", EncodeFinishedRound());
    std::vector<uint8_t> stream;
    for (const auto& [name, bytes] : recs) {
      Write(dir / fmt::format("f{}-{}", fi, name), RecordsInput(f, 0, bytes));
      stream.insert(stream.end(), bytes.begin(), bytes.end());
      ++n;
    }
    // Starting near the end of the ring, so a record straddles it.
    Write(dir / fmt::format("f{}-stream", fi), RecordsInput(f, 250, stream));
    ++n;
  }
  return n;
}

void WritePerfData(const std::filesystem::path& path, const std::string& lib) {
  auto elf = ElfFile::Open(lib);
  if (!elf.ok()) throw std::runtime_error(elf.status().ToString());
  const BuildId id = elf->build_id();
  // File offsets of a few functions, as samples would hit them.
  std::vector<uint64_t> offsets;
  for (const ElfSymbol& sym : elf->ReadSymbols()) {
    for (const LoadSegment& seg : elf->loads()) {
      if (seg.executable && sym.addr >= seg.vaddr && sym.addr - seg.vaddr < seg.filesz)
        offsets.push_back(sym.addr - seg.vaddr + seg.offset);
    }
    if (offsets.size() == 3) break;
  }
  while (offsets.size() < 3) offsets.push_back(0x1000 + offsets.size() * 16);

  const SampleFormat fs{kIdAll | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                            PERF_SAMPLE_PERIOD | PERF_SAMPLE_CALLCHAIN,
                        0, true};
  const SampleFormat fd{kIdAll | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_STREAM_ID, 0,
                        true};
  constexpr uint64_t kSamplingId = 11, kSidebandId = 22;
  PerfFileAttr sampling;
  sampling.attr.size = sizeof(perf_event_attr);
  sampling.attr.sample_type = fs.sample_type;
  sampling.attr.sample_id_all = 1;
  sampling.ids = {kSamplingId};
  PerfFileAttr sideband;
  sideband.attr.size = sizeof(perf_event_attr);
  sideband.attr.sample_type = fd.sample_type;
  sideband.attr.sample_id_all = 1;
  sideband.attr.comm = sideband.attr.task = 1;
  perf_mmap3_attr_set(&sideband.attr);
  sideband.ids = {kSidebandId};

  auto sid = [&](uint32_t pid, uint64_t time) {
    SampleId s;
    s.pid = s.tid = pid;
    s.time = time;
    s.id = kSidebandId;
    return s;
  };
  auto mmap = [&](MmapFormat format, uint32_t pid, uint64_t start, const std::string& file,
                  bool with_id, uint8_t status, uint64_t time) {
    MmapRecord m;
    m.format = format;
    m.misc = PERF_RECORD_MISC_USER;
    m.pid = m.tid = pid;
    m.start = start;
    m.len = 0x100000;
    m.ino = 4242;
    if (with_id) m.build_id = id;
    m.build_id_status = status;
    m.filename = file;
    m.sample_id = sid(pid, time);
    return EncodeMmap(m, fd);
  };
  auto sample = [&](uint32_t pid, uint64_t ip, std::vector<uint64_t> chain, uint64_t time,
                    uint16_t misc = PERF_RECORD_MISC_USER) {
    SampleRecord s;
    s.misc = misc;
    s.id = kSamplingId;
    s.pid = s.tid = pid;
    s.ip = ip;
    s.time = time;
    s.period = 1000;
    return EncodeSample(s, chain, fs);
  };
  const uint64_t a = 0x20000000, b = 0x30000000;
  const uint64_t user = static_cast<uint64_t>(PERF_CONTEXT_USER);
  CommRecord comm;
  comm.pid = comm.tid = 9;
  comm.comm = "seed";
  comm.exec = true;
  comm.sample_id = sid(9, 1);
  const std::vector<std::vector<uint8_t>> records = {
      EncodeComm(comm, fd),
      mmap(MmapFormat::kMmap3, 9, a, lib, true, PERF_MMAP3_BUILD_ID_FOUND, 2),
      mmap(MmapFormat::kMmap, 9, 0x50000000, "/data/blob", false, kNoBuildIdStatus, 3),
      sample(9, a + offsets[0], {user, a + offsets[0], a + offsets[1] + 1}, 4),
      EncodeTask({false, 10, 9, 10, 9, 5, sid(10, 5)}, fd),
      mmap(MmapFormat::kMmap2BuildId, 10, b, lib, true, kNoBuildIdStatus, 6),
      EncodeFinishedRound(),
      sample(10, b + offsets[1], {user, b + offsets[1], b + offsets[2] + 1}, 8),
      sample(9, 0xffffffff81000000, {}, 9, PERF_RECORD_MISC_KERNEL),
      EncodeLost({false, kSamplingId, 3, sid(9, 10)}, fd),
      EncodeLost({true, 0, 2, sid(9, 10)}, fd),
      mmap(MmapFormat::kMmap2, 9, 0x40000000, "/lib/other.so", false, kNoBuildIdStatus, 11),
      sample(9, a + offsets[2], {}, 12),
      EncodeTask({true, 10, 9, 10, 9, 13, sid(10, 13)}, fd),
      mmap(MmapFormat::kMmap3, 9, 0x60000000, "/data/blob2", false, PERF_MMAP3_BUILD_ID_NO_NOTE,
           14),
      EncodeFinishedRound(),
      sample(9, a + offsets[0], {user, a + offsets[0]}, 15),
  };
  auto w = PerfDataWriter::Create(path, {sampling, sideband});
  if (!w.ok()) throw std::runtime_error(w.status().ToString());
  for (const auto& r : records) {
    if (Status s = w->Write(r); !s.ok()) throw std::runtime_error(s.ToString());
  }
  const uint8_t kernel_id[20] = {0x22};
  const std::vector<BuildIdEntry> table = {
      {-1, PERF_RECORD_MISC_USER, id, lib},
      {-1, PERF_RECORD_MISC_KERNEL, BuildId(kernel_id, sizeof(kernel_id)), "[kernel.kallsyms]"}};
  const std::string meta = fmt::format(
      R"({{"tool":"mmap3-reader","mode":"mmap3","mode_reason":"seed","event_lost":0,)"
      R"("bad_size":0,"overrides":[{{"pid":9,"start":{},"build_id":"{}","source":"map_files"}}],)"
      R"("startup":{{"processes":1,"seconds":0.5,"records_drained":2}}}})",
      a, id.Hex());
  if (Status s = w->Finish(table, meta); !s.ok()) throw std::runtime_error(s.ToString());
}

}  // namespace
}  // namespace mmap3

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s OUT LIB\n", argv[0]);
    return 2;
  }
  try {
    const std::filesystem::path out = argv[1];
    std::filesystem::create_directories(out / "perf_data");
    std::filesystem::create_directories(out / "records");
    mmap3::WritePerfData(out / "perf_data" / "synthetic.data", argv[2]);
    const int n = mmap3::WriteRecordSeeds(out / "records");
    std::printf("mmap3_fuzz_seeds: 1 perf.data and %d record inputs in %s\n", n, argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mmap3_fuzz_seeds: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
