// The only user of libelf: build-ids, load segments and symbols of one file.
//
// Contract: an ElfFile owns its file descriptor and libelf handle (move-only)
// and reads lazily through libelf's mmap of the file.  Build-ids are looked
// up in PT_NOTE segments first (what the kernel and the loader see), then in
// SHT_NOTE sections (separate debug files keep only the sections).
#ifndef MMAP3_READER_ELF_FILE_H_
#define MMAP3_READER_ELF_FILE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "build_id.h"
#include "files.h"
#include "result.h"

typedef struct Elf Elf;  // NOLINT: libelf's opaque type

namespace mmap3 {

struct ElfSymbol {
  uint64_t addr = 0;  // st_value: a virtual address in the file's layout
  uint64_t size = 0;
  std::string name;
};

struct LoadSegment {
  uint64_t offset = 0, vaddr = 0, filesz = 0, memsz = 0;
  bool executable = false;
};

class ElfFile {
 public:
  // Opens `path` read-only.
  static Result<ElfFile> Open(const std::string& path);
  // Owns `fd` from now on (closed on failure too); `name` is for messages.
  static Result<ElfFile> FromFd(UniqueFd fd, const std::string& name);

  ElfFile(ElfFile&& other) noexcept;
  ElfFile& operator=(ElfFile&& other) noexcept;
  ElfFile(const ElfFile&) = delete;
  ElfFile& operator=(const ElfFile&) = delete;
  ~ElfFile();

  // Empty if the file has no NT_GNU_BUILD_ID note.
  const BuildId& build_id() const { return build_id_; }
  const std::vector<LoadSegment>& loads() const { return loads_; }
  // Maps a file offset inside a PT_LOAD segment to its virtual address.
  std::optional<uint64_t> FileOffsetToVaddr(uint64_t offset) const;
  // Function symbols from .symtab and .dynsym, and x86-64 PLT stubs named
  // "f@plt" from their GOT slot's relocation, sorted by address, duplicates
  // (same address) collapsed to the first name seen in .symtab.
  std::vector<ElfSymbol> ReadSymbols() const;
  // True if the file has a full symbol table (.symtab), not just .dynsym.
  bool HasSymtab() const;

 private:
  ElfFile(UniqueFd fd, Elf* elf) : fd_(std::move(fd)), elf_(elf) {}
  Status Load(const std::string& name);
  void Close();

  UniqueFd fd_;
  Elf* elf_ = nullptr;
  BuildId build_id_;
  std::vector<LoadSegment> loads_;
};

// Reads only the build-id of an open file (`fd` is borrowed).
// An empty BuildId means the file is ELF without a note; a failed Result means
// it is not ELF or could not be read.  *notes_unread (if given) says whether
// the failure is that its notes are more than this reader reads (1 MiB in
// all): then the file may well be an ELF image with a build-id, which is
// not known, rather than a file that changed or is not ELF.
Result<BuildId> ReadBuildIdFromFd(int fd, const std::string& name,
                                  bool* notes_unread = nullptr);

// True if the file open at `fd` (borrowed) says `id` now, read with pread:
// its first GNU build-id note, walking the PT_NOTE segments in order as
// ReadBuildIdFromFd() does, is `id`.  False for anything else, including
// files it cannot walk plainly (other byte order, more than 64 KiB of
// program headers or 1 MiB of notes, a malformed note, no PT_NOTE build-id):
// the caller then reads the file in full.  A few small reads, for checking
// a remembered id against the file as it is.
bool BuildIdStillIn(int fd, const BuildId& id);

}  // namespace mmap3

#endif  // MMAP3_READER_ELF_FILE_H_
