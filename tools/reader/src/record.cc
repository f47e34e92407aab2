#include "record.h"

#include <cstddef>

#include "linux/perf_event_mmap3.h"

namespace mmap3 {
namespace {

static_assert(PERF_MMAP3_RECORD_TYPE == kRecordMmap3);
static_assert(sizeof(perf_mmap3_record) == PERF_MMAP3_RECORD_FIXED_SIZE);

constexpr uint64_t kFormatLost = 1u << 4;  // PERF_FORMAT_LOST (6.0+)

// Bounds-checked sequential reader over one record.
class Cursor {
 public:
  Cursor(const uint8_t* begin, const uint8_t* end) : p_(begin), end_(end) {}
  bool ok() const { return ok_; }
  size_t remaining() const { return ok_ ? static_cast<size_t>(end_ - p_) : 0; }
  const uint8_t* position() const { return p_; }

  template <typename T>
  T Read() {
    T v{};
    if (!ok_ || remaining() < sizeof(T)) {
      ok_ = false;
      return v;
    }
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  void Skip(size_t n) {
    if (!ok_ || remaining() < n) {
      ok_ = false;
      return;
    }
    p_ += n;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  bool ok_ = true;
};

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Splits a non-sample record into its body and its sample_id trailer
// (see SampleIdOffset()).  Returns false when the record cannot even hold
// the trailer.
bool SplitTrailer(Bytes bytes, const SampleLayout& l, const uint8_t** body_end, SampleId* id) {
  if (bytes.size() < sizeof(perf_event_header) + l.trailer_size) return false;
  const uint8_t* t = bytes.data() + SampleIdOffset(bytes, l.trailer_size);
  *body_end = t;
  if (l.trailer_tid != SampleLayout::kAbsent) {
    id->has_tid = true;
    id->pid = Load<uint32_t>(t + l.trailer_tid);
    id->tid = Load<uint32_t>(t + l.trailer_tid + 4);
  }
  if (l.trailer_time != SampleLayout::kAbsent) {
    id->has_time = true;
    id->time = Load<uint64_t>(t + l.trailer_time);
  }
  if (l.trailer_id != SampleLayout::kAbsent) {
    id->has_id = true;
    id->id = Load<uint64_t>(t + l.trailer_id);
  }
  if (l.trailer_cpu != SampleLayout::kAbsent) {
    id->has_cpu = true;
    id->cpu = Load<uint32_t>(t + l.trailer_cpu);
  }
  if (l.trailer_identifier != SampleLayout::kAbsent) {
    id->has_id = true;
    id->id = Load<uint64_t>(t + l.trailer_identifier);
  }
  return true;
}

// A NUL-terminated string that must end inside [p, end).
bool ReadString(const uint8_t* p, const uint8_t* end, std::string_view* out) {
  if (p > end) return false;
  const void* nul = std::memchr(p, 0, static_cast<size_t>(end - p));
  if (nul == nullptr) return false;
  *out = std::string_view(reinterpret_cast<const char*>(p),
                          static_cast<const uint8_t*>(nul) - p);
  return true;
}

// Whether MMAP2's build-id union (size, 3 reserved bytes, 20 bytes) holds
// one as its writers write it (see Mmap2BuildIds): a size of 1 to 20 and
// the reserved bytes 0 (the kernel and perf zero them); unless an event
// asked (perf's synthesized records may not), zeroes after a shorter id;
// in perf's files where none asked, 8, 16 or 20 bytes not beginning as a
// minor number does.  An inode layout under the bit: maj 259 (NVMe) fails
// on a reserved byte; in perf's files, maj 7 (loop) on its size and maj 8
// (sd) on its minor; elsewhere maj 8 (an 8-byte "id" of minor and inode)
// on its inode's high half or its ino_generation.  What passes: in ours
// and live, a maj up to 20 with an inode below 2^32 and ino_generation 0
// (vfat, squashfs), which record drops in mmap2 mode before this; any at
// all where an event asked, which no stray bit comes with.
bool HoldsBuildId(const uint8_t* raw, Mmap2BuildIds writers) {
  const uint8_t size = raw[0];
  if (size == 0 || size > BuildId::kMaxSize || (raw[1] | raw[2] | raw[3]) != 0) return false;
  if (writers == Mmap2BuildIds::kAsked) return true;
  if (writers == Mmap2BuildIds::kUnasked) {
    if (size != 8 && size != 16 && size != 20) return false;
    // Read as an id, an inode layout begins with the minor number: below
    // 256 for majors 8, 16 and 20 (sd's extra disks have majors of their
    // own), so its bytes 1 to 3 are zero, which a hash's are once in 2^24.
    if ((raw[5] | raw[6] | raw[7]) == 0) return false;
  }
  for (size_t i = 4 + size; i < 4 + BuildId::kMaxSize; ++i)
    if (raw[i] != 0) return false;
  return true;
}

// maj, min, ino, ino_generation: MMAP2 without a build ID, and MMAP3.
void ReadInodeIdentity(Cursor& c, MmapRecord& m) {
  m.has_inode = true;
  m.maj = c.Read<uint32_t>();
  m.min = c.Read<uint32_t>();
  m.ino = c.Read<uint64_t>();
  m.ino_generation = c.Read<uint64_t>();
}

DecodeStatus DecodeMmap(Bytes bytes, const perf_event_header& h, const SampleLayout& f,
                        Record* out) {
  MmapRecord m;
  m.misc = h.misc;
  const uint8_t* body_end;
  if (!SplitTrailer(bytes, f, &body_end, &m.sample_id)) return DecodeStatus::kTruncated;
  Cursor c(bytes.data() + sizeof(h), body_end);
  m.pid = c.Read<uint32_t>();
  m.tid = c.Read<uint32_t>();
  m.start = c.Read<uint64_t>();
  m.len = c.Read<uint64_t>();
  m.pgoff = c.Read<uint64_t>();
  if (h.type == PERF_RECORD_MMAP) {
    m.format = MmapFormat::kMmap;
  } else if (h.type == PERF_RECORD_MMAP2) {
    if (h.misc & kMiscMmapBuildId) {
      // size, 3 reserved bytes, 20 of build-id: as long as the inode
      // layout (maj, min, ino, ino_generation), which it stands in for.
      uint8_t raw[4 + BuildId::kMaxSize];
      for (auto& b : raw) b = c.Read<uint8_t>();
      if (HoldsBuildId(raw, f.format.mmap2_build_ids)) {
        m.format = MmapFormat::kMmap2BuildId;
        m.build_id = BuildId(raw + 4, raw[0]);
      } else {
        // The bit over bytes no writer of build-ids leaves: a kernel
        // without the series' first patch sets it on the records of an
        // event that did not ask, after another event that did (see
        // Enricher::OnRecord).  They are the inode layout.
        m.format = MmapFormat::kMmap2;
        m.stray_build_id_bit = true;
        Cursor inode(raw, raw + sizeof(raw));
        ReadInodeIdentity(inode, m);
      }
    } else {
      m.format = MmapFormat::kMmap2;
      ReadInodeIdentity(c, m);
    }
    m.prot = c.Read<uint32_t>();
    m.flags = c.Read<uint32_t>();
  } else {  // MMAP3: laid out as struct perf_mmap3_record
    m.format = MmapFormat::kMmap3;
    ReadInodeIdentity(c, m);
    m.prot = c.Read<uint32_t>();
    m.flags = c.Read<uint32_t>();
    uint8_t size = c.Read<uint8_t>();
    m.build_id_status = c.Read<uint8_t>();
    m.mmap3_flags = c.Read<uint16_t>();
    uint8_t id[PERF_MMAP3_BUILD_ID_MAX];
    for (auto& b : id) b = c.Read<uint8_t>();
    if (!c.ok()) return DecodeStatus::kTruncated;
    if (size > PERF_MMAP3_BUILD_ID_MAX) return DecodeStatus::kMalformed;
    // Only a FOUND status makes the bytes meaningful; any other status with
    // a nonzero size is a kernel bug we refuse to trust.
    if (m.build_id_status == PERF_MMAP3_BUILD_ID_FOUND) {
      if (size == 0) return DecodeStatus::kMalformed;
      m.build_id = BuildId(id, size);
    } else if (size != 0) {
      return DecodeStatus::kMalformed;
    }
    // A flag this reader does not know may change what the record means;
    // only a module (pid -1) is ever unloaded.
    if ((m.mmap3_flags & ~PERF_MMAP3_UNLOADED) != 0 ||
        ((m.mmap3_flags & PERF_MMAP3_UNLOADED) && m.pid != UINT32_MAX))
      return DecodeStatus::kMalformed;
  }
  if (!c.ok()) return DecodeStatus::kTruncated;
  if (!ReadString(c.position(), body_end, &m.filename)) return DecodeStatus::kMalformed;
  *out = m;
  return DecodeStatus::kOk;
}

DecodeStatus DecodeSampleBody(Bytes bytes, const perf_event_header& h, const SampleLayout& l,
                              SampleRecord* out) {
  SampleRecord& s = *out;
  s = SampleRecord{};
  s.misc = h.misc;
  if (bytes.size() < l.fixed_end) return DecodeStatus::kTruncated;
  constexpr uint16_t kAbsent = SampleLayout::kAbsent;
  const uint8_t* p = bytes.data();
  if (l.identifier != kAbsent) s.id = Load<uint64_t>(p + l.identifier);
  if (l.ip != kAbsent) s.ip = Load<uint64_t>(p + l.ip);
  if (l.tid != kAbsent) {
    s.pid = Load<uint32_t>(p + l.tid);
    s.tid = Load<uint32_t>(p + l.tid + 4);
  }
  if (l.time != kAbsent) s.time = Load<uint64_t>(p + l.time);
  if (l.id != kAbsent) s.id = Load<uint64_t>(p + l.id);
  if (l.cpu != kAbsent) s.cpu = Load<uint32_t>(p + l.cpu);
  if (l.period != kAbsent) s.period = Load<uint64_t>(p + l.period);
  if (l.read_value == 0 && !l.callchain) return DecodeStatus::kOk;
  Cursor c(p + l.fixed_end, p + bytes.size());
  if (l.read_group) {
    uint64_t nr = c.Read<uint64_t>();
    c.Skip(l.read_times);
    if (nr > kMaxRecordSize / l.read_value) return DecodeStatus::kMalformed;
    c.Skip(nr * l.read_value);
  } else if (l.read_value != 0) {
    c.Skip(l.read_value + l.read_times);
  }
  if (l.callchain) {
    uint64_t nr = c.Read<uint64_t>();
    if (!c.ok()) return DecodeStatus::kTruncated;
    if (nr > c.remaining() / 8) return DecodeStatus::kTruncated;
    s.callchain = U64Array(c.position(), nr);
    c.Skip(nr * 8);
  }
  if (!c.ok()) return DecodeStatus::kTruncated;
  return DecodeStatus::kOk;
}

DecodeStatus DecodeSample(Bytes bytes, const perf_event_header& h, const SampleLayout& f,
                          Record* out) {
  SampleRecord s;
  DecodeStatus status = DecodeSampleBody(bytes, h, f, &s);
  if (status == DecodeStatus::kOk) *out = s;
  return status;
}

// The framing checks every record gets.
DecodeStatus CheckFrame(Bytes bytes, perf_event_header* h) {
  if (!ReadHeader(bytes, h)) return DecodeStatus::kTruncated;
  // Every record the kernel writes is u64 aligned; anything else is a
  // framing error, and its fields cannot be trusted.  perf's own records
  // need not be (PERF_RECORD_HEADER_BUILD_ID, which perf inject -b writes,
  // is 100 or 164 bytes): those are only never decoded.
  if (h->size < sizeof(*h) || (h->size % 8 != 0 && h->type < kRecordUserTypeStart))
    return DecodeStatus::kBadSize;
  if (h->size > bytes.size()) return DecodeStatus::kTruncated;
  if (h->size < bytes.size()) return DecodeStatus::kBadSize;
  return DecodeStatus::kOk;
}

}  // namespace

DecodeStatus DecodeSampleRecordFull(Bytes bytes, const SampleLayout& layout, SampleRecord* out) {
  perf_event_header h;
  if (DecodeStatus status = CheckFrame(bytes, &h); status != DecodeStatus::kOk) return status;
  if (h.type != PERF_RECORD_SAMPLE) return DecodeStatus::kIgnored;
  return DecodeSampleBody(bytes, h, layout, out);
}

const char* DecodeStatusName(DecodeStatus status) {
  switch (status) {
    case DecodeStatus::kOk: return "ok";
    case DecodeStatus::kIgnored: return "ignored";
    case DecodeStatus::kTruncated: return "truncated";
    case DecodeStatus::kBadSize: return "bad size";
    case DecodeStatus::kMalformed: return "malformed";
  }
  return "?";
}

SampleLayout::SampleLayout(const SampleFormat& f) : format(f) {
  const uint64_t t = f.sample_type;
  // The kernel's order (perf_output_sample()): each present field takes the
  // next 8 bytes.
  uint16_t off = sizeof(perf_event_header);
  auto place = [&](uint64_t bit, uint16_t& field) {
    if (!(t & bit)) return;
    field = off;
    off += 8;
  };
  place(PERF_SAMPLE_IDENTIFIER, identifier);
  place(PERF_SAMPLE_IP, ip);
  place(PERF_SAMPLE_TID, tid);
  place(PERF_SAMPLE_TIME, time);
  place(PERF_SAMPLE_ADDR, addr);
  place(PERF_SAMPLE_ID, id);
  place(PERF_SAMPLE_STREAM_ID, stream_id);
  place(PERF_SAMPLE_CPU, cpu);
  place(PERF_SAMPLE_PERIOD, period);
  fixed_end = off;
  if (t & PERF_SAMPLE_READ) {
    const uint64_t rf = f.read_format;
    read_value = 8 + ((rf & PERF_FORMAT_ID) ? 8 : 0) + ((rf & kFormatLost) ? 8 : 0);
    read_times = ((rf & PERF_FORMAT_TOTAL_TIME_ENABLED) ? 8 : 0) +
                 ((rf & PERF_FORMAT_TOTAL_TIME_RUNNING) ? 8 : 0);
    read_group = (rf & PERF_FORMAT_GROUP) != 0;
  }
  callchain = (t & PERF_SAMPLE_CALLCHAIN) != 0;
  auto pick = [this](Pick f, uint16_t at) {
    if (at == kAbsent) return;
    pick_at[f] = at;
    pick_keep[f] = ~uint64_t{0};
  };
  pick(kPickIp, ip);
  pick(kPickTid, tid);
  pick(kPickTime, time);
  pick(kPickId, identifier);
  pick(kPickId, id);  // SAMPLE_ID's, when both are there
  pick(kPickCpu, cpu);
  pick(kPickPeriod, period);
  if (!f.sample_id_all) return;
  // The trailer (perf_event__output_id_sample()): its own order.
  off = 0;
  place(PERF_SAMPLE_TID, trailer_tid);
  place(PERF_SAMPLE_TIME, trailer_time);
  place(PERF_SAMPLE_ID, trailer_id);
  place(PERF_SAMPLE_STREAM_ID, trailer_stream_id);
  place(PERF_SAMPLE_CPU, trailer_cpu);
  place(PERF_SAMPLE_IDENTIFIER, trailer_identifier);
  trailer_size = off;
}

size_t SampleIdSize(const SampleFormat& f) { return SampleLayout(f).trailer_size; }

DecodeStatus DecodeRecord(Bytes bytes, const SampleLayout& f, Record* out) {
  *out = std::monostate{};
  perf_event_header h;
  if (DecodeStatus status = CheckFrame(bytes, &h); status != DecodeStatus::kOk) return status;

  switch (h.type) {
    case PERF_RECORD_MMAP:
    case PERF_RECORD_MMAP2:
    case kRecordMmap3:
      return DecodeMmap(bytes, h, f, out);
    case PERF_RECORD_SAMPLE:
      return DecodeSample(bytes, h, f, out);
    case PERF_RECORD_COMM: {
      CommRecord r;
      const uint8_t* body_end;
      if (!SplitTrailer(bytes, f, &body_end, &r.sample_id)) return DecodeStatus::kTruncated;
      Cursor c(bytes.data() + sizeof(h), body_end);
      r.pid = c.Read<uint32_t>();
      r.tid = c.Read<uint32_t>();
      if (!c.ok()) return DecodeStatus::kTruncated;
      if (!ReadString(c.position(), body_end, &r.comm)) return DecodeStatus::kMalformed;
      r.exec = (h.misc & kMiscCommExec) != 0;
      *out = r;
      return DecodeStatus::kOk;
    }
    case PERF_RECORD_FORK:
    case PERF_RECORD_EXIT: {
      TaskRecord r;
      r.exit = h.type == PERF_RECORD_EXIT;
      const uint8_t* body_end;
      if (!SplitTrailer(bytes, f, &body_end, &r.sample_id)) return DecodeStatus::kTruncated;
      Cursor c(bytes.data() + sizeof(h), body_end);
      r.pid = c.Read<uint32_t>();
      r.ppid = c.Read<uint32_t>();
      r.tid = c.Read<uint32_t>();
      r.ptid = c.Read<uint32_t>();
      r.time = c.Read<uint64_t>();
      if (!c.ok()) return DecodeStatus::kTruncated;
      *out = r;
      return DecodeStatus::kOk;
    }
    case PERF_RECORD_LOST:
    case PERF_RECORD_LOST_SAMPLES: {
      LostRecord r;
      r.samples = h.type == PERF_RECORD_LOST_SAMPLES;
      const uint8_t* body_end;
      if (!SplitTrailer(bytes, f, &body_end, &r.sample_id)) return DecodeStatus::kTruncated;
      Cursor c(bytes.data() + sizeof(h), body_end);
      if (!r.samples) r.id = c.Read<uint64_t>();
      r.lost = c.Read<uint64_t>();
      if (!c.ok()) return DecodeStatus::kTruncated;
      *out = r;
      return DecodeStatus::kOk;
    }
    case PERF_RECORD_KSYMBOL: {
      KsymbolRecord r;
      const uint8_t* body_end;
      if (!SplitTrailer(bytes, f, &body_end, &r.sample_id)) return DecodeStatus::kTruncated;
      Cursor c(bytes.data() + sizeof(h), body_end);
      r.addr = c.Read<uint64_t>();
      r.len = c.Read<uint32_t>();
      r.ksym_type = c.Read<uint16_t>();
      r.unregister = (c.Read<uint16_t>() & PERF_RECORD_KSYMBOL_FLAGS_UNREGISTER) != 0;
      if (!c.ok()) return DecodeStatus::kTruncated;
      if (!ReadString(c.position(), body_end, &r.name)) return DecodeStatus::kMalformed;
      r.excess = static_cast<uint16_t>(bytes.data() + bytes.size() - body_end - f.trailer_size);
      *out = r;
      return DecodeStatus::kOk;
    }
    case PERF_RECORD_BPF_EVENT: {
      BpfEventRecord r;
      const uint8_t* body_end;
      if (!SplitTrailer(bytes, f, &body_end, &r.sample_id)) return DecodeStatus::kTruncated;
      Cursor c(bytes.data() + sizeof(h), body_end);
      r.type = c.Read<uint16_t>();
      r.flags = c.Read<uint16_t>();
      r.id = c.Read<uint32_t>();
      const uint64_t tag = c.Read<uint64_t>();
      if (!c.ok()) return DecodeStatus::kTruncated;
      std::memcpy(r.tag, &tag, sizeof(r.tag));
      r.excess = static_cast<uint16_t>(bytes.data() + bytes.size() - body_end - f.trailer_size);
      *out = r;
      return DecodeStatus::kOk;
    }
    default:
      return DecodeStatus::kIgnored;
  }
}

size_t SideBandBodyEnd(Bytes bytes) {
  perf_event_header h;
  if (!ReadHeader(bytes, &h) || h.size != bytes.size()) return 0;
  // struct perf_record_ksymbol and perf_record_bpf_event: 24 bytes with the
  // header, then (KSYMBOL) the name.  TEXT_POKE: 16, two u16 lengths and
  // the old and new bytes, padded to 8.
  constexpr size_t kFixed = sizeof(perf_event_header) + 16;
  if (bytes.size() < kFixed) return 0;
  if (h.type == PERF_RECORD_BPF_EVENT) return kFixed;
  if (h.type == PERF_RECORD_TEXT_POKE) {
    const size_t lengths = Load<uint16_t>(bytes.data() + 16) + Load<uint16_t>(bytes.data() + 18);
    const size_t end = 16 + (4 + lengths + 7) / 8 * 8;
    return end <= bytes.size() ? end : 0;
  }
  if (h.type != PERF_RECORD_KSYMBOL) return 0;
  const void* nul = std::memchr(bytes.data() + kFixed, 0, bytes.size() - kFixed);
  if (nul == nullptr) return 0;
  const size_t name = static_cast<const uint8_t*>(nul) - (bytes.data() + kFixed) + 1;
  return kFixed + (name + 7) / 8 * 8;
}

bool CutToContents(Bytes record, size_t trailer_size, std::vector<uint8_t>* out) {
  const size_t body_end = SideBandBodyEnd(record);
  const size_t end = body_end + trailer_size;
  if (body_end == 0 || end >= record.size()) return false;
  out->assign(record.begin(), record.begin() + static_cast<ptrdiff_t>(end));
  const uint16_t size = static_cast<uint16_t>(end);
  std::memcpy(out->data() + offsetof(perf_event_header, size), &size, sizeof(size));
  return true;
}

size_t SampleIdOffset(Bytes bytes, size_t trailer_size) {
  const size_t body_end = SideBandBodyEnd(bytes);
  if (body_end != 0 && body_end + trailer_size <= bytes.size()) return body_end;
  return bytes.size() - trailer_size;
}

std::optional<uint64_t> RecordTimeOutOfLine(Bytes bytes, const SampleLayout& l) {
  perf_event_header h;
  if (!ReadHeader(bytes, &h) || h.size != bytes.size() || h.size < sizeof(h)) return std::nullopt;
  if (h.type == PERF_RECORD_SAMPLE) {
    if (l.time == SampleLayout::kAbsent || bytes.size() < l.time + 8u) return std::nullopt;
    return Load<uint64_t>(bytes.data() + l.time);
  }
  // Tool-synthesized records (types >= 64) carry no trailer.
  if (l.trailer_time == SampleLayout::kAbsent || h.type >= kRecordUserTypeStart ||
      bytes.size() < sizeof(h) + l.trailer_size)
    return std::nullopt;
  return Load<uint64_t>(bytes.data() + SampleIdOffset(bytes, l.trailer_size) + l.trailer_time);
}

}  // namespace mmap3
