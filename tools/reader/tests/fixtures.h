// Test fixtures built at test time: temporary directories and tiny ELF
// files compiled with the same compiler the tests were built with.
#ifndef MMAP3_READER_TESTS_FIXTURES_H_
#define MMAP3_READER_TESTS_FIXTURES_H_

#include <elf.h>

#include <cstdint>
#include <string>
#include <vector>

#include "build_id.h"
#include "record.h"

namespace mmap3::testing {

// The worst spread over many hash tables: the largest mean distance of a
// table's keys from the slots their hashes name (Displacement() / size()),
// and the key and key set that gave it, for tests that sweep fixed keys.
struct WorstSpread {
  double mean = 0;
  int key = -1, set = -1;
  template <typename Table>
  void Note(const Table& table, int table_key, int key_set) {
    const double m =
        static_cast<double>(table.Displacement()) / static_cast<double>(table.size());
    if (m > mean) {
      mean = m;
      key = table_key;
      set = key_set;
    }
  }
};

// A fresh directory under the build tree, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Compiles C `source` into `output` with extra `flags` (e.g. "-shared -fPIC").
// Fails the current test (ADD_FAILURE) and returns false on error.
bool CompileC(const std::string& source, const std::string& output, const std::string& flags);

// A shared library whose functions are `functions` (space-separated names),
// each with a distinct body, with the given build-id ("" for the linker's
// default sha1, "none" for no build-id, or 0x-less hex for an explicit id).
bool BuildSharedLibrary(const std::string& output, const std::string& functions,
                        const std::string& build_id_hex);

void WriteFile(const std::string& path, const std::string& contents);

// An x86-64 ELF shared object's header with no headers of any kind yet.
Elf64_Ehdr LittleEndianElfHeader();

// Writes at `path` an ELF file of `count` PT_NOTE segments of `size` bytes
// each, all at offset 1 MiB, with no build-id: a sparse file, nearly
// nothing on disk.  With `after`, one more small PT_NOTE segment follows
// them, holding a GNU build-id note of that id.  Fails the test and
// returns false if it cannot.
bool WriteSparseNotesElf(const std::string& path, int count, uint64_t size,
                         const BuildId* after = nullptr);

// Fixed build-ids used across tests.
inline const char* kIdV1 = "1111111111111111111111111111111111111111";
inline const char* kIdV2 = "2222222222222222222222222222222222222222";
inline const char* kIdV3 = "3333333333333333333333333333333333333333";
BuildId Id(const char* hex);

// A sample_id trailer of pid == tid, with its tid, time and cpu (0).
SampleId Sid(uint32_t pid, uint64_t time);

// A notes file as /sys/kernel/notes and /sys/module/*/notes/.note.gnu.build-id
// expose it: one GNU build-id note.
std::string BuildIdNotes(const BuildId& id);

// Words x with bits only from `low` to `high` (inclusive) whose CRC32C
// from 0, crc32c(0, x), is 0: a basis of them over GF(2).  CRC32C is
// linear, so changing any word of a key by any combination of these
// leaves a CRC32C hash of the key as it was (ChainMemo's, where the CPU
// has SSE4.2).  Empty where the CPU has no CRC32C instruction.
std::vector<uint64_t> Crc32cKernel(int low, int high);

// The same kernel image in kallsyms form as loaded at `text` (its _text; the
// KASLR base), with one module "fakemod" loaded at `module`.  Offsets from
// _text: do_work 0x100, helper 0x200, schedule 0x1000, _etext 0x2000; from
// the module: mod_init 0, mod_work 0x1000.
std::string FakeKallsyms(uint64_t text, uint64_t module);
inline constexpr uint64_t kScheduleOffset = 0x1000;

}  // namespace mmap3::testing

#endif  // MMAP3_READER_TESTS_FIXTURES_H_

namespace mmap3::testing {
// File offset of function `name` in the ELF file at `path` (0 if not found).
uint64_t FunctionFileOffset(const std::string& path, const std::string& name);
}  // namespace mmap3::testing
