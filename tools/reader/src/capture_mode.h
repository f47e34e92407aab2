// Which mapping records a capture asks the kernel for, decided once, before
// any event is opened, and never guessed:
//   kMmap3        the kernel advertises PERF_MMAP3_CAP_PATH with our ABI
//                 version and accepts the attr bit;
//   kMmap2BuildId attr.build_id (Linux 5.12+);
//   kMmap2        plain MMAP2.
#ifndef MMAP3_READER_CAPTURE_MODE_H_
#define MMAP3_READER_CAPTURE_MODE_H_

#include <string>

#include "result.h"

namespace mmap3 {

enum class CaptureMode { kMmap3, kMmap2BuildId, kMmap2 };
const char* CaptureModeName(CaptureMode mode);

struct ModeDecision {
  CaptureMode mode = CaptureMode::kMmap2;
  std::string reason;  // why MMAP3 is not used ("" if it is)
  int abi_version = 0;  // the kernel's MMAP3 ABI version (0: no MMAP3)
};

// Probes the kernel with a disabled dummy event on this process.  `max_mode`
// is an upper bound (kMmap2 forbids the build-id bit, kMmap2BuildId forbids
// MMAP3); `cap_path` is where the kernel advertises MMAP3 ("" for
// PERF_MMAP3_CAP_PATH).  Fails only if `require_mmap3` and MMAP3 cannot be
// used; the error says why.
Result<ModeDecision> DetectCaptureMode(CaptureMode max_mode, bool require_mmap3,
                                       const std::string& cap_path);

}  // namespace mmap3

#endif  // MMAP3_READER_CAPTURE_MODE_H_
