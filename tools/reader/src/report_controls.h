// What `report` shows, with perf report's names and meanings: --sort keys,
// the --comms/--dsos/--symbols filters, --children, --percent-limit and
// --percentage.  Values only; Profile::BuildReport applies them.
#ifndef MMAP3_READER_REPORT_CONTROLS_H_
#define MMAP3_READER_REPORT_CONTROLS_H_

#include <string>
#include <string_view>
#include <vector>

#include "address_space.h"

namespace mmap3 {

enum class SortKey {
  kComm,     // the task's name
  kPid,      // the process (perf 6.1's "pid" key is the thread: see kTid)
  kTid,      // the thread
  kDso,      // the mapped file: path and build-id (two versions are two rows)
  kSym,      // the symbol ("symbol" is accepted too, as perf)
  kBuildId,  // the build-id alone, whatever path it was mapped at
};

const char* SortKeyName(SortKey key);

struct ReportControls {
  // What the report does by default, and perf report's default too.
  std::vector<SortKey> sort{SortKey::kComm, SortKey::kDso, SortKey::kSym};
  // Empty: no filter.  A sample is counted only if its comm, its DSO (base
  // name or full path) and its symbol are in the lists given (exact names,
  // as perf's -c, -d, -S; a symbol matches only if it was found).
  std::vector<std::string> comms, dsos, symbols;
  // perf's cumulative overhead: a row's Children counts every sample with
  // that row's key anywhere in its call chain, once per sample.
  bool children = false;
  // Rows whose overhead (Children with `children`) is below this are not
  // shown; a row exactly at it is (perf's --percent-limit).
  double percent_limit = 0;
  // perf's --percentage: false (absolute, perf's default) gives percentages
  // of every sample; true (relative) of the samples the filters let through.
  bool relative = false;

  bool Filters() const { return !comms.empty() || !dsos.empty() || !symbols.empty(); }
  bool Has(SortKey key) const;
  // "--comm a,b --dso c": the filters given, for the report's notes.
  std::string FilterText() const;
  // Whether a sample on `symbol` of `object` (null: no mapping) by `comm`
  // passes the filters.
  bool Matches(std::string_view comm, const MappedObject* object, const std::string& symbol,
               SymbolStatus status) const;
};

// "comm,dso,sym" -> keys.  On a bad or repeated key, an empty list and
// `error` says which.
std::vector<SortKey> ParseSortKeys(std::string_view text, std::string* error);
// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> SplitList(std::string_view text);

}  // namespace mmap3

#endif  // MMAP3_READER_REPORT_CONTROLS_H_
