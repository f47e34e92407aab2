#include "capture_mode.h"

#include <gtest/gtest.h>

#include <string>

#include "fixtures.h"
#include "linux/perf_event_mmap3.h"

namespace mmap3 {
namespace {

using testing::TempDir;

// What the kernel advertises decides whether the attr bit is ever tried:
// versions 1 (mappings) and 2 (module loads and unloads too) are known; any
// other is not, and the reason says which version the kernel gave.
std::string ReasonFor(const std::string& advertised, TempDir& dir) {
  const std::string cap = dir.File("perf_event_mmap3");
  testing::WriteFile(cap, advertised);
  auto d = DetectCaptureMode(CaptureMode::kMmap3, /*require_mmap3=*/false, cap);
  EXPECT_TRUE(d.ok());
  if (d.ok() && d->mode == CaptureMode::kMmap3) {
    EXPECT_GE(d->abi_version, 1);
    return "mmap3 " + std::to_string(d->abi_version);
  }
  EXPECT_EQ(d->abi_version, 0);
  return d->reason;
}

TEST(CaptureModeTest, OnlyKnownAbiVersionsAreTried) {
  TempDir dir;
  static_assert(PERF_MMAP3_ABI_VERSION == 2);
  for (const char* known : {"1\n", "2\n"}) {
    const std::string r = ReasonFor(known, dir);
    // A kernel with MMAP3 takes the bit; any other rejects it.  Either way
    // the version was accepted.
    EXPECT_TRUE(r == "mmap3 " + std::string(known, 1) ||
                r.starts_with("kernel advertises MMAP3 but rejected the attr bit"))
        << known << ": " << r;
  }
  EXPECT_EQ(ReasonFor("3\n", dir), "kernel MMAP3 ABI version 3 is not one this reader knows (1 to 2)");
  EXPECT_EQ(ReasonFor("0\n", dir), "kernel MMAP3 ABI version 0 is not one this reader knows (1 to 2)");
  EXPECT_EQ(ReasonFor("garbage", dir),
            "kernel MMAP3 ABI version 0 is not one this reader knows (1 to 2)");
  auto d = DetectCaptureMode(CaptureMode::kMmap3, /*require_mmap3=*/true, dir.File("absent"));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().ToString().find("absent"), std::string::npos) << d.status().ToString();
}

}  // namespace
}  // namespace mmap3
