// Replay throughput: records through timestamp ordering, decoding and
// attribution (no symbolization, no I/O in the timed part).
//
//   mmap3_reader_bench [RECORDS]        synthetic records in memory (default
//                                       10,000,000), the quick measurement
//   mmap3_reader_bench synth FILE RECORDS IPS [DSO...]
//                                       writes a perf.data file (MMAP2 with
//                                       build-id, perf's format) of RECORDS
//                                       records: 64 processes mapping real
//                                       DSOs (default: libc, libstdc++,
//                                       ld.so and this program), samples on
//                                       their functions from two CPUs in
//                                       FINISHED_ROUND rounds, on at most
//                                       IPS instructions per function (the
//                                       hot ones; 0: any byte of it)
//   mmap3_reader_bench synth-g FILE RECORDS DEPTH STACKS [DSO...]
//                                       the same with call chains (perf
//                                       record -g's layout: PERF_CONTEXT_USER,
//                                       then DEPTH ips, the sample's first):
//                                       STACKS distinct chains of functions of
//                                       the DSOs, each of one process, each
//                                       sample on one of them (skewed)
//   mmap3_reader_bench replay FILE [REPEAT [copy|g|children]]
//                                       replays FILE REPEAT times (default 3)
//                                       and prints the best; records are views
//                                       into the mapped file (as report does),
//                                       or with "copy" copied into the sorter
//                                       (as the live capture must); "g" also
//                                       aggregates call stacks (report -g),
//                                       "children" chains (--children)
//   mmap3_reader_bench sort BUFFERS [RECORDS]
//                                       the sorter alone: rounds of BUFFERS
//                                       runs of 2048 / BUFFERS records each
//                                       (views), times at random within the
//                                       round, RECORDS in all (default
//                                       20,000,000); best of 3
//
// Prints records per second on one core.  A measurement aid, not a test.
#include <climits>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "elf_file.h"
#include "perf_data.h"
#include "profile.h"
#include "record_sorter.h"
#include "record_writer.h"

using namespace mmap3;

namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void PrintRate(const char* what, size_t records, const Profile& profile, double secs) {
  std::printf("%s %zu records (%llu samples at %zu locations, %llu unattributed, %llu bad) in "
              "%.3f s: %.2f M records/s on one core\n",
              what, records, static_cast<unsigned long long>(profile.samples()), profile.locations(),
              static_cast<unsigned long long>(profile.unattributed()),
              static_cast<unsigned long long>(profile.bad_records()), secs,
              static_cast<double>(records) / secs / 1e6);
}

