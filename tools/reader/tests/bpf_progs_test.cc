#include "bpf_progs.h"

#include <bpf/btf.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>

#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "fixtures.h"
#include "perf_data.h"
#include "profile.h"
#include "record_writer.h"
#include "symbolizer.h"

namespace mmap3 {
namespace {

using testing::TempDir;

const SampleFormat kFormat{PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU |
                               PERF_SAMPLE_PERIOD,
                           0, true};

constexpr BpfTag kMain = {0x64, 0x4f, 0x69, 0x79, 0xc2, 0xfa, 0xcc, 0xb2};
constexpr BpfTag kMainAlone = {0x9f, 0x37, 0xc7, 0x8d, 0x6b, 0x70, 0xeb, 0xdc};
constexpr BpfTag kStep = {0x31, 0x6b, 0x7a, 0x36, 0x25, 0xc5, 0xee, 0x7a};
constexpr BpfTag kOther = {0x46, 0xeb, 0xaf, 0x52, 0xe2, 0xf2, 0x07, 0x89};

// As the kernel writes it: in the context of the task loading or freeing
// the program (synthesized ones: the kernel's, -1).
std::vector<uint8_t> Ksym(uint64_t addr, uint32_t len, const std::string& name, bool unregister,
                          uint64_t time, uint32_t tid = 5) {
  KsymbolRecord k;
  k.addr = addr;
  k.len = len;
  k.ksym_type = PERF_RECORD_KSYMBOL_TYPE_BPF;
  k.unregister = unregister;
  k.name = name;
  k.sample_id.has_tid = k.sample_id.has_time = k.sample_id.has_cpu = true;
  k.sample_id.pid = k.sample_id.tid = tid;
  k.sample_id.time = time;
  return EncodeKsymbol(k, kFormat);
}

TEST(BpfTagTest, ReadFromTheKernelsNames) {
  EXPECT_EQ(BpfTagOfSymbol("bpf_prog_644f6979c2faccb2_e2e_bpf_a"), kMain);
  EXPECT_EQ(BpfTagOfSymbol("bpf_prog_644f6979c2faccb2"), kMain);  // a program without a name
  EXPECT_EQ(BpfTagHex(kMain), "644f6979c2faccb2");
  EXPECT_FALSE(BpfTagOfSymbol("bpf_prog_644f6979c2faccb"));       // 15 digits
  EXPECT_FALSE(BpfTagOfSymbol("bpf_prog_644f6979c2faccb2x"));     // no "_" after the tag
  EXPECT_FALSE(BpfTagOfSymbol("bpf_prog_644F6979c2faccb2_a"));    // the kernel writes lower case
  EXPECT_FALSE(BpfTagOfSymbol("bpf_trampoline_6442522727"));
  EXPECT_FALSE(BpfTagOfSymbol("bpf_dispatcher_xdp"));
}

// A program as the kernel describes one: a main function at 0x1000 (0x100
// bytes) and a subprogram at 0x2000 (0x40 bytes, named "e2e_step" in its
// BTF), lines at 0x1000 (prog.c:10), 0x1080 (prog.c:11) and 0x2010
// (step.c:20).  The arrays live in the object, as the kernel's output
// lives in the caller's buffers.
struct KernelInfo {
  bpf_prog_info info{};
  std::vector<uint64_t> ksyms = {0x1000, 0x2000};
  std::vector<uint32_t> lens = {0x100, 0x40};
  std::vector<uint8_t> tags;
  std::vector<bpf_func_info> funcs;
  std::vector<bpf_line_info> lines;
  std::vector<uint64_t> jited_lines = {0x1000, 0x1080, 0x2010};
  std::vector<uint8_t> insns = std::vector<uint8_t>(0x140, 0xcc);
  std::vector<uint8_t> btf_raw;
  uint32_t btf_id = 7;

