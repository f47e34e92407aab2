// Replay throughput: synthetic records from two "CPUs" through timestamp
// ordering, decoding and attribution (no symbolization, no I/O).
//
//   mmap3_reader_bench [records]      default 10,000,000
//
// Prints records per second on one core.  A measurement aid, not a test.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "profile.h"
#include "record_sorter.h"
#include "record_writer.h"

using namespace mmap3;

int main(int argc, char** argv) {
  const size_t total = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 10'000'000;
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
  profile.SetFormat(f);
  RecordSorter sorter;
  auto process = [&](Bytes r) { profile.Process(r); };
  const auto t0 = std::chrono::steady_clock::now();
  size_t next_round = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    Bytes rec(stream.data() + records[i].first, records[i].second);
    sorter.Push(RecordTime(rec, f), rec);
    if (next_round < round_ends.size() && i + 1 == round_ends[next_round]) {
      sorter.FinishRound(process);
      ++next_round;
    }
  }
  sorter.Flush(process);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("replayed %zu records (%llu samples, %llu unattributed, %llu bad) in %.3f s: "
              "%.2f M records/s on one core\n",
              records.size(), static_cast<unsigned long long>(profile.samples()),
              static_cast<unsigned long long>(profile.unattributed()),
              static_cast<unsigned long long>(profile.bad_records()), secs,
              static_cast<double>(records.size()) / secs / 1e6);
  return profile.bad_records() == 0 ? 0 : 1;
}
