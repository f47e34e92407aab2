#include "perf_event_fd.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fixtures.h"
#include "record.h"

namespace mmap3 {
namespace {

perf_event_attr SidebandAttr() {
  perf_event_attr a{};
  a.size = sizeof(a);
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_DUMMY;
  a.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME;
  a.sample_id_all = 1;
  a.mmap = 1;
  a.mmap2 = 1;
  a.exclude_kernel = 1;
  a.exclude_hv = 1;
  return a;
}

// The real kernel ring buffer, end to end: mapping a file executable in this
// process must produce an MMAP2 record naming it.
TEST(PerfEventFdTest, RealBufferDeliversOurMmapRecord) {
  auto fd = PerfEventFd::Open(SidebandAttr(), 0, -1);
  if (!fd.ok()) GTEST_SKIP() << fd.status().ToString();
  ASSERT_TRUE(fd->Map(8).ok());
  // Moving the owner keeps the mapping and the ring valid.
  PerfEventFd moved = std::move(*fd);
  ASSERT_NE(moved.ring(), nullptr);

  testing::TempDir dir;
  const std::string lib = dir.File("libmapped.so");
  ASSERT_TRUE(testing::BuildSharedLibrary(lib, "f", testing::kIdV1));
  int file = open(lib.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(file, 0);
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, file, 0);
  ASSERT_NE(p, MAP_FAILED);

  const SampleFormat f{PERF_SAMPLE_TID | PERF_SAMPLE_TIME, 0, true};
  bool found = false;
  size_t n = moved.ring()->Drain([&](Bytes rec) {
    Record r;
    if (DecodeRecord(rec, f, &r) != DecodeStatus::kOk) return;
    if (auto* m = std::get_if<MmapRecord>(&r)) {
      if (m->filename == lib && m->start == reinterpret_cast<uint64_t>(p)) {
        found = true;
        EXPECT_EQ(m->pid, static_cast<uint32_t>(getpid()));
        EXPECT_TRUE(m->sample_id.has_time);
      }
    }
  });
  EXPECT_GT(n, 0u);
  EXPECT_TRUE(found);
  EXPECT_EQ(moved.ring()->Available(), 0u);  // drained and released
  EXPECT_EQ(moved.ring()->stats().bad_size, 0u);
  munmap(p, 4096);
  close(file);
}

TEST(PerfEventFdTest, InvalidAttrIsAnErrnoResult) {
  perf_event_attr a = SidebandAttr();
  a.type = 0xdead;  // no such PMU
  auto fd = PerfEventFd::Open(a, 0, -1);
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().error_number(), 0);
  EXPECT_EQ(fd.status().context().rfind("perf_event_open", 0), 0u);
}

}  // namespace
}  // namespace mmap3