  KernelInfo() {
    struct btf* btf = btf__new_empty();
    const int prog_c = btf__add_str(btf, "/src/prog.c");
    const int step_c = btf__add_str(btf, "/src/step.c");
    const int proto = btf__add_func_proto(btf, 0);
    const int main_fn = btf__add_func(btf, "e2e_main", BTF_FUNC_GLOBAL, proto);
    const int step_fn = btf__add_func(btf, "e2e_step", BTF_FUNC_STATIC, proto);
    __u32 size = 0;
    const auto* raw = static_cast<const uint8_t*>(btf__raw_data(btf, &size));
    btf_raw.assign(raw, raw + size);
    btf__free(btf);
    funcs = {{0, static_cast<uint32_t>(main_fn)}, {40, static_cast<uint32_t>(step_fn)}};
    lines = {{0, static_cast<uint32_t>(prog_c), 0, 10u << 10 | 3},
             {8, static_cast<uint32_t>(prog_c), 0, 11u << 10 | 5},
             {41, static_cast<uint32_t>(step_c), 0, 20u << 10 | 1}};
    tags.insert(tags.end(), kMainAlone.begin(), kMainAlone.end());
    tags.insert(tags.end(), kStep.begin(), kStep.end());

    info.id = 42;
    std::memcpy(info.tag, kMain.data(), 8);
    std::strcpy(info.name, "e2e_bpf_a");
    info.btf_id = btf_id;
    info.jited_prog_len = static_cast<uint32_t>(insns.size());
    info.jited_prog_insns = Ptr(insns.data());
    info.nr_jited_ksyms = 2;
    info.jited_ksyms = Ptr(ksyms.data());
    info.nr_jited_func_lens = 2;
    info.jited_func_lens = Ptr(lens.data());
    info.nr_prog_tags = 2;
    info.prog_tags = Ptr(tags.data());
    info.nr_func_info = 2;
    info.func_info_rec_size = sizeof(bpf_func_info);
    info.func_info = Ptr(funcs.data());
    info.nr_line_info = 3;
    info.line_info_rec_size = sizeof(bpf_line_info);
    info.line_info = Ptr(lines.data());
    info.nr_jited_line_info = 3;
    info.jited_line_info_rec_size = 8;
    info.jited_line_info = Ptr(jited_lines.data());
  }
  static __u64 Ptr(const void* p) { return reinterpret_cast<uintptr_t>(p); }
};

BpfPrograms Programs(const KernelInfo& k) {
  auto p = BpfProgramFromInfo(&k.info, sizeof(k.info));
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  BpfPrograms progs;
  progs.AddBtf(k.btf_id, k.btf_raw);
  if (p.ok()) progs.Add(std::move(*p));
  return progs;
}

// What a lookup of every interesting address gives, as text.
std::string Lines(const BpfPrograms& progs) {
  std::string out;
  for (uint64_t addr : {0x0fffull, 0x1000ull, 0x107full, 0x1080ull, 0x10ffull, 0x1100ull, 0x2000ull,
                        0x200full, 0x2010ull, 0x203full, 0x2040ull}) {
    for (const BpfTag& tag : {kMain, kStep}) {
      const BpfProgram* p = progs.Find(tag, addr);
      if (p == nullptr) continue;
      auto l = progs.LineOf(*p, addr);
      out += fmt::format("{:#x}:{}:{} ", addr, BpfTagHex(tag).substr(0, 4),
                         l ? fmt::format("{}:{}", *l->file, l->line) : "-");
    }
  }
  return out;
}

TEST(BpfProgramsTest, FunctionsCarryTheTagsOfTheirKernelNames) {
  KernelInfo k;
  BpfPrograms progs = Programs(k);
  ASSERT_EQ(progs.programs().size(), 1u);
  const BpfProgram& p = progs.programs()[0];
  EXPECT_EQ(p.id, 42u);
  EXPECT_EQ(p.name, "e2e_bpf_a");
  ASSERT_EQ(p.functions.size(), 2u);
  // The main function is the program: the kernel names it with the
  // program's tag, not with prog_tags[0] (its instructions alone).
  EXPECT_EQ(p.functions[0].tag, kMain);
  EXPECT_EQ(p.functions[1].tag, kStep);
  EXPECT_EQ(progs.FunctionName(p, 0), "bpf_prog_644f6979c2faccb2_e2e_main");
  EXPECT_EQ(progs.FunctionName(p, 1), "bpf_prog_316b7a3625c5ee7a_e2e_step");
}

TEST(BpfProgramsTest, ALineIsServedOnlyInsideItsFunctionAndOnlyForItsTag) {
  KernelInfo k;
  // 0x0fff, 0x1100 and 0x2040 are outside both functions; 0x2000 is in
  // the subprogram before its first line (not prog.c:11, the main
  // function's last); the main tag never finds the subprogram's code.
  EXPECT_EQ(Lines(Programs(k)),
            "0x1000:644f:/src/prog.c:10 0x107f:644f:/src/prog.c:10 0x1080:644f:/src/prog.c:11 "
            "0x10ff:644f:/src/prog.c:11 0x2000:316b:- 0x200f:316b:- 0x2010:316b:/src/step.c:20 "
            "0x203f:316b:/src/step.c:20 ");
  EXPECT_EQ(Programs(k).Find(kOther, 0x1000), nullptr);
}

TEST(BpfProgramsTest, LineZeroIsNoLine) {
  // The compiler's "no line" (a prologue, spills): not file:0, and not the
  // line before it either.
  KernelInfo k;
  k.lines[1].line_col = 0;
  BpfPrograms progs = Programs(k);
  const BpfProgram& p = progs.programs()[0];
  EXPECT_TRUE(progs.LineOf(p, 0x107f));
  EXPECT_FALSE(progs.LineOf(p, 0x1080));
  EXPECT_FALSE(progs.LineOf(p, 0x10ff));
}

TEST(BpfProgramsTest, PerfsSectionsRoundTrip) {
  KernelInfo k;
  BpfPrograms progs = Programs(k);
  const std::vector<uint8_t> info = progs.ProgInfoFeature(), btf = progs.BtfFeature();
  // perf's layout: a count, then info_len, data_len, arrays, the struct
  // (array pointers as offsets into the data that follows) and the data.
  ASSERT_GE(info.size(), 4 + 16 + sizeof(bpf_prog_info));
  uint32_t count, info_len;
  std::memcpy(&count, info.data(), 4);
  std::memcpy(&info_len, info.data() + 4, 4);
  EXPECT_EQ(count, 1u);
  EXPECT_EQ(info_len, sizeof(bpf_prog_info));
  bpf_prog_info written;
  std::memcpy(&written, info.data() + 20, sizeof(written));
  EXPECT_EQ(written.jited_prog_insns, 0u);  // the first array, at offset 0
  EXPECT_LT(written.jited_ksyms, 0x1000u);  // an offset, not the caller's pointer
  EXPECT_EQ(written.xlated_prog_len, 0u);   // not kept

  uint64_t bad = 0;
  BpfPrograms back = BpfPrograms::FromFeatures(info, btf, &bad);
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(Lines(back), Lines(progs));
  ASSERT_EQ(back.programs().size(), 1u);
  EXPECT_EQ(back.programs()[0].perf_entry, progs.programs()[0].perf_entry);
  EXPECT_EQ(back.FunctionName(back.programs()[0], 1), "bpf_prog_316b7a3625c5ee7a_e2e_step");

  // Through a file, beside the other sections.
  TempDir dir;
  const std::string path = dir.File("bpf.data");
  {
    PerfFileAttr a;
    a.attr.size = sizeof(a.attr);
    a.attr.sample_type = kFormat.sample_type;
    auto w = PerfDataWriter::Create(path, {a});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Write(Ksym(0x1000, 0x100, "bpf_prog_644f6979c2faccb2", false, 1)).ok());
    ASSERT_TRUE(w->Finish({}, "{}", {{kFeatureBpfBtf, btf}, {kFeatureBpfProgInfo, info}}).ok());
  }
  auto r = PerfDataReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->HasFeature(kFeatureBpfProgInfo));
  EXPECT_EQ(std::vector<uint8_t>(r->feature(kFeatureBpfProgInfo).begin(),
                                 r->feature(kFeatureBpfProgInfo).end()),
            info);
  EXPECT_EQ(std::vector<uint8_t>(r->feature(kFeatureBpfBtf).begin(), r->feature(kFeatureBpfBtf).end()),
            btf);
  EXPECT_EQ(r->meta_json(), "{}");
}

