// The record and report commands, minus the command line: main.cc parses
// flags into these options, runs them, and prints what they return.
#ifndef MMAP3_READER_COMMANDS_H_
#define MMAP3_READER_COMMANDS_H_

#include <functional>
#include <string>

#include "build_id_cache.h"
#include "capture.h"
#include "report.h"
#include "result.h"

namespace mmap3 {

struct RecordOptions {
  CaptureOptions capture;
  std::string output;          // perf.data to write; "" to report directly
  std::string cache_dir;       // build-id cache; "" disables it
  bool callchains = false;     // keep stacks in the direct report
  std::function<void(const CaptureStats&)> on_status;  // live status, may be empty
};

struct RecordResult {
  CaptureMode mode = CaptureMode::kMmap2;
  std::string mode_reason;
  CaptureStats stats;
  BuildIdCache::Stats cache;
  uint64_t bytes_written = 0;
  int command_status = -1;
  ReportModel report;  // filled when no output file was requested
};

Result<RecordResult> RunRecord(const RecordOptions& options);

struct ReportOptions {
  std::string input = "perf.data";
  std::string cache_dir;  // where to look for cached copies ("" to skip)
  bool callchains = false;
};

Result<ReportModel> RunReport(const ReportOptions& options);

}  // namespace mmap3

#endif  // MMAP3_READER_COMMANDS_H_
