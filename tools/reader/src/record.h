// Pure decoding of perf records: bytes in, typed views out, no I/O.
//
// Contract: DecodeRecord() never reads outside the span it is given and never
// throws.  Views inside the decoded record (filename, comm, callchain) point
// into that span and stay valid only as long as the bytes do.  Records that
// are too short for their declared fields, whose header size disagrees with
// the span, or whose strings are not terminated are rejected with a status;
// the caller counts them and moves on.
#ifndef MMAP3_READER_RECORD_H_
#define MMAP3_READER_RECORD_H_

#include <linux/perf_event.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "build_id.h"

namespace mmap3 {

using Bytes = std::span<const uint8_t>;

// Asks for every cache line of `bytes` into the first-level cache: a hint,
// which reads nothing and cannot fault (the replay's framing and its chain
// path ask for records they will read soon).
inline void PrefetchLines(Bytes bytes) {
  for (size_t line = 0; line < bytes.size(); line += 64) __builtin_prefetch(bytes.data() + line);
}

// Record types we use beyond <linux/perf_event.h>.
inline constexpr uint32_t kRecordMmap3 = 63;            // PERF_MMAP3_RECORD_TYPE
inline constexpr uint32_t kRecordFinishedRound = 68;    // perf tool: PERF_RECORD_FINISHED_ROUND
inline constexpr uint32_t kRecordThreadMap = 73;        // perf tool: PERF_RECORD_THREAD_MAP
inline constexpr uint32_t kRecordUserTypeStart = 64;    // perf tool-synthesized types start here
inline constexpr uint16_t kMiscMmapBuildId = 1 << 14;   // PERF_RECORD_MISC_MMAP_BUILD_ID
inline constexpr uint16_t kMiscCommExec = 1 << 13;      // PERF_RECORD_MISC_COMM_EXEC
// Maximum size of one record: header.size is a u16.
inline constexpr size_t kMaxRecordSize = 0xffff;

// How to parse samples and sample_id trailers: the relevant attr fields.
// Who may have set an MMAP2 record's build-id bit, which decides how its
// bytes are checked before they are taken for a build-id (see
// DecodeMmap()): of the whole capture, not of one event.
enum class Mmap2BuildIds : uint8_t {
  // The kernel, for an event that asked or stray, or this reader: each
  // zero-pads a short id.  Live captures and this reader's files.
  kZeroPadded,
  // Some event of the capture asked (attr.build_id): perf's synthesized
  // records may leave bytes after a short id.
  kAsked,
  // A file perf wrote where no event asked: the bit is the kernel's stray
  // one, or a later tool's (perf inject -B), which writes ids as the files
  // have them (8, 16 or 20 bytes: lld's fast, md5 or uuid, sha1).
  kUnasked,
};

struct SampleFormat {
  uint64_t sample_type = 0;
  uint64_t read_format = 0;
  bool sample_id_all = false;
  Mmap2BuildIds mmap2_build_ids = Mmap2BuildIds::kZeroPadded;
};

// Where each field lies, for one SampleFormat: in a PERF_RECORD_SAMPLE, and
// in the sample_id trailer of every other record the kernel writes.  The
// one description of both layouts: the decoder, RecordTime() and the
// encoder all read it, and none walks the sample_type bits itself.
// Computing it costs a few branches; hot paths keep one per format.
struct SampleLayout {
  static constexpr uint16_t kAbsent = 0xffff;

  SampleLayout() : SampleLayout(SampleFormat{}) {}
  explicit SampleLayout(const SampleFormat& format);

  SampleFormat format;
  // A sample's fixed-size fields, in the kernel's order: byte offsets from
  // the start of the record (the header included), kAbsent if the format
  // has no such field.  TID and CPU are two u32 (pid, tid; cpu, reserved).
  uint16_t identifier = kAbsent, ip = kAbsent, tid = kAbsent, time = kAbsent, addr = kAbsent,
           id = kAbsent, stream_id = kAbsent, cpu = kAbsent, period = kAbsent;
  // Where the fixed part ends: a sample is at least this long, and READ
  // (when present), then CALLCHAIN (when present), begin here.
  uint16_t fixed_end = 8;
  // PERF_SAMPLE_READ: bytes of one value (value, id, lost) and of the
  // time fields; with PERF_FORMAT_GROUP, nr comes first and the times
  // before nr values.  0 when the samples carry no READ.
  uint16_t read_value = 0, read_times = 0;
  bool read_group = false;
  bool callchain = false;
  // The sample_id trailer (sample_id_all): its size (0: none) and its
  // fields' offsets from its start.
  uint16_t trailer_size = 0;
  uint16_t trailer_tid = kAbsent, trailer_time = kAbsent, trailer_id = kAbsent,
           trailer_stream_id = kAbsent, trailer_cpu = kAbsent, trailer_identifier = kAbsent;

