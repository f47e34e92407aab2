#include "elf_file.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <elf.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "files.h"
#include "keyed_hash.h"

namespace mmap3 {
namespace {

constexpr uint32_t kNtGnuBuildId = 3;  // NT_GNU_BUILD_ID

void InitLibelf() {
  static const bool initialized = [] { return elf_version(EV_CURRENT) != EV_NONE; }();
  (void)initialized;
}

// Scans one block of notes for GNU/NT_GNU_BUILD_ID.
bool FindBuildIdNote(Elf_Data* data, BuildId* out) {
  if (data == nullptr || data->d_buf == nullptr) return false;
  size_t offset = 0;
  GElf_Nhdr nhdr;
  size_t name_off, desc_off;
  // gelf_getnote bounds-checks each note against d_size and returns 0 at the
  // end or on a malformed note.
  while (offset < data->d_size &&
         (offset = gelf_getnote(data, offset, &nhdr, &name_off, &desc_off)) > 0) {
    const char* base = static_cast<const char*>(data->d_buf);
    if (nhdr.n_type == kNtGnuBuildId && nhdr.n_namesz == 4 &&
        std::memcmp(base + name_off, "GNU", 4) == 0 && nhdr.n_descsz > 0) {
      *out = BuildId(base + desc_off, nhdr.n_descsz);
      return true;
    }
  }
  return false;
}

// Note segments and sections are read whole (libelf allocates their size
// and keeps it until the file is closed): a build-id note is 36 bytes, and
// every note of a linked object together some hundreds.  At most this many
// bytes of them are read from a file, in all; a note block that would pass
// it is not read, and ends the search (FindBuildId()).  A sparse file of
// 4 KB on disk with a 3 GB PT_NOTE cost the recorder 3 GB and 20 s, one
// with 1,500 notes of 1 MiB each 1.5 GB (helper-58's and helper-59's
// reviews).
constexpr uint64_t kMaxNotesBytes = 1 << 20;

// The GNU build-id of an ELF file: its first GNU build-id note, in the
// PT_NOTE segments' order, then the SHT_NOTE sections' (as the kernel and
// perf take it).  Empty if none was found.  *skipped says whether a note
// block was left unread for its size; then the id is empty, since nothing
// after such a block is taken: an id found there may not be the first (helper-62's review: a
// crafted file read as its second id, where the kernel's records said the
// first, and the build-id cache called the untouched file changed).
BuildId FindBuildId(Elf* elf, bool* skipped) {
  BuildId id;
  uint64_t budget = kMaxNotesBytes;
  *skipped = false;
  auto take = [&](uint64_t size) {
    if (size > budget) {
      *skipped = true;
      return false;
    }
    budget -= size;
    return true;
  };
  size_t phnum = 0;
  if (elf_getphdrnum(elf, &phnum) == 0) {
    for (size_t i = 0; i < phnum; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(elf, static_cast<int>(i), &ph) == nullptr || ph.p_type != PT_NOTE)
        continue;
      if (!take(ph.p_filesz)) return {};
      Elf_Data* data = elf_getdata_rawchunk(elf, static_cast<int64_t>(ph.p_offset), ph.p_filesz,
                                            ELF_T_NHDR);
      if (FindBuildIdNote(data, &id)) return id;
    }
  }
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf, scn)) != nullptr) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr || sh.sh_type != SHT_NOTE) continue;
    if (!take(sh.sh_size)) return {};
    Elf_Data* data = nullptr;
    while ((data = elf_getdata(scn, data)) != nullptr) {
      if (FindBuildIdNote(data, &id)) return id;
    }
  }
  return id;
}

Status NotesSkipped(const std::string& name) {
  return Status::Failure(fmt::format(
      "{}: its notes are more than {} bytes; not read, so its build-id is not known", name,
      kMaxNotesBytes));
}

// More section or program headers than any linked object has: libelf
// allocates about 200 bytes for each section header when the file is
// opened, so a sparse file of 120 KB on disk claiming 15 M of them cost
// 3 GB (helper-57's review).
constexpr uint64_t kMaxHeaders = 1 << 16;

uint64_t FieldAt(const unsigned char* p, size_t size, bool swap) {
  uint64_t v = 0;
  std::memcpy(&v, p, size);  // little-endian host
  if (swap) v = size == 2 ? __builtin_bswap16(static_cast<uint16_t>(v))
                : size == 4 ? __builtin_bswap32(static_cast<uint32_t>(v))
                            : __builtin_bswap64(v);
  return v;
}

