// Entry points of the coverage-guided fuzzers (make fuzz) and of the replay
// of their regression inputs (fuzz_regressions_test.cc in make reader-test).
//
// Contract: each function takes any bytes, never throws, and returns
// normally for every input the reader handles correctly.  A broken promise
// of the reader (a failed decode that leaves a record behind, a report whose
// counts do not add up, an inject output that does not read back) is
// reported on stderr and ends the process with abort(), which libFuzzer and
// GoogleTest's death-free replay both see as a crash; memory errors are left
// to the sanitizers of the build.  The functions are plain C++ so the
// libFuzzer mains (fuzz_main_*.cc, clang) and the GoogleTest replay (gcc)
// share them.
#ifndef MMAP3_READER_FUZZ_FUZZ_TARGETS_H_
#define MMAP3_READER_FUZZ_FUZZ_TARGETS_H_

#include <cstddef>
#include <cstdint>

namespace mmap3::fuzz {

// The input is a whole perf.data file.  It goes through PerfDataReader,
// FileFormats, ForEachRecord and DecodeRecord, RunReport (with and without
// callchains: ordering, Profile attribution, symbolization) and, for files
// with our metadata, RunInject, whose output must report again.  Files are
// written to a private directory under $TMPDIR (or /tmp) made on first use.
void FuzzPerfData(const uint8_t* data, size_t size);

// The input is a SampleFormat followed by records:
//   [0, 8)   sample_type     [8, 16) read_format
//   [16]     bit 0: sample_id_all; [17]: where the records start in the ring
//            (in 16-byte units)
//   [18, 18 + n) one record (DecodeRecord, DecodeSampleRecord, RecordTime,
//            ReadHeader), and the same bytes as the contents of a fake
//            perf ring buffer that RingBuffer::Drain frames.
inline constexpr size_t kRecordsPrefix = 18;
void FuzzRecords(const uint8_t* data, size_t size);

// The input is a file: ElfFile (Open, build_id, loads, FileOffsetToVaddr,
// ReadSymbols, HasSymtab) and ReadBuildIdFromFd, which must agree.
void FuzzElf(const uint8_t* data, size_t size);

}  // namespace mmap3::fuzz

#endif  // MMAP3_READER_FUZZ_FUZZ_TARGETS_H_