  // For the inline decoder, which reads every field without a branch: each
  // field's offset, or 0 (inside the header) when the format has none, and
  // a mask that keeps what was read there (all ones) or drops it (0).  The
  // id is SAMPLE_ID's, else SAMPLE_IDENTIFIER's, as the full decoder reads
  // them.
  enum Pick : uint8_t { kPickIp, kPickTid, kPickTime, kPickId, kPickCpu, kPickPeriod, kPicks };
  uint16_t pick_at[kPicks] = {};
  uint64_t pick_keep[kPicks] = {};
};

// The struct sample_id trailer (only the fields we use).  has_* tell which
// fields the sample_type provided.
struct SampleId {
  bool has_tid = false, has_time = false, has_id = false, has_cpu = false;
  uint32_t pid = 0, tid = 0;
  uint64_t time = 0;
  uint64_t id = 0;
  uint32_t cpu = 0;
};

enum class MmapFormat : uint8_t {
  kMmap,          // PERF_RECORD_MMAP: no inode, no build-id
  kMmap2,         // PERF_RECORD_MMAP2 with maj/min/ino/ino_generation
  kMmap2BuildId,  // PERF_RECORD_MMAP2 with misc bit 14: build-id instead of inode
  kMmap3,         // PERF_RECORD_MMAP3: inode and build-id with status
};

// Sentinel for MmapRecord::build_id_status when the record has no status.
inline constexpr uint8_t kNoBuildIdStatus = 0xff;

struct MmapRecord {
  MmapFormat format = MmapFormat::kMmap;
  uint16_t misc = 0;
  uint32_t pid = 0, tid = 0;
  uint64_t start = 0, len = 0, pgoff = 0;
  bool has_inode = false;
  uint32_t maj = 0, min = 0;
  uint64_t ino = 0, ino_generation = 0;
  uint32_t prot = 0, flags = 0;
  BuildId build_id;                          // empty when the record has none
  uint8_t build_id_status = kNoBuildIdStatus;  // MMAP3 only
  // MMAP3 only: PERF_MMAP3_UNLOADED on a module's unload (ABI version 2).
  uint16_t mmap3_flags = 0;
  std::string_view filename;
  SampleId sample_id;
  // MMAP2: PERF_RECORD_MISC_MMAP_BUILD_ID was set over bytes that are not a
  // build-id; read as the inode layout (format kMmap2).
  bool stray_build_id_bit = false;
};

struct CommRecord {
  uint32_t pid = 0, tid = 0;
  bool exec = false;
  std::string_view comm;
  SampleId sample_id;
};

// PERF_RECORD_FORK and PERF_RECORD_EXIT share a layout.
struct TaskRecord {
  bool exit = false;
  uint32_t pid = 0, ppid = 0, tid = 0, ptid = 0;
  uint64_t time = 0;
  SampleId sample_id;
};

// PERF_RECORD_LOST (ring buffer full: `lost` records dropped for event `id`)
// and PERF_RECORD_LOST_SAMPLES (samples dropped before reaching the buffer;
// `samples` is true and `id` is 0).
struct LostRecord {
  bool samples = false;
  uint64_t id = 0, lost = 0;
  SampleId sample_id;
};

// An array of u64 inside a record, read without alignment assumptions.
class U64Array {
 public:
  U64Array() = default;
  U64Array(const uint8_t* data, size_t count) : data_(data), count_(count) {}
  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  // The array's bytes (size() * 8 of them, not necessarily aligned).
  std::span<const uint8_t> bytes() const { return {data_, count_ * 8}; }
  uint64_t operator[](size_t i) const {
    uint64_t v;
    std::memcpy(&v, data_ + i * 8, 8);
    return v;
  }

