#include "fuzz_targets.h"

#include <fcntl.h>
#include <linux/perf_event.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "elf_file.h"
#include "flamegraph.h"
#include "perf_data.h"
#include "pprof.h"
#include "record.h"
#include "report.h"
#include "ring_buffer.h"

namespace mmap3::fuzz {
namespace {

// A broken promise: say which, then crash so the fuzzer keeps the input.
[[noreturn]] void Broken(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "\n*** fuzz: %s%s%s\n", what, detail.empty() ? "" : ": ", detail.c_str());
  std::abort();
}

#define FUZZ_CHECK(cond, ...) \
  do {                        \
    if (!(cond)) Broken("check failed: " #cond, ##__VA_ARGS__); \
  } while (0)

// Exceptions are bugs too (the reader reports errors as Status).
template <typename Fn>
void NoThrow(const char* what, Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    Broken(what, std::string("threw ") + e.what());
  } catch (...) {
    Broken(what, "threw a non-exception");
  }
}

// One private directory per process, removed at exit.
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/mmap3-fuzz.XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) Broken("mkdtemp", pattern);
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string File(const char* name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

const ScratchDir& Scratch() {
  static ScratchDir dir;
  return dir;
}

void WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) Broken("open for writing", path);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) Broken("write", path);
    done += static_cast<size_t>(n);
  }
  close(fd);
}

// Bytes in a heap block of exactly their size, so the sanitizers see a read
// one past the end.
std::unique_ptr<uint8_t[]> ExactCopy(const uint8_t* data, size_t size) {
  auto copy = std::make_unique<uint8_t[]>(size == 0 ? 1 : size);
  if (size > 0) std::memcpy(copy.get(), data, size);
  return copy;
}

// ---------------------------------------------------------------------------
// Records.

void CheckDecode(Bytes bytes, const SampleFormat& f) {
  Record r = CommRecord{};  // must be reset, not left over, on failure
  const DecodeStatus status = DecodeRecord(bytes, f, &r);
  FUZZ_CHECK(std::strcmp(DecodeStatusName(status), "?") != 0);
  perf_event_header h{};
  const bool has_header = ReadHeader(bytes, &h);
  FUZZ_CHECK(has_header == (bytes.size() >= sizeof(h)));
  if (status != DecodeStatus::kOk) {
    FUZZ_CHECK(std::holds_alternative<std::monostate>(r), DecodeStatusName(status));
  } else {
    FUZZ_CHECK(has_header);
    FUZZ_CHECK(h.size == bytes.size());
    FUZZ_CHECK(!std::holds_alternative<std::monostate>(r));
    auto inside = [&](std::string_view s) {
      // Views point into the record, not past it.
      const auto* b = reinterpret_cast<const char*>(bytes.data());
      FUZZ_CHECK(s.empty() || (s.data() >= b && s.data() + s.size() <= b + bytes.size()));
    };
    if (const auto* m = std::get_if<MmapRecord>(&r)) {
      inside(m->filename);
      FUZZ_CHECK(m->build_id.size() <= BuildId::kMaxSize);
    } else if (const auto* c = std::get_if<CommRecord>(&r)) {
      inside(c->comm);
    } else if (const auto* s = std::get_if<SampleRecord>(&r)) {
      // Reading every entry is what the profile does; ASan checks it.
      uint64_t sum = 0;
      for (size_t i = 0; i < s->callchain.size(); ++i) sum += s->callchain[i];
      (void)sum;
      FUZZ_CHECK(s->callchain.size() * 8 <= bytes.size());
    }
  }
  // The hot path agrees with the general one on samples.
  SampleRecord s;
  const DecodeStatus sample_status = DecodeSampleRecord(bytes, f, &s);
  if (has_header && h.type == PERF_RECORD_SAMPLE) {
    FUZZ_CHECK(sample_status == status, std::string(DecodeStatusName(sample_status)) + " vs " +
                                            DecodeStatusName(status));
    if (status == DecodeStatus::kOk) {
      const auto& g = std::get<SampleRecord>(r);
      FUZZ_CHECK(g.ip == s.ip && g.pid == s.pid && g.tid == s.tid && g.time == s.time &&
                 g.period == s.period && g.callchain.size() == s.callchain.size());
    }
  }
  (void)RecordTime(bytes, f);
  (void)SampleIdSize(f);
}

constexpr size_t kRingPage = 4096;
constexpr size_t kRingData = 4096;  // a power of two, as the kernel's

