// perf.data files: perf's documented on-disk format
// (tools/perf/Documentation/perf.data-file-format.txt), native endian only.
//
// Layout we write:  header | ids of each attr | attrs | data | feature table
// | feature payloads.  Features: HEADER_BUILD_ID (perf's table of build-ids
// per path), and kFeatureReaderMeta, a JSON document with what perf's format
// has no place for (capture mode, per-mapping build-id sources, lost counts).
// perf skips feature bits it does not know, so the file stays readable by
// perf.  MMAP3 records (type 63) are written as the kernel produced them;
// perf 6.1 counts them as unknown and then fails at the next FINISHED_ROUND,
// so MMAP3-mode captures go through RunInject() (commands.h) for perf.
//
// PerfDataReader refuses what it cannot frame: pipe mode, the other
// endianness, zstd-compressed data.
//
// Contract: PerfDataWriter buffers records and patches the header in
// Finish().  The file is written without a name (O_TMPFILE, or a fresh
// hidden name beside the output where that is not available) and takes the
// output's name only once it is complete and fsynced: a capture that fails
// (a full filesystem) or is killed never leaves a file with a zeroed header,
// and an existing output stays as it was until then.  A symlink at the
// output is replaced, never written through.  Outputs that are not regular
// files (/dev/null) are written in place.  PerfDataReader maps the file;
// spans it returns stay valid as long as the reader lives.
#ifndef MMAP3_READER_PERF_DATA_H_
#define MMAP3_READER_PERF_DATA_H_

#include <linux/perf_event.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "build_id.h"
#include "files.h"
#include "keyed_hash.h"
#include "record.h"
#include "result.h"

namespace mmap3 {

inline constexpr int kFeatureBuildId = 2;       // HEADER_BUILD_ID
inline constexpr int kFeatureCompressed = 27;   // HEADER_COMPRESSED (zstd data; unsupported)
inline constexpr int kFeatureReaderMeta = 200;  // ours; beyond any perf feature
inline constexpr int kFeatureBits = 256;

struct PerfFileAttr {
  perf_event_attr attr{};
  std::vector<uint64_t> ids;
};

// One HEADER_BUILD_ID entry.
struct BuildIdEntry {
  int32_t pid = -1;  // perf: -1 (HOST_KERNEL_ID) for host DSOs
  uint16_t misc = PERF_RECORD_MISC_USER;  // cpumode: USER or KERNEL
  BuildId build_id;
  std::string filename;
};

class PerfDataWriter {
 public:
  // `use_tmpfile` false: a hidden name even where O_TMPFILE works (tests).
  static Result<PerfDataWriter> Create(const std::string& path, std::vector<PerfFileAttr> attrs,
                                       bool use_tmpfile = true);
  PerfDataWriter(PerfDataWriter&& other) noexcept;
  PerfDataWriter& operator=(PerfDataWriter&&) = delete;
  ~PerfDataWriter();

  Status Write(Bytes record);
  // Writes the feature sections and the final header, fsyncs the file and
  // gives it the output's name.
  // `more`: other feature sections, by bit (empty payloads are left out).
  Status Finish(const std::vector<BuildIdEntry>& build_ids, const std::string& meta_json,
                std::vector<std::pair<int, std::vector<uint8_t>>> more = {});
  uint64_t data_size() const { return data_size_ + buffer_.size(); }
  const std::string& path() const { return path_; }

 private:
  static constexpr uint64_t kWriteChunk = uint64_t{2} << 20;
  PerfDataWriter() = default;
  // Writes the buffer's first `bytes` (at most all of it) after the data
  // written so far.
  Status Flush(size_t bytes);
  Status Publish();

  UniqueFd fd_;
  std::string path_;
  // Where the file is written until Finish() names it: the output's
  // directory, and the hidden name ("" for an O_TMPFILE).  No directory:
  // the output is written in place.
  UniqueFd dir_;
  std::string temp_name_;
  bool in_place_ = false;
  std::vector<PerfFileAttr> attrs_;
  uint64_t attrs_offset_ = 0;
  uint64_t data_offset_ = 0;
  uint64_t data_size_ = 0;
  std::vector<uint8_t> buffer_;
};

class PerfDataReader {
 public:
  static Result<PerfDataReader> Open(const std::string& path);
  PerfDataReader(PerfDataReader&& other) noexcept;
  PerfDataReader& operator=(PerfDataReader&&) = delete;
  ~PerfDataReader();