TEST(BpfProgramsTest, MalformedSectionsDescribeNothing) {
  KernelInfo k;
  BpfPrograms progs = Programs(k);
  const std::vector<uint8_t> info = progs.ProgInfoFeature(), btf = progs.BtfFeature();
  uint64_t bad = 0;
  // An array beyond its entry's data block.
  std::vector<uint8_t> far = info;
  bpf_prog_info written;
  std::memcpy(&written, far.data() + 20, sizeof(written));
  written.jited_line_info = 1u << 20;
  std::memcpy(far.data() + 20, &written, sizeof(written));
  EXPECT_TRUE(BpfPrograms::FromFeatures(far, btf, &bad).programs().empty());
  EXPECT_EQ(bad, 1u);
  // An array the mask says is not there.
  std::vector<uint8_t> unmasked = info;
  uint64_t arrays;
  std::memcpy(&arrays, unmasked.data() + 12, 8);
  arrays &= ~(uint64_t{1} << 6);  // line_info
  std::memcpy(unmasked.data() + 12, &arrays, 8);
  bad = 0;
  EXPECT_TRUE(BpfPrograms::FromFeatures(unmasked, btf, &bad).programs().empty());
  EXPECT_EQ(bad, 1u);
  // Counts that promise more entries than there are; a cut BTF section.
  for (size_t cut : {size_t{5}, size_t{30}, info.size() - 1}) {
    bad = 0;
    EXPECT_TRUE(BpfPrograms::FromFeatures(Bytes(info.data(), cut), {}, &bad).programs().empty());
    EXPECT_EQ(bad, 1u) << cut;
  }
  bad = 0;
  BpfPrograms no_btf = BpfPrograms::FromFeatures(info, Bytes(btf.data(), btf.size() - 1), &bad);
  EXPECT_EQ(bad, 1u);
  // The program is still described; its lines cannot be named.
  ASSERT_EQ(no_btf.programs().size(), 1u);
  EXPECT_FALSE(no_btf.LineOf(no_btf.programs()[0], 0x1000));
  // A BTF that is not BTF names nothing either.
  BpfPrograms garbage;
  garbage.AddBtf(k.btf_id, std::vector<uint8_t>(64, 0x5a));
  auto p = BpfProgramFromInfo(&k.info, sizeof(k.info));
  ASSERT_TRUE(p.ok());
  garbage.Add(std::move(*p));
  EXPECT_FALSE(garbage.LineOf(garbage.programs()[0], 0x1000));
  EXPECT_EQ(garbage.FunctionName(garbage.programs()[0], 1), "bpf_prog_316b7a3625c5ee7a");
}

