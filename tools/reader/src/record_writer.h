// Encoding of perf records: the inverse of record.h.
//
// Used to synthesize records for mappings and threads that existed before a
// capture started, to rewrite an MMAP2 record with the build-id we read from
// /proc/PID/map_files, and by tests to build records.  Output is a complete
// record (header.size == returned size, 8-byte aligned, strings NUL padded);
// the sample_id trailer is written from the record's SampleId when
// format.sample_id_all is set.
#ifndef MMAP3_READER_RECORD_WRITER_H_
#define MMAP3_READER_RECORD_WRITER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "record.h"

namespace mmap3 {

// Encodes according to m.format (MMAP, MMAP2 with inode, MMAP2 with
// build-id, or MMAP3).  For kMmap2BuildId the misc build-id bit is added.
std::vector<uint8_t> EncodeMmap(const MmapRecord& m, const SampleFormat& format);
std::vector<uint8_t> EncodeComm(const CommRecord& c, const SampleFormat& format);
std::vector<uint8_t> EncodeTask(const TaskRecord& t, const SampleFormat& format);
std::vector<uint8_t> EncodeLost(const LostRecord& l, const SampleFormat& format);
std::vector<uint8_t> EncodeKsymbol(const KsymbolRecord& k, const SampleFormat& format);
std::vector<uint8_t> EncodeBpfEvent(const BpfEventRecord& b, const SampleFormat& format);
// Writes the fields format.sample_type selects (IDENTIFIER, IP, TID, TIME,
// ID, CPU, PERIOD, CALLCHAIN); READ is not supported here.
std::vector<uint8_t> EncodeSample(const SampleRecord& s, std::span<const uint64_t> callchain,
                                  const SampleFormat& format);
// A perf-tool PERF_RECORD_FINISHED_ROUND marker (header only).
std::vector<uint8_t> EncodeFinishedRound();

}  // namespace mmap3

#endif  // MMAP3_READER_RECORD_WRITER_H_
