#include "flamegraph.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <string>

#include "fixtures.h"

namespace mmap3 {
namespace {

using testing::Id;
using testing::kIdV1;
using testing::kIdV2;
using testing::kIdV3;

// One drawn frame, as the SVG has it.
struct Drawn {
  int depth = 0;
  uint64_t samples = 0;
  double x = 0, width = 0;
  std::string label, fill;
};

std::vector<Drawn> Frames(const std::string& svg) {
  static const std::regex kFrame(
      "<g data-depth=\"(\\d+)\" data-samples=\"(\\d+)\"><title>([^\n]*)\n[^<]*</title>"
      "<rect x=\"([0-9.]+)\" y=\"[0-9.]+\" width=\"([0-9.]+)\" height=\"[0-9.]+\" rx=\"2\" "
      "ry=\"2\" fill=\"([^\"]+)\"/>");
  std::vector<Drawn> out;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), kFrame); it != std::sregex_iterator();
       ++it) {
    const std::smatch& m = *it;
    out.push_back({std::stoi(m[1]), std::stoull(m[2]), std::stod(m[4]), std::stod(m[5]), m[3],
                   m[6]});
  }
  return out;
}

// prog_a runs v1 of libe2e.so, prog_b v2 (two build-ids, one name), both
// from main in prog; prog_a also its own e2e_main_hot.
ReportModel Model(bool callchains) {
  ReportModel m;
  m.mode = "mmap2-build-id";
  m.callchains = callchains;
  auto mapping = [&](const char* path, const char* id) {
    FrameMapping fm;
    fm.path = path;
    fm.build_id = Id(id);
    fm.source = BuildIdSource::kMmap2;
    m.frame_mappings.push_back(fm);
    return static_cast<uint32_t>(m.frame_mappings.size());
  };
  const uint32_t lib1 = mapping("/w/lib/libe2e.so", kIdV1);
  const uint32_t lib2 = mapping("/w/lib/libe2e.so", kIdV2);
  const uint32_t prog = mapping("/w/prog", kIdV3);
  auto location = [&](uint32_t mapping, uint64_t address, const std::string& symbol) {
    m.frame_locations.push_back({mapping, address, symbol, SymbolStatus::kFound});
    return static_cast<uint32_t>(m.frame_locations.size() - 1);
  };
  const uint32_t v1_hot = location(lib1, 0x1000, "e2e_v1_hot");
  const uint32_t lib1_hot = location(lib1, 0x1100, "e2e_lib_hot");
  const uint32_t v2_hot = location(lib2, 0x1000, "e2e_v2_hot");
  const uint32_t lib2_hot = location(lib2, 0x1100, "e2e_lib_hot");
  const uint32_t main_fn = location(prog, 0x500, "main");
  const uint32_t main_hot = location(prog, 0x400, "e2e_main_hot");
  const uint32_t odd = location(prog, 0x600, "f<T&U>\xff");
  const uint32_t unknown = location(0, 0x1234, "[unknown]");
  auto stack = [&](const char* comm, std::vector<uint32_t> leaf_first, uint64_t samples) {
    m.frame_stacks.push_back({comm, leaf_first, samples, samples * 250000});
    m.samples += samples;
  };
  stack("prog_a", {v1_hot, lib1_hot, main_fn}, 300);
  stack("prog_a", {main_hot, main_fn}, 200);
  stack("prog_b", {v2_hot, lib2_hot, main_fn}, 250);
  stack("prog_b", {odd, main_fn}, 3);
  stack("prog_b", {unknown}, 1);
  m.matched_samples = m.samples;
  m.event.name = "cpu";
  return m;
}

TEST(FlamegraphTest, WidthsAreSampleShares) {
  const ReportModel m = Model(true);
  const std::string svg = RenderFlamegraph(m);
  const std::vector<Drawn> frames = Frames(svg);
  ASSERT_FALSE(frames.empty());
  const double scale = (1200.0 - 20) / static_cast<double>(m.samples);
  for (const Drawn& f : frames) EXPECT_NEAR(f.width, static_cast<double>(f.samples) * scale, 0.006) << f.label;
  // all -> comm -> main -> e2e_lib_hot -> e2e_v1_hot: the root has every
  // sample, each child is inside its parent and they add up to no more.
  ASSERT_EQ(frames[0].label, "all");
  EXPECT_EQ(frames[0].samples, m.samples);
  for (const Drawn& parent : frames) {
    uint64_t children = 0;
    for (const Drawn& c : frames) {
      if (c.depth != parent.depth + 1 || c.x < parent.x - 0.01 || c.x + c.width > parent.x + parent.width + 0.01)
        continue;
      children += c.samples;
    }
    EXPECT_LE(children, parent.samples) << parent.label;
  }
  std::map<std::string, uint64_t> by_label;
  for (const Drawn& f : frames) by_label[f.label] += f.samples;
  EXPECT_EQ(by_label["prog_a"], 500u);
  EXPECT_EQ(by_label["prog_b"], 254u);
  EXPECT_EQ(by_label["e2e_v1_hot [libe2e.so 111111111111]"], 300u);
  EXPECT_EQ(by_label["e2e_v2_hot [libe2e.so 222222222222]"], 250u);
  EXPECT_EQ(by_label["main [prog 333333333333]"], 753u);
  EXPECT_EQ(by_label["[unknown]"], 1u);
}

