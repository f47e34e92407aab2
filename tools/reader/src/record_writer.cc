#include "record_writer.h"

#include <cstring>

#include "linux/perf_event_mmap3.h"

namespace mmap3 {
namespace {

class Encoder {
 public:
  Encoder(uint32_t type, uint16_t misc) {
    perf_event_header h{type, misc, 0};
    out_.resize(sizeof(h));
    std::memcpy(out_.data(), &h, sizeof(h));
  }
  template <typename T>
  void Put(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void PutBytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  // NUL-terminated and padded to 8 bytes, as the kernel emits strings.
  void PutString(std::string_view s) {
    PutBytes(s.data(), s.size());
    out_.push_back(0);
    while (out_.size() % 8 != 0) out_.push_back(0);
  }
  // Appends `size` zero bytes and returns where they begin.
  size_t Reserve(size_t size) {
    const size_t at = out_.size();
    out_.resize(at + size, 0);
    return at;
  }
  // Writes `v` at `base + offset`, unless the layout has no such field.
  template <typename T>
  void PutAt(size_t base, uint16_t offset, const T& v) {
    if (offset != SampleLayout::kAbsent) std::memcpy(out_.data() + base + offset, &v, sizeof(v));
  }
  void PutSampleId(const SampleId& id, const SampleFormat& f) {
    const SampleLayout l(f);
    const size_t base = Reserve(l.trailer_size);
    PutAt(base, l.trailer_tid, uint64_t{id.tid} << 32 | id.pid);
    PutAt(base, l.trailer_time, id.time);
    PutAt(base, l.trailer_id, id.id);
    PutAt(base, l.trailer_cpu, uint64_t{id.cpu});
    PutAt(base, l.trailer_identifier, id.id);
  }
  std::vector<uint8_t> Finish() {
    while (out_.size() % 8 != 0) out_.push_back(0);
    uint16_t size = static_cast<uint16_t>(out_.size());
    std::memcpy(out_.data() + offsetof(perf_event_header, size), &size, sizeof(size));
    return std::move(out_);
  }

 private:
  std::vector<uint8_t> out_;
};

}  // namespace

std::vector<uint8_t> EncodeMmap(const MmapRecord& m, const SampleFormat& f) {
  uint32_t type = PERF_RECORD_MMAP2;
  uint16_t misc = m.misc;
  switch (m.format) {
    case MmapFormat::kMmap: type = PERF_RECORD_MMAP; break;
    case MmapFormat::kMmap2: misc &= ~kMiscMmapBuildId; break;
    case MmapFormat::kMmap2BuildId: misc |= kMiscMmapBuildId; break;
    case MmapFormat::kMmap3: type = kRecordMmap3; break;
  }
  Encoder e(type, misc);
  e.Put(m.pid);
  e.Put(m.tid);
  e.Put(m.start);
  e.Put(m.len);
  e.Put(m.pgoff);
  uint8_t id[BuildId::kMaxSize] = {};
  std::memcpy(id, m.build_id.data(), m.build_id.size());
  if (m.format == MmapFormat::kMmap2) {
    e.Put(m.maj);
    e.Put(m.min);
    e.Put(m.ino);
    e.Put(m.ino_generation);
  } else if (m.format == MmapFormat::kMmap2BuildId) {
    e.Put(static_cast<uint8_t>(m.build_id.size()));
    e.Put(uint8_t{0});
    e.Put(uint16_t{0});
    e.PutBytes(id, sizeof(id));
  } else if (m.format == MmapFormat::kMmap3) {
    e.Put(m.maj);
    e.Put(m.min);
    e.Put(m.ino);
    e.Put(m.ino_generation);
    e.Put(m.prot);
    e.Put(m.flags);
    e.Put(static_cast<uint8_t>(m.build_id.size()));
    e.Put(m.build_id_status == kNoBuildIdStatus
              ? static_cast<uint8_t>(m.build_id.empty() ? PERF_MMAP3_BUILD_ID_UNAVAILABLE
                                                        : PERF_MMAP3_BUILD_ID_FOUND)
              : m.build_id_status);
    e.Put(m.mmap3_flags);
    e.PutBytes(id, sizeof(id));
  }
  if (m.format == MmapFormat::kMmap2 || m.format == MmapFormat::kMmap2BuildId) {
    e.Put(m.prot);
    e.Put(m.flags);
  }
  e.PutString(m.filename);
  e.PutSampleId(m.sample_id, f);
  return e.Finish();
}

std::vector<uint8_t> EncodeComm(const CommRecord& c, const SampleFormat& f) {
  Encoder e(PERF_RECORD_COMM, c.exec ? kMiscCommExec : 0);
  e.Put(c.pid);
  e.Put(c.tid);
  e.PutString(c.comm);
  e.PutSampleId(c.sample_id, f);
  return e.Finish();
}

std::vector<uint8_t> EncodeTask(const TaskRecord& t, const SampleFormat& f) {
  Encoder e(t.exit ? PERF_RECORD_EXIT : PERF_RECORD_FORK, 0);
  e.Put(t.pid);
  e.Put(t.ppid);
  e.Put(t.tid);
  e.Put(t.ptid);
  e.Put(t.time);
  e.PutSampleId(t.sample_id, f);
  return e.Finish();
}

std::vector<uint8_t> EncodeLost(const LostRecord& l, const SampleFormat& f) {
  Encoder e(l.samples ? PERF_RECORD_LOST_SAMPLES : PERF_RECORD_LOST, 0);
  if (!l.samples) e.Put(l.id);
  e.Put(l.lost);
  e.PutSampleId(l.sample_id, f);
  return e.Finish();
}

std::vector<uint8_t> EncodeKsymbol(const KsymbolRecord& k, const SampleFormat& f) {
  Encoder e(PERF_RECORD_KSYMBOL, 0);
  e.Put(k.addr);
  e.Put(k.len);
  e.Put(k.ksym_type);
  e.Put(static_cast<uint16_t>(k.unregister ? PERF_RECORD_KSYMBOL_FLAGS_UNREGISTER : 0));
  e.PutString(k.name);
  e.PutSampleId(k.sample_id, f);
  return e.Finish();
}

std::vector<uint8_t> EncodeBpfEvent(const BpfEventRecord& b, const SampleFormat& f) {
  Encoder e(PERF_RECORD_BPF_EVENT, 0);
  e.Put(b.type);
  e.Put(b.flags);
  e.Put(b.id);
  e.PutBytes(b.tag, sizeof(b.tag));
  e.PutSampleId(b.sample_id, f);
  return e.Finish();
}

std::vector<uint8_t> EncodeSample(const SampleRecord& s, std::span<const uint64_t> callchain,
                                  const SampleFormat& f) {
  Encoder e(PERF_RECORD_SAMPLE, s.misc);
  const SampleLayout l(f);
  // The fixed part, header included, then what follows it.
  e.Reserve(l.fixed_end - sizeof(perf_event_header));
  e.PutAt(0, l.identifier, s.id);
  e.PutAt(0, l.ip, s.ip);
  e.PutAt(0, l.tid, uint64_t{s.tid} << 32 | s.pid);
  e.PutAt(0, l.time, s.time);
  e.PutAt(0, l.id, s.id);
  e.PutAt(0, l.cpu, uint64_t{s.cpu});
  e.PutAt(0, l.period, s.period);
  // A read of no counters (a group of none), or of one whose value and
  // times are 0.
  if (l.read_group)
    e.Reserve(8 + l.read_times);
  else if (l.read_value != 0)
    e.Reserve(l.read_value + l.read_times);
  if (l.callchain) {
    e.Put(static_cast<uint64_t>(callchain.size()));
    for (uint64_t ip : callchain) e.Put(ip);
  }
  return e.Finish();
}

std::vector<uint8_t> EncodeFinishedRound() {
  Encoder e(kRecordFinishedRound, 0);
  return e.Finish();
}

}  // namespace mmap3