TEST(BpfProgramsTest, InconsistentKernelDescriptionsAreRefused) {
  KernelInfo k;
  k.info.nr_jited_func_lens = 1;
  EXPECT_FALSE(BpfProgramFromInfo(&k.info, sizeof(k.info)).ok());
  KernelInfo l;
  l.info.nr_jited_line_info = 2;
  EXPECT_FALSE(BpfProgramFromInfo(&l.info, sizeof(l.info)).ok());
}

TEST(BpfRecordTest, KsymbolAndBpfEventRoundTrip) {
  KsymbolRecord k;
  k.addr = 0xffffffffc0025b90;
  k.len = 166;
  k.ksym_type = PERF_RECORD_KSYMBOL_TYPE_BPF;
  k.unregister = true;
  k.name = "bpf_prog_644f6979c2faccb2_e2e_bpf_a";
  k.sample_id.has_tid = k.sample_id.has_time = k.sample_id.has_cpu = true;
  k.sample_id.time = 77;
  Record r;
  // (The decoded record's name points into the bytes: they must outlive it.)
  const std::vector<uint8_t> ksymbol = EncodeKsymbol(k, kFormat);
  ASSERT_EQ(DecodeRecord(ksymbol, kFormat, &r), DecodeStatus::kOk);
  const KsymbolRecord& kd = std::get<KsymbolRecord>(r);
  EXPECT_EQ(kd.addr, k.addr);
  EXPECT_EQ(kd.len, k.len);
  EXPECT_EQ(kd.ksym_type, k.ksym_type);
  EXPECT_TRUE(kd.unregister);
  EXPECT_EQ(kd.name, k.name);
  EXPECT_EQ(kd.sample_id.time, 77u);

  BpfEventRecord b;
  b.type = PERF_BPF_EVENT_PROG_LOAD;
  b.id = 118;
  std::memcpy(b.tag, kMain.data(), 8);
  std::vector<uint8_t> bytes = EncodeBpfEvent(b, kFormat);
  ASSERT_EQ(DecodeRecord(bytes, kFormat, &r), DecodeStatus::kOk);
  const BpfEventRecord& bd = std::get<BpfEventRecord>(r);
  EXPECT_EQ(bd.type, PERF_BPF_EVENT_PROG_LOAD);
  EXPECT_EQ(bd.id, 118u);
  EXPECT_EQ(std::memcmp(bd.tag, kMain.data(), 8), 0);
  // Cut short: refused, never read past the record.
  bytes.resize(16);
  reinterpret_cast<perf_event_header*>(bytes.data())->size = 16;
  EXPECT_NE(DecodeRecord(bytes, kFormat, &r), DecodeStatus::kOk);
  // A name without its terminating NUL.
  std::vector<uint8_t> ks = EncodeKsymbol(k, SampleFormat{});
  std::fill(ks.begin() + sizeof(perf_event_header) + 16, ks.end(), 'x');
  EXPECT_EQ(DecodeRecord(ks, SampleFormat{}, &r), DecodeStatus::kMalformed);
}