  const std::vector<PerfFileAttr>& attrs() const { return attrs_; }
  const std::vector<BuildIdEntry>& build_ids() const { return build_ids_; }
  const std::string& meta_json() const { return meta_json_; }
  // A feature section's bytes (empty if the file has none): those this
  // class does not parse itself (HEADER_BPF_PROG_INFO, HEADER_BPF_BTF).
  Bytes feature(int bit) const {
    auto it = sections_.find(bit);
    return it == sections_.end() ? Bytes{} : it->second;
  }
  bool HasFeature(int bit) const { return (features_[bit / 64] >> (bit % 64)) & 1; }
  Bytes data() const { return {base_ + data_offset_, data_size_}; }

  // Calls fn(Bytes) for each record of the data section.  A record with an
  // impossible size ends iteration (the rest cannot be framed); returns the
  // number of such stops (0 or 1) so the caller can count it.
  template <typename Fn>
  uint64_t ForEachRecord(Fn&& fn) const;

  // Gives back the memory of the file's pages before `upto` (a pointer
  // into data()): a long file is read front to back, and its pages need
  // not stay resident once read.  The bytes stay readable (the mapping is
  // private and read-only: a later access reads them from the file again),
  // so this costs time, never correctness, if something looks back.
  void DropPagesBefore(const uint8_t* upto) const;

 private:
  PerfDataReader() = default;
  Status Parse();

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  uint64_t data_offset_ = 0, data_size_ = 0;
  uint64_t features_[kFeatureBits / 64] = {};
  std::vector<PerfFileAttr> attrs_;
  std::vector<BuildIdEntry> build_ids_;
  std::string meta_json_;
  std::unordered_map<int, Bytes> sections_;
};

// The sample format each record of a file was written with.  With one
// format for all events that is trivial; otherwise every event must carry
// PERF_SAMPLE_IDENTIFIER (perf adds it whenever formats differ), whose
// position does not depend on the format: the first u64 of a sample, the
// last u64 of any other kernel record.  Records without a known id
// (synthesized ones carry 0) get the first event's format.
class FileFormats {
 public:
  // `perfs`: a file perf wrote (no metadata of ours), whose MMAP2 build-id
  // bits are checked as Mmap2BuildIds::kUnasked says where no event asked.
  static Result<FileFormats> Create(const std::vector<PerfFileAttr>& attrs, bool perfs = false);
  // Valid as long as this FileFormats.
  const SampleLayout& For(Bytes record) const { return uniform_ ? first_ : Lookup(record); }

 private:
  FileFormats() = default;
  const SampleLayout& Lookup(Bytes record) const;
  SampleLayout first_;
  bool uniform_ = true;
  // Layouts by event id; node-based, so references to them stay valid.
  KeyedMap<uint64_t, SampleLayout> by_id_;
  std::vector<uint16_t> trailer_sizes_;  // the layouts' distinct ones
};

template <typename Fn>
uint64_t PerfDataReader::ForEachRecord(Fn&& fn) const {
  Bytes d = data();
  size_t off = 0;
  while (d.size() - off >= sizeof(perf_event_header)) {
    perf_event_header h;
    std::memcpy(&h, d.data() + off, sizeof(h));
    if (h.size < sizeof(h) || h.size > d.size() - off) return 1;
    // The record about 40 records on (of this one's size), every cache
    // line of it, asked for into L1 now: replay reads records faster than
    // the hardware's prefetch brings them, and that prefetch stops at each
    // 4 KiB page.  How far ahead depends on the CPU.  On an AMD EPYC, 10
    // records ahead (one line) gave flat +3 to 4% and chains +3 to 4%,
    // and 16 was worse on the flat file.  On an Intel Xeon (Emerald
    // Rapids), 10 ahead left 16% on the flat file and 17% on the chains
    // (192-byte records, whose other lines one prefetch a record did not
    // ask for): quiet alternating runs there, best of 3 to 4, flat 32.9 ->
    // 38.2 M records/s, chains 12.35 -> 14.50 M samples/s; 24 to 60 ahead
    // were all within noise of 40, and one line a record, 40 ahead, gave
    // the chains only +8%.  With no prefetch at all the Xeon's flat replay
    // was 18% slower than with 10 ahead.
    const size_t ahead = 40 * size_t{h.size};
    if (off + ahead + h.size <= d.size()) PrefetchLines(d.subspan(off + ahead, h.size));
    fn(d.subspan(off, h.size));
    off += h.size;
  }
  return 0;
}

}  // namespace mmap3

#endif  // MMAP3_READER_PERF_DATA_H_
