// libFuzzer entry point of the elf fuzzer (make fuzz); the work is in
// fuzz_targets.cc, shared with the regression replay of make reader-test.
#include <cstddef>
#include <cstdint>

#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mmap3::fuzz::FuzzElf(data, size);
  return 0;
}