// Refuses a file whose headers count more than kMaxHeaders sections or
// segments (the extended counts of section 0 included), before libelf
// reads and allocates them.  Anything that is not an ELF header is
// libelf's to refuse.
Status CheckHeaderCounts(int fd, const std::string& name) {
  static_assert(std::endian::native == std::endian::little);
  unsigned char eh[64];
  if (pread(fd, eh, sizeof(eh), 0) != static_cast<ssize_t>(sizeof(eh)) ||
      std::memcmp(eh, ELFMAG, SELFMAG) != 0)
    return {};
  const bool is64 = eh[EI_CLASS] == ELFCLASS64, swap = eh[EI_DATA] == ELFDATA2MSB;
  const uint64_t shoff = is64 ? FieldAt(eh + 40, 8, swap) : FieldAt(eh + 32, 4, swap);
  uint64_t shnum = FieldAt(eh + (is64 ? 60 : 48), 2, swap);
  uint64_t phnum = FieldAt(eh + (is64 ? 56 : 44), 2, swap);
  if (shoff != 0 && (shnum == 0 || phnum == PN_XNUM)) {
    // Extended numbering: the counts are in section 0's sh_size and sh_info.
    unsigned char sh0[64];
    const size_t sh_size = is64 ? 64 : 40;
    if (pread(fd, sh0, sh_size, static_cast<off_t>(shoff)) == static_cast<ssize_t>(sh_size)) {
      if (shnum == 0) shnum = is64 ? FieldAt(sh0 + 32, 8, swap) : FieldAt(sh0 + 20, 4, swap);
      if (phnum == PN_XNUM) phnum = FieldAt(sh0 + (is64 ? 44 : 28), 4, swap);
    }
  }
  if (shnum > kMaxHeaders || phnum > kMaxHeaders)
    return Status::Failure(fmt::format(
        "{}: {} section and {} program headers: more than this reader reads ({})", name, shnum,
        phnum, kMaxHeaders));
  return {};
}

// ELF_C_READ, not ELF_C_READ_MMAP: another user can truncate a file while
// it is read, and a mapping of it then kills the reader with SIGBUS (as
// root, in the middle of a capture); read() sees the shorter file.
Elf* BeginRead(int fd, const std::string& name, Status* error) {
  if (Status s = CheckHeaderCounts(fd, name); !s.ok()) {
    *error = s;
    return nullptr;
  }
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  if (elf == nullptr) *error = Status::Failure(name + ": " + elf_errmsg(-1));
  return elf;
}

}  // namespace

Result<ElfFile> ElfFile::Open(const std::string& path) {
  auto fd = OpenRegularFile(path);
  if (!fd.ok()) return fd.status();
  return FromFd(std::move(*fd), path);
}

Result<ElfFile> ElfFile::FromFd(UniqueFd fd, const std::string& name) {
  InitLibelf();
  Status error;
  Elf* elf = BeginRead(fd.get(), name, &error);
  if (elf == nullptr) return error;
  ElfFile file(std::move(fd), elf);
  if (Status s = file.Load(name); !s.ok()) return s;
  return file;
}

Status ElfFile::Load(const std::string& name) {
  if (elf_kind(elf_) != ELF_K_ELF) return Status::Failure(name + ": not an ELF file");
  GElf_Ehdr eh;
  if (gelf_getehdr(elf_, &eh) == nullptr) return Status::Failure(name + ": " + elf_errmsg(-1));
  size_t phnum = 0;
  if (elf_getphdrnum(elf_, &phnum) == 0) {
    for (size_t i = 0; i < phnum; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(elf_, static_cast<int>(i), &ph) == nullptr || ph.p_type != PT_LOAD) continue;
      loads_.push_back({ph.p_offset, ph.p_vaddr, ph.p_filesz, ph.p_memsz, (ph.p_flags & PF_X) != 0});
    }
  }
  bool skipped = false;
  build_id_ = FindBuildId(elf_, &skipped);
  if (skipped) return NotesSkipped(name);  // (then nothing was taken)
  return {};
}