std::vector<uint8_t> KernelSample(uint64_t ip, uint64_t time) {
  SampleRecord s;
  s.misc = PERF_RECORD_MISC_KERNEL;
  s.pid = s.tid = 9;
  s.ip = ip;
  s.time = time;
  return EncodeSample(s, {}, kFormat);
}

std::vector<uint8_t> LoadEvent(uint32_t id, const BpfTag& tag, uint64_t time, uint32_t tid = 5) {
  BpfEventRecord b;
  b.type = PERF_BPF_EVENT_PROG_LOAD;
  b.id = id;
  std::memcpy(b.tag, tag.data(), 8);
  b.sample_id.has_tid = b.sample_id.has_time = b.sample_id.has_cpu = true;
  b.sample_id.pid = b.sample_id.tid = tid;
  b.sample_id.time = time;
  return EncodeBpfEvent(b, kFormat);
}

// `record` as the kernel serves it to a side-band event after others got
// it first (see SampleIdOffset()): longer by their trailers, the bytes
// after its own trailer the ring buffer's.  Here those bytes are an older
// record's trailer: a time and ids that look right.
std::vector<uint8_t> Oversized(std::vector<uint8_t> record, uint64_t stale_time) {
  SampleId stale;
  stale.has_tid = stale.has_time = stale.has_cpu = true;
  stale.pid = stale.tid = 1234;
  stale.time = stale_time;
  stale.cpu = 3;
  KsymbolRecord holder;  // only its trailer is taken
  holder.sample_id = stale;
  const std::vector<uint8_t> other = EncodeKsymbol(holder, kFormat);
  const size_t trailer = SampleIdSize(kFormat);
  record.insert(record.end(), other.end() - static_cast<ptrdiff_t>(trailer), other.end());
  reinterpret_cast<perf_event_header*>(record.data())->size = static_cast<uint16_t>(record.size());
  return record;
}

