#include "elf_file.h"

#include <fcntl.h>
#include <gelf.h>
#include <gtest/gtest.h>
#include <libelf.h>
#include <unistd.h>
#include <sys/wait.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string_view>

#include "dso_store.h"
#include "files.h"
#include "fixtures.h"

namespace mmap3 {
namespace {

using testing::TempDir;

const ElfSymbol* FindByName(const std::vector<ElfSymbol>& syms, const std::string& name) {
  auto it = std::find_if(syms.begin(), syms.end(), [&](const ElfSymbol& s) { return s.name == name; });
  return it == syms.end() ? nullptr : &*it;
}

TEST(ElfFileTest, ReadsExplicitBuildIdFromProgramHeaderNote) {
  TempDir dir;
  const std::string lib = dir.File("libv1.so");
  ASSERT_TRUE(testing::BuildSharedLibrary(lib, "alpha beta", testing::kIdV1));
  auto elf = ElfFile::Open(lib);
  ASSERT_TRUE(elf.ok()) << elf.status().ToString();
  EXPECT_EQ(elf->build_id(), testing::Id(testing::kIdV1));
  EXPECT_FALSE(elf->loads().empty());
}

TEST(ElfFileTest, ReadsDefaultSha1AndShortMd5Ids) {
  TempDir dir;
  ASSERT_TRUE(testing::CompileC("int f(void){return 1;}", dir.File("sha1.so"),
                                "-shared -fPIC -Wl,--build-id=sha1"));
  ASSERT_TRUE(testing::CompileC("int f(void){return 1;}", dir.File("md5.so"),
                                "-shared -fPIC -Wl,--build-id=md5"));
  auto sha1 = ElfFile::Open(dir.File("sha1.so"));
  auto md5 = ElfFile::Open(dir.File("md5.so"));
  ASSERT_TRUE(sha1.ok() && md5.ok());
  EXPECT_EQ(sha1->build_id().size(), 20u);
  EXPECT_EQ(md5->build_id().size(), 16u);
}

TEST(ElfFileTest, FileWithoutNoteHasEmptyBuildId) {
  TempDir dir;
  ASSERT_TRUE(testing::BuildSharedLibrary(dir.File("plain.so"), "f", "none"));
  auto elf = ElfFile::Open(dir.File("plain.so"));
  ASSERT_TRUE(elf.ok());
  EXPECT_TRUE(elf->build_id().empty());
}

TEST(ElfFileTest, FallsBackToSectionNotesWithoutProgramHeaders) {
  TempDir dir;
  ASSERT_TRUE(testing::CompileC("int f(void){return 1;}", dir.File("r.o"), "-c"));
  std::string cmd = "ld -r --build-id=0xabcdef01 '" + dir.File("r.o") + "' -o '" +
                    dir.File("r2.o") + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto elf = ElfFile::Open(dir.File("r2.o"));
  ASSERT_TRUE(elf.ok());
  EXPECT_TRUE(elf->loads().empty());
  EXPECT_EQ(elf->build_id().Hex(), "abcdef01");
}

TEST(ElfFileTest, NotElfAndMissingFilesFailCleanly) {
  TempDir dir;
  testing::WriteFile(dir.File("text"), "#!/bin/sh\necho hello\n");
  auto text = ElfFile::Open(dir.File("text"));
  EXPECT_FALSE(text.ok());
  auto missing = ElfFile::Open(dir.File("missing"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().error_number(), ENOENT);
  int fd = open(dir.File("text").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_FALSE(ReadBuildIdFromFd(fd, "text").ok());
  close(fd);
}

TEST(ElfFileTest, SymbolsAndOffsetConversionInNonPieExecutable) {
  TempDir dir;
  // A non-PIE executable is linked at 0x400000, so virtual addresses and
  // file offsets differ and the PT_LOAD conversion is really exercised.
  ASSERT_TRUE(testing::CompileC(
      "__attribute__((noinline)) int known_function(int x) { return x * 3 + 1; }\n"
      "int main(int c, char** v) { (void)v; return known_function(c); }\n",
      dir.File("exe"), "-no-pie -Wl,--build-id=0x" + std::string(testing::kIdV2)));
  auto elf = ElfFile::Open(dir.File("exe"));
  ASSERT_TRUE(elf.ok());
  auto syms = elf->ReadSymbols();
  const ElfSymbol* known = FindByName(syms, "known_function");
  ASSERT_NE(known, nullptr);
  EXPECT_GT(known->size, 0u);
  EXPECT_TRUE(std::is_sorted(syms.begin(), syms.end(),
                             [](const ElfSymbol& a, const ElfSymbol& b) { return a.addr < b.addr; }));
  const LoadSegment* text = nullptr;
  for (const LoadSegment& s : elf->loads()) {
    if (known->addr >= s.vaddr && known->addr < s.vaddr + s.filesz) text = &s;
  }
  ASSERT_NE(text, nullptr);
  EXPECT_NE(text->vaddr, text->offset);
  uint64_t offset = known->addr - text->vaddr + text->offset;
  EXPECT_EQ(elf->FileOffsetToVaddr(offset), known->addr);
  EXPECT_FALSE(elf->FileOffsetToVaddr(1ull << 40).has_value());
}

// Another user truncates a file while the reader (root, mid-capture) reads
// it: the read sees a shorter file and gives less, it does not kill the
// reader.  Through a mapping of the file (libelf's ELF_C_READ_MMAP), the
// symbol table's pages would be gone and the read a SIGBUS: this test's
// process would die.
TEST(ElfFileTest, AFileTruncatedWhileOpenIsReadNotFaultedOn) {
  TempDir dir;
  ASSERT_TRUE(testing::CompileC(
      "__attribute__((noinline)) int known_function(int x) { return x * 3 + 1; }\n"
      "int main(int c, char** v) { (void)v; return known_function(c); }\n",
      dir.File("exe"), "-no-pie"));
  auto elf = ElfFile::Open(dir.File("exe"));
  ASSERT_TRUE(elf.ok()) << elf.status().ToString();
  ASSERT_EQ(truncate(dir.File("exe").c_str(), 0), 0);
  const std::vector<ElfSymbol> syms = elf->ReadSymbols();  // no signal
  EXPECT_EQ(FindByName(syms, "known_function"), nullptr) << "its bytes are gone";
}

// A header that claims more sections than any linked object has (through
// section 0's extended count, in a file of 128 bytes) is refused before
// libelf allocates for each of them.
TEST(ElfFileTest, MillionsOfSectionHeadersAreRefusedUpFront) {
  TempDir dir;
  Elf64_Ehdr eh = testing::LittleEndianElfHeader();
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shoff = sizeof(Elf64_Ehdr);
  eh.e_shnum = 0;  // extended: section 0's sh_size
  Elf64_Shdr sh0{};
  sh0.sh_size = 15'000'000;
  std::string bytes(reinterpret_cast<const char*>(&eh), sizeof(eh));
  bytes.append(reinterpret_cast<const char*>(&sh0), sizeof(sh0));
  ASSERT_TRUE(ReplaceFile(dir.File("many.so"), bytes).ok());
  auto elf = ElfFile::Open(dir.File("many.so"));
  ASSERT_FALSE(elf.ok());
  EXPECT_NE(elf.status().ToString().find("15000000 section"), std::string::npos)
      << elf.status().ToString();
  auto fd = OpenRegularFile(dir.File("many.so"));
  ASSERT_TRUE(fd.ok());
  auto id = ReadBuildIdFromFd(fd->get(), "many.so");
  EXPECT_FALSE(id.ok());
  // 65,536 (the most a file without extended numbering can claim, plus one)
  // still opens as far as the headers go.
  sh0.sh_size = 1 << 16;
  bytes.replace(sizeof(eh), sizeof(sh0), reinterpret_cast<const char*>(&sh0), sizeof(sh0));
  ASSERT_TRUE(ReplaceFile(dir.File("many.so"), bytes).ok());
  auto fewer = ElfFile::Open(dir.File("many.so"));
  if (!fewer.ok()) {
    EXPECT_EQ(fewer.status().ToString().find("more than this reader reads"), std::string::npos)
        << fewer.status().ToString();
  }
}

// Whether reading the build-id of `path` said it is not known (its notes
// not read) and grew the reader's peak memory by less than 256 MiB.  In a
// child, whose peak is its own.
bool NotesLeftUnread(const std::string& path) {
  const pid_t child = fork();
  if (child < 0) return false;
  if (child == 0) {
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    auto fd = OpenRegularFile(path);
    if (!fd.ok()) _exit(2);
    auto id = ReadBuildIdFromFd(fd->get(), path);
    getrusage(RUSAGE_SELF, &after);
    const bool small = after.ru_maxrss - before.ru_maxrss < 256 * 1024;  // KiB
    // Not "no build-id": its id is not known.
    const bool said = !id.ok() && id.status().ToString().find("not known") != std::string::npos;
    _exit(said && small ? 0 : 1);
  }
  int status = 0;
  return waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Note segments in a sparse file that holds almost nothing on disk are not
// read past 1 MiB in all (before: libelf allocated and read all of them):
// one of 2 GB, and 1,500 of 1 MiB each (helper-59's review: 1.5 GB).
TEST(ElfFileTest, HugeOrManyNoteSegmentsAreNotRead) {
  TempDir dir;
  for (auto [count, size] : {std::pair<int, uint64_t>{1, uint64_t{2} << 30},
                             std::pair<int, uint64_t>{1500, uint64_t{1} << 20}}) {
    SCOPED_TRACE(count);
    const std::string path = dir.File("notes" + std::to_string(count) + ".so");
    ASSERT_TRUE(testing::WriteSparseNotesElf(path, count, size));
    EXPECT_TRUE(NotesLeftUnread(path));
  }
}

// The file's build-id is its first GNU build-id note, as the kernel and
// perf read it: past a note segment left unread, an id found later may
// not be the first, and is not taken for it (helper-62's review: a file
// whose first segment, over the budget, began with one id and whose next
// held another read as the other one; the kernel's records said the
// first, and the build-id cache called the untouched file changed).
TEST(ElfFileTest, AnIdAfterNotesLeftUnreadIsNotTakenForTheFilesId) {
  TempDir dir;
  const std::string path = dir.File("two.so");
  const BuildId later = testing::Id(testing::kIdV2);
  ASSERT_TRUE(testing::WriteSparseNotesElf(path, 1, (uint64_t{1} << 20) + 1, &later));
  EXPECT_TRUE(NotesLeftUnread(path));
  auto elf = ElfFile::Open(path);
  ASSERT_FALSE(elf.ok());
  EXPECT_NE(elf.status().ToString().find("not known"), std::string::npos)
      << elf.status().ToString();
  // The premise: within the budget, the later segment's id is the file's.
  ASSERT_TRUE(testing::WriteSparseNotesElf(path, 1, 4096, &later));
  auto fd = OpenRegularFile(path);
  ASSERT_TRUE(fd.ok());
  auto id = ReadBuildIdFromFd(fd->get(), path);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, later);
}

TEST(ElfFileTest, StrippedLibraryStillHasDynamicSymbols) {
  TempDir dir;
  const std::string lib = dir.File("libs.so");
  ASSERT_TRUE(testing::BuildSharedLibrary(lib, "exported_one exported_two", ""));
  ASSERT_EQ(std::system(("strip --strip-all '" + lib + "'").c_str()), 0);
  auto elf = ElfFile::Open(lib);
  ASSERT_TRUE(elf.ok());
  auto syms = elf->ReadSymbols();
  EXPECT_NE(FindByName(syms, "exported_one"), nullptr);
  EXPECT_NE(FindByName(syms, "exported_two"), nullptr);
  EXPECT_FALSE(elf->build_id().empty());  // strip keeps the note
}

// crti.o's _init has no size and .init is followed by the PLT, which has no
// symbols: a sample in the PLT is not in _init.
TEST(ElfFileTest, ASymbolWithoutASizeEndsWithItsSection) {
  TempDir dir;
  const std::string lib = dir.File("libplt.so");
  ASSERT_TRUE(testing::CompileC("#include <stdio.h>\nvoid hot(void) { puts(\"x\"); }\n", lib,
                                "-shared -fPIC"));
  auto elf = ElfFile::Open(lib);
  ASSERT_TRUE(elf.ok());
  // Where .init and .plt are, from the section headers.
  uint64_t init_addr = 0, init_size = 0, plt_addr = 0, plt_size = 0;
  {
    int fd = open(lib.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    elf_version(EV_CURRENT);
    Elf* e = elf_begin(fd, ELF_C_READ, nullptr);
    ASSERT_NE(e, nullptr);
    size_t shstrndx = 0;
    ASSERT_EQ(elf_getshdrstrndx(e, &shstrndx), 0);
    for (Elf_Scn* scn = elf_nextscn(e, nullptr); scn; scn = elf_nextscn(e, scn)) {
      GElf_Shdr sh;
      ASSERT_NE(gelf_getshdr(scn, &sh), nullptr);
      const std::string name = elf_strptr(e, shstrndx, sh.sh_name);
      if (name == ".init") init_addr = sh.sh_addr, init_size = sh.sh_size;
      if (name == ".plt") plt_addr = sh.sh_addr, plt_size = sh.sh_size;
    }
    elf_end(e);
    close(fd);
  }
  ASSERT_NE(plt_size, 0u) << "no .plt in " << lib;
  auto syms = elf->ReadSymbols();
  const ElfSymbol* init = FindByName(syms, "_init");
  ASSERT_NE(init, nullptr);
  ASSERT_EQ(init->addr, init_addr);
  EXPECT_EQ(init->size, init_size);

  SymbolTable table(syms, elf->loads(), false);
  const ElfSymbol* at_init = table.Find(init_addr + init_size - 1);
  ASSERT_NE(at_init, nullptr);
  EXPECT_EQ(at_init->name, "_init");
  // The PLT's header has no symbol; its stubs have their own ("puts@plt").
  EXPECT_EQ(table.Find(plt_addr), nullptr);
  for (uint64_t a = plt_addr; a < plt_addr + plt_size; a += 4) {
    const ElfSymbol* s = table.Find(a);
    if (s == nullptr) continue;
    EXPECT_TRUE(s->name.ends_with("@plt")) << "0x" << std::hex << a << " in .plt put on " << s->name;
  }
}

// objdump's "<f@plt>:" labels, address and name: binutils' own reading of
// the PLT, an independent oracle for ours.
std::set<std::pair<uint64_t, std::string>> ObjdumpPltLabels(const std::string& file) {
  std::set<std::pair<uint64_t, std::string>> out;
  FILE* p = popen(("objdump -d --no-show-raw-insn '" + file + "' 2>/dev/null").c_str(), "r");
  if (p == nullptr) return out;
  char line[4096];
  while (std::fgets(line, sizeof(line), p) != nullptr) {
    unsigned long long addr = 0;
    char name[1024];
    if (std::sscanf(line, "%llx <%1023[^>]>:", &addr, name) == 2 &&
        std::string_view(name).ends_with("@plt"))
      out.emplace(addr, name);
  }
  pclose(p);
  return out;
}

// Each way the linker lays out x86-64 stubs: lazy .plt, -z now, and the
// IBT layouts where the stubs are in .plt.sec and .plt.got has 16-byte
// entries.  __cxa_finalize is called through .plt.got, puts through .plt
// (or .plt.sec); abort's address is taken too.  Names and addresses must
// be objdump's, and the stubs must cover each of their bytes.
TEST(ElfFileTest, PltStubsAreNamedAsObjdumpNamesThem) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "PLT stubs are named on x86-64 only";
#endif
  const char* source =
      "#include <stdio.h>\n#include <stdlib.h>\n"
      "void hot(void) { puts(\"x\"); }\nvoid *addr(void) { return (void *)abort; }\n"
      "int main(void) { hot(); return addr() == 0; }\n";
  const std::vector<std::string> layouts = {
      "-shared -fPIC",
      "-shared -fPIC -Wl,-z,now",
      "-shared -fPIC -fcf-protection=full -Wl,-z,ibtplt",
      "-shared -fPIC -fcf-protection=full -Wl,-z,ibt -Wl,-z,now",
      "-no-pie",
      "-pie -fPIE -fcf-protection=full -Wl,-z,ibtplt",
  };
  // lld's layouts (sh_entsize 0), where it is installed (Debian's lld; make
  // test installs it).
  std::vector<std::string> all = layouts;
  if (std::system("command -v ld.lld >/dev/null 2>&1") == 0) {
    all.push_back("-fuse-ld=lld -shared -fPIC");
    all.push_back("-fuse-ld=lld -shared -fPIC -Wl,-z,now");
    all.push_back("-fuse-ld=lld -shared -fPIC -fcf-protection=full -Wl,-z,force-ibt");
  } else {
    std::fprintf(stderr, "note: no ld.lld: lld's PLT layouts not checked\n");
  }
  TempDir dir;
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE(all[i]);
    const std::string file = dir.File("plt" + std::to_string(i));
    ASSERT_TRUE(testing::CompileC(source, file, all[i]));
    const auto want = ObjdumpPltLabels(file);
    ASSERT_FALSE(want.empty()) << "objdump names no stub in " << file;
    auto elf = ElfFile::Open(file);
    ASSERT_TRUE(elf.ok());
    const auto syms = elf->ReadSymbols();
    std::set<std::pair<uint64_t, std::string>> got;
    for (const ElfSymbol& s : syms)
      if (s.name.ends_with("@plt")) got.emplace(s.addr, s.name);
    EXPECT_EQ(got, want);
    EXPECT_NE(FindByName(syms, "puts@plt"), nullptr);
    SymbolTable table(syms, elf->loads(), false);
    for (const auto& [addr, name] : want) {
      const ElfSymbol* s = FindByName(syms, name);
      ASSERT_NE(s, nullptr) << name;
      ASSERT_GE(s->size, 8u) << name;
      for (uint64_t a = addr; a < addr + s->size; ++a) {
        const ElfSymbol* at = table.Find(a);
        ASSERT_NE(at, nullptr) << "0x" << std::hex << a;
        EXPECT_EQ(at->name, name) << "0x" << std::hex << a;
      }
    }
  }
}

}  // namespace
}  // namespace mmap3