ElfFile::ElfFile(ElfFile&& other) noexcept
    : fd_(std::move(other.fd_)), elf_(other.elf_), build_id_(other.build_id_),
      loads_(std::move(other.loads_)) {
  other.elf_ = nullptr;
}

ElfFile& ElfFile::operator=(ElfFile&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = std::move(other.fd_);
    elf_ = other.elf_;
    build_id_ = other.build_id_;
    loads_ = std::move(other.loads_);
    other.elf_ = nullptr;
  }
  return *this;
}

ElfFile::~ElfFile() { Close(); }

void ElfFile::Close() {
  if (elf_ != nullptr) elf_end(elf_);  // before the descriptor it reads
  elf_ = nullptr;
  fd_.Reset();
}

std::optional<uint64_t> ElfFile::FileOffsetToVaddr(uint64_t offset) const {
  for (const LoadSegment& s : loads_) {
    if (offset >= s.offset && offset - s.offset < s.filesz) return offset - s.offset + s.vaddr;
  }
  return std::nullopt;
}

bool ElfFile::HasSymtab() const {
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf_, scn)) != nullptr) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) != nullptr && sh.sh_type == SHT_SYMTAB && sh.sh_size > 0) return true;
  }
  return false;
}

// A symbol without a size (crti.o's _init, hand-written assembly) is
// looked up as reaching the next symbol; it must not reach past the end of
// its own section, or code after it that has no symbol (the PLT after
// .init) would be put on it.  So it gets the size up to that end.
static uint64_t SizeWithinSection(Elf* elf, const GElf_Sym& sym) {
  if (sym.st_size != 0 || sym.st_shndx == SHN_UNDEF || sym.st_shndx >= SHN_LORESERVE)
    return sym.st_size;
  GElf_Shdr sh;
  Elf_Scn* scn = elf_getscn(elf, sym.st_shndx);
  if (scn == nullptr || gelf_getshdr(scn, &sh) == nullptr || !(sh.sh_flags & SHF_ALLOC))
    return 0;
  if (sym.st_value < sh.sh_addr || sym.st_value - sh.sh_addr >= sh.sh_size) return 0;
  return sh.sh_addr + sh.sh_size - sym.st_value;
}