TEST(BpfRecordTest, RecordsLongerThanTheirContentsAreReadByTheirContents) {
  // Names that end a word early, exactly, and one byte into the next.
  for (const std::string name : {"bpf_prog_1", "bpf_prog_1234", "bpf_prog_12345",
                                 "bpf_prog_644f6979c2faccb2_e2e_bpf_a"}) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> exact = Ksym(0xffffffffc0001000, 64, name, false, 500, 7);
    for (size_t times = 1; times <= 2; ++times) {
      std::vector<uint8_t> bytes = exact;
      for (size_t i = 0; i < times; ++i) bytes = Oversized(bytes, 100);
      EXPECT_EQ(SideBandBodyEnd(bytes), exact.size() - SampleIdSize(kFormat));
      EXPECT_EQ(RecordTime(bytes, kFormat), 500u);
      Record r;
      ASSERT_EQ(DecodeRecord(bytes, kFormat, &r), DecodeStatus::kOk);
      const KsymbolRecord& k = std::get<KsymbolRecord>(r);
      EXPECT_EQ(k.name, name);
      EXPECT_EQ(k.addr, 0xffffffffc0001000u);
      EXPECT_EQ(k.sample_id.time, 500u);
      EXPECT_EQ(k.sample_id.pid, 7u);
      EXPECT_EQ(k.sample_id.cpu, 0u);
      EXPECT_EQ(k.excess, times * SampleIdSize(kFormat));
    }
    Record r;
    ASSERT_EQ(DecodeRecord(exact, kFormat, &r), DecodeStatus::kOk);
    EXPECT_EQ(std::get<KsymbolRecord>(r).excess, 0u);
  }
  const std::vector<uint8_t> load = LoadEvent(118, kMain, 600, 7);
  const std::vector<uint8_t> bytes = Oversized(load, 100);
  EXPECT_EQ(RecordTime(bytes, kFormat), 600u);
  Record r;
  ASSERT_EQ(DecodeRecord(bytes, kFormat, &r), DecodeStatus::kOk);
  const BpfEventRecord& b = std::get<BpfEventRecord>(r);
  EXPECT_EQ(b.id, 118u);
  EXPECT_EQ(b.sample_id.time, 600u);
  EXPECT_EQ(b.sample_id.pid, 7u);
  EXPECT_EQ(b.excess, SampleIdSize(kFormat));
  // TEXT_POKE (which the kernel grows alike): 5 old and 5 new bytes.
  std::vector<uint8_t> poke(32, 0);
  perf_event_header ph{PERF_RECORD_TEXT_POKE, PERF_RECORD_MISC_KERNEL, 0};
  const uint16_t lengths[2] = {5, 5};
  std::memcpy(poke.data() + 16, lengths, sizeof(lengths));
  std::memset(poke.data() + 20, 0x90, 10);
  const std::vector<uint8_t> tail = Ksym(0, 0, "", false, 800, 7);  // a trailer of time 800
  poke.insert(poke.end(), tail.end() - static_cast<ptrdiff_t>(SampleIdSize(kFormat)), tail.end());
  ph.size = static_cast<uint16_t>(poke.size());
  std::memcpy(poke.data(), &ph, sizeof(ph));
  EXPECT_EQ(RecordTime(poke, kFormat), 800u);
  const std::vector<uint8_t> longer_poke = Oversized(poke, 100);
  EXPECT_EQ(SideBandBodyEnd(longer_poke), 32u);
  EXPECT_EQ(RecordTime(longer_poke, kFormat), 800u);
  // Other records keep their trailer at their end.
  EXPECT_EQ(SideBandBodyEnd(KernelSample(0x1000, 5)), 0u);
}

// A description of program `id`: one function at `addr`, `len` bytes.
void Describe(BpfPrograms& progs, uint32_t id, const BpfTag& tag, const char* name, uint64_t addr,
              uint32_t len) {
  bpf_prog_info info{};
  info.id = id;
  std::memcpy(info.tag, tag.data(), 8);
  std::strcpy(info.name, name);
  info.nr_jited_ksyms = info.nr_jited_func_lens = 1;
  info.jited_ksyms = reinterpret_cast<uintptr_t>(&addr);
  info.jited_func_lens = reinterpret_cast<uintptr_t>(&len);
  auto prog = BpfProgramFromInfo(&info, sizeof(info));
  ASSERT_TRUE(prog.ok());
  progs.Add(std::move(*prog));
}

struct BpfReport {
  ReportModel model;
  std::map<std::string, uint64_t> by_symbol;  // every row, by symbol
  std::map<uint32_t, uint64_t> by_program;    // described programs' samples
};

BpfReport Report(Profile& p, const BpfPrograms& progs) {
  SymbolSearch search;
  search.kernel_notes = "/nonexistent";
  DsoStore store(search);
  Symbolizer sym(store);
  BpfReport r;
  r.model = p.BuildReport(sym, "t");
  p.DescribeBpfPrograms(progs, r.model);
  for (const ReportRow& row : r.model.rows) {
    r.by_symbol[row.symbol] += row.samples;
    if (row.source == BuildIdSource::kBpf) {
      EXPECT_EQ(row.build_id.Hex(), row.symbol.substr(9, 16));
      EXPECT_EQ(row.symbol_status, SymbolStatus::kFound);
    } else {
      EXPECT_NE(row.symbol_status, SymbolStatus::kFound) << row.symbol;
    }
  }
  for (const ReportBpfProgram& b : r.model.bpf_programs) r.by_program[b.id] = b.samples;
  return r;
}

