#include "fixtures.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace mmap3::testing {

#if defined(__x86_64__)
namespace {
__attribute__((target("sse4.2"))) uint32_t Crc32cOfWord(uint64_t w) {
  return static_cast<uint32_t>(_mm_crc32_u64(0, w));
}
}  // namespace
#endif

std::vector<uint64_t> Crc32cKernel(int low, int high) {
  std::vector<uint64_t> kernel;
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("sse4.2")) return kernel;
  // Elimination: (crc, which bits of x give it), one per leading bit.
  std::vector<std::pair<uint32_t, uint64_t>> basis;
  for (int bit = low; bit <= high; ++bit) {
    uint32_t v = Crc32cOfWord(uint64_t{1} << bit);
    uint64_t combo = uint64_t{1} << bit;
    for (const auto& [bv, bc] : basis) {
      if ((v ^ bv) < v) {  // bv's leading bit is set in v
        v ^= bv;
        combo ^= bc;
      }
    }
    if (v == 0) {
      kernel.push_back(combo);
    } else {
      basis.emplace_back(v, combo);
      std::sort(basis.begin(), basis.end(), std::greater<>());
    }
  }
#endif
  return kernel;
}

TempDir::TempDir() {
  std::filesystem::create_directories(MMAP3_TEST_TMP);
  std::string tmpl = std::string(MMAP3_TEST_TMP) + "/t.XXXXXX";
  char* p = mkdtemp(tmpl.data());
  if (p == nullptr) {
    ADD_FAILURE() << "mkdtemp " << tmpl;
    return;
  }
  path_ = p;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
}

bool CompileC(const std::string& source, const std::string& output, const std::string& flags) {
  const std::string src = output + ".c";
  WriteFile(src, source);
  std::string cmd =
      std::string(MMAP3_TEST_CC) + " -O1 -g0 " + flags + " -o '" + output + "' '" + src + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    ADD_FAILURE() << "popen " << cmd;
    return false;
  }
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  int rc = pclose(p);
  if (rc != 0) {
    ADD_FAILURE() << "compile failed: " << cmd << "\n" << out;
    return false;
  }
  return true;
}

bool BuildSharedLibrary(const std::string& output, const std::string& functions,
                        const std::string& build_id_hex) {
  std::istringstream names(functions);
  std::ostringstream src;
  std::string name;
  int i = 0;
  while (names >> name) {
    // Distinct bodies so each function has a distinct, non-zero size.
    src << "int " << name << "(int x) { int s = 0; for (int i = 0; i < x; ++i) s += i * "
        << ++i << " + (s >> 3); return s; }\n";
  }
  std::string flags = "-shared -fPIC";
  if (build_id_hex == "none") {
    flags += " -Wl,--build-id=none";
  } else if (!build_id_hex.empty()) {
    flags += " -Wl,--build-id=0x" + build_id_hex;
  } else {
    flags += " -Wl,--build-id=sha1";
  }
  return CompileC(src.str(), output, flags);
}

BuildId Id(const char* hex) { return *BuildId::FromHex(hex); }

SampleId Sid(uint32_t pid, uint64_t time) {
  SampleId s;
  s.has_tid = s.has_time = s.has_cpu = true;
  s.pid = s.tid = pid;
  s.time = time;
  return s;
}

std::string BuildIdNotes(const BuildId& id) {
  std::string notes;
  auto put32 = [&](uint32_t v) { notes.append(reinterpret_cast<const char*>(&v), 4); };
  put32(4);
  put32(static_cast<uint32_t>(id.size()));
  put32(3);  // NT_GNU_BUILD_ID
  notes.append("GNU\0", 4);
  notes.append(reinterpret_cast<const char*>(id.data()), id.size());
  notes.append((4 - id.size() % 4) % 4, '\0');
  return notes;
}

std::string FakeKallsyms(uint64_t text, uint64_t module) {
  return fmt::format(
      "{0:016x} T _stext\n"
      "{0:016x} T _text\n"
      "{1:016x} T do_work\n"
      "{2:016x} t helper\n"
      "{3:016x} T schedule\n"
      "{4:016x} T _etext\n"
      "{5:016x} D some_data\n"
      "{6:016x} t mod_init\t[fakemod]\n"
      "{7:016x} t mod_work\t[fakemod]\n"
      "{8:016x} d mod_data\t[fakemod]\n",
      text, text + 0x100, text + 0x200, text + kScheduleOffset, text + 0x2000, text + 0x3000,
      module, module + 0x1000, module + 0x3000);
}

}  // namespace mmap3::testing

#include "elf_file.h"

namespace mmap3::testing {

Elf64_Ehdr LittleEndianElfHeader() {
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_DYN;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_ehsize = sizeof(Elf64_Ehdr);
  return eh;
}

bool WriteSparseNotesElf(const std::string& path, int count, uint64_t size,
                         const BuildId* after) {
  Elf64_Ehdr eh = LittleEndianElfHeader();
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phoff = sizeof(Elf64_Ehdr);
  eh.e_phnum = static_cast<uint16_t>(count + (after != nullptr ? 1 : 0));
  Elf64_Phdr ph{};
  ph.p_type = PT_NOTE;
  ph.p_offset = uint64_t{1} << 20;  // past the headers
  ph.p_filesz = ph.p_memsz = size;
  std::string bytes(reinterpret_cast<const char*>(&eh), sizeof(eh));
  for (int i = 0; i < count; ++i) bytes.append(reinterpret_cast<const char*>(&ph), sizeof(ph));
  if (after != nullptr) {
    const std::string note = BuildIdNotes(*after);
    Elf64_Phdr small = ph;
    small.p_offset = bytes.size() + sizeof(small);  // right after this header
    small.p_filesz = small.p_memsz = note.size();
    small.p_align = 4;
    bytes.append(reinterpret_cast<const char*>(&small), sizeof(small));
    bytes += note;
  }
  WriteFile(path, bytes);
  if (truncate(path.c_str(), static_cast<off_t>(ph.p_offset + size)) != 0) {
    ADD_FAILURE() << "truncate " << path << ": " << std::strerror(errno);
    return false;
  }
  return true;
}

uint64_t FunctionFileOffset(const std::string& path, const std::string& name) {
  auto elf = ElfFile::Open(path);
  if (!elf.ok()) {
    ADD_FAILURE() << elf.status().ToString();
    return 0;
  }
  for (const ElfSymbol& s : elf->ReadSymbols()) {
    if (s.name != name) continue;
    for (const LoadSegment& seg : elf->loads()) {
      if (s.addr >= seg.vaddr && s.addr < seg.vaddr + seg.filesz)
        return s.addr - seg.vaddr + seg.offset + 2;  // a few bytes into the body
    }
  }
  ADD_FAILURE() << name << " not found in " << path;
  return 0;
}

}  // namespace mmap3::testing