void DrainRing(const uint8_t* bytes, size_t n, size_t start, const SampleFormat& f) {
  n = std::min(n, kRingData);
  std::vector<uint64_t> mem((kRingPage + kRingData) / 8, 0);
  auto* meta = reinterpret_cast<perf_event_mmap_page*>(mem.data());
  auto* ring = reinterpret_cast<uint8_t*>(mem.data()) + kRingPage;
  meta->data_offset = kRingPage;
  meta->data_size = kRingData;
  // The kernel only ever writes whole records at 8-byte aligned positions.
  const uint64_t tail = (start * 16) % kRingData + kRingData;  // head and tail grow forever
  for (size_t i = 0; i < n; ++i) ring[(tail + i) % kRingData] = bytes[i];
  meta->data_tail = tail;
  meta->data_head = tail + n;
  RingBuffer rb(mem.data(), kRingPage, kRingData);
  uint64_t framed = 0;
  rb.Drain([&](std::span<const uint8_t> rec) {
    FUZZ_CHECK(rec.size() >= sizeof(perf_event_header) && rec.size() % 8 == 0);
    const auto copy = ExactCopy(rec.data(), rec.size());
    CheckDecode(Bytes(copy.get(), rec.size()), f);
    framed += rec.size();
  });
  // Every byte is either a record or dropped after a bad size, and the
  // kernel gets all of its space back.
  FUZZ_CHECK(framed + rb.stats().dropped_bytes == n,
             std::to_string(framed) + " + " + std::to_string(rb.stats().dropped_bytes) +
                 " != " + std::to_string(n));
  FUZZ_CHECK(meta->data_tail == meta->data_head);
  FUZZ_CHECK(rb.Available() == 0);
}

// ---------------------------------------------------------------------------
// perf.data.

void CheckModel(const ReportModel& m, uint64_t file_size, bool callchains) {
  uint64_t rows = 0;
  for (const ReportRow& r : m.rows) {
    FUZZ_CHECK(r.samples > 0);
    FUZZ_CHECK(!r.symbol.empty());
    rows += r.samples;
  }
  FUZZ_CHECK(rows == m.samples, std::to_string(rows) + " != " + std::to_string(m.samples));
  FUZZ_CHECK(m.samples * sizeof(perf_event_header) <= file_size);
  uint64_t stacks = 0;
  for (const ReportStack& s : m.stacks) stacks += s.samples;
  FUZZ_CHECK(stacks == (callchains ? m.samples : 0));
  uint64_t by_source = 0;
  for (uint64_t n : m.mappings_by_source) by_source += n;
  FUZZ_CHECK(by_source == m.mappings.size());
  std::ostringstream out;
  WriteTextReport(m, out);
  WriteJsonReport(m, out);
  WriteFoldedReport(m, out);
  if (!callchains) return;
  // The pprof model (ReportOptions::sample_frames, asked for with
  // callchains): references in range, every sample once, and each stack's
  // leaf where the rows put it.
  std::map<std::tuple<std::string, std::string, std::string, std::string>, uint64_t> by_row,
      by_leaf;
  for (const ReportRow& r : m.rows) by_row[{r.comm, r.path, r.build_id.Hex(), r.symbol}] += r.samples;
  for (const FrameLocation& l : m.frame_locations) FUZZ_CHECK(l.mapping <= m.frame_mappings.size());
  uint64_t framed = 0;
  for (const FrameStack& st : m.frame_stacks) {
    FUZZ_CHECK(!st.locations.empty());
    for (uint32_t l : st.locations) FUZZ_CHECK(l < m.frame_locations.size());
    framed += st.samples;
    if (st.locations.empty() || st.locations[0] >= m.frame_locations.size()) continue;
    const FrameLocation& leaf = m.frame_locations[st.locations[0]];
    const FrameMapping* mp = leaf.mapping != 0 && leaf.mapping <= m.frame_mappings.size()
                                 ? &m.frame_mappings[leaf.mapping - 1]
                                 : nullptr;
    by_leaf[{st.comm, mp ? mp->path : "[unknown]", mp ? mp->build_id.Hex() : "", leaf.symbol}] +=
        st.samples;
  }
  FUZZ_CHECK(framed == m.samples, std::to_string(framed) + " != " + std::to_string(m.samples));
  FUZZ_CHECK(by_leaf == by_row, "pprof leaves differ from the report's rows");
  auto pprof = EncodePprof(m);
  FUZZ_CHECK(pprof.ok(), pprof.status().ToString());
  // The flame graph of the same model: every sample in the root, and
  // nothing but printable UTF-8 and newlines (names are file contents).
  const std::string svg = RenderFlamegraph(m);
  FUZZ_CHECK(svg.ends_with("</svg>\n"), "the flame graph is cut short");
  for (unsigned char c : svg) FUZZ_CHECK(c >= 0x20 || c == '\n', "a control byte in the flame graph");
  if (m.samples != 0) {
    FUZZ_CHECK(svg.find(fmt::format("<g data-depth=\"0\" data-samples=\"{}\">", m.samples)) !=
                   std::string::npos,
               "the flame graph's root does not hold every sample");
  }
}