// x86-64 PLT stubs ("f@plt"), named as objdump names them.  A stub is an
// indirect jump through a GOT slot, `jmp *disp(%rip)` (ff 25 disp32), at the
// start of its entry or after `endbr64` and a `bnd` prefix (the .plt.sec
// and .plt.got entries of IBT-enabled files).  The slot's dynamic
// relocation (R_X86_64_JUMP_SLOT or R_X86_64_GLOB_DAT) names the function.
// An entry that is not such a jump (the lazy-binding header, the `push;
// jmp` halves of an IBT .plt) or whose slot has no named relocation gets
// no symbol: it is not guessed from its position.  Other machines get none.
static void AddPltSymbols(Elf* elf, std::vector<ElfSymbol>* out) {
  constexpr uint32_t kJumpSlot = 7, kGlobDat = 6;  // R_X86_64_*
  GElf_Ehdr eh;
  size_t shstrndx = 0;
  if (gelf_getehdr(elf, &eh) == nullptr || eh.e_machine != EM_X86_64 ||
      gelf_getclass(elf) != ELFCLASS64 || elf_getshdrstrndx(elf, &shstrndx) != 0)
    return;
  // Names point into libelf's data, valid until ReadSymbols() returns.
  KeyedMap<uint64_t, const char*> slot_names;
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf, scn)) != nullptr) {
    GElf_Shdr sh, symsh;
    if (gelf_getshdr(scn, &sh) == nullptr || sh.sh_type != SHT_RELA || sh.sh_entsize == 0) continue;
    Elf_Scn* symscn = elf_getscn(elf, sh.sh_link);
    if (symscn == nullptr || gelf_getshdr(symscn, &symsh) == nullptr ||
        symsh.sh_type != SHT_DYNSYM)
      continue;
    Elf_Data* rel = elf_getdata(scn, nullptr);
    Elf_Data* syms = elf_getdata(symscn, nullptr);
    if (rel == nullptr || syms == nullptr) continue;
    for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; ++i) {
      GElf_Rela r;
      GElf_Sym sym;
      if (gelf_getrela(rel, static_cast<int>(i), &r) == nullptr) break;
      const uint64_t type = GELF_R_TYPE(r.r_info), index = GELF_R_SYM(r.r_info);
      if ((type != kJumpSlot && type != kGlobDat) || index == 0 ||
          gelf_getsym(syms, static_cast<int>(index), &sym) == nullptr)
        continue;
      const char* name = elf_strptr(elf, symsh.sh_link, sym.st_name);
      if (name != nullptr && *name != '\0') slot_names.emplace(r.r_offset, name);
    }
  }
  if (slot_names.empty()) return;
  scn = nullptr;
  while ((scn = elf_nextscn(elf, scn)) != nullptr) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr || sh.sh_type != SHT_PROGBITS ||
        !(sh.sh_flags & SHF_EXECINSTR))
      continue;
    const char* secname = elf_strptr(elf, shstrndx, sh.sh_name);
    if (secname == nullptr || std::strncmp(secname, ".plt", 4) != 0) continue;
    // lld leaves sh_entsize 0; its .plt and .plt.sec entries are 16 bytes.
    if (sh.sh_entsize == 0 &&
        (std::strcmp(secname, ".plt") == 0 || std::strcmp(secname, ".plt.sec") == 0))
      sh.sh_entsize = 16;
    if (sh.sh_entsize != 8 && sh.sh_entsize != 16) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (data == nullptr || data->d_buf == nullptr) continue;
    const auto* bytes = static_cast<const unsigned char*>(data->d_buf);
    const size_t size = std::min<size_t>(data->d_size, sh.sh_size);
    for (size_t off = 0; off + sh.sh_entsize <= size; off += sh.sh_entsize) {
      const unsigned char* e = bytes + off;
      size_t pos = 0;
      if (sh.sh_entsize >= 4 && std::memcmp(e, "\xf3\x0f\x1e\xfa", 4) == 0) pos = 4;  // endbr64
      if (e[pos] == 0xf2) ++pos;                                                   // bnd
      if (pos + 6 > sh.sh_entsize || e[pos] != 0xff || e[pos + 1] != 0x25) continue;
      int32_t disp;
      std::memcpy(&disp, e + pos + 2, sizeof(disp));
      const uint64_t slot = sh.sh_addr + off + pos + 6 + static_cast<uint64_t>(int64_t{disp});
      auto it = slot_names.find(slot);
      if (it != slot_names.end()) out->push_back({sh.sh_addr + off, sh.sh_entsize, std::string(it->second) + "@plt"});
    }
  }
}

std::vector<ElfSymbol> ElfFile::ReadSymbols() const {
  std::vector<ElfSymbol> out;
  for (Elf64_Word wanted : {SHT_SYMTAB, SHT_DYNSYM}) {
    Elf_Scn* scn = nullptr;
    while ((scn = elf_nextscn(elf_, scn)) != nullptr) {
      GElf_Shdr sh;
      if (gelf_getshdr(scn, &sh) == nullptr || sh.sh_type != wanted || sh.sh_entsize == 0) continue;
      Elf_Data* data = elf_getdata(scn, nullptr);
      if (data == nullptr) continue;
      size_t count = sh.sh_size / sh.sh_entsize;
      for (size_t i = 0; i < count; ++i) {
        GElf_Sym sym;
        if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) break;
        int type = GELF_ST_TYPE(sym.st_info);
        if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_shndx == SHN_UNDEF ||
            sym.st_value == 0)
          continue;
        const char* name = elf_strptr(elf_, sh.sh_link, sym.st_name);
        if (name == nullptr || *name == '\0') continue;
        out.push_back({sym.st_value, SizeWithinSection(elf_, sym), name});
      }
    }
  }
  AddPltSymbols(elf_, &out);
  // Stable: .symtab entries come first and win ties with .dynsym, and both
  // with the PLT stubs.
  std::stable_sort(out.begin(), out.end(),
                   [](const ElfSymbol& a, const ElfSymbol& b) { return a.addr < b.addr; });
  out.erase(std::unique(out.begin(), out.end(),
                        [](const ElfSymbol& a, const ElfSymbol& b) { return a.addr == b.addr; }),
            out.end());
  return out;
}

namespace {

bool PreadAll(int fd, void* buf, size_t len, uint64_t off) {
  auto* p = static_cast<unsigned char*>(buf);
  while (len > 0) {
    const ssize_t n = pread(fd, p, len, static_cast<off_t>(off));
    if (n <= 0) return false;
    p += n;
    off += static_cast<uint64_t>(n);
    len -= static_cast<size_t>(n);
  }
  return true;
}

uint64_t Align4(uint64_t v) { return (v + 3) & ~uint64_t{3}; }

}  // namespace

