// --format pprof: the report's samples as a gzipped profile.proto (the
// format of pprof and `go tool pprof`; proto/profile.proto).  No logic:
// everything here encodes what Profile::BuildReport computed with
// ProfileOptions::sample_frames.
//
// What the file holds:
//   sample_type          [samples/count, <event>/<unit>] (ReportModel::event);
//                        the second is the default, as the text report's
//                        Overhead is the share of the period
//   period_type, period  the event and its nominal period
//   sample               one per distinct (comm, stack): location ids leaf
//                        first, values [samples, period], label comm
//   mapping              one per (object, recorded range): start, limit,
//                        file offset, path, the full build-id in hex (none:
//                        the report has none), has_functions if a location
//                        in it got a symbol
//   location             one per (mapping, address); mapping_id 0 for an
//                        address in no known mapping; a Line (and Function)
//                        only where the report found a symbol
//   function             one per (symbol, object: build-id, else path); a
//                        symbol name that more than one object has is
//                        named "NAME [FILE BUILDID12]" (pprof adds up
//                        functions by name), system_name is the symbol
//   comment              the capture's mode, counts and event, and per file
//                        (path, build-id) where the build-id came from:
//                        "build-id of PATH: HEX (source mmap3)"
#ifndef MMAP3_READER_PPROF_H_
#define MMAP3_READER_PPROF_H_

#include <string>

#include "report.h"
#include "result.h"

namespace mmap3 {

// The serialized profile.proto, uncompressed (for tests).
// s as profile.proto's string_table holds it: unchanged if it is UTF-8,
// else with each byte that is not part of a UTF-8 sequence written \xNN and
// each backslash \\.
std::string PprofString(const std::string& s);

std::string EncodePprofProto(const ReportModel& model);

// EncodePprofProto() gzipped: the bytes of a .pb.gz file.
Result<std::string> EncodePprof(const ReportModel& model);

}  // namespace mmap3

#endif  // MMAP3_READER_PPROF_H_
