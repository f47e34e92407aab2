#include "bpf_progs.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <linux/bpf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "build_id.h"
#include "files.h"

namespace mmap3 {
namespace {

// perf's array numbering (the `arrays` bit mask of each entry): the order
// in which the arrays follow each other in the data block.
enum PerfArray {
  kJitedInsns = 0,
  kXlatedInsns = 1,
  kMapIds = 2,
  kJitedKsyms = 3,
  kJitedFuncLens = 4,
  kFuncInfo = 5,
  kLineInfo = 6,
  kJitedLineInfo = 7,
  kProgTags = 8,
};

// One array of struct bpf_prog_info: where its pointer is and how many
// bytes it holds by the counts beside it.
struct ArrayField {
  PerfArray index;
  __u64 bpf_prog_info::*pointer;
  uint64_t (*bytes)(const bpf_prog_info&);
};

constexpr ArrayField kArrays[] = {
    {kJitedInsns, &bpf_prog_info::jited_prog_insns,
     [](const bpf_prog_info& i) -> uint64_t { return i.jited_prog_len; }},
    {kJitedKsyms, &bpf_prog_info::jited_ksyms,
     [](const bpf_prog_info& i) -> uint64_t { return uint64_t{i.nr_jited_ksyms} * 8; }},
    {kJitedFuncLens, &bpf_prog_info::jited_func_lens,
     [](const bpf_prog_info& i) -> uint64_t { return uint64_t{i.nr_jited_func_lens} * 4; }},
    {kFuncInfo, &bpf_prog_info::func_info,
     [](const bpf_prog_info& i) -> uint64_t {
       return uint64_t{i.nr_func_info} * i.func_info_rec_size;
     }},
    {kLineInfo, &bpf_prog_info::line_info,
     [](const bpf_prog_info& i) -> uint64_t {
       return uint64_t{i.nr_line_info} * i.line_info_rec_size;
     }},
    {kJitedLineInfo, &bpf_prog_info::jited_line_info,
     [](const bpf_prog_info& i) -> uint64_t {
       return uint64_t{i.nr_jited_line_info} * i.jited_line_info_rec_size;
     }},
    {kProgTags, &bpf_prog_info::prog_tags,
     [](const bpf_prog_info& i) -> uint64_t { return uint64_t{i.nr_prog_tags} * 8; }},
};

// Arrays are at most this big (the largest program is 1 M instructions):
// a count beyond it is a corrupt description, not a program.
constexpr uint64_t kMaxArrayBytes = 64u << 20;

uint64_t RoundUp8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <typename T>
void Put(std::vector<uint8_t>& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(v));
}

}  // namespace

struct BpfPrograms::Btf {
  struct btf* btf = nullptr;
  ~Btf() { btf__free(btf); }
};

BpfPrograms::BpfPrograms() = default;
BpfPrograms::~BpfPrograms() = default;
BpfPrograms::BpfPrograms(BpfPrograms&&) noexcept = default;
BpfPrograms& BpfPrograms::operator=(BpfPrograms&&) noexcept = default;

std::string BpfTagHex(const BpfTag& tag) { return BuildId(tag.data(), tag.size()).Hex(); }

