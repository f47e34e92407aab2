// Output of `script` and `buildid-list`: formatting only, from a
// ReportModel that Profile::BuildReport filled.
//
// script, one line per sample, in time order (deterministic: the same file
// gives the same text):
//   COMM PID/TID [CPU] SECONDS.MICROS: PERIOD  IP SYMBOL+0xOFF (PATH) BUILD-ID
// "[CPU]" only when the capture recorded it; SYMBOL+0xOFF as perf script's
// sym,symoff (the offset from the symbol's start; names that say why there
// is no symbol, see symbolizer.h, have none); BUILD-ID the full hex, with
// "(unverified)" when it is perf's table's by path, or "[no build-id]".
// With call chains (-g) the line ends after PERIOD: and each frame follows
// on its own line, tab-indented, the sample's ip first, then a blank line,
// as perf script -g prints them.
//
// buildid-list: "BUILD-ID PATH" as perf buildid-list prints it, but one line
// per (path, build-id): a file replaced during the capture has a line per
// version.  Files the capture has no build-id for are listed too, as
// "[no build-id] PATH (why)"; ids from perf's table end in
// " (unverified: perf's build-id table, by path)".  In the order the files
// were first mapped, the kernel's first.
#ifndef MMAP3_READER_SCRIPT_OUTPUT_H_
#define MMAP3_READER_SCRIPT_OUTPUT_H_

#include <ostream>

#include "report.h"

namespace mmap3 {

void WriteScript(const ReportModel& model, bool callchains, std::ostream& out);
void WriteBuildIdList(const ReportModel& model, std::ostream& out);

}  // namespace mmap3

#endif  // MMAP3_READER_SCRIPT_OUTPUT_H_
