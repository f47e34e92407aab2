#include "symbolizer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "build_id_cache.h"
#include "elf_file.h"
#include "fixtures.h"
#include "proc_maps.h"

namespace mmap3 {
namespace {

using testing::Id;
using testing::kIdV1;
using testing::kIdV2;
using testing::kIdV3;
using testing::TempDir;

MappedObject Object(const std::string& path, const char* id_hex) {
  MappedObject o;
  o.path = path;
  if (id_hex != nullptr) o.build_id = Id(id_hex);
  return o;
}

SymbolSearch PathsOnly() {
  SymbolSearch s;
  s.debug_dir = "";
  return s;
}

class SymbolizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lib_ = dir_.File("libdemo.so");
    v1_ = dir_.File("v1.so");
    v2_ = dir_.File("v2.so");
    ASSERT_TRUE(testing::BuildSharedLibrary(v1_, "common_fn only_in_v1", kIdV1));
    ASSERT_TRUE(testing::BuildSharedLibrary(v2_, "common_fn only_in_v2", kIdV2));
  }
  TempDir dir_;
  std::string lib_, v1_, v2_;
};

TEST_F(SymbolizerTest, UsesTheRecordedPathWhenItsBuildIdMatches) {
  std::filesystem::copy_file(v1_, lib_);
  DsoStore store(PathsOnly());
  Symbolizer sym(store);
  MappedObject o = Object(lib_, kIdV1);
  EXPECT_EQ(sym.Symbolize(o, testing::FunctionFileOffset(v1_, "only_in_v1")), "only_in_v1");
}

// Another user's copy of a library, with the library's build-id and a
// .symtab of its owner's naming, does not name the samples of the
// library's own file (which has only .dynsym); the library's names do.
TEST_F(SymbolizerTest, AFileAnotherUserCanWriteDoesNotNameAnotherFilesSamples) {
  const std::string forged = dir_.File("a_forged.so"), stripped = dir_.File("b_libx.so");
  ASSERT_EQ(std::system(fmt::format("objcopy --redefine-sym only_in_v1=attacker_fn {} {}", v1_,
                                    forged).c_str()), 0);
  ASSERT_EQ(std::system(fmt::format("strip --strip-all -o {} {}", stripped, v1_).c_str()), 0);
  ASSERT_EQ(chmod(forged.c_str(), 0666), 0);  // anyone can write it
  ASSERT_TRUE(ElfFile::Open(forged)->HasSymtab());
  ASSERT_FALSE(ElfFile::Open(stripped)->HasSymtab());
  const uint64_t offset = testing::FunctionFileOffset(v1_, "only_in_v1");
  {
    DsoStore store(PathsOnly());
    Symbolizer sym(store);
    store.Get(Id(kIdV1), forged);  // a mapping of the copy was recorded too
    EXPECT_EQ(sym.Symbolize(Object(stripped, kIdV1), offset), "only_in_v1");
  }
  // Its own file still names its own samples when nothing else can, and
  // the store keeps which file that was (the report's symbol_files say
  // own_path_only).
  {
    DsoStore store(PathsOnly());
    Symbolizer sym(store);
    EXPECT_EQ(sym.Symbolize(Object(forged, kIdV1), offset), "attacker_fn");
    const std::vector<const Dso*> dsos = store.LoadedDsos();
    ASSERT_EQ(dsos.size(), 1u);
    EXPECT_EQ(dsos[0]->symbols, nullptr);
    ASSERT_TRUE(dsos[0]->others.contains(forged));
    EXPECT_NE(dsos[0]->others.at(forged), nullptr);
  }
  // Both files another user's (the real one a service user's program):
  // each names only its own path's mappings (helper-58: in byte order the
  // forged one named both).
  ASSERT_EQ(chmod(stripped.c_str(), 0666), 0);
  {
    DsoStore store(PathsOnly());
    Symbolizer sym(store);
    store.Get(Id(kIdV1), forged);
    // (Two objects alive at once: the symbolizer keeps a table per object.)
    const MappedObject real_one = Object(stripped, kIdV1), forged_one = Object(forged, kIdV1);
    EXPECT_EQ(sym.Symbolize(real_one, offset), "only_in_v1");
    EXPECT_EQ(sym.Symbolize(forged_one, offset), "attacker_fn");
  }
  // The real file rebuilt since (another id): the forged copy, the only
  // file with the id left, still does not name the real path's samples.
  const std::string real = dir_.File("c_prog.so");
  std::filesystem::copy_file(v2_, real);
  {
    DsoStore store(PathsOnly());
    Symbolizer sym(store);
    store.Get(Id(kIdV1), forged);
    const std::string name = sym.Symbolize(Object(real, kIdV1), offset);
    EXPECT_TRUE(name.starts_with("[unknown")) << name;
  }
  ASSERT_EQ(chmod(stripped.c_str(), 0644), 0);
  // Only the mode makes the difference: written by no one else, the
  // .symtab wins, as it should.
  ASSERT_EQ(chmod(forged.c_str(), 0644), 0);
  DsoStore store(PathsOnly());
  Symbolizer sym(store);
  store.Get(Id(kIdV1), forged);
  EXPECT_EQ(sym.Symbolize(Object(stripped, kIdV1), offset), "attacker_fn");
}