TEST(BpfAttributionTest, AddressesReusedByTheNextProgramNeverNameTheOldOne) {
  // A at 0x1000, unloaded; for a while nothing is there; then B at the
  // same address.  Each sample goes to what was there when it was taken.
  const std::string a = "bpf_prog_644f6979c2faccb2_e2e_bpf_a";
  const std::string b = "bpf_prog_46ebaf52e2f20789_e2e_bpf_b";
  BpfPrograms progs;
  Describe(progs, 1, kMain, "e2e_bpf_a", 0x1000, 0x100);
  Describe(progs, 2, kOther, "e2e_bpf_b", 0x1000, 0x80);
  ProfileOptions o;
  o.bpf_programs = &progs;
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(Ksym(0x1000, 0x100, a, false, 1));
  p.Process(LoadEvent(1, kMain, 1));
  p.Process(KernelSample(0x1010, 2));
  p.Process(KernelSample(0x1010, 3));
  p.Process(Ksym(0x1000, 0x100, a, true, 4));
  p.Process(KernelSample(0x1010, 5));
  p.Process(Ksym(0x1000, 0x80, b, false, 6));
  p.Process(LoadEvent(2, kOther, 6));
  p.Process(KernelSample(0x1010, 7));
  p.Process(KernelSample(0x1090, 8));  // beyond B's 0x80 bytes: not A's either

  BpfReport r = Report(p, progs);
  EXPECT_EQ(r.by_symbol[a], 2u);
  EXPECT_EQ(r.by_symbol[b], 1u);
  uint64_t rest = 0;  // the sample between the two, the one past B's end
  for (const auto& [symbol, n] : r.by_symbol)
    if (symbol != a && symbol != b) rest += n;
  EXPECT_EQ(rest, 2u);
  EXPECT_EQ(r.by_program, (std::map<uint32_t, uint64_t>{{1, 2}, {2, 1}}));
}

TEST(BpfAttributionTest, TheSameProgramLoadedAgainIsEachLoadsOwn) {
  // One object loaded three times (a service restarting), and another
  // program with the same instructions (so the same tag) but another name
  // in between, all at the same address: each load's samples are its own,
  // whatever the tag and the address say.
  const std::string a = "bpf_prog_644f6979c2faccb2_e2e_bpf_a";
  const std::string other = "bpf_prog_644f6979c2faccb2_zzz_other";
  BpfPrograms progs;
  Describe(progs, 10, kMain, "e2e_bpf_a", 0x1000, 0x100);
  Describe(progs, 12, kMain, "zzz_other", 0x1000, 0x100);
  Describe(progs, 14, kMain, "e2e_bpf_a", 0x1000, 0x100);
  ProfileOptions o;
  o.bpf_programs = &progs;
  Profile p(o);
  p.SetFormat(kFormat);
  uint64_t t = 1;
  const std::vector<std::tuple<uint32_t, std::string, int>> loads = {
      {10, a, 3}, {12, other, 1}, {14, a, 5}};
  for (const auto& [id, name, samples] : loads) {
    p.Process(Ksym(0x1000, 0x100, name, false, t++));
    p.Process(LoadEvent(id, kMain, t++));
    for (int i = 0; i < samples; ++i) p.Process(KernelSample(0x1020, t++));
    p.Process(Ksym(0x1000, 0x100, name, true, t++));
  }
  BpfReport r = Report(p, progs);
  EXPECT_EQ(r.by_program, (std::map<uint32_t, uint64_t>{{10, 3}, {12, 1}, {14, 5}}));
  EXPECT_EQ(r.by_symbol[a], 8u);
  EXPECT_EQ(r.by_symbol[other], 1u);
}

TEST(BpfAttributionTest, AProgramNotDescribedIsCountedByItsLoadNotItsTag) {
  // Program 20 was read; 21, with the same tag, was gone before it could
  // be: its samples are not 20's, and 20's are not its.
  const std::string a = "bpf_prog_644f6979c2faccb2_e2e_bpf_a";
  const std::string step = "bpf_prog_316b7a3625c5ee7a_e2e_a_step";
  BpfPrograms progs;
  Describe(progs, 20, kMain, "e2e_bpf_a", 0x1000, 0x100);
  progs.NotRead({21, kMain, "BPF program 21 was unloaded before it could be read"});
  ProfileOptions o;
  o.bpf_programs = &progs;
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(Ksym(0x1000, 0x100, a, false, 1));
  p.Process(LoadEvent(20, kMain, 2));
  p.Process(KernelSample(0x1010, 3));
  p.Process(Ksym(0x1000, 0x100, a, true, 4));
  // 21: a main function and a subprogram (whose tag only its description
  // would give), loaded by task 6 while task 5 loads nothing.
  p.Process(Ksym(0x1000, 0x100, a, false, 5, 6));
  p.Process(Ksym(0x3000, 0x40, step, false, 6, 6));
  p.Process(LoadEvent(21, kMain, 7, 6));
  for (uint64_t t = 8; t < 12; ++t) p.Process(KernelSample(0x1010, t));
  p.Process(KernelSample(0x3010, 12));
  BpfReport r = Report(p, progs);
  EXPECT_EQ(r.by_program, (std::map<uint32_t, uint64_t>{{20, 1}}));
  ASSERT_EQ(r.model.bpf_not_read.size(), 1u);
  EXPECT_EQ(r.model.bpf_not_read[0].samples, 4u);
  EXPECT_EQ(r.model.bpf_samples_of_unknown_programs, 1u);  // the subprogram's
  EXPECT_EQ(r.by_symbol[step], 1u);
}