TEST(FlamegraphTest, TwoVersionsOfALibraryHaveTwoColoursEachItsOwn) {
  const std::vector<Drawn> frames = Frames(RenderFlamegraph(Model(true)));
  std::map<std::string, std::set<std::string>> fills;  // short build-id -> fills
  for (const Drawn& f : frames) {
    for (const char* id : {"111111111111", "222222222222", "333333333333"})
      if (f.label.find(std::string(" ") + id + "]") != std::string::npos) fills[id].insert(f.fill);
  }
  ASSERT_EQ(fills.size(), 3u);
  for (const auto& [id, set] : fills) EXPECT_EQ(set.size(), 1u) << id;  // one colour per build-id
  EXPECT_NE(*fills["111111111111"].begin(), *fills["222222222222"].begin());
  EXPECT_NE(*fills["111111111111"].begin(), *fills["333333333333"].begin());
  // Keyed by build-id: the same file has the same colour in another picture.
  ReportModel other = Model(false);
  other.frame_stacks.erase(other.frame_stacks.begin() + 1, other.frame_stacks.end());
  for (const Drawn& f : Frames(RenderFlamegraph(other)))
    if (f.label.find("111111111111") != std::string::npos) {
      EXPECT_EQ(f.fill, *fills["111111111111"].begin());
    }
}

TEST(FlamegraphTest, TheSameModelGivesTheSameBytes) {
  const std::string a = RenderFlamegraph(Model(true));
  const std::string b = RenderFlamegraph(Model(true));
  EXPECT_EQ(a, b);
  // Stacks in another order (a model is sorted, but the picture must not
  // depend on it either).
  ReportModel reversed = Model(true);
  std::reverse(reversed.frame_stacks.begin(), reversed.frame_stacks.end());
  EXPECT_EQ(RenderFlamegraph(reversed), a);
}

TEST(FlamegraphTest, WithoutCallChainsTheFlatProfileIsOneLevelAndSaysSo) {
  const std::string svg = RenderFlamegraph(Model(false));
  EXPECT_NE(svg.find("flat profile: the capture has no call chains"), std::string::npos);
  const std::vector<Drawn> frames = Frames(svg);
  std::set<std::string> leaves;
  for (const Drawn& f : frames) {
    EXPECT_LE(f.depth, 1) << f.label;
    if (f.depth == 1) leaves.insert(f.label);
  }
  EXPECT_EQ(leaves, (std::set<std::string>{"e2e_v1_hot [libe2e.so 111111111111]",
                                           "e2e_v2_hot [libe2e.so 222222222222]",
                                           "e2e_main_hot [prog 333333333333]",
                                           "f&lt;T&amp;U&gt;\\xff [prog 333333333333]", "[unknown]"}));
  EXPECT_EQ(RenderFlamegraph(Model(true)).find("flat profile"), std::string::npos);
}

TEST(FlamegraphTest, NamesAreEscapedAndTheFileIsWellFormedXml) {
  ReportModel m = Model(true);
  m.frame_stacks[0].comm = "a]]><script>\x01\"'";
  const std::string svg = RenderFlamegraph(m);
  EXPECT_EQ(svg.find("f<T"), std::string::npos);
  EXPECT_NE(svg.find("f&lt;T&amp;U&gt;\\xff"), std::string::npos);
  EXPECT_NE(svg.find("a]]&gt;&lt;script&gt;\\x01&quot;&apos;"), std::string::npos);
  // No byte that is not printable UTF-8 (the only control characters are
  // the newlines and the script's own layout).
  for (unsigned char c : svg) EXPECT_TRUE(c >= 0x20 || c == '\n') << int(c);
  // A real XML parser, where the machine has one.
  if (std::system("command -v python3 >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 not installed: the XML parse is left to the e2e test";
  }
  testing::TempDir dir;
  const std::string path = dir.File("f.svg");
  testing::WriteFile(path, svg);
  const std::string cmd =
      "python3 -c 'import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])' " + path;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "not well-formed XML";
}

TEST(FlamegraphTest, AnEmptyProfileIsStillAPicture) {
  ReportModel m;
  m.callchains = true;
  const std::string svg = RenderFlamegraph(m);
  EXPECT_TRUE(Frames(svg).empty());
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("0 samples"), std::string::npos);
}

}  // namespace
}  // namespace mmap3