// A PLT stub of a C++ function is demangled as the function is, with
// "@plt" after it.
TEST_F(SymbolizerTest, PltStubsOfCxxFunctionsAreDemangled) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "PLT stubs are named on x86-64 only";
#endif
  // foo() and operator delete(void*, unsigned long), called through the PLT.
  ASSERT_TRUE(testing::CompileC("void _Z3foov(void); void _ZdlPvm(void *, unsigned long);\n"
                                "void g(void *p) { _Z3foov(); _ZdlPvm(p, 8); }\n",
                                lib_, std::string("-shared -fPIC -Wl,--build-id=0x") + kIdV1));
  auto elf = ElfFile::Open(lib_);
  ASSERT_TRUE(elf.ok());
  std::map<std::string, uint64_t> stubs;
  for (const ElfSymbol& s : elf->ReadSymbols())
    if (s.name.ends_with("@plt")) stubs[s.name] = s.addr;
  ASSERT_TRUE(stubs.contains("_Z3foov@plt") && stubs.contains("_ZdlPvm@plt"));
  auto offset_of = [&](uint64_t addr) {
    for (const LoadSegment& l : elf->loads())
      if (addr >= l.vaddr && addr - l.vaddr < l.filesz) return addr - l.vaddr + l.offset;
    ADD_FAILURE() << "no segment has 0x" << std::hex << addr;
    return uint64_t{0};
  };
  DsoStore store(PathsOnly());
  Symbolizer sym(store);
  MappedObject o = Object(lib_, kIdV1);
  sym.Declare(o);
  EXPECT_EQ(sym.Symbolize(o, offset_of(stubs["_Z3foov@plt"])), "foo()@plt");
  EXPECT_EQ(sym.Symbolize(o, offset_of(stubs["_ZdlPvm@plt"]) + 4),
            "operator delete(void*, unsigned long)@plt");
}

TEST_F(SymbolizerTest, RefusesAFileWithAnotherBuildId) {
  // The recorded mapping was v1; the path now holds v2.
  std::filesystem::copy_file(v2_, lib_);
  DsoStore store(PathsOnly());
  Symbolizer sym(store);
  MappedObject o = Object(lib_, kIdV1);
  uint64_t off = testing::FunctionFileOffset(v1_, "only_in_v1");
  EXPECT_EQ(sym.Symbolize(o, off), fmt::format("[unknown 111111111111]+{:#x}", off));
  Dso& dso = store.Get(Id(kIdV1), lib_);
  EXPECT_EQ(dso.symbols, nullptr);
  ASSERT_EQ(dso.refused.size(), 1u);
  EXPECT_EQ(dso.refused[0], lib_);
}

