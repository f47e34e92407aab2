#include "address_space.h"

#include <gtest/gtest.h>

namespace mmap3 {
namespace {

std::shared_ptr<const MappedObject> Obj(const std::string& path) {
  auto o = std::make_shared<MappedObject>();
  o->path = path;
  return o;
}

Mapping Map(uint64_t start, uint64_t end, uint64_t pgoff, std::shared_ptr<const MappedObject> o) {
  return Mapping{start, end, pgoff, std::move(o)};
}

TEST(AddressSpaceTest, FindSeesEveryInsertAfterALookup) {
  // Lookups use an index built on demand: an Insert after a Find must show.
  AddressSpace as;
  auto a = Obj("a"), b = Obj("b");
  as.Insert(Map(0x1000, 0x3000, 0, a));
  EXPECT_EQ(as.Find(0x2000)->object, a);
  as.Insert(Map(0x2000, 0x4000, 0, b));  // overlaps: splits a
  EXPECT_EQ(as.Find(0x1800)->object, a);
  EXPECT_EQ(as.Find(0x2000)->object, b);
  EXPECT_EQ(as.Find(0x3800)->object, b);
  EXPECT_EQ(as.Find(0x4000), nullptr);
}

TEST(AddressSpaceTest, FindAgreesWithAScanForManyMappings) {
  // 1..100 mappings with gaps between them: every address around every
  // boundary finds what a linear scan finds.
  auto o = Obj("o");
  for (uint64_t n = 1; n <= 100; n += 9) {
    AddressSpace as;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t start = 0x10000 + i * 0x3000, end = start + 0x1000 + (i % 3) * 0x800;
      as.Insert(Map(start, end, 0, o));
      ranges.emplace_back(start, end);
    }
    for (const auto& [start, end] : ranges) {
      for (uint64_t addr : {start - 1, start, start + 1, end - 1, end, end + 1}) {
        bool inside = false;
        for (const auto& [s, e] : ranges) inside |= s <= addr && addr < e;
        const Mapping* m = as.Find(addr);
        ASSERT_EQ(m != nullptr, inside) << "n=" << n << " addr=" << std::hex << addr;
        if (m != nullptr) {
          EXPECT_TRUE(m->start <= addr && addr < m->end);
        }
      }
    }
    EXPECT_EQ(as.Find(0), nullptr);
    EXPECT_EQ(as.Find(~0ull), nullptr);
  }
}

TEST(AddressSpaceTest, RangesCarryTheirObjectsOffsetsAndNumbers) {
  // A range answers for its object (the flat loop reads nothing else): a
  // file's offsets are file offsets, a split mapping's included; JIT
  // code's are addresses (its perf map names addresses); the object's
  // number and whether it is a BPF program's are copied.
  auto file = std::make_shared<MappedObject>();
  file->path = "/lib/a.so";
  file->number = 7;
  auto jit = std::make_shared<MappedObject>();
  jit->path = "//anon";
  jit->jit_pid = 42;
  jit->number = 9;
  auto bpf = std::make_shared<MappedObject>();
  bpf->path = "bpf_prog_0123456789abcdef_f";
  bpf->source = BuildIdSource::kBpf;
  bpf->number = 11;
  AddressSpace as;
  as.Insert(Map(0x400000, 0x408000, 0x3000, file));
  as.Insert(Map(0x402000, 0x403000, 0, jit));  // splits the file's mapping
  as.Insert(Map(0x7f0000000000, 0x7f0000001000, 0x5000, bpf));
  ASSERT_EQ(as.Ranges().size(), 4u);
  for (const AddressSpace::Range& r : as.Ranges()) {
    for (uint64_t addr : {r.start, r.start + 0x123, r.end - 1}) {
      const uint64_t want = r.object->jit_pid >= 0 ? addr : r.mapping->FileOffset(addr);
      EXPECT_EQ(r.Offset(addr), want) << r.object->path << " at " << std::hex << addr;
    }
    EXPECT_EQ(r.number, r.object->number) << r.object->path;
    EXPECT_EQ(r.bpf, r.object->source == BuildIdSource::kBpf) << r.object->path;
  }
  // The file's part after the JIT code: 0x403000 is 0x3000 into the
  // mapping, so offset 0x6000 in the file.
  EXPECT_EQ(AddressSpace::FindRange(as.Ranges(), 0x403000)->Offset(0x403000), 0x6000u);
  EXPECT_EQ(AddressSpace::FindRange(as.Ranges(), 0x402010)->Offset(0x402010), 0x402010u);
}

TEST(AddressSpaceTest, CopyIsIndependent) {
  // fork copies an address space; the copy's lookups must point into its
  // own mappings, and a change to either leaves the other alone.
  AddressSpace parent;
  auto a = Obj("a"), b = Obj("b");
  parent.Insert(Map(0x1000, 0x2000, 0, a));
  ASSERT_NE(parent.Find(0x1000), nullptr);
  AddressSpace child(parent);
  child.Insert(Map(0x1000, 0x2000, 0, b));
  EXPECT_EQ(parent.Find(0x1000)->object, a);
  EXPECT_EQ(child.Find(0x1000)->object, b);
  AddressSpace assigned;
  assigned.Insert(Map(0x9000, 0xa000, 0, b));
  ASSERT_NE(assigned.Find(0x9000), nullptr);
  assigned = parent;
  EXPECT_EQ(assigned.Find(0x9000), nullptr);
  EXPECT_EQ(assigned.Find(0x1000)->object, a);
  EXPECT_NE(assigned.Find(0x1000), parent.Find(0x1000));
}

TEST(AddressSpaceTest, FindsContainingMapping) {
  AddressSpace as;
  auto a = Obj("a"), b = Obj("b");
  as.Insert(Map(0x1000, 0x3000, 0, a));
  as.Insert(Map(0x5000, 0x6000, 0x2000, b));
  EXPECT_EQ(as.Find(0xfff), nullptr);
  EXPECT_EQ(as.Find(0x1000)->object, a);
  EXPECT_EQ(as.Find(0x2fff)->object, a);
  EXPECT_EQ(as.Find(0x3000), nullptr);  // end is exclusive
  EXPECT_EQ(as.Find(0x5800)->object, b);
  EXPECT_EQ(as.Find(0x5800)->FileOffset(0x5800), 0x2800u);
  EXPECT_EQ(as.size(), 2u);
}

TEST(AddressSpaceTest, NewMappingSplitsTheOneItOverlaps) {
  AddressSpace as;
  auto big = Obj("big"), hole = Obj("hole");
  as.Insert(Map(0x10000, 0x20000, 0x100, big));
  as.Insert(Map(0x14000, 0x15000, 0, hole));  // punches into the middle
  ASSERT_EQ(as.size(), 3u);
  const Mapping* left = as.Find(0x13fff);
  const Mapping* mid = as.Find(0x14000);
  const Mapping* right = as.Find(0x15000);
  ASSERT_TRUE(left && mid && right);
  EXPECT_EQ(left->object, big);
  EXPECT_EQ(left->end, 0x14000u);
  EXPECT_EQ(left->pgoff, 0x100u);
  EXPECT_EQ(mid->object, hole);
  EXPECT_EQ(right->object, big);
  EXPECT_EQ(right->start, 0x15000u);
  EXPECT_EQ(right->end, 0x20000u);
  // The right remainder keeps mapping the same file bytes as before.
  EXPECT_EQ(right->FileOffset(0x15000), 0x100u + 0x5000u);
}

TEST(AddressSpaceTest, NewMappingTrimsAndReplacesSeveral) {
  AddressSpace as;
  auto a = Obj("a"), b = Obj("b"), c = Obj("c"), n = Obj("new");
  as.Insert(Map(0x1000, 0x3000, 0, a));
  as.Insert(Map(0x3000, 0x4000, 0, b));
  as.Insert(Map(0x4000, 0x6000, 0, c));
  as.Insert(Map(0x2000, 0x5000, 0, n));  // covers the end of a, all of b, the start of c
  auto ms = as.Mappings();
  ASSERT_EQ(ms.size(), 3u);
  EXPECT_EQ(ms[0].object, a);
  EXPECT_EQ(ms[0].end, 0x2000u);
  EXPECT_EQ(ms[1].object, n);
  EXPECT_EQ(ms[2].object, c);
  EXPECT_EQ(ms[2].start, 0x5000u);
  EXPECT_EQ(ms[2].pgoff, 0x1000u);
}

TEST(AddressSpaceTest, ExactReplacementAndAdjacency) {
  AddressSpace as;
  auto v1 = Obj("v1"), v2 = Obj("v2"), next = Obj("next");
  as.Insert(Map(0x1000, 0x2000, 0, v1));
  as.Insert(Map(0x2000, 0x3000, 0, next));  // adjacent: no overlap
  as.Insert(Map(0x1000, 0x2000, 0, v2));    // same range: replaces
  EXPECT_EQ(as.size(), 2u);
  EXPECT_EQ(as.Find(0x1800)->object, v2);
  EXPECT_EQ(as.Find(0x2000)->object, next);
}

TEST(AddressSpaceTest, EmptyRangesAreIgnored) {
  AddressSpace as;
  as.Insert(Map(0x1000, 0x1000, 0, Obj("empty")));
  EXPECT_EQ(as.size(), 0u);
}

}  // namespace
}  // namespace mmap3