int InMemory(size_t total) {
  const SampleFormat f{PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID |
                           PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD,
                       0, true};
  // Build the input once: per round, a batch from CPU 0 then one from CPU 1
  // with interleaved timestamps, as two ring buffers drained in turn.
  // One contiguous stream, as a ring buffer or a perf.data data section.
  std::vector<uint8_t> stream;
  std::vector<std::pair<size_t, size_t>> records;  // offset, size
  records.reserve(total + 1024);
  stream.reserve(total * 56);
  auto add = [&](const std::vector<uint8_t>& r) {
    records.emplace_back(stream.size(), r.size());
    stream.insert(stream.end(), r.begin(), r.end());
  };
  uint64_t t = 1;
  for (uint32_t pid = 1; pid <= 64; ++pid) {
    CommRecord c;
    c.pid = c.tid = pid;
    c.comm = "bench";
    c.sample_id.time = t++;
    add(EncodeComm(c, f));
    for (int i = 0; i < 16; ++i) {
      MmapRecord m;
      m.format = MmapFormat::kMmap2BuildId;
      m.pid = m.tid = pid;
      m.start = 0x7f0000000000 + static_cast<uint64_t>(i) * 0x1000000;
      m.len = 0x800000;
      uint8_t id[20] = {static_cast<uint8_t>(i), static_cast<uint8_t>(pid)};
      m.build_id = BuildId(id, 20);
      m.filename = "/usr/lib/libbench.so";
      m.sample_id.time = t++;
      add(EncodeMmap(m, f));
    }
  }
  std::vector<size_t> round_ends;
  const size_t batch = 512;
  while (records.size() < total) {
    for (int cpu = 0; cpu < 2 && records.size() < total; ++cpu) {
      for (size_t i = 0; i < batch && records.size() < total; ++i) {
        SampleRecord s;
        s.pid = s.tid = 1 + static_cast<uint32_t>((i * 7) % 64);
        s.ip = 0x7f0000000000 + ((i * 2654435761u) % 16) * 0x1000000 + (i % 4096) * 16;
        s.time = t + i * 2 + static_cast<uint64_t>(cpu);
        s.cpu = static_cast<uint32_t>(cpu);
        s.misc = PERF_RECORD_MISC_USER;
        add(EncodeSample(s, {}, f));
      }
    }
    t += batch * 2;
    round_ends.push_back(records.size());
  }

  Profile profile({});
  const SampleLayout layout(f);
  profile.SetFormat(layout);
  RecordSorter sorter;
  auto process = [&](std::span<const Bytes> batch) { profile.ProcessBatch(batch); };
  const auto t0 = std::chrono::steady_clock::now();
  size_t next_round = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    Bytes rec(stream.data() + records[i].first, records[i].second);
    sorter.Push(RecordTime(rec, layout), rec);
    if (next_round < round_ends.size() && i + 1 == round_ends[next_round]) {
      sorter.FinishRound(process);
      ++next_round;
    }
  }
  sorter.Flush(process);
  PrintRate("replayed", records.size(), profile, Seconds(t0));
  return profile.bad_records() == 0 ? 0 : 1;
}

// A DSO to put samples in: its executable segment and functions there.
struct Dso {
  std::string path;
  BuildId build_id;
  LoadSegment text;
  std::vector<ElfSymbol> functions;
};

bool LoadDso(const std::string& path, Dso* out) {
  char real[PATH_MAX];
  if (realpath(path.c_str(), real) == nullptr) return false;
  auto elf = ElfFile::Open(real);
  if (!elf.ok() || elf->build_id().empty()) return false;
  out->path = real;
  out->build_id = elf->build_id();
  for (const LoadSegment& s : elf->loads())
    if (s.executable) out->text = s;
  if (out->text.filesz == 0) return false;
  for (ElfSymbol& s : elf->ReadSymbols())
    if (s.size > 0 && s.addr >= out->text.vaddr && s.addr + s.size <= out->text.vaddr + out->text.filesz)
      out->functions.push_back(std::move(s));
  return !out->functions.empty();
}