TEST_F(SymbolizerTest, SaysWhetherTheFileOrOnlyTheSymbolIsMissing) {
  std::filesystem::copy_file(v1_, lib_);
  DsoStore store(PathsOnly());
  Symbolizer sym(store);
  // Offset 0 is the ELF header: inside the file's first PT_LOAD, in no
  // function.
  MappedObject found = Object(lib_, kIdV1);
  const Symbolizer::Symbol& header = sym.Lookup(found, 0);
  EXPECT_EQ(*header.name, "[no symbol 111111111111]+0x0");
  EXPECT_EQ(header.status, SymbolStatus::kNoSymbol);
  const uint64_t off = testing::FunctionFileOffset(v1_, "only_in_v1");
  const Symbolizer::Symbol& fn = sym.Lookup(found, off);
  EXPECT_EQ(*fn.name, "only_in_v1");
  EXPECT_EQ(fn.status, SymbolStatus::kFound);
  // No file has v2's build-id.
  MappedObject missing = Object(lib_, kIdV2);
  const Symbolizer::Symbol& none = sym.Lookup(missing, off);
  EXPECT_EQ(*none.name, fmt::format("[unknown 222222222222]+{:#x}", off));
  EXPECT_EQ(none.status, SymbolStatus::kNoFile);
  MappedObject no_id = Object(lib_, nullptr);
  EXPECT_EQ(sym.Lookup(no_id, off).status, SymbolStatus::kNoBuildId);
}

TEST_F(SymbolizerTest, AStrippedFileSaysNoSymbolForWhatOnlySymtabNamed) {
  // A static function is only in .symtab; strip --strip-all leaves .dynsym.
  ASSERT_TRUE(testing::CompileC(
      "static __attribute__((noinline)) int hidden_fn(int x) { return x * 7 + 1; }\n"
      "int exported_fn(int x) { return hidden_fn(x) + 2; }\n",
      lib_, "-shared -fPIC -Wl,--build-id=0x" + std::string(testing::kIdV3)));
  const uint64_t hidden = testing::FunctionFileOffset(lib_, "hidden_fn");
  ASSERT_EQ(std::system(("strip --strip-all '" + lib_ + "'").c_str()), 0);
  DsoStore store(PathsOnly());
  Symbolizer sym(store);
  MappedObject o = Object(lib_, testing::kIdV3);
  const Symbolizer::Symbol& s = sym.Lookup(o, hidden);
  EXPECT_EQ(*s.name, fmt::format("[no symbol 333333333333]+{:#x}", hidden));
  EXPECT_EQ(s.status, SymbolStatus::kNoSymbol);
}

