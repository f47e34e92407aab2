#include "capture_mode.h"

#include <linux/perf_event.h>

#include <cstdlib>

#include <fmt/format.h>

#include "linux/perf_event_mmap3.h"
#include "perf_event_fd.h"
#include "proc_maps.h"

namespace mmap3 {

const char* CaptureModeName(CaptureMode mode) {
  switch (mode) {
    case CaptureMode::kMmap3: return "mmap3";
    case CaptureMode::kMmap2BuildId: return "mmap2-build-id";
    case CaptureMode::kMmap2: return "mmap2";
  }
  return "?";
}

Result<ModeDecision> DetectCaptureMode(CaptureMode max_mode, bool require_mmap3,
                                       const std::string& cap_path) {
  perf_event_attr probe{};
  probe.size = sizeof(probe);
  probe.type = PERF_TYPE_SOFTWARE;
  probe.config = PERF_COUNT_SW_DUMMY;
  probe.disabled = 1;
  probe.exclude_kernel = 1;
  probe.exclude_hv = 1;
  probe.mmap = 1;
  probe.mmap2 = 1;

  ModeDecision d;
  // MMAP3 only when the kernel says so: on other kernels bit 63 is reserved
  // today and may mean something else tomorrow.
  const std::string cap = cap_path.empty() ? PERF_MMAP3_CAP_PATH : cap_path;
  if (max_mode != CaptureMode::kMmap3) {
    d.reason = "MMAP3 disabled by --mode";
  } else if (auto text = ReadSmallFile(cap); !text.ok()) {
    d.reason = fmt::format("kernel does not advertise MMAP3 ({} absent)", cap);
  } else if (const int version = std::atoi(text->c_str());
             version < 1 || version > PERF_MMAP3_ABI_VERSION) {
    // Version 2 added module records to version 1's; a newer one may mean
    // something this reader would misread.
    d.reason = fmt::format("kernel MMAP3 ABI version {} is not one this reader knows (1 to {})",
                           version, PERF_MMAP3_ABI_VERSION);
  } else {
    perf_event_attr a = probe;
    a.mmap2 = 0;
    perf_mmap3_attr_set(&a);
    auto fd = PerfEventFd::Open(a, 0, -1);
    if (fd.ok()) {
      d.mode = CaptureMode::kMmap3;
      d.abi_version = version;
      return d;
    }
    d.reason = "kernel advertises MMAP3 but rejected the attr bit: " + fd.status().ToString();
  }
  if (require_mmap3)
    return Status::Failure("--mode mmap3 needs a kernel with PERF_RECORD_MMAP3: " + d.reason);
  if (max_mode != CaptureMode::kMmap2) {
    perf_event_attr a = probe;
    a.build_id = 1;
    if (PerfEventFd::Open(a, 0, -1).ok()) {
      d.mode = CaptureMode::kMmap2BuildId;
      return d;
    }
  }
  d.mode = CaptureMode::kMmap2;
  return d;
}

}  // namespace mmap3