// depth 0: no call chains; else `depth` frames per sample, on one of
// `stacks` distinct chains.
int Synth(const std::string& file, size_t total, uint64_t ips, std::vector<std::string> paths,
          size_t depth = 0, size_t stacks = 0) {
  if (paths.empty()) {
    paths = {"/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
             "/lib64/ld-linux-x86-64.so.2", "/proc/self/exe"};
  }
  std::vector<Dso> dsos;
  for (const std::string& p : paths) {
    Dso d;
    if (!LoadDso(p, &d)) {
      std::fprintf(stderr, "synth: %s: no build-id, executable segment or functions\n", p.c_str());
      return 1;
    }
    dsos.push_back(std::move(d));
  }
  perf_event_attr attr{};
  attr.type = PERF_TYPE_SOFTWARE;
  attr.size = sizeof(attr);
  attr.config = PERF_COUNT_SW_CPU_CLOCK;
  attr.freq = 1;
  attr.sample_freq = 10000;
  attr.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU |
                     PERF_SAMPLE_PERIOD;
  if (depth > 0) attr.sample_type |= PERF_SAMPLE_CALLCHAIN;
  attr.sample_id_all = 1;
  attr.comm = attr.mmap = attr.mmap2 = attr.task = 1;
  const SampleFormat f{attr.sample_type, 0, true};
  auto writer = PerfDataWriter::Create(file, {PerfFileAttr{attr, {1, 2}}});
  if (!writer.ok()) {
    std::fprintf(stderr, "synth: %s\n", writer.status().ToString().c_str());
    return 1;
  }
  size_t written = 0;
  auto add = [&](const std::vector<uint8_t>& r) {
    if (Status s = writer->Write(r); !s.ok()) {
      std::fprintf(stderr, "synth: %s\n", s.ToString().c_str());
      std::exit(1);
    }
    ++written;
  };
  constexpr uint32_t kProcesses = 64;
  constexpr uint64_t kPage = 4096;
  auto base_of = [&](uint32_t pid, size_t d) {
    return 0x7f0000000000ull + pid * 0x100000000ull + d * 0x10000000ull;
  };
  uint64_t t = 1'000'000;
  for (uint32_t pid = 1000; pid < 1000 + kProcesses; ++pid) {
    CommRecord c;
    c.pid = c.tid = pid;
    c.comm = pid % 2 ? "worker" : "server";
    c.sample_id.pid = c.sample_id.tid = pid;
    c.sample_id.time = t++;
    add(EncodeComm(c, f));
    for (size_t d = 0; d < dsos.size(); ++d) {
      const LoadSegment& s = dsos[d].text;
      MmapRecord m;
      m.format = MmapFormat::kMmap2BuildId;
      m.pid = m.tid = pid;
      m.start = base_of(pid, d);
      m.len = (s.vaddr % kPage + s.filesz + kPage - 1) / kPage * kPage;
      m.pgoff = s.offset / kPage * kPage;
      m.prot = 5;  // PROT_READ | PROT_EXEC
      m.flags = 2;  // MAP_PRIVATE
      m.build_id = dsos[d].build_id;
      m.filename = dsos[d].path;
      m.sample_id.pid = m.sample_id.tid = pid;
      m.sample_id.time = t++;
      add(EncodeMmap(m, f));
    }
  }
  // Samples: two CPUs drained in turn, 512 per batch, timestamps
  // interleaved across the batches of a round; a skewed choice of function
  // so the report has a head and a long tail.
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(0, 1);
  // Call chains: per stack, `depth` (DSO, address relative to the DSO's
  // base) pairs, leaf first; the leaf anywhere in its function, the
  // callers return addresses (never a function's first byte).
  std::vector<std::vector<std::pair<size_t, uint64_t>>> chains(stacks);
  for (auto& chain : chains) {
    for (size_t k = 0; k < depth; ++k) {
      const size_t d = rng() % dsos.size();
      const ElfSymbol& fn = dsos[d].functions[rng() % dsos[d].functions.size()];
      const uint64_t in_fn = k == 0 ? rng() % fn.size : 1 + rng() % fn.size;
      chain.emplace_back(d, fn.addr - dsos[d].text.vaddr / kPage * kPage + std::min(in_fn, fn.size - 1));
    }
  }
  std::vector<uint64_t> callchain;
  const size_t batch = 512;
  while (written < total) {
    for (uint32_t cpu = 0; cpu < 2 && written < total; ++cpu) {
      for (size_t i = 0; i < batch && written < total; ++i) {
        uint32_t pid = 1000 + static_cast<uint32_t>(rng() % kProcesses);
        const size_t d = rng() % dsos.size();
        const Dso& dso = dsos[d];
        const double x = u(rng);
        const ElfSymbol& fn = dso.functions[static_cast<size_t>(x * x * x * dso.functions.size())];
        SampleRecord s;
        s.misc = PERF_RECORD_MISC_USER;
        s.pid = s.tid = pid;
        // Hot instructions spread over the function, 4 bytes apart at least.
        const uint64_t in_fn = ips == 0 ? rng() % fn.size
                                        : (rng() % ips) * (fn.size / 4 / ips) * 4 % fn.size;
        s.ip = base_of(pid, d) + (fn.addr - dso.text.vaddr / kPage * kPage) + in_fn;
        s.time = t + i * 2 + cpu;
        s.cpu = cpu;
        s.period = 100000;
        callchain.clear();
        if (depth > 0) {
          const double y = u(rng);
          const size_t c = static_cast<size_t>(y * y * chains.size());
          const auto& chain = chains[c];
          // A chain is one program's: always sampled in the same process.
          pid = 1000 + static_cast<uint32_t>(c % kProcesses);
          s.pid = s.tid = pid;
          callchain.push_back(PERF_CONTEXT_USER);
          for (const auto& [cd, rel] : chain) callchain.push_back(base_of(pid, cd) + rel);
          s.ip = callchain[1];
        }
        add(EncodeSample(s, callchain, f));
      }
    }
    t += batch * 2;
    add(EncodeFinishedRound());
  }
  std::vector<BuildIdEntry> table;
  for (const Dso& d : dsos) {
    BuildIdEntry e;
    e.build_id = d.build_id;
    e.filename = d.path;
    table.push_back(std::move(e));
  }
  if (Status s = writer->Finish(table, ""); !s.ok()) {
    std::fprintf(stderr, "synth: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("wrote %s: %zu records, %zu DSOs\n", file.c_str(), written, dsos.size());
  return 0;
}

// copy: push copies into the sorter, as the live capture must (its ring
// buffers are reused); otherwise views into the mapped file, as report does.
// g: with call stacks aggregated as report -g does; children: chains as
// --children does.
int Replay(const std::string& file, int repeat, bool copy, bool g, bool children) {
  auto r = PerfDataReader::Open(file);
  if (!r.ok()) {
    std::fprintf(stderr, "replay: %s\n", r.status().ToString().c_str());
    return 1;
  }
  const perf_event_attr& a = r->attrs()[0].attr;
  const SampleFormat f{a.sample_type, a.read_format, a.sample_id_all != 0};
  const SampleLayout layout(f);
  // Touch the file once so the timed passes do not measure page faults.
  uint64_t sum = 0;
  for (uint8_t b : r->data()) sum += b;
  double best = 1e30, best_cpu = 1e30;
  size_t records = 0;
  uint64_t samples = 0;
  for (int i = 0; i < repeat; ++i) {
    ProfileOptions options;
    options.callchains = g;
    options.controls.children = children;
    Profile profile(std::move(options));
    profile.SetFormat(layout);
    RecordSorter sorter;
    auto process = [&](std::span<const Bytes> batch) { profile.ProcessBatch(batch); };
    records = 0;
    const std::clock_t c0 = std::clock();
    const auto t0 = std::chrono::steady_clock::now();
    r->ForEachRecord([&](Bytes rec) {
      ++records;
      perf_event_header h;
      std::memcpy(&h, rec.data(), sizeof(h));
      if (h.type == kRecordFinishedRound) {
        sorter.FinishRound(process);
        return;
      }
      if (copy)
        sorter.Push(RecordTime(rec, layout), rec);
      else
        sorter.PushView(RecordTime(rec, layout), rec);
    });
    sorter.Flush(process);
    // Every count in place (a chain memo's hits are settled here), as a
    // report would read them: part of the time.
    const uint64_t counted = profile.CountedSamples();
    const double secs = Seconds(t0);
    // CPU time too: on a shared machine the wall time includes waiting.
    const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    best_cpu = std::min(best_cpu, cpu);
    PrintRate("replayed", records, profile, secs);
    if (profile.bad_records() != 0 || profile.unattributed() != 0) return 1;
    if (counted != profile.samples()) {
      std::fprintf(stderr, "replay: %llu samples counted of %llu\n",
                   static_cast<unsigned long long>(counted),
                   static_cast<unsigned long long>(profile.samples()));
      return 1;
    }
    best = std::min(best, secs);
    samples = profile.samples();
  }
  std::printf("best: %.2f M records/s on one core (%zu records, %.3f s, %s%s; %.2f M records/s "
              "of CPU time)%s\n",
              static_cast<double>(records) / best / 1e6, records, best,
              copy ? "copied into the sorter" : "views into the file",
              g ? ", call stacks aggregated" : children ? ", chains aggregated" : "",
              static_cast<double>(records) / best_cpu / 1e6, sum == 1 ? " " : "");
  if (g || children)
    std::printf("best: %.2f M samples/s on one core (%llu samples; %.2f M samples/s of CPU time)\n",
                static_cast<double>(samples) / best / 1e6, static_cast<unsigned long long>(samples),
                static_cast<double>(samples) / best_cpu / 1e6);
  return 0;
}

// Rounds as perf record writes them: each buffer's records of the round,
// in order, buffer after buffer, their times interleaved at random over the
// round's span; each round releases the one before.
int SortOnly(size_t buffers, size_t total) {
  if (buffers == 0 || buffers > 2048) {
    std::fprintf(stderr, "sort: 1 to 2048 buffers\n");
    return 2;
  }
  const size_t per = 2048 / buffers;
  std::mt19937_64 rng(7);
  std::vector<uint64_t> times(buffers * per);
  for (size_t b = 0; b < buffers; ++b) {
    uint64_t t = 0;
    for (size_t i = 0; i < per; ++i) times[b * per + i] = t += 1 + rng() % (2 * buffers);
  }
  std::vector<uint8_t> bytes(16 * times.size());
  double best = 1e30;
  size_t done = 0;
  for (int pass = 0; pass < 3; ++pass) {
    RecordSorter sorter;
    uint64_t sum = 0, base = 0;
    auto take = [&](std::span<const Bytes> batch) { sum += batch.size(); };
    done = 0;
    const auto t0 = std::chrono::steady_clock::now();
    while (done < total) {
      for (size_t i = 0; i < times.size(); ++i)
        sorter.PushView(base + times[i], Bytes(bytes.data() + 16 * i, 16));
      done += times.size();
      base += 2 * per * buffers + 1;
      sorter.FinishRound(take);
    }
    sorter.Flush(take);
    const double secs = Seconds(t0);
    if (sum != done) return 1;
    best = std::min(best, secs);
  }
  std::printf("best: %.2f M records/s ordered on one core (%zu buffers, %zu records a buffer and "
              "round, %zu records)\n",
              static_cast<double>(done) / best / 1e6, buffers, per, done);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 5 && std::strcmp(argv[1], "synth") == 0)
    return Synth(argv[2], std::strtoull(argv[3], nullptr, 10), std::strtoull(argv[4], nullptr, 10),
                 std::vector<std::string>(argv + 5, argv + argc));
  if (argc >= 6 && std::strcmp(argv[1], "synth-g") == 0)
    return Synth(argv[2], std::strtoull(argv[3], nullptr, 10), 0,
                 std::vector<std::string>(argv + 6, argv + argc), std::strtoull(argv[4], nullptr, 10),
                 std::strtoull(argv[5], nullptr, 10));
  if (argc >= 3 && std::strcmp(argv[1], "replay") == 0) {
    const char* mode = argc > 4 ? argv[4] : "";
    return Replay(argv[2], argc > 3 ? std::atoi(argv[3]) : 3, std::strcmp(mode, "copy") == 0,
                  std::strcmp(mode, "g") == 0, std::strcmp(mode, "children") == 0);
  }
  if (argc >= 3 && std::strcmp(argv[1], "sort") == 0)
    return SortOnly(std::strtoull(argv[2], nullptr, 10),
                    argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 20'000'000);
  return InMemory(argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 10'000'000);
}
