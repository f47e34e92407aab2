// BPF programs of a capture: what the kernel says of each program loaded
// while it ran (or before it started), read while the program exists.
//
// A BPF program has no file and no build-id.  What it is, is its tag (a hash
// of its instructions, 8 bytes), which names it in every KSYMBOL record
// ("bpf_prog_<tag>_<name>") and in the BPF_EVENT record of its load.  Its
// JITed functions' addresses, their source lines (line_info with the JITed
// address of each) and the BTF those lines' file names are in can only be
// read through the bpf() syscall, by the program's id, until it is
// unloaded: ReadBpfProgram() does that when the capture sees the load.
//
// The capture keeps them in perf's own layout: HEADER_BPF_PROG_INFO (one
// struct bpf_prog_info per program, its arrays in a data block after it,
// array pointers written as offsets into that block) and HEADER_BPF_BTF
// (id, size, raw BTF), so perf can use them too.  A program that could not
// be read is kept with the reason, in the reader's own section.
//
// Contract: a program's lines are served only for addresses inside one of
// its own JITed functions, and only to a lookup with its tag: addresses are
// reused by the next program, so the address alone never names one.  Data
// from a file is checked (every array inside its block, every string
// inside its BTF); what is malformed is dropped and counted.
#ifndef MMAP3_READER_BPF_PROGS_H_
#define MMAP3_READER_BPF_PROGS_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "record.h"
#include "result.h"

namespace mmap3 {

inline constexpr int kFeatureBpfProgInfo = 25;  // HEADER_BPF_PROG_INFO
inline constexpr int kFeatureBpfBtf = 26;       // HEADER_BPF_BTF

using BpfTag = std::array<uint8_t, 8>;
std::string BpfTagHex(const BpfTag& tag);
// The tag in a KSYMBOL name "bpf_prog_<16 hex digits>[_<name>]", if it is one.
std::optional<BpfTag> BpfTagOfSymbol(std::string_view name);

// A JITed function: the main program or one of its subprograms, each with
// the tag its KSYMBOL name has: the program's for the first, its own for
// each subprogram.
struct BpfFunction {
  uint64_t addr = 0;
  uint32_t len = 0;
  BpfTag tag{};
  uint32_t btf_type_id = 0;  // its BTF FUNC (0: the program has no func_info)
};

struct BpfSourceLine {
  const std::string* file = nullptr;  // owned by the BpfPrograms
  uint32_t line = 0, column = 0;
};

// One program as bpf(BPF_OBJ_GET_INFO_BY_FD) described it.
struct BpfProgram {
  uint32_t id = 0;
  BpfTag tag{};
  std::string name;  // as the kernel keeps it (at most 15 bytes)
  uint32_t btf_id = 0;
  std::vector<BpfFunction> functions;  // JITed, main program first
  // prog_tags[0], the tag of the main function's instructions alone, where
  // it differs from the program's: perf names the main function of a
  // program it synthesizes with it.
  std::optional<BpfTag> main_function_tag;
  // Source lines: the JITed address each starts at, and where in the BTF
  // its file name is.  Sorted by address.
  struct Line {
    uint64_t addr;
    uint32_t file_name_off, line, column;
  };
  std::vector<Line> lines;
  // The program's entry in perf's HEADER_BPF_PROG_INFO layout: info_len,
  // data_len, arrays, struct bpf_prog_info (pointers as offsets), data.
  std::vector<uint8_t> perf_entry;
};

// A program whose description the capture does not have, and why.
struct BpfNotRead {
  uint32_t id = 0;
  BpfTag tag{};
  std::string reason;
};

class BpfPrograms {
 public:
  BpfPrograms();
  ~BpfPrograms();
  BpfPrograms(BpfPrograms&&) noexcept;
  BpfPrograms& operator=(BpfPrograms&&) noexcept;

  // A program read; the raw BTF its btf_id names, if not added already
  // (empty: none could be read).
  void Add(BpfProgram program);
  void AddBtf(uint32_t id, std::vector<uint8_t> raw);
  bool HasBtf(uint32_t id) const { return btf_raw_.count(id) != 0; }
  void NotRead(BpfNotRead n) { not_read_.push_back(std::move(n)); }

  const std::vector<BpfProgram>& programs() const { return programs_; }
  const std::vector<BpfNotRead>& not_read() const { return not_read_; }
  bool empty() const { return programs_.empty() && not_read_.empty(); }

  // The program with id `id`, or null.
  const BpfProgram* ById(uint32_t id) const;
  // The program one of whose JITed functions has `tag` and covers `addr`
  // (the first such: addresses and tags are reused, see ById()).
  const BpfProgram* Find(const BpfTag& tag, uint64_t addr) const;
  // Why the source lines of `program` cannot be named ("" if they can):
  // it has no line info, or the capture lacks its BTF or cannot parse it.
  std::string LinesMissing(const BpfProgram& program) const;
  // The name the kernel gives function `i` of `program` in KSYMBOL records
  // and kallsyms: "bpf_prog_<its tag>_<its BTF name, or the program's>".
  std::string FunctionName(const BpfProgram& program, size_t i) const;
  // The source line of `addr` in that program; nullopt if it has no lines
  // there (or line 0: code with no line) or their file name cannot be
  // read.
  std::optional<BpfSourceLine> LineOf(const BpfProgram& program, uint64_t addr) const;

  // perf's feature sections (empty when there is nothing to write).
  std::vector<uint8_t> ProgInfoFeature() const;
  std::vector<uint8_t> BtfFeature() const;
  // From a file's sections; `bad` counts entries dropped as malformed.
  static BpfPrograms FromFeatures(Bytes prog_info, Bytes btf, uint64_t* bad);

 private:
  struct Btf;
  const Btf* BtfOf(uint32_t id) const;

  std::vector<BpfProgram> programs_;
  std::vector<BpfNotRead> not_read_;
  std::map<uint32_t, std::vector<uint8_t>> btf_raw_;
  // Parsed on first use.
  mutable std::map<uint32_t, std::unique_ptr<Btf>> btf_;
  mutable std::map<std::pair<uint32_t, uint32_t>, std::string> names_;
};

// Builds a BpfProgram from a struct bpf_prog_info whose array pointers
// point into memory the caller owns (`info_len` bytes of it valid), as the
// kernel filled it: copies the arrays into the perf layout.  An error says
// which array is inconsistent.
Result<BpfProgram> BpfProgramFromInfo(const void* info, uint32_t info_len);

// Reads program `id` through the bpf() syscall (CAP_SYS_ADMIN or
// CAP_BPF + CAP_PERFMON): its description, and into *btf the raw BTF its
// lines name (left empty if it has none).  Fails, saying why, if the
// program is gone or, with `tag`, is not the one with that tag (an id
// names one program for its life, but a record may be older than that).
Result<BpfProgram> ReadBpfProgram(uint32_t id, const BpfTag* tag, std::vector<uint8_t>* btf);

// The ids of the programs loaded now; empty with *error set if they
// cannot be listed.
std::vector<uint32_t> ListBpfPrograms(std::string* error);

}  // namespace mmap3

#endif  // MMAP3_READER_BPF_PROGS_H_