 private:
  const uint8_t* data_ = nullptr;
  size_t count_ = 0;
};

struct SampleRecord {
  uint16_t misc = 0;  // cpumode in PERF_RECORD_MISC_CPUMODE_MASK
  uint64_t ip = 0;
  uint32_t pid = 0, tid = 0;
  uint64_t time = 0;
  uint64_t id = 0;
  uint32_t cpu = 0;
  uint64_t period = 1;
  U64Array callchain;  // includes PERF_CONTEXT_* markers as the kernel wrote them
};

// PERF_RECORD_KSYMBOL: kernel code that is not the image or a module came
// (register) or went (unregister): a BPF program's JITed function
// ("bpf_prog_<tag>_<name>"), a BPF dispatcher or trampoline, or other
// out-of-line code.  The range is [addr, addr + len).
struct KsymbolRecord {
  uint64_t addr = 0;
  uint32_t len = 0;
  uint16_t ksym_type = 0;  // PERF_RECORD_KSYMBOL_TYPE_*
  bool unregister = false;
  std::string_view name;
  SampleId sample_id;
  // Bytes after the trailer (see SampleIdOffset()): not part of the record.
  uint16_t excess = 0;
};

// PERF_RECORD_BPF_EVENT: a BPF program was loaded or unloaded; its id is
// what the bpf() syscall finds it by while it exists, its tag (a hash of
// its instructions) what it is.
struct BpfEventRecord {
  uint16_t type = 0;  // PERF_BPF_EVENT_PROG_LOAD or _UNLOAD
  uint16_t flags = 0;
  uint32_t id = 0;
  uint8_t tag[8] = {};
  SampleId sample_id;
  uint16_t excess = 0;  // as KsymbolRecord's
};

using Record = std::variant<std::monostate, MmapRecord, CommRecord, TaskRecord, LostRecord,
                            SampleRecord, KsymbolRecord, BpfEventRecord>;

enum class DecodeStatus {
  kOk,
  kIgnored,    // a well-formed record of a type we do not model
  kTruncated,  // span shorter than header.size, or fields run past the end
  kBadSize,    // header.size smaller than a header, not a multiple of 8, or
               // not what the span holds
  kMalformed,  // fields inconsistent (unterminated string, impossible sizes)
};

const char* DecodeStatusName(DecodeStatus status);

// Decodes one record.  `bytes` must be exactly one record (header.size bytes).
DecodeStatus DecodeRecord(Bytes bytes, const SampleLayout& layout, Record* out);
// The same for a record that is a sample, without going through Record (the
// hot path: most records are samples).  kIgnored if it is another type.
// Inline for a well-formed sample without PERF_SAMPLE_READ, which is
// nearly every record a profile holds: a call and the generic walk cost
// about half a flat sample's decoding (callgrind).  Everything else, and
// every record the inline checks do not accept, goes to the full decoder,
// whose verdict is the only one: the inline part accepts exactly what it
// accepts, with the same fields (a test holds the two to that).
DecodeStatus DecodeSampleRecordFull(Bytes bytes, const SampleLayout& layout, SampleRecord* out);

// A sample record's fixed fields and call chain, read where its layout puts
// them when asked for: a caller that needs four fields loads four, and
// keeps them in registers (a SampleRecord filled for it is stored whole
// and read back).  Of() makes the inline decoder's checks; where they
// fail, only DecodeSampleRecordFull() may say what the record holds.
// DecodeSampleRecord() is this view copied into a SampleRecord.
class SampleView {
 public:
  [[gnu::always_inline]] static bool Of(Bytes bytes, const SampleLayout& l, SampleView* out) {
    perf_event_header h;
    if (bytes.size() < sizeof(h) || l.read_value != 0) return false;
    std::memcpy(&h, bytes.data(), sizeof(h));
    // CheckFrame()'s rules for a kernel record, and the fixed fields' room.
    if (h.type != PERF_RECORD_SAMPLE || h.size != bytes.size() || h.size % 8 != 0 ||
        h.size < l.fixed_end)
      return false;
    out->p_ = bytes.data();
    out->l_ = &l;
    out->misc_ = h.misc;
    out->callchain_ = U64Array();
    if (l.callchain) {
      // The chain's nr and its words must lie inside the record.
      const size_t room = h.size - l.fixed_end;
      if (room < 8) return false;
      const uint64_t nr = out->Load64(l.fixed_end);
      if (nr > (room - 8) / 8) return false;
      out->callchain_ = U64Array(bytes.data() + l.fixed_end + 8, nr);
    }
    return true;
  }

  uint16_t misc() const { return misc_; }
  uint64_t ip() const { return Pick64(SampleLayout::kPickIp); }
  uint32_t pid() const { return Pick32(SampleLayout::kPickTid, 0); }
  uint32_t tid() const { return Pick32(SampleLayout::kPickTid, 4); }
  uint64_t time() const { return Pick64(SampleLayout::kPickTime); }
  uint64_t id() const { return Pick64(SampleLayout::kPickId); }
  uint32_t cpu() const { return Pick32(SampleLayout::kPickCpu, 0); }
  // 1 when the samples carry no period.
  uint64_t period() const {
    return Pick64(SampleLayout::kPickPeriod) | (~l_->pick_keep[SampleLayout::kPickPeriod] & 1);
  }
  U64Array callchain() const { return callchain_; }

 private:
  uint64_t Load64(uint16_t at) const {
    uint64_t v;
    std::memcpy(&v, p_ + at, 8);
    return v;
  }
  uint64_t Pick64(SampleLayout::Pick f) const { return Load64(l_->pick_at[f]) & l_->pick_keep[f]; }
  uint32_t Pick32(SampleLayout::Pick f, uint16_t plus) const {
    uint32_t v;
    std::memcpy(&v, p_ + l_->pick_at[f] + plus, 4);
    return v & static_cast<uint32_t>(l_->pick_keep[f]);
  }