std::optional<BpfTag> BpfTagOfSymbol(std::string_view name) {
  constexpr std::string_view kPrefix = "bpf_prog_";
  if (!name.starts_with(kPrefix) || name.size() < kPrefix.size() + 16) return std::nullopt;
  const std::string_view hex = name.substr(kPrefix.size(), 16);
  if (name.size() > kPrefix.size() + 16 && name[kPrefix.size() + 16] != '_') return std::nullopt;
  BpfTag tag;
  for (size_t i = 0; i < 8; ++i) {
    auto nibble = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    tag[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return tag;
}

Result<BpfProgram> BpfProgramFromInfo(const void* raw, uint32_t info_len) {
  bpf_prog_info info{};
  std::memcpy(&info, raw, std::min<size_t>(info_len, sizeof(info)));
  BpfProgram p;
  p.id = info.id;
  std::memcpy(p.tag.data(), info.tag, p.tag.size());
  p.name.assign(info.name, strnlen(info.name, sizeof(info.name)));
  p.btf_id = info.btf_id;

  // The arrays we keep, copied into one block in perf's order; the rest
  // (the translated instructions, the maps) are not written.
  info.xlated_prog_len = 0;
  info.xlated_prog_insns = 0;
  info.nr_map_ids = 0;
  info.map_ids = 0;
  std::vector<uint8_t> data;
  uint64_t arrays = 0;
  for (const ArrayField& a : kArrays) {
    const uint64_t n = a.bytes(info);
    const uint64_t ptr = info.*a.pointer;
    if (n > kMaxArrayBytes) return Status::Failure(fmt::format("BPF program {}: an array of {} bytes", p.id, n));
    if (n == 0 || ptr == 0) {
      info.*a.pointer = 0;
      continue;
    }
    arrays |= uint64_t{1} << a.index;
    const uint64_t offset = data.size();
    const auto* src = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(ptr));
    data.insert(data.end(), src, src + n);
    data.resize(RoundUp8(data.size()), 0);
    info.*a.pointer = offset;
  }
  auto at = [&](uint64_t offset) { return data.data() + offset; };
  // Which arrays are there (an offset of 0 is the first one's).
  auto has = [&](PerfArray a) { return (arrays >> a & 1) != 0; };

  // The JITed functions: one address and one length each.
  if (info.nr_jited_ksyms != info.nr_jited_func_lens)
    return Status::Failure(fmt::format("BPF program {}: {} JITed functions but {} lengths", p.id,
                                       info.nr_jited_ksyms, info.nr_jited_func_lens));
  for (uint32_t i = 0; i < info.nr_jited_ksyms && has(kJitedKsyms) && has(kJitedFuncLens); ++i) {
    BpfFunction f{Load<uint64_t>(at(info.jited_ksyms + 8u * i)),
                  Load<uint32_t>(at(info.jited_func_lens + 4u * i)), p.tag, 0};
    // Each subprogram's own tag, where the kernel gives them (4.19+).  The
    // main function is the program, named by the program's tag (its entry
    // in prog_tags is the tag of its instructions alone).
    if (info.nr_prog_tags == info.nr_jited_ksyms && has(kProgTags)) {
      BpfTag own;
      std::memcpy(own.data(), at(info.prog_tags + 8u * i), own.size());
      if (i != 0)
        f.tag = own;
      else if (own != p.tag)
        p.main_function_tag = own;
    }
    if (info.nr_func_info == info.nr_jited_ksyms && has(kFuncInfo) &&
        info.func_info_rec_size >= sizeof(bpf_func_info))
      f.btf_type_id =
          Load<bpf_func_info>(at(info.func_info + uint64_t{info.func_info_rec_size} * i)).type_id;
    p.functions.push_back(f);
  }
  // Source lines: line_info[i] starts at jited_line_info[i].
  if (info.nr_line_info != 0 && has(kLineInfo) && has(kJitedLineInfo)) {
    if (info.nr_jited_line_info != info.nr_line_info ||
        info.line_info_rec_size < sizeof(bpf_line_info) || info.jited_line_info_rec_size < 8)
      return Status::Failure(fmt::format("BPF program {}: {} lines but {} JITed line addresses",
                                         p.id, info.nr_line_info, info.nr_jited_line_info));
    for (uint32_t i = 0; i < info.nr_line_info; ++i) {
      const bpf_line_info li =
          Load<bpf_line_info>(at(info.line_info + uint64_t{info.line_info_rec_size} * i));
      const uint64_t addr =
          Load<uint64_t>(at(info.jited_line_info + uint64_t{info.jited_line_info_rec_size} * i));
      p.lines.push_back({addr, li.file_name_off, li.line_col >> 10, li.line_col & 0x3ff});
    }
    std::stable_sort(p.lines.begin(), p.lines.end(),
                     [](const BpfProgram::Line& a, const BpfProgram::Line& b) { return a.addr < b.addr; });
  }

  Put(p.perf_entry, static_cast<uint32_t>(sizeof(info)));
  Put(p.perf_entry, static_cast<uint32_t>(data.size()));
  Put(p.perf_entry, arrays);
  Put(p.perf_entry, info);
  p.perf_entry.insert(p.perf_entry.end(), data.begin(), data.end());
  return p;
}

void BpfPrograms::Add(BpfProgram program) { programs_.push_back(std::move(program)); }

void BpfPrograms::AddBtf(uint32_t id, std::vector<uint8_t> raw) {
  if (id == 0 || raw.empty()) return;
  btf_raw_.try_emplace(id, std::move(raw));
}

const BpfProgram* BpfPrograms::ById(uint32_t id) const {
  for (const BpfProgram& p : programs_)
    if (p.id == id) return &p;
  return nullptr;
}

std::string BpfPrograms::LinesMissing(const BpfProgram& p) const {
  if (p.lines.empty()) return "the program has no line info";
  if (btf_raw_.count(p.btf_id) == 0)
    return fmt::format("its BTF (id {}) is not in the capture", p.btf_id);
  if (BtfOf(p.btf_id) == nullptr) return fmt::format("its BTF (id {}) does not parse", p.btf_id);
  return "";
}

const BpfProgram* BpfPrograms::Find(const BpfTag& tag, uint64_t addr) const {
  for (const BpfProgram& p : programs_) {
    for (const BpfFunction& f : p.functions)
      if (f.tag == tag && addr >= f.addr && addr - f.addr < f.len) return &p;
  }
  return nullptr;
}

std::string BpfPrograms::FunctionName(const BpfProgram& p, size_t i) const {
  const BpfFunction& f = p.functions.at(i);
  std::string name = "bpf_prog_" + BpfTagHex(f.tag);
  if (f.btf_type_id != 0) {
    // The kernel names it after its BTF; without the BTF we cannot.
    if (const Btf* btf = BtfOf(p.btf_id)) {
      const btf_type* t = btf__type_by_id(btf->btf, f.btf_type_id);
      const char* s = t != nullptr ? btf__name_by_offset(btf->btf, t->name_off) : nullptr;
      if (s != nullptr && *s != '\0') return name + "_" + s;
    }
    return name;
  }
  // As the kernel names them without BTF: the program's name for the main
  // function (nothing if it has none), "F" for each subprogram.
  if (i != 0) return name + "_F";
  if (!p.name.empty()) return name + "_" + p.name;
  return name;
}

const BpfPrograms::Btf* BpfPrograms::BtfOf(uint32_t id) const {
  auto it = btf_.find(id);
  if (it != btf_.end()) return it->second.get();
  std::unique_ptr<Btf> parsed;
  if (auto raw = btf_raw_.find(id); raw != btf_raw_.end()) {
    struct btf* b = btf__new(raw->second.data(), static_cast<__u32>(raw->second.size()));
    if (b != nullptr) {
      parsed = std::make_unique<Btf>();
      parsed->btf = b;
    }
  }
  return btf_.emplace(id, std::move(parsed)).first->second.get();
}

std::optional<BpfSourceLine> BpfPrograms::LineOf(const BpfProgram& p, uint64_t addr) const {
  // The function that covers addr bounds the lines: a line of another
  // function never extends into this one.
  const BpfFunction* fn = nullptr;
  for (const BpfFunction& f : p.functions)
    if (addr >= f.addr && addr - f.addr < f.len) fn = &f;
  if (fn == nullptr) return std::nullopt;
  auto it = std::upper_bound(p.lines.begin(), p.lines.end(), addr,
                             [](uint64_t a, const BpfProgram::Line& l) { return a < l.addr; });
  if (it == p.lines.begin()) return std::nullopt;
  --it;
  // Line 0: code the compiler gave no line (a prologue, spills).
  if (it->addr < fn->addr || it->line == 0) return std::nullopt;
  const Btf* btf = BtfOf(p.btf_id);
  if (btf == nullptr) return std::nullopt;
  auto key = std::make_pair(p.btf_id, it->file_name_off);
  auto name = names_.find(key);
  if (name == names_.end()) {
    const char* s = btf__name_by_offset(btf->btf, it->file_name_off);
    if (s == nullptr || *s == '\0') return std::nullopt;
    name = names_.emplace(key, s).first;
  }
  return BpfSourceLine{&name->second, it->line, it->column};
}

std::vector<uint8_t> BpfPrograms::ProgInfoFeature() const {
  std::vector<uint8_t> out;
  if (programs_.empty()) return out;
  Put(out, static_cast<uint32_t>(programs_.size()));
  for (const BpfProgram& p : programs_) out.insert(out.end(), p.perf_entry.begin(), p.perf_entry.end());
  return out;
}

std::vector<uint8_t> BpfPrograms::BtfFeature() const {
  std::vector<uint8_t> out;
  if (btf_raw_.empty()) return out;
  Put(out, static_cast<uint32_t>(btf_raw_.size()));
  for (const auto& [id, raw] : btf_raw_) {
    Put(out, id);
    Put(out, static_cast<uint32_t>(raw.size()));
    out.insert(out.end(), raw.begin(), raw.end());
  }
  return out;
}

BpfPrograms BpfPrograms::FromFeatures(Bytes prog_info, Bytes btf, uint64_t* bad) {
  BpfPrograms out;
  if (prog_info.size() >= 4) {
    const uint32_t count = Load<uint32_t>(prog_info.data());
    size_t off = 4;
    for (uint32_t i = 0; i < count; ++i) {
      if (prog_info.size() - off < 16) {
        ++*bad;
        break;
      }
      const uint32_t info_len = Load<uint32_t>(prog_info.data() + off);
      const uint32_t data_len = Load<uint32_t>(prog_info.data() + off + 4);
      const uint64_t arrays = Load<uint64_t>(prog_info.data() + off + 8);
      off += 16;
      if (prog_info.size() - off < uint64_t{info_len} + data_len) {
        ++*bad;
        break;
      }
      bpf_prog_info info{};
      std::memcpy(&info, prog_info.data() + off, std::min<size_t>(info_len, sizeof(info)));
      const uint8_t* data = prog_info.data() + off + info_len;
      off += uint64_t{info_len} + data_len;
      // Offsets back to pointers, each array inside this entry's block.
      bool ok = true;
      for (const ArrayField& a : kArrays) {
        const uint64_t n = a.bytes(info);
        if (n == 0) {
          info.*a.pointer = 0;
          continue;
        }
        const uint64_t o = info.*a.pointer;
        if (!(arrays >> a.index & 1) || o > data_len || n > data_len - o) {
          ok = false;
          break;
        }
        info.*a.pointer = reinterpret_cast<uintptr_t>(data + o);
      }
      info.xlated_prog_len = 0;
      info.xlated_prog_insns = 0;
      info.nr_map_ids = 0;
      info.map_ids = 0;
      auto p = ok ? BpfProgramFromInfo(&info, sizeof(info)) : Result<BpfProgram>(Status::Failure(""));
      if (!p.ok()) {
        ++*bad;
        continue;
      }
      out.programs_.push_back(std::move(*p));
    }
  }
  if (btf.size() >= 4) {
    const uint32_t count = Load<uint32_t>(btf.data());
    size_t off = 4;
    for (uint32_t i = 0; i < count; ++i) {
      if (btf.size() - off < 8) {
        ++*bad;
        break;
      }
      const uint32_t id = Load<uint32_t>(btf.data() + off);
      const uint32_t size = Load<uint32_t>(btf.data() + off + 4);
      off += 8;
      if (btf.size() - off < size) {
        ++*bad;
        break;
      }
      out.AddBtf(id, std::vector<uint8_t>(btf.data() + off, btf.data() + off + size));
      off += size;
    }
  }
  return out;
}

Result<BpfProgram> ReadBpfProgram(uint32_t id, const BpfTag* tag, std::vector<uint8_t>* btf) {
  btf->clear();
  const int raw_fd = bpf_prog_get_fd_by_id(id);
  if (raw_fd < 0) {
    const int e = errno;
    if (e == ENOENT)
      return Status::Failure(fmt::format("BPF program {} was unloaded before it could be read", id));
    if (e == EPERM || e == EACCES)
      return Status::Failure(fmt::format(
          "BPF program {}: reading it needs CAP_SYS_ADMIN (or CAP_BPF and CAP_PERFMON)", id));
    return Status::FromErrno(e, fmt::format("BPF program {}: bpf(BPF_PROG_GET_FD_BY_ID)", id));
  }
  UniqueFd fd(raw_fd);
  bpf_prog_info first{};
  __u32 len = sizeof(first);
  if (bpf_obj_get_info_by_fd(fd.get(), &first, &len) != 0)
    return Status::FromErrno(errno, fmt::format("BPF program {}: bpf(BPF_OBJ_GET_INFO_BY_FD)", id));
  if (tag != nullptr && std::memcmp(first.tag, tag->data(), tag->size()) != 0) {
    BpfTag now;
    std::memcpy(now.data(), first.tag, now.size());
    return Status::Failure(fmt::format("BPF program id {} is now another program (tag {}, not {})",
                                       id, BpfTagHex(now), BpfTagHex(*tag)));
  }
  // Second call: the arrays, sized by the first.
  bpf_prog_info info{};
  std::vector<uint8_t> insns(first.jited_prog_len), ksyms(uint64_t{first.nr_jited_ksyms} * 8),
      lens(uint64_t{first.nr_jited_func_lens} * 4),
      funcs(uint64_t{first.nr_func_info} * first.func_info_rec_size),
      lines(uint64_t{first.nr_line_info} * first.line_info_rec_size),
      jited_lines(uint64_t{first.nr_jited_line_info} * first.jited_line_info_rec_size),
      tags(uint64_t{first.nr_prog_tags} * 8);
  auto ptr = [](std::vector<uint8_t>& v) -> __u64 {
    return v.empty() ? 0 : static_cast<__u64>(reinterpret_cast<uintptr_t>(v.data()));
  };
  info.jited_prog_len = first.jited_prog_len;
  info.jited_prog_insns = ptr(insns);
  info.nr_jited_ksyms = first.nr_jited_ksyms;
  info.jited_ksyms = ptr(ksyms);
  info.nr_jited_func_lens = first.nr_jited_func_lens;
  info.jited_func_lens = ptr(lens);
  info.nr_func_info = first.nr_func_info;
  info.func_info_rec_size = first.func_info_rec_size;
  info.func_info = ptr(funcs);
  info.nr_line_info = first.nr_line_info;
  info.line_info_rec_size = first.line_info_rec_size;
  info.line_info = ptr(lines);
  info.nr_jited_line_info = first.nr_jited_line_info;
  info.jited_line_info_rec_size = first.jited_line_info_rec_size;
  info.jited_line_info = ptr(jited_lines);
  info.nr_prog_tags = first.nr_prog_tags;
  info.prog_tags = ptr(tags);
  len = sizeof(info);
  if (bpf_obj_get_info_by_fd(fd.get(), &info, &len) != 0)
    return Status::FromErrno(errno, fmt::format("BPF program {}: bpf(BPF_OBJ_GET_INFO_BY_FD)", id));
  // A loaded program does not change; counts that grew would mean the
  // kernel wrote past what was asked for, which it never does.
  if (info.jited_prog_len > first.jited_prog_len || info.nr_jited_ksyms > first.nr_jited_ksyms ||
      info.nr_jited_func_lens > first.nr_jited_func_lens || info.nr_line_info > first.nr_line_info ||
      info.nr_jited_line_info > first.nr_jited_line_info || info.nr_func_info > first.nr_func_info ||
      info.nr_prog_tags > first.nr_prog_tags)
    return Status::Failure(fmt::format("BPF program {}: its description changed between two reads", id));
  auto p = BpfProgramFromInfo(&info, len);
  if (!p.ok()) return p.status();
  for (const BpfFunction& f : p->functions) {
    if (f.addr == 0)
      return Status::Failure(fmt::format(
          "BPF program {}: the kernel hides its JITed addresses (kernel.kptr_restrict, or the "
          "program is not JITed: net.core.bpf_jit_enable)",
          id));
  }
  if (p->functions.empty())
    return Status::Failure(fmt::format("BPF program {} has no JITed code (net.core.bpf_jit_enable)", id));
  if (p->btf_id != 0) {
    if (struct btf* b = btf__load_from_kernel_by_id(p->btf_id)) {
      __u32 size = 0;
      const void* raw = btf__raw_data(b, &size);
      if (raw != nullptr) {
        const auto* bytes = static_cast<const uint8_t*>(raw);
        btf->assign(bytes, bytes + size);
      }
      btf__free(b);
    }
  }
  return p;
}

std::vector<uint32_t> ListBpfPrograms(std::string* error) {
  std::vector<uint32_t> ids;
  uint32_t id = 0;
  while (true) {
    uint32_t next = 0;
    if (bpf_prog_get_next_id(id, &next) != 0) {
      if (errno != ENOENT) {
        *error = errno == EPERM ? "listing BPF programs needs CAP_SYS_ADMIN"
                                : fmt::format("bpf(BPF_PROG_GET_NEXT_ID): {}", std::strerror(errno));
        ids.clear();
      }
      return ids;
    }
    ids.push_back(next);
    id = next;
  }
}

}  // namespace mmap3
