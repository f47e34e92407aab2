#include "perf_data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "files.h"

namespace mmap3 {
namespace {

constexpr char kMagic[8] = {'P', 'E', 'R', 'F', 'I', 'L', 'E', '2'};
constexpr uint16_t kMiscBuildIdSize = 1 << 15;  // PERF_RECORD_MISC_BUILD_ID_SIZE
constexpr size_t kNameAlign = 64;               // perf pads build-id filenames to this

struct FileSection {
  uint64_t offset;
  uint64_t size;
};

struct FileHeader {
  char magic[8];
  uint64_t size;
  uint64_t attr_size;  // sizeof(perf_event_attr) + sizeof(FileSection)
  FileSection attrs;
  FileSection data;
  FileSection event_types;
  uint64_t features[kFeatureBits / 64];
};
static_assert(sizeof(FileHeader) == 104);

// Fixed part of a HEADER_BUILD_ID entry.
struct BuildIdEntryHeader {
  perf_event_header header;
  int32_t pid;
  uint8_t build_id[20];
  uint8_t size;
  uint8_t reserved1;
  uint16_t reserved2;
};
static_assert(sizeof(BuildIdEntryHeader) == 36);

void Append(std::vector<uint8_t>& out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}

}  // namespace

Result<PerfDataWriter> PerfDataWriter::Create(const std::string& path,
                                              std::vector<PerfFileAttr> attrs, bool use_tmpfile) {
  PerfDataWriter w;
  w.path_ = path;
  Result<UniqueFd> in_place = OpenOutputInPlace(path);
  if (!in_place.ok()) return in_place.status();
  if (in_place->valid()) {
    // A device (/dev/null), not a file to replace.  A regular file reached
    // through the caller's descriptor (/dev/stdout, /dev/fd/N) is refused:
    // a perf.data file is written at offsets from its start (its header
    // last), over whatever else is written to that descriptor (the
    // reader's own summary on stdout, the recorded command's output, a
    // script's lines before it) or into a file opened to append, and would
    // not be readable (helper-59's and helper-60's reviews).
    struct stat st;
    if (fstat(in_place->get(), &st) == 0 && S_ISREG(st.st_mode))
      return Status::Failure(
          path + ": a perf.data file is written at offsets from its start, and others write to "
                 "this descriptor too; write the capture to a file by name (-o FILE)");
    w.in_place_ = true;
    w.fd_ = std::move(*in_place);
  } else {
    // Written beside the output, under no name or a hidden one, so that
    // nothing incomplete ever has the output's name (see the header).
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    w.dir_.Reset(open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!w.dir_.valid()) return ErrnoStatus("open the directory of " + path);
    if (use_tmpfile) {
      w.fd_.Reset(openat(w.dir_.get(), ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644));
      // Naming it later goes through /proc/self/fd.
      if (w.fd_.valid() &&
          access(("/proc/self/fd/" + std::to_string(w.fd_.get())).c_str(), F_OK) != 0)
        w.fd_.Reset();
    }
    for (int attempt = 0; !w.fd_.valid() && attempt < 64; ++attempt) {
      std::string name = HiddenName(path);
      w.fd_.Reset(openat(w.dir_.get(), name.c_str(),
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
      if (w.fd_.valid()) {
        w.temp_name_ = std::move(name);
      } else if (errno != EEXIST) {
        return ErrnoStatus("create a file beside " + path);
      }
    }
    if (!w.fd_.valid()) return Status::Failure("no unused temporary name beside " + path);
  }
  w.attrs_ = std::move(attrs);
  // ids arrays first, then the attrs that point at them, then data.
  uint64_t off = sizeof(FileHeader);
  for (const PerfFileAttr& a : w.attrs_) off += a.ids.size() * sizeof(uint64_t);
  w.attrs_offset_ = off;
  off += w.attrs_.size() * (sizeof(perf_event_attr) + sizeof(FileSection));
  w.data_offset_ = (off + 7) & ~uint64_t{7};
  return w;
}

PerfDataWriter::PerfDataWriter(PerfDataWriter&& o) noexcept
    : fd_(std::move(o.fd_)), path_(std::move(o.path_)), dir_(std::move(o.dir_)),
      temp_name_(std::exchange(o.temp_name_, {})), in_place_(o.in_place_),
      attrs_(std::move(o.attrs_)), attrs_offset_(o.attrs_offset_), data_offset_(o.data_offset_),
      data_size_(o.data_size_), buffer_(std::move(o.buffer_)) {}

PerfDataWriter::~PerfDataWriter() {
  // Never finished (an error, a write that failed): the output keeps what
  // it had.  An O_TMPFILE goes with its descriptor.
  if (!temp_name_.empty()) unlinkat(dir_.get(), temp_name_.c_str(), 0);
}

Status PerfDataWriter::Publish() {
  if (in_place_) return {};
  const size_t slash = path_.rfind('/');
  const std::string base = slash == std::string::npos ? path_ : path_.substr(slash + 1);
  if (temp_name_.empty()) {
    // An O_TMPFILE: a hidden name first (linkat never replaces), then the
    // output's by rename, which replaces atomically.
    const std::string self = "/proc/self/fd/" + std::to_string(fd_.get());
    for (int attempt = 0; temp_name_.empty() && attempt < 64; ++attempt) {
      std::string name = HiddenName(path_);
      if (linkat(AT_FDCWD, self.c_str(), dir_.get(), name.c_str(), AT_SYMLINK_FOLLOW) == 0)
        temp_name_ = std::move(name);
      else if (errno != EEXIST)
        return ErrnoStatus("link the finished " + path_);
    }
    if (temp_name_.empty()) return Status::Failure("no unused temporary name beside " + path_);
  }
  if (renameat(dir_.get(), temp_name_.c_str(), dir_.get(), base.c_str()) != 0)
    return ErrnoStatus("rename the finished file to " + path_);
  temp_name_.clear();
  return {};
}

Status PerfDataWriter::Write(Bytes record) {
  buffer_.insert(buffer_.end(), record.begin(), record.end());
  // The data goes out in writes that end on the file's 2 MiB boundaries
  // (whole 2 MiB from the second on): where the page cache holds files in
  // large folios (ext4 on this host's Linux 6.18 does; Debian 12's 6.1
  // does not, and there this changes nothing) each such write makes one
  // 2 MiB folio, which a reader's mmap maps with one TLB entry.  Written
  // in 1 MiB pieces, the same file replayed with call chains about 20%
  // slower until it was read back from the disk (QEMU guest, Xeon; the
  // reader's README, session 37).
  const uint64_t end = data_offset_ + data_size_;
  const uint64_t upto_boundary = kWriteChunk - end % kWriteChunk;
  if (buffer_.size() >= upto_boundary) return Flush(upto_boundary);
  return {};
}

Status PerfDataWriter::Flush(size_t bytes) {
  bytes = std::min(bytes, buffer_.size());
  if (bytes == 0) return {};
  Status s = WriteAll(fd_.get(), buffer_.data(), bytes, data_offset_ + data_size_, path_);
  if (!s.ok()) return s;
  data_size_ += bytes;
  buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<ptrdiff_t>(bytes));
  return {};
}

Status PerfDataWriter::Finish(const std::vector<BuildIdEntry>& build_ids,
                              const std::string& meta_json,
                              std::vector<std::pair<int, std::vector<uint8_t>>> more) {
  if (Status s = Flush(buffer_.size()); !s.ok()) return s;

  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.size = sizeof(FileHeader);
  h.attr_size = sizeof(perf_event_attr) + sizeof(FileSection);

  // ids, then attrs
  std::vector<uint8_t> head;
  uint64_t ids_off = sizeof(FileHeader);
  std::vector<uint8_t> attr_bytes;
  for (const PerfFileAttr& a : attrs_) {
    FileSection ids{ids_off, a.ids.size() * sizeof(uint64_t)};
    Append(head, a.ids.data(), ids.size);
    ids_off += ids.size;
    perf_event_attr attr = a.attr;
    attr.size = sizeof(perf_event_attr);
    Append(attr_bytes, &attr, sizeof(attr));
    Append(attr_bytes, &ids, sizeof(ids));
  }
  head.insert(head.end(), attr_bytes.begin(), attr_bytes.end());
  if (Status s = WriteAll(fd_.get(), head.data(), head.size(), sizeof(FileHeader), path_); !s.ok())
    return s;
  h.attrs = {attrs_offset_, attr_bytes.size()};
  h.data = {data_offset_, data_size_};

  // Feature payloads, in bit order, preceded by their section table.
  std::vector<std::pair<int, std::vector<uint8_t>>> features;
  {
    std::vector<uint8_t> payload;
    for (const BuildIdEntry& e : build_ids) {
      size_t name_len = e.filename.size() + 1;
      size_t padded = (name_len + kNameAlign - 1) / kNameAlign * kNameAlign;
      // An entry's size is 16 bits: a name too long for that (only a
      // crafted input has one; paths are at most PATH_MAX) is left out
      // rather than written with a wrapped size that corrupts the table.
      if (sizeof(BuildIdEntryHeader) + padded > UINT16_MAX) continue;
      BuildIdEntryHeader b{};
      b.header.type = 0;
      b.header.misc = static_cast<uint16_t>(e.misc | kMiscBuildIdSize);
      b.header.size = static_cast<uint16_t>(sizeof(b) + padded);
      b.pid = e.pid;
      std::memcpy(b.build_id, e.build_id.data(), e.build_id.size());
      b.size = static_cast<uint8_t>(e.build_id.size());
      Append(payload, &b, sizeof(b));
      Append(payload, e.filename.data(), e.filename.size());
      payload.resize(payload.size() + (padded - e.filename.size()), 0);
    }
    features.emplace_back(kFeatureBuildId, std::move(payload));
  }
  if (!meta_json.empty()) {
    std::vector<uint8_t> payload(meta_json.begin(), meta_json.end());
    features.emplace_back(kFeatureReaderMeta, std::move(payload));
  }
  for (auto& [bit, payload] : more) {
    if (bit > kFeatureBuildId && bit < kFeatureBits && bit != kFeatureReaderMeta && !payload.empty())
      features.emplace_back(bit, std::move(payload));
  }
  // The table lists sections in bit order.
  std::stable_sort(features.begin(), features.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  uint64_t table_off = data_offset_ + data_size_;
  uint64_t payload_off = table_off + features.size() * sizeof(FileSection);
  std::vector<uint8_t> tail;
  std::vector<FileSection> table;
  for (auto& [bit, payload] : features) {
    h.features[bit / 64] |= uint64_t{1} << (bit % 64);
    table.push_back({payload_off + tail.size(), payload.size()});
    tail.insert(tail.end(), payload.begin(), payload.end());
  }
  if (Status s = WriteAll(fd_.get(), table.data(), table.size() * sizeof(FileSection), table_off,
                          path_);
      !s.ok())
    return s;
  if (Status s = WriteAll(fd_.get(), tail.data(), tail.size(), payload_off, path_); !s.ok())
    return s;
  if (Status s = WriteAll(fd_.get(), &h, sizeof(h), 0, path_); !s.ok()) return s;
  // Named only once it is on disk: a crash right after the rename must not
  // leave an empty file under the output's name either.
  if (!in_place_ && fsync(fd_.get()) != 0) return ErrnoStatus("fsync " + path_);
  if (Status s = Publish(); !s.ok()) return s;
  return fd_.Close(path_);
}

Result<PerfDataReader> PerfDataReader::Open(const std::string& path) {
  PerfDataReader r;
  r.path_ = path;
  auto opened = OpenRegularFile(path);  // pipe-mode input is not supported
  if (!opened.ok()) return opened.status();
  UniqueFd fd = std::move(*opened);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + path);
  r.size_ = static_cast<size_t>(st.st_size);
  if (r.size_ < sizeof(FileHeader))
    return Status::Failure(path + ": too small for a perf.data header");
  void* p = mmap(nullptr, r.size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  fd.Reset();  // the mapping keeps the file
  if (p == MAP_FAILED) return ErrnoStatus("mmap " + path);
  r.base_ = static_cast<const uint8_t*>(p);
  if (Status s = r.Parse(); !s.ok()) return s;
  return r;
}

void PerfDataReader::DropPagesBefore(const uint8_t* upto) const {
  if (base_ == nullptr || upto <= base_) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t n = std::min(static_cast<size_t>(upto - base_), size_) / page * page;
  // Advice only: a failure leaves the pages resident, nothing else.
  if (n != 0) (void)madvise(const_cast<uint8_t*>(base_), n, MADV_DONTNEED);
}

PerfDataReader::PerfDataReader(PerfDataReader&& o) noexcept
    : path_(std::move(o.path_)), base_(o.base_), size_(o.size_), data_offset_(o.data_offset_),
      data_size_(o.data_size_), attrs_(std::move(o.attrs_)), build_ids_(std::move(o.build_ids_)),
      meta_json_(std::move(o.meta_json_)), sections_(std::move(o.sections_)) {
  std::memcpy(features_, o.features_, sizeof(features_));
  o.base_ = nullptr;
}

PerfDataReader::~PerfDataReader() {
  if (base_ != nullptr) munmap(const_cast<uint8_t*>(base_), size_);
}

Status PerfDataReader::Parse() {
  FileHeader h;
  std::memcpy(&h, base_, sizeof(h));
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) {
    uint64_t magic, swapped;
    std::memcpy(&magic, kMagic, 8);
    std::memcpy(&swapped, h.magic, 8);
    if (__builtin_bswap64(swapped) == magic)
      return Status::Failure(path_ + ": perf.data from a machine of the other endianness "
                                     "is not supported");
    return Status::Failure(path_ + ": not a perf.data file (bad magic; pipe-mode files are not "
                                   "supported)");
  }
  auto in_file = [&](const FileSection& s) {
    return s.offset <= size_ && s.size <= size_ - s.offset;
  };
  if (h.size < sizeof(FileHeader) || !in_file(h.attrs) || !in_file(h.data))
    return Status::Failure(path_ + ": corrupt header (sections outside the file)");
  if (h.data.size == 0) return Status::Failure(path_ + ": empty data section (capture unfinished?)");
  data_offset_ = h.data.offset;
  data_size_ = h.data.size;
  std::memcpy(features_, h.features, sizeof(features_));
  // Compressed data is PERF_RECORD_COMPRESSED records of zstd frames: none
  // of it could be framed or decoded here.
  if (HasFeature(kFeatureCompressed))
    return Status::Failure(path_ + ": compressed (zstd) perf.data is not supported; "
                                   "re-record with perf record -z off");

  if (h.attr_size <= sizeof(FileSection) || h.attr_size > 4096)
    return Status::Failure(path_ + ": corrupt attr size");
  const size_t attr_bytes = h.attr_size - sizeof(FileSection);
  // Each attr's ids are a section of the file; sections that overlap (a
  // crafted file can point every attr at the whole file) would multiply
  // the memory we copy them into.  Valid files need at most the file size.
  uint64_t ids_total = 0;
  for (uint64_t off = 0; off + h.attr_size <= h.attrs.size; off += h.attr_size) {
    PerfFileAttr a;
    const uint8_t* p = base_ + h.attrs.offset + off;
    std::memcpy(&a.attr, p, std::min(attr_bytes, sizeof(perf_event_attr)));
    FileSection ids;
    std::memcpy(&ids, p + attr_bytes, sizeof(ids));
    if (!in_file(ids)) return Status::Failure(path_ + ": corrupt attr id section");
    ids_total += ids.size;
    if (ids_total > size_)
      return Status::Failure(path_ + ": corrupt attr id sections (they overlap)");
    a.ids.resize(ids.size / sizeof(uint64_t));
    if (!a.ids.empty())
      std::memcpy(a.ids.data(), base_ + ids.offset, a.ids.size() * sizeof(uint64_t));
    attrs_.push_back(std::move(a));
  }
  if (attrs_.empty()) return Status::Failure(path_ + ": no event attributes");

  // Feature sections: a table right after the data, one entry per set bit.
  uint64_t table = h.data.offset + h.data.size;
  int index = 0;
  for (int bit = 0; bit < kFeatureBits; ++bit) {
    if (!HasFeature(bit)) continue;
    FileSection sec;
    uint64_t entry = table + static_cast<uint64_t>(index++) * sizeof(FileSection);
    if (entry + sizeof(sec) > size_) return Status::Failure(path_ + ": truncated feature table");
    std::memcpy(&sec, base_ + entry, sizeof(sec));
    if (!in_file(sec)) return Status::Failure(path_ + ": corrupt feature section");
    const uint8_t* p = base_ + sec.offset;
    if (bit == kFeatureBuildId) {
      size_t off = 0;
      while (sec.size - off >= sizeof(BuildIdEntryHeader)) {
        BuildIdEntryHeader b;
        std::memcpy(&b, p + off, sizeof(b));
        if (b.header.size < sizeof(b) || b.header.size > sec.size - off) break;
        BuildIdEntry e;
        e.pid = b.pid;
        e.misc = b.header.misc & PERF_RECORD_MISC_CPUMODE_MASK;
        // Before perf 5.11 the size field did not exist: ids were 20 bytes,
        // and perf trims trailing zeros... we keep all 20 as it does.
        size_t idsize = (b.header.misc & kMiscBuildIdSize) ? std::min<size_t>(b.size, 20) : 20;
        e.build_id = BuildId(b.build_id, idsize);
        const char* name = reinterpret_cast<const char*>(p + off + sizeof(b));
        size_t max = b.header.size - sizeof(b);
        e.filename.assign(name, strnlen(name, max));
        build_ids_.push_back(std::move(e));
        off += b.header.size;
      }
    } else if (bit == kFeatureReaderMeta) {
      meta_json_.assign(reinterpret_cast<const char*>(p), sec.size);
    } else {
      sections_[bit] = Bytes(p, sec.size);
    }
  }
  return {};
}

Result<FileFormats> FileFormats::Create(const std::vector<PerfFileAttr>& attrs, bool perfs) {
  FileFormats f;
  if (attrs.empty()) return Status::Failure("no event attributes");
  // Whether an event asked for build-ids in MMAP2, for the whole file: the
  // one that asks is the one with the mapping records (perf's tracking
  // event).
  const Mmap2BuildIds build_ids =
      std::any_of(attrs.begin(), attrs.end(),
                  [](const PerfFileAttr& a) { return a.attr.build_id != 0; })
          ? Mmap2BuildIds::kAsked
      : perfs ? Mmap2BuildIds::kUnasked
              : Mmap2BuildIds::kZeroPadded;
  const perf_event_attr& a0 = attrs[0].attr;
  f.first_ = SampleLayout({a0.sample_type, a0.read_format, a0.sample_id_all != 0, build_ids});
  const SampleFormat& first = f.first_.format;
  bool identified = true;
  for (const PerfFileAttr& a : attrs) {
    SampleFormat g{a.attr.sample_type, a.attr.read_format, a.attr.sample_id_all != 0, build_ids};
    if (g.sample_type != first.sample_type || g.read_format != first.read_format ||
        g.sample_id_all != first.sample_id_all)
      f.uniform_ = false;
    if (!(g.sample_type & PERF_SAMPLE_IDENTIFIER)) identified = false;
    const SampleLayout layout(g);
    for (uint64_t id : a.ids) f.by_id_.insert_or_assign(id, layout);
    const uint16_t size = layout.trailer_size;
    if (std::find(f.trailer_sizes_.begin(), f.trailer_sizes_.end(), size) == f.trailer_sizes_.end())
      f.trailer_sizes_.push_back(size);
  }
  if (!f.uniform_ && !identified)
    return Status::Failure("events with different sample formats and no identifier");
  return f;
}

const SampleLayout& FileFormats::Lookup(Bytes rec) const {
  perf_event_header h;
  if (!ReadHeader(rec, &h) || rec.size() < sizeof(h) + 8) return first_;
  uint64_t id;
  if (h.type == PERF_RECORD_SAMPLE) {
    std::memcpy(&id, rec.data() + sizeof(h), 8);
  } else if (first_.format.sample_id_all && h.type < kRecordUserTypeStart) {
    if (const size_t body_end = SideBandBodyEnd(rec); body_end != 0) {
      // The identifier ends the trailer, which begins where the body ends
      // (see SampleIdOffset()) and is as long as its event's layout says.
      // A record as long as its contents says so at its end (its last
      // word, an event whose trailer fills the rest): that first, as
      // another size's word could be a field that happens to equal an id
      // (a cpu number).  A grown record: the size that finds an event of
      // that size.
      std::memcpy(&id, rec.data() + rec.size() - 8, 8);
      if (auto it = by_id_.find(id);
          it != by_id_.end() && body_end + it->second.trailer_size == rec.size())
        return it->second;
      for (uint16_t size : trailer_sizes_) {
        if (size < 8 || body_end + size > rec.size()) continue;
        std::memcpy(&id, rec.data() + body_end + size - 8, 8);
        auto it = by_id_.find(id);
        if (it != by_id_.end() && it->second.trailer_size == size) return it->second;
      }
      return first_;
    }
    std::memcpy(&id, rec.data() + rec.size() - 8, 8);
  } else {
    return first_;
  }
  auto it = by_id_.find(id);
  return it == by_id_.end() ? first_ : it->second;
}

}  // namespace mmap3