bool BuildIdStillIn(int fd, const BuildId& id) {
  constexpr uint64_t kMaxPhdrBytes = 64 * 1024, kMaxNoteBytes = 1024 * 1024;
  if (id.empty()) return false;
  Elf64_Ehdr eh{};
  if (!PreadAll(fd, &eh, sizeof(Elf32_Ehdr), 0)) return false;
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return false;
  const unsigned char native = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB;
  if (eh.e_ident[EI_DATA] != native) return false;
  const bool is64 = eh.e_ident[EI_CLASS] == ELFCLASS64;
  if (!is64 && eh.e_ident[EI_CLASS] != ELFCLASS32) return false;
  uint64_t phoff;
  uint32_t phnum, phentsize;
  if (is64) {
    if (!PreadAll(fd, &eh, sizeof(eh), 0)) return false;
    phoff = eh.e_phoff;
    phnum = eh.e_phnum;
    phentsize = eh.e_phentsize;
  } else {
    Elf32_Ehdr e32;
    std::memcpy(&e32, &eh, sizeof(e32));
    phoff = e32.e_phoff;
    phnum = e32.e_phnum;
    phentsize = e32.e_phentsize;
  }
  if (phnum == 0 || phnum == PN_XNUM ||
      phentsize != (is64 ? sizeof(Elf64_Phdr) : sizeof(Elf32_Phdr)) ||
      uint64_t{phnum} * phentsize > kMaxPhdrBytes)
    return false;
  std::vector<unsigned char> phdrs(uint64_t{phnum} * phentsize);
  if (!PreadAll(fd, phdrs.data(), phdrs.size(), phoff)) return false;
  std::vector<unsigned char> notes;
  for (uint32_t i = 0; i < phnum; ++i) {
    uint64_t offset, filesz;
    uint32_t type;
    if (is64) {
      Elf64_Phdr ph;
      std::memcpy(&ph, phdrs.data() + uint64_t{i} * phentsize, sizeof(ph));
      type = ph.p_type, offset = ph.p_offset, filesz = ph.p_filesz;
    } else {
      Elf32_Phdr ph;
      std::memcpy(&ph, phdrs.data() + uint64_t{i} * phentsize, sizeof(ph));
      type = ph.p_type, offset = ph.p_offset, filesz = ph.p_filesz;
    }
    if (type != PT_NOTE) continue;
    if (filesz > kMaxNoteBytes) return false;
    notes.resize(filesz);
    if (!PreadAll(fd, notes.data(), notes.size(), offset)) return false;
    uint64_t pos = 0;
    while (pos < filesz) {
      Elf32_Nhdr nh;
      if (filesz - pos < sizeof(nh)) return false;
      std::memcpy(&nh, notes.data() + pos, sizeof(nh));
      const uint64_t name = pos + sizeof(nh);
      const uint64_t desc = name + Align4(nh.n_namesz);
      if (desc > filesz || nh.n_descsz > filesz - desc) return false;
      if (nh.n_type == kNtGnuBuildId && nh.n_namesz == 4 &&
          std::memcmp(notes.data() + name, "GNU", 4) == 0 && nh.n_descsz > 0)
        return nh.n_descsz == id.size() && std::memcmp(notes.data() + desc, id.data(), id.size()) == 0;
      pos = desc + Align4(nh.n_descsz);
    }
  }
  return false;
}

Result<BuildId> ReadBuildIdFromFd(int fd, const std::string& name, bool* notes_unread) {
  if (notes_unread != nullptr) *notes_unread = false;
  InitLibelf();
  Status error;
  Elf* elf = BeginRead(fd, name, &error);
  if (elf == nullptr) return error;
  if (elf_kind(elf) != ELF_K_ELF) {
    elf_end(elf);
    return Status::Failure(name + ": not an ELF file");
  }
  bool skipped = false;
  BuildId id = FindBuildId(elf, &skipped);
  elf_end(elf);
  if (skipped) {  // (then nothing was taken)
    if (notes_unread != nullptr) *notes_unread = true;
    return NotesSkipped(name);
  }
  return id;
}

}  // namespace mmap3