TEST_F(SymbolizerTest, FindsReplacedVersionInTheBuildIdCache) {
  TempDir cache;
  UniqueFd fd(open(v1_.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  BuildIdCache c(cache.path());
  ASSERT_TRUE(c.Insert(Id(kIdV1), lib_, fd.get()).ok());
  std::filesystem::copy_file(v2_, lib_);  // replaced after the copy was taken
  SymbolSearch search = PathsOnly();
  search.cache_dir = cache.path();
  DsoStore store(search);
  Symbolizer sym(store);
  MappedObject o1 = Object(lib_, kIdV1), o2 = Object(lib_, kIdV2);
  EXPECT_EQ(sym.Symbolize(o1, testing::FunctionFileOffset(v1_, "only_in_v1")), "only_in_v1");
  EXPECT_EQ(sym.Symbolize(o2, testing::FunctionFileOffset(v2_, "only_in_v2")), "only_in_v2");
  EXPECT_EQ(store.Get(Id(kIdV1), "").symbol_file, BuildIdCache::LinkPath(cache.path(), Id(kIdV1)) + "/elf");
}

TEST(VdsoSymbolsTest, TheVdsoIsCachedInPerfsLayoutAndSymbolized) {
  // The kernel maps one vDSO image into every process: the capture caches
  // ours under [vdso]/<id>/vdso, where perf keeps it too.
  auto fd = OwnVdsoImage();
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  auto elf = ElfFile::FromFd(UniqueFd(dup(fd->get())), "[vdso]");
  ASSERT_TRUE(elf.ok()) << elf.status().ToString();
  const BuildId id = elf->build_id();
  if (id.empty()) GTEST_SKIP() << "this kernel's vDSO has no build-id";
  std::string fn;
  uint64_t offset = 0;
  for (const ElfSymbol& s : elf->ReadSymbols()) {
    if (s.name.find("clock_gettime") != std::string::npos) {  // or its __vdso_ alias
      fn = s.name;
      offset = s.addr;  // the vDSO is linked at 0 and loaded whole: address == file offset
    }
  }
  TempDir cache;
  BuildIdCache c(cache.path());
  ASSERT_TRUE(c.Insert(id, "[vdso]", fd->get()).ok());
  EXPECT_EQ(c.stats().copied, 1u);
  EXPECT_TRUE(std::filesystem::exists(cache.path() + "/[vdso]/" + id.Hex() + "/vdso"));
  EXPECT_EQ(BuildIdCache::ElfPath(cache.path(), "[vdso]", id),
            cache.path() + "/[vdso]/" + id.Hex() + "/vdso");
  if (fn.empty()) GTEST_SKIP() << "no clock_gettime in this vDSO";
  SymbolSearch search = PathsOnly();
  search.cache_dir = cache.path();
  DsoStore store(search);
  Symbolizer sym(store);
  MappedObject o;
  o.path = "[vdso]";
  o.build_id = id;
  EXPECT_EQ(sym.Symbolize(o, offset), fn);
}

TEST_F(SymbolizerTest, FindsDebugFilesByBuildId) {
  TempDir debug;
  std::string hex = kIdV1;
  std::filesystem::create_directories(debug.File(".build-id/" + hex.substr(0, 2)));
  std::filesystem::copy_file(v1_, debug.File(".build-id/" + hex.substr(0, 2) + "/" + hex.substr(2) + ".debug"));
  SymbolSearch search = PathsOnly();
  search.debug_dir = debug.path();
  search.use_recorded_paths = false;
  DsoStore store(search);
  Symbolizer sym(store);
  MappedObject o = Object("/nonexistent/libdemo.so", kIdV1);
  EXPECT_EQ(sym.Symbolize(o, testing::FunctionFileOffset(v1_, "common_fn")), "common_fn");
}

TEST_F(SymbolizerTest, NoBuildIdMeansNoSymbols) {
  std::filesystem::copy_file(v1_, lib_);
  DsoStore store(PathsOnly());
  Symbolizer sym(store);
  MappedObject o = Object(lib_, nullptr);
  EXPECT_EQ(sym.Symbolize(o, 0x1234), "[unknown]+0x1234");
}

TEST_F(SymbolizerTest, TheFileChosenDoesNotDependOnTheOrderPathsWereSeen) {
  // Two copies of v1 at two recorded paths: the same one is used whichever
  // path was recorded first.
  std::filesystem::copy_file(v1_, lib_);
  const std::string other = dir_.File("copy/libdemo.so");
  std::filesystem::create_directories(dir_.File("copy"));
  std::filesystem::copy_file(v1_, other);
  std::string chosen[2];
  for (int order = 0; order < 2; ++order) {
    DsoStore store(PathsOnly());
    Dso& dso = store.Get(Id(kIdV1), order == 0 ? lib_ : other);
    store.Get(Id(kIdV1), order == 0 ? other : lib_);
    ASSERT_NE(store.Symbols(dso), nullptr);
    chosen[order] = dso.symbol_file;
  }
  EXPECT_EQ(chosen[0], chosen[1]);
}

TEST_F(SymbolizerTest, LoadsEachDsoOnce) {
  std::filesystem::copy_file(v1_, lib_);
  DsoStore store(PathsOnly());
  Symbolizer sym(store);
  MappedObject a = Object(lib_, kIdV1), b = Object(lib_ + "-alias", kIdV1);
  for (uint64_t off = 0; off < 0x2000; off += 16) {
    (void)sym.Symbolize(a, off);
    (void)sym.Symbolize(b, off);
  }
  EXPECT_EQ(store.loads(), 1u);
  EXPECT_EQ(store.size(), 1u);
}

// Kernel symbols come from kallsyms snapshots, each of one boot.  The
// fixture has a running kernel (notes, kallsyms, modules under dir_) and a
// build-id cache; tests put a snapshot in one or the other.
class KernelSymbolsTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kBootA = 0xffffffff81000000;  // one KASLR offset
  static constexpr uint64_t kBootB = 0xffffffff9a200000;  // another boot's
  static constexpr uint64_t kModuleA = 0xffffffffc0000000;

  void SetUp() override {
    search_.debug_dir = "";
    search_.cache_dir = cache_.path();
    search_.kernel_notes = dir_.File("notes");
    search_.kallsyms = dir_.File("kallsyms");
    search_.modules_dir = dir_.File("module");
    search_.proc_modules = dir_.File("modules");
  }
  // The running kernel: build-id `id`, loaded at `text`.
  void Running(const char* id, uint64_t text) {
    testing::WriteFile(search_.kernel_notes, testing::BuildIdNotes(Id(id)));
    testing::WriteFile(search_.kallsyms, testing::FakeKallsyms(text, kModuleA));
    testing::WriteFile(search_.proc_modules, fmt::format("fakemod 16384 0 - Live {:#x}\n", kModuleA));
  }
  void RunningModule(const char* id) {
    std::filesystem::create_directories(dir_.File("module/fakemod/notes"));
    testing::WriteFile(dir_.File("module/fakemod/notes/.note.gnu.build-id"),
                       testing::BuildIdNotes(Id(id)));
  }
  // A snapshot taken in a boot at `text`, stored with the kernel's build-id.
  void Cached(const char* id, uint64_t text) {
    const std::string file = BuildIdCache::KallsymsPath(cache_.path(), Id(id));
    std::filesystem::create_directories(std::filesystem::path(file).parent_path());
    testing::WriteFile(file, testing::FakeKallsyms(text, kModuleA));
  }
  // The image as a capture made at `text` knows it.
  static MappedObject Image(const char* id, uint64_t text) {
    MappedObject k;
    k.kernel = true;
    k.path = "[kernel.kallsyms]";
    k.build_id = Id(id);
    k.reloc_symbol = "_text";
    k.reloc_address = text;
    return k;
  }
  std::string At(const MappedObject& k, uint64_t addr) {
    DsoStore store(search_);
    Symbolizer sym(store);
    return sym.Symbolize(k, addr);
  }

  TempDir dir_, cache_;
  SymbolSearch search_;
};

TEST_F(KernelSymbolsTest, UsedOnlyForTheMatchingKernel) {
  Running(kIdV2, kBootA);
  EXPECT_EQ(ReadKernelBuildId(search_.kernel_notes), Id(kIdV2));
  MappedObject k = Image(kIdV2, kBootA);
  EXPECT_EQ(At(k, kBootA + 0x150), "do_work");
  EXPECT_EQ(At(k, kBootA + 0x210), "helper");
  MappedObject other = Image(kIdV1, kBootA);  // captured on another kernel
  EXPECT_EQ(At(other, kBootA + 0x150), fmt::format("[unknown 111111111111]+{:#x}", kBootA + 0x150));
}

// The reviewer's case: a capture reported after a reboot that moved the
// kernel.  The live kallsyms has the right build-id but another offset: read
// as it is, the capture's schedule address falls past the end of the text
// and lands on _etext.
TEST_F(KernelSymbolsTest, AfterARebootTheCapturesSnapshotIsRelocated) {
  Running(kIdV2, kBootA);
  Cached(kIdV2, kBootB);  // what record stored, in the capture's boot
  const MappedObject k = Image(kIdV2, kBootB);
  EXPECT_EQ(At(k, kBootB + testing::kScheduleOffset + 0x10), "schedule");
  EXPECT_EQ(At(k, kBootB + 0x150), "do_work");
  // The snapshot may come from any boot of this kernel: relocated by _text.
  Cached(kIdV2, kBootA);
  EXPECT_EQ(At(k, kBootB + testing::kScheduleOffset + 0x10), "schedule");
  EXPECT_EQ(At(Image(kIdV2, 0xffffffff8c000000), 0xffffffff8c000000 + 0x210), "helper");
}

TEST_F(KernelSymbolsTest, LiveKallsymsOnlyWhenRelocatedTheSameWay) {
  Running(kIdV2, kBootA);
  // No snapshot kept: the running kernel has the build-id but not the
  // capture's offset.  Nothing, rather than _etext.
  const uint64_t schedule_b = kBootB + testing::kScheduleOffset + 0x10;
  EXPECT_EQ(At(Image(kIdV2, kBootB), schedule_b),
            fmt::format("[unknown 222222222222]+{:#x}", schedule_b));
  // Same boot: the live one is the capture's.
  EXPECT_EQ(At(Image(kIdV2, kBootA), kBootA + testing::kScheduleOffset + 0x10), "schedule");
  // A capture without the _text record cannot be related to any snapshot.
  MappedObject unrelocated = Image(kIdV2, kBootA);
  unrelocated.reloc_symbol.clear();
  unrelocated.reloc_address = 0;
  EXPECT_EQ(At(unrelocated, kBootA + 0x150).rfind("[unknown 222222222222]", 0), 0u);
}

TEST_F(KernelSymbolsTest, OutsideTheImagesTextThereIsNoImageSymbol) {
  Cached(kIdV2, kBootA);
  const MappedObject k = Image(kIdV2, kBootA);
  // Past _etext (module space, BPF, trampolines) and below _text: the last
  // or first image symbol would be a lie.
  EXPECT_EQ(At(k, kBootA + 0x2010).rfind("[no symbol 222222222222]", 0), 0u);
  EXPECT_EQ(At(k, kModuleA + 0x1010).rfind("[no symbol 222222222222]", 0), 0u);
  EXPECT_EQ(At(k, kBootA - 0x10).rfind("[no symbol 222222222222]", 0), 0u);
}

TEST_F(KernelSymbolsTest, HiddenSnapshotFallsBackToTheSameBootsLiveOne) {
  Running(kIdV2, kBootA);
  const std::string file = BuildIdCache::KallsymsPath(cache_.path(), Id(kIdV2));
  std::filesystem::create_directories(std::filesystem::path(file).parent_path());
  testing::WriteFile(file, testing::FakeKallsyms(0, 0));  // kptr_restrict zeros
  EXPECT_EQ(At(Image(kIdV2, kBootA), kBootA + 0x150), "do_work");
}

// A copy cut short in the image's text (a full disk, a crash of whatever
// wrote it) lacks the symbols after the cut: every later address would land
// on the last one left.
TEST_F(KernelSymbolsTest, ASnapshotCutShortIsNotUsed) {
  Cached(kIdV2, kBootA);
  const std::string file = BuildIdCache::KallsymsPath(cache_.path(), Id(kIdV2));
  const std::string whole = testing::FakeKallsyms(kBootA, kModuleA);
  const MappedObject k = Image(kIdV2, kBootA);
  const uint64_t schedule = kBootA + testing::kScheduleOffset + 0x10;
  ASSERT_EQ(At(k, schedule), "schedule");
  // Cut at the end of the line before schedule's, and inside schedule's.
  const size_t line = whole.rfind('\n', whole.find(" T schedule\n")) + 1;
  for (size_t cut : {line, line + 10}) {
    testing::WriteFile(file, whole.substr(0, cut));
    EXPECT_EQ(At(k, schedule), fmt::format("[unknown 222222222222]+{:#x}", schedule)) << cut;
  }
}

// Unlike an ELF image, a snapshot has no build-id to check it by: it is
// used only if no one but us or root could have put it there.
TEST_F(KernelSymbolsTest, ASnapshotOthersCouldWriteIsNotUsed) {
  const MappedObject k = Image(kIdV2, kBootA);
  const uint64_t schedule = kBootA + testing::kScheduleOffset + 0x10;
  const std::string unknown = fmt::format("[unknown 222222222222]+{:#x}", schedule);
  Cached(kIdV2, kBootA);
  const std::string file = BuildIdCache::KallsymsPath(cache_.path(), Id(kIdV2));
  ASSERT_EQ(At(k, schedule), "schedule");
  ASSERT_EQ(chmod(file.c_str(), 0664), 0);
  EXPECT_EQ(At(k, schedule), unknown);
  // A symlink to a whole snapshot, in place of the file or of its directory.
  const std::string elsewhere = dir_.File("elsewhere");
  std::filesystem::create_directories(elsewhere);
  testing::WriteFile(elsewhere + "/kallsyms", testing::FakeKallsyms(kBootA, kModuleA));
  std::filesystem::remove(file);
  std::filesystem::create_symlink(elsewhere + "/kallsyms", file);
  EXPECT_EQ(At(k, schedule), unknown);
  const std::string entry = std::filesystem::path(file).parent_path();
  std::filesystem::remove_all(entry);
  std::filesystem::create_directory_symlink(elsewhere, entry);
  EXPECT_EQ(At(k, schedule), unknown);
  // A FIFO is not read (it would block the report).
  std::filesystem::remove(entry);
  std::filesystem::create_directories(entry);
  ASSERT_EQ(mkfifo(file.c_str(), 0600), 0);
  EXPECT_EQ(At(k, schedule), unknown);
}

// A capture made where kallsyms was hidden (kptr_restrict) that still has a
// _text record, at address 0: nothing relates it to a snapshot.
TEST_F(KernelSymbolsTest, AHiddenReferenceGivesNoSymbols) {
  Cached(kIdV2, kBootA);
  const uint64_t schedule = kBootA + testing::kScheduleOffset + 0x10;
  EXPECT_EQ(At(Image(kIdV2, 0), schedule), fmt::format("[unknown 222222222222]+{:#x}", schedule));
}

MappedObject Module(const char* id) {
  MappedObject m;
  m.kernel = m.kernel_module = true;
  m.path = "[fakemod]";
  m.build_id = Id(id);
  return m;
}

TEST_F(KernelSymbolsTest, ModuleSymbolsAreRelativeToTheLoadAddress) {
  // Stored by record in a boot that loaded it elsewhere: offsets hold.
  KernelModule stored;
  stored.name = "fakemod";
  stored.symbols = {{0, 0, "mod_init"}, {0x1000, 0, "mod_work"}};
  const std::string file = BuildIdCache::ModuleSymbolsPath(cache_.path(), "fakemod", Id(kIdV1));
  std::filesystem::create_directories(std::filesystem::path(file).parent_path());
  testing::WriteFile(file, FormatModuleSymbols(stored));
  EXPECT_EQ(At(Module(kIdV1), 0x1010), "mod_work");
  EXPECT_EQ(At(Module(kIdV1), 0x10), "mod_init");
  // Another build of the module has other code: nothing stored for it.
  EXPECT_EQ(At(Module(kIdV2), 0x1010), "[unknown 222222222222]+0x1010");
}

// Owned by root and read-only, a snapshot can still be another kernel's:
// whoever may write to a directory of its path may rename entries there,
// and so put the snapshot record stored for one kernel build under another
// build's id (or rename the id directories themselves).  Only a path no one
// else could have changed is trusted; the cache directory itself is the
// user's choice (a shared one is world-writable).
TEST_F(KernelSymbolsTest, ASnapshotInADirectoryOthersCouldWriteIsNotUsed) {
  const MappedObject k = Image(kIdV2, kBootA);
  const uint64_t schedule = kBootA + testing::kScheduleOffset + 0x10;
  const std::string unknown = fmt::format("[unknown 222222222222]+{:#x}", schedule);
  Cached(kIdV2, kBootA);
  const std::filesystem::path entry =
      std::filesystem::path(BuildIdCache::KallsymsPath(cache_.path(), Id(kIdV2))).parent_path();
  for (const std::filesystem::path& dir : {entry.parent_path(), entry}) {
    ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
    ASSERT_EQ(At(k, schedule), "schedule") << dir;
    for (mode_t mode : {0777, 0757, 01777}) {
      ASSERT_EQ(chmod(dir.c_str(), mode), 0);
      EXPECT_EQ(At(k, schedule), unknown) << dir << " mode " << std::oct << mode;
    }
    ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  }
  ASSERT_EQ(chmod(cache_.path().c_str(), 01777), 0);  // a shared cache
  EXPECT_EQ(At(k, schedule), "schedule");

  // The same for a module's symbols.
  KernelModule stored;
  stored.name = "fakemod";
  stored.symbols = {{0, 0, "mod_init"}, {0x1000, 0, "mod_work"}};
  const std::string file = BuildIdCache::ModuleSymbolsPath(cache_.path(), "fakemod", Id(kIdV1));
  std::filesystem::create_directories(std::filesystem::path(file).parent_path());
  testing::WriteFile(file, FormatModuleSymbols(stored));
  ASSERT_EQ(chmod(std::filesystem::path(file).parent_path().c_str(), 0755), 0);
  ASSERT_EQ(At(Module(kIdV1), 0x1010), "mod_work");
  ASSERT_EQ(chmod(std::filesystem::path(file).parent_path().c_str(), 0777), 0);
  EXPECT_EQ(At(Module(kIdV1), 0x1010), "[unknown 111111111111]+0x1010");
}

TEST_F(KernelSymbolsTest, ModuleSymbolsCutShortAreNotUsed) {
  KernelModule stored;
  stored.name = "fakemod";
  stored.symbols = {{0, 0, "mod_init"}, {0x1000, 0, "mod_work"}};
  const std::string file = BuildIdCache::ModuleSymbolsPath(cache_.path(), "fakemod", Id(kIdV1));
  std::filesystem::create_directories(std::filesystem::path(file).parent_path());
  const std::string whole = FormatModuleSymbols(stored);
  // The last line lost its end: 0x1010 would be in mod_init.
  testing::WriteFile(file, whole.substr(0, whole.size() - 8));
  EXPECT_EQ(At(Module(kIdV1), 0x1010), "[unknown 111111111111]+0x1010");
}

TEST_F(KernelSymbolsTest, LiveModuleSymbolsOnlyForTheSameBuild) {
  search_.cache_dir = "";
  Running(kIdV3, kBootA);
  RunningModule(kIdV1);
  EXPECT_EQ(At(Module(kIdV1), 0x1010), "mod_work");
  EXPECT_EQ(At(Module(kIdV2), 0x1010), "[unknown 222222222222]+0x1010");
}

TEST(ReadKallsymsTest, HiddenAddressesGiveNoTable) {
  TempDir dir;
  testing::WriteFile(dir.File("kallsyms"), "0000000000000000 T _text\n0000000000000000 T x\n");
  EXPECT_TRUE(ReadKallsyms(dir.File("kallsyms")).empty());
}

}  // namespace
}  // namespace mmap3