// Returns whether the report succeeded.
bool Report(const std::string& path, uint64_t size, bool callchains) {
  bool ok = false;
  NoThrow("RunReport", [&] {
    ReportOptions o;
    o.input = path;
    o.callchains = callchains;
    o.sample_frames = callchains;
    o.kernel_notes = "";  // the same on every host, and no kallsyms per input
    auto model = RunReport(o);
    if (!model.ok()) {
      FUZZ_CHECK(model.status().ToString().find(path) != std::string::npos,
                 model.status().ToString());
      return;
    }
    CheckModel(*model, size, callchains);
    ok = true;
  });
  return ok;
}

}  // namespace

void FuzzRecords(const uint8_t* data, size_t size) {
  if (size < kRecordsPrefix) return;
  SampleFormat f;
  std::memcpy(&f.sample_type, data, 8);
  std::memcpy(&f.read_format, data + 8, 8);
  f.sample_id_all = (data[16] & 1) != 0;
  const size_t start = data[17];
  const uint8_t* rec = data + kRecordsPrefix;
  const size_t n = size - kRecordsPrefix;
  const auto copy = ExactCopy(rec, n);
  CheckDecode(Bytes(copy.get(), n), f);
  DrainRing(rec, n, start, f);
}

void FuzzPerfData(const uint8_t* data, size_t size) {
  const std::string input = Scratch().File("input.data");
  WriteFile(input, data, size);
  NoThrow("PerfDataReader", [&] {
    auto file = PerfDataReader::Open(input);
    if (!file.ok()) return;
    auto formats = FileFormats::Create(file->attrs());
    if (!formats.ok()) return;
    file->ForEachRecord([&](Bytes rec) {
      Record r;
      (void)DecodeRecord(rec, formats->For(rec), &r);
    });
  });
  const bool reported = Report(input, size, true);
  const bool reported_flat = Report(input, size, false);
  FUZZ_CHECK(reported == reported_flat);

  // inject: no output on failure, and an output that reports on success.
  const std::string output = Scratch().File("output.data");
  std::error_code ec;
  std::filesystem::remove(output, ec);
  NoThrow("RunInject", [&] {
    auto res = RunInject({input, output});
    if (!res.ok()) {
      FUZZ_CHECK(!std::filesystem::exists(output), res.status().ToString());
      return;
    }
    FUZZ_CHECK(reported, "inject converted a file that does not report");
    auto out = PerfDataReader::Open(output);
    FUZZ_CHECK(out.ok(), "inject's output does not read back: " + out.status().ToString());
    uint64_t mmap3 = 0;
    out->ForEachRecord([&](Bytes r) {
      perf_event_header h;
      FUZZ_CHECK(ReadHeader(r, &h));
      mmap3 += h.type == kRecordMmap3;
    });
    FUZZ_CHECK(mmap3 == 0, "inject left MMAP3 records");
    FUZZ_CHECK(Report(output, std::filesystem::file_size(output), false),
               "inject's output does not report");
  });
}

void FuzzElf(const uint8_t* data, size_t size) {
  const int fd = memfd_create("mmap3-fuzz-elf", MFD_CLOEXEC);
  if (fd < 0) Broken("memfd_create");
  size_t done = 0;
  while (done < size) {
    const ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) Broken("write to memfd");
    done += static_cast<size_t>(n);
  }
  NoThrow("ElfFile", [&] {
    auto fd_id = ReadBuildIdFromFd(fd, "input");
    if (fd_id.ok()) FUZZ_CHECK(fd_id->size() <= BuildId::kMaxSize);
    const int own = dup(fd);
    if (own < 0) Broken("dup");
    auto elf = ElfFile::FromFd(UniqueFd(own), "input");
    if (!elf.ok()) return;
    // The same libelf calls on the same bytes find the same id.
    FUZZ_CHECK(fd_id.ok(), fd_id.status().ToString());
    FUZZ_CHECK(*fd_id == elf->build_id(), fd_id->Hex() + " vs " + elf->build_id().Hex());
    FUZZ_CHECK(elf->build_id().size() <= BuildId::kMaxSize);
    std::vector<uint64_t> offsets = {0, size, size / 2};
    for (const LoadSegment& s : elf->loads())
      offsets.insert(offsets.end(), {s.offset, s.offset + s.filesz - 1, s.offset + s.filesz});
    for (uint64_t off : offsets) {
      // A vaddr only for an offset inside a PT_LOAD's file image.
      if (elf->FileOffsetToVaddr(off).has_value()) {
        bool inside = false;
        for (const LoadSegment& s : elf->loads())
          inside |= off >= s.offset && off - s.offset < s.filesz;
        FUZZ_CHECK(inside, std::to_string(off));
      }
    }
    const std::vector<ElfSymbol> symbols = elf->ReadSymbols();
    for (size_t i = 1; i < symbols.size(); ++i)
      FUZZ_CHECK(symbols[i - 1].addr < symbols[i].addr, "symbols not sorted and unique");
    (void)elf->HasSymtab();
  });
  close(fd);
}

}  // namespace mmap3::fuzz
