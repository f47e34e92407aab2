#include "kallsyms.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "dso_store.h"
#include "fixtures.h"

namespace mmap3 {
namespace {

TEST(KallsymsTest, SplitsTheImageFromModulesAndKeepsMarkers) {
  const Kallsyms k = ParseKallsyms(
      "ffffffff81000000 T _stext\n"
      "ffffffff81000000 T _text\n"
      "ffffffff81000100 t do_work\n"
      "ffffffff81000200 D some_data\n"
      "ffffffff82000000 T _etext\n"
      "ffffffffc0001000 t mod_fn\t[mod]\n"
      "ffffffffc0001100 d mod_data\t[mod]\n"
      "ffffffffc0009000 t bpf_prog_1\t[bpf]\n"
      "not a line\n"
      "ffffffff8100zzzz T bad_address\n"
      "ffffffff81000300 T\n"
      "ffffffff81000400 T name\t[unterminated\n");
  EXPECT_FALSE(k.hidden);
  ASSERT_EQ(k.kernel.size(), 4u);  // _stext, _text, do_work, _etext
  EXPECT_EQ(k.kernel[2].name, "do_work");
  EXPECT_EQ(k.Marker("_text"), 0xffffffff81000000u);
  EXPECT_EQ(k.Marker("_etext"), 0xffffffff82000000u);
  EXPECT_EQ(k.Marker("schedule"), std::nullopt);
  ASSERT_EQ(k.owners.count("mod"), 1u);
  ASSERT_EQ(k.owners.at("mod").size(), 1u);  // text only
  EXPECT_EQ(k.owners.at("mod")[0].name, "mod_fn");
  EXPECT_EQ(k.owners.count("bpf"), 1u);
}

TEST(KallsymsTest, AllZeroAddressesAreHidden) {
  EXPECT_TRUE(ParseKallsyms("0000000000000000 T _text\n0000000000000000 t x\t[m]\n").hidden);
  EXPECT_TRUE(ParseKallsyms("").hidden);
}

// A snapshot is usable only whole: a copy cut short in the image's text
// would put every later address on its last symbol.
TEST(KallsymsTest, OnlyAWholeSnapshotIsComplete) {
  const std::string whole = testing::FakeKallsyms(0xffffffff81000000, 0xffffffffc0000000);
  EXPECT_TRUE(ParseKallsyms(whole).complete);
  // Cut at a line's end before _etext, in the middle of a line, or hidden.
  const size_t schedule = whole.find(" T schedule\n");
  ASSERT_NE(schedule, std::string::npos);
  EXPECT_FALSE(ParseKallsyms(whole.substr(0, whole.rfind('\n', schedule) + 1)).complete);
  EXPECT_FALSE(ParseKallsyms(whole.substr(0, whole.size() - 3)).complete);
  EXPECT_FALSE(ParseKallsyms("0000000000000000 T _text\n0000000000000000 T _etext\n").complete);
  // Cut after _etext (modules lost): the image is whole.
  EXPECT_TRUE(ParseKallsyms(whole.substr(0, whole.find("some_data\n") + 10)).complete);
}

TEST(KallsymsTest, OneImageInAnyBoot) {
  const Kallsyms a = ParseKallsyms(testing::FakeKallsyms(0xffffffff81000000, 0xffffffffc0000000));
  const Kallsyms b = ParseKallsyms(testing::FakeKallsyms(0xffffffff9a200000, 0xffffffffc1230000));
  EXPECT_TRUE(SameKernelImage(a, b));
  EXPECT_TRUE(SameKernelImage(b, a));
  std::string other = testing::FakeKallsyms(0xffffffff81000000, 0xffffffffc0000000);
  other.replace(other.find("helper"), 6, "helpes");
  EXPECT_FALSE(SameKernelImage(a, ParseKallsyms(other)));
  const std::string whole = testing::FakeKallsyms(0xffffffff81000000, 0xffffffffc0000000);
  EXPECT_FALSE(SameKernelImage(a, ParseKallsyms(whole.substr(0, whole.find("_etext")))));
  EXPECT_FALSE(SameKernelImage(a, ParseKallsyms("")));
}

// /proc/modules of Linux 6.4+: the size counts data allocated elsewhere, so
// a module's load address + size can reach over another owner's code.
TEST(KallsymsTest, ModuleRangesStopAtTheNextOwnersCode) {
  const Kallsyms k = ParseKallsyms(
      "ffffffff81000000 T _text\n"
      "ffffffffc0000000 t a_init_fn\t[a]\n"
      "ffffffffc0000040 t a_fn\t[a]\n"
      "ffffffffc0002000 t bpf_prog_x\t[bpf]\n"
      "ffffffffc0004000 t b_fn\t[b]\n"
      "ffffffffc0010000 t c_fn\t[c]\n");
  const auto mods = ParseKernelModules(
      "c 4096 0 - Live 0xffffffffc0010000\n"
      "b 65536 1 c, Live 0xffffffffc0004000 (OE)\n"
      "a 65536 0 - Live 0xffffffffc0000000\n"
      "gone 4096 0 - Unloading 0xffffffffc0020000\n"
      "hidden 4096 0 - Live 0x0000000000000000\n",
      k);
  ASSERT_EQ(mods.size(), 3u);
  EXPECT_EQ(mods[0].name, "a");
  EXPECT_EQ(mods[0].start, 0xffffffffc0000000u);
  EXPECT_EQ(mods[0].end, 0xffffffffc0002000u);  // BPF code follows
  ASSERT_EQ(mods[0].symbols.size(), 2u);
  EXPECT_EQ(mods[0].symbols[1].addr, 0x40u);  // relative to the load address
  EXPECT_EQ(mods[1].name, "b");
  EXPECT_EQ(mods[1].end, 0xffffffffc0010000u);  // the next module
  EXPECT_EQ(mods[2].name, "c");
  EXPECT_EQ(mods[2].end, 0xffffffffc0011000u);  // its size
}

// Modules at the start and the end of a capture: which ranges could have
// run code other than the module recorded there.
class ModulesOverlaidTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kA = 0xffffffffc0000000, kB = 0xffffffffc0010000;
  static KernelModule Module(const char* name, uint64_t start, uint64_t end, const char* id) {
    KernelModule m;
    m.name = name;
    m.start = start;
    m.end = end;
    m.build_id = testing::Id(id);
    return m;
  }
  // fs at kA (8 KiB), net at kB, as recorded at the start.
  std::vector<KernelModule> before_ = {Module("fs", kA, kA + 0x2000, testing::kIdV1),
                                       Module("net", kB, kB + 0x3000, testing::kIdV2)};
  static std::vector<size_t> Overlaid(const std::vector<KernelModule>& before,
                                      const std::vector<KernelModule>& after,
                                      const std::string& kallsyms = "") {
    return ModulesOverlaid(before, after, ParseKallsyms(kallsyms));
  }
};

TEST_F(ModulesOverlaidTest, TheSameModulesAreNotOverlaid) {
  EXPECT_EQ(Overlaid(before_, before_), std::vector<size_t>{});
}

TEST_F(ModulesOverlaidTest, AModuleGoneOrMovedWithNothingInItsPlaceIsNot) {
  // fs unloaded; net unloaded and loaded again elsewhere: their old ranges
  // hold nothing, so what was sampled there was them.
  EXPECT_EQ(Overlaid(before_, {Module("net", 0xffffffffc0100000, 0xffffffffc0103000,
                                      testing::kIdV2)}),
            std::vector<size_t>{});
}

TEST_F(ModulesOverlaidTest, AnotherModuleInItsPlaceIs) {
  // fs unloaded, net reloaded at fs's old address: fs's range ran net's
  // code; net's old range holds nothing, so what ran there was net.
  EXPECT_EQ(Overlaid(before_, {Module("net", kA, kA + 0x3000, testing::kIdV2)}),
            std::vector<size_t>{0});
  // Another module loaded into the tail of fs's range (/proc/modules'
  // size counts more than the code).
  std::vector<KernelModule> after = before_;
  after.push_back(Module("late", kA + 0x1800, kA + 0x1900, testing::kIdV3));
  EXPECT_EQ(Overlaid(before_, after), std::vector<size_t>{0});
}

TEST_F(ModulesOverlaidTest, AnotherBuildInItsPlaceIs) {
  std::vector<KernelModule> after = before_;
  after[1].build_id = testing::Id(testing::kIdV3);  // rebuilt, reloaded at the same address
  EXPECT_EQ(Overlaid(before_, after), std::vector<size_t>{1});
}

TEST_F(ModulesOverlaidTest, OtherCodeInItsRangeIs) {
  const std::string bpf = fmt::format("{:016x} t bpf_prog_1\t[bpf]\n", kB + 0x2800);
  EXPECT_EQ(Overlaid(before_, before_, bpf), std::vector<size_t>{1});
  // Outside every recorded range: nothing to say.
  EXPECT_EQ(Overlaid(before_, before_, fmt::format("{:016x} t bpf_prog_2\t[bpf]\n", kB + 0x3000)),
            std::vector<size_t>{});
}

// /proc/modules' size counts the init sections, freed after loading (and
// since 6.4 data allocated elsewhere): past the core allocation is space
// other code can take during a capture.
TEST(KallsymsTest, ModuleRangesEndAtTheirCoreSize) {
  const Kallsyms k = ParseKallsyms(
      "ffffffff81000000 T _text\n"
      "ffffffffc0000000 t a_fn\t[a]\n"
      "ffffffffc0100000 t b_fn\t[b]\n");
  const std::string modules =
      "a 20480 0 - Live 0xffffffffc0000000\n"
      "b 8192 0 - Live 0xffffffffc0100000\n";
  const auto mods = ParseKernelModules(modules, k, {{"a", 12288}, {"b", 65536}, {"gone", 4096}});
  ASSERT_EQ(mods.size(), 2u);
  EXPECT_EQ(mods[0].end, 0xffffffffc0003000u);  // its core size
  EXPECT_EQ(mods[1].end, 0xffffffffc0102000u);  // its size, the smaller
  EXPECT_EQ(ParseKernelModules(modules, k)[0].end, 0xffffffffc0005000u);  // not known
}

TEST(KallsymsTest, ModuleSymbolsRoundTrip) {
  KernelModule m;
  m.name = "nf_nat";
  m.symbols = {{0x0, 0, "nf_nat_setup"}, {0x1c0, 0, "nf_nat_packet"}};
  const std::string text = FormatModuleSymbols(m);
  const auto back = ParseModuleSymbols(text, "nf_nat");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].addr, 0x1c0u);
  EXPECT_EQ(back[1].name, "nf_nat_packet");
  EXPECT_TRUE(ParseModuleSymbols(text, "other").empty());
}

TEST(KallsymsTest, ModuleNamesFromPaths) {
  EXPECT_EQ(KernelModuleName("[nf_nat]"), "nf_nat");
  EXPECT_EQ(KernelModuleName("/lib/modules/6.1.0/kernel/net/nf-nat.ko"), "nf_nat");
  EXPECT_EQ(KernelModuleName("/lib/modules/6.1.0/kernel/fs/ext4.ko.xz"), "ext4");
  EXPECT_EQ(KernelModuleName("/usr/lib/libc.so.6"), "");
  EXPECT_EQ(KernelModuleName("/x/.ko"), "");
  EXPECT_EQ(KernelModuleName("[]"), "");
}

}  // namespace
}  // namespace mmap3