TEST(BpfAttributionTest, ScriptGivesTheOffsetInTheKernelsSymbol) {
  // One program loaded at two addresses, the same ip in both: the offset
  // is from where that load began.
  const std::string a = "bpf_prog_644f6979c2faccb2_e2e_bpf_a";
  ProfileOptions o;
  o.script = true;
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(Ksym(0x1000, 0x100, a, false, 1));
  p.Process(KernelSample(0x1010, 2));
  p.Process(Ksym(0x1000, 0x100, a, true, 3));
  p.Process(Ksym(0x0f80, 0x100, a, false, 4));
  p.Process(KernelSample(0x1010, 5));
  BpfReport r = Report(p, BpfPrograms{});
  ASSERT_EQ(r.model.script.size(), 2u);
  std::vector<uint64_t> offsets;
  for (const ScriptSample& sample : r.model.script) {
    const ScriptLocation& l = r.model.script_locations.at(sample.locations.at(0));
    EXPECT_EQ(l.symbol, a);
    offsets.push_back(l.symbol_offset);
  }
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0x10, 0x90}));
}

TEST(BpfAttributionTest, WithoutEveryUnloadNoRangeIsNamed) {
  // A per-task capture without the CPU-wide side-band event: an unload may
  // be missing, so the name of what was loaded is no proof of what ran.
  const std::string a = "bpf_prog_644f6979c2faccb2_e2e_bpf_a";
  ProfileOptions o;
  o.bpf_untracked = "a per-task capture follows them only with a CPU-wide side-band event";
  Profile p(o);
  p.SetFormat(kFormat);
  p.Process(Ksym(0x1000, 0x100, a, false, 1));
  p.Process(KernelSample(0x1010, 2));
  BpfReport r = Report(p, BpfPrograms{});
  EXPECT_EQ(r.by_symbol.count(a), 0u);
  EXPECT_EQ(r.model.bpf_untracked, o.bpf_untracked);
}

TEST(BpfProgramsTest, NamesOfFunctionsWithoutBtfAreTheKernels) {
  // A program of raw instructions: no BTF, no func_info.  The kernel names
  // its main function after the program, its subprograms "F".
  KernelInfo k;
  k.info.nr_func_info = 0;
  k.info.func_info = 0;
  k.info.btf_id = 0;
  k.info.nr_line_info = k.info.nr_jited_line_info = 0;
  auto p = BpfProgramFromInfo(&k.info, sizeof(k.info));
  ASSERT_TRUE(p.ok());
  BpfPrograms progs;
  progs.Add(std::move(*p));
  EXPECT_EQ(progs.FunctionName(progs.programs()[0], 0), "bpf_prog_644f6979c2faccb2_e2e_bpf_a");
  EXPECT_EQ(progs.FunctionName(progs.programs()[0], 1), "bpf_prog_316b7a3625c5ee7a_F");
  EXPECT_EQ(progs.LinesMissing(progs.programs()[0]), "the program has no line info");
  // Line info whose BTF the capture lacks: said, not an empty list.
  KernelInfo l;
  BpfPrograms no_btf;
  auto q = BpfProgramFromInfo(&l.info, sizeof(l.info));
  ASSERT_TRUE(q.ok());
  no_btf.Add(std::move(*q));
  EXPECT_EQ(no_btf.LinesMissing(no_btf.programs()[0]), "its BTF (id 7) is not in the capture");
  EXPECT_EQ(Programs(l).LinesMissing(Programs(l).programs()[0]), "");
}

}  // namespace
}  // namespace mmap3