  const uint8_t* p_ = nullptr;
  const SampleLayout* l_ = nullptr;
  uint16_t misc_ = 0;
  U64Array callchain_;
};

[[gnu::always_inline]] inline DecodeStatus DecodeSampleRecord(Bytes bytes,
                                                              const SampleLayout& l,
                                                              SampleRecord* out) {
  SampleView v;
  if (!SampleView::Of(bytes, l, &v)) return DecodeSampleRecordFull(bytes, l, out);
  SampleRecord& s = *out;
  s.misc = v.misc();
  s.ip = v.ip();
  s.pid = v.pid();
  s.tid = v.tid();
  s.time = v.time();
  s.id = v.id();
  s.cpu = v.cpu();
  s.period = v.period();
  s.callchain = v.callchain();
  return DecodeStatus::kOk;
}

// Where a non-sample record's sample_id trailer of `trailer_size` bytes
// begins: at its end, but for KSYMBOL, BPF_EVENT and TEXT_POKE records,
// which can be longer than what is written in them.  The kernel writes one
// into each side-band event that wants it in turn (perf_event_ksymbol_output(),
// perf_event_bpf_output(), perf_event_text_poke_output()) and grows its
// size by each event's trailer
// without restoring it: every event served after the first gets a record
// longer by the trailers of those before, with its own trailer where the
// body ends and, after that, whatever bytes the ring buffer held.  (Two
// captures that follow BPF programs, perf's included, are enough.)  Their
// bodies say their length: BPF_EVENT's is fixed, KSYMBOL's name is
// NUL-terminated and padded to 8 bytes, as every writer pads it, and
// TEXT_POKE gives the lengths of its bytes, padded alike.
size_t SampleIdOffset(Bytes bytes, size_t trailer_size);
// Where such a record's body ends by its contents (0 for other records,
// and for one whose header size is not the span's or whose name is not
// terminated).
size_t SideBandBodyEnd(Bytes bytes);
// Such a record longer than its contents and a trailer of `trailer_size`
// bytes, copied into `out` without the bytes after the trailer and with
// its size set to match; false, and `out` untouched, for any other.
bool CutToContents(Bytes record, size_t trailer_size, std::vector<uint8_t>* out);

// The timestamp of a record for ordering: a sample's time, or the time in the
// sample_id trailer.  nullopt when the format carries no time for it, and
// for a record whose header size is not the span's.
std::optional<uint64_t> RecordTimeOutOfLine(Bytes bytes, const SampleLayout& layout);
inline std::optional<uint64_t> RecordTime(Bytes bytes, const SampleLayout& layout) {
  // Inline only for a sample of a format with a time (nearly every record
  // of a capture, once each, before the sorter): one load after the checks
  // RecordTimeOutOfLine() makes, which handles every other case.  A format
  // without a time has layout.time == kAbsent, which no record whose header
  // agrees with its span is long enough for.
  static_assert(SampleLayout::kAbsent + 8u > kMaxRecordSize);
  if (bytes.size() >= sizeof(perf_event_header)) {
    perf_event_header h;
    std::memcpy(&h, bytes.data(), sizeof(h));
    if (h.type == PERF_RECORD_SAMPLE && h.size == bytes.size() && bytes.size() >= layout.time + 8u) {
      uint64_t time;
      std::memcpy(&time, bytes.data() + layout.time, sizeof(time));
      return time;
    }
  }
  return RecordTimeOutOfLine(bytes, layout);
}

// The same, for callers that hold a format and not its layout (each call
// computes the layout).
inline DecodeStatus DecodeRecord(Bytes bytes, const SampleFormat& format, Record* out) {
  return DecodeRecord(bytes, SampleLayout(format), out);
}
inline DecodeStatus DecodeSampleRecord(Bytes bytes, const SampleFormat& format,
                                       SampleRecord* out) {
  return DecodeSampleRecord(bytes, SampleLayout(format), out);
}
inline std::optional<uint64_t> RecordTime(Bytes bytes, const SampleFormat& format) {
  return RecordTime(bytes, SampleLayout(format));
}

// Size in bytes of the sample_id trailer for this format (0 if none).
size_t SampleIdSize(const SampleFormat& format);

// Reads the common header; false if fewer than 8 bytes.  Inline: report
// calls it for every record, twice (the scan and the replay).
inline bool ReadHeader(Bytes bytes, perf_event_header* header) {
  if (bytes.size() < sizeof(*header)) return false;
  std::memcpy(header, bytes.data(), sizeof(*header));
  return true;
}

}  // namespace mmap3

#endif  // MMAP3_READER_RECORD_H_