namespace mmap3 {
namespace {

TEST_F(SymbolizerTest, DebugFileGivesSymbolsImageGivesLayout) {
  // A static function exists only in .symtab; the image at the path is
  // stripped, the separate debug file has the symbols but zeroed p_offset.
  ASSERT_TRUE(testing::CompileC(
      "static __attribute__((noinline)) int hidden_static(int x) { return x * 5 + 3; }\n"
      "int visible(int x) { return hidden_static(x) + 1; }\n",
      dir_.File("full.so"),
      "-shared -fPIC -Wl,--build-id=0x" + std::string(testing::kIdV3)));
  uint64_t off = testing::FunctionFileOffset(dir_.File("full.so"), "hidden_static");
  TempDir debug;
  std::string hex = testing::kIdV3;
  std::string debug_file = debug.File(".build-id/" + hex.substr(0, 2) + "/" + hex.substr(2) + ".debug");
  std::filesystem::create_directories(debug.File(".build-id/" + hex.substr(0, 2)));
  ASSERT_EQ(std::system(("objcopy --only-keep-debug '" + dir_.File("full.so") + "' '" + debug_file + "'").c_str()), 0);
  std::filesystem::copy_file(dir_.File("full.so"), lib_);
  ASSERT_EQ(std::system(("strip --strip-all '" + lib_ + "'").c_str()), 0);

  SymbolSearch search = PathsOnly();
  search.debug_dir = debug.path();
  {
    DsoStore store(search);
    Symbolizer sym(store);
    MappedObject o = Object(lib_, testing::kIdV3);
    EXPECT_EQ(sym.Symbolize(o, off), "hidden_static");
    EXPECT_EQ(store.Get(o.build_id, "").symbol_file, debug_file);
  }
  {
    // Debug file alone: no trustworthy layout, so no symbol rather than a
    // wrong one.
    search.use_recorded_paths = false;
    DsoStore store(search);
    Symbolizer sym(store);
    MappedObject o = Object(lib_, testing::kIdV3);
    EXPECT_EQ(sym.Symbolize(o, off).rfind("[unknown 333333333333]", 0), 0u);
  }
}

TEST(SymbolizerDemangleTest, CxxNamesAreDemangled) {
  TempDir dir;
  const std::string lib = dir.File("libcxx.so");
  ASSERT_TRUE(testing::CompileC("namespace ns { int Work(int x) { return x * 9; } }\n", lib,
                                "-x c++ -shared -fPIC -Wl,--build-id=0x" + std::string(testing::kIdV1)));
  uint64_t off = testing::FunctionFileOffset(lib, "_ZN2ns4WorkEi");
  SymbolSearch s;
  s.debug_dir = "";
  DsoStore store(s);
  Symbolizer sym(store);
  MappedObject o;
  o.path = lib;
  o.build_id = testing::Id(testing::kIdV1);
  EXPECT_EQ(sym.Symbolize(o, off), "ns::Work(int)");
}

}  // namespace
}  // namespace mmap3
