// Times for the records synthesized from /proc at the start of a capture.
//
// -a and -p enable the events first, then read each existing process's
// /proc/PID/maps and comm, one process after another (0.1-0.3 s for 1,000
// processes).  What is read describes the process at that moment, not at
// the start: a sample taken before an exec or a remap that happened in
// between must not be matched against the mapping read afterwards.  The
// kernel reports every such change (COMM with exec, FORK, MMAP of an
// executable mapping) with a time in the events' clock, and the capture
// reads that clock around each read, so a synthesized record can be given
// the time from which it is known to hold:
//   - no change to it before the read: 0, it held before the capture
//     started (a sample at any time before the next change matches it);
//   - changes before the read: the last one's time (before it, the capture
//     does not know what was there: samples there are unknown);
//   - a change during the read (or too close to tell): none, the record is
//     not synthesized (the read may show the old or the new state; the
//     kernel's record of the change describes the new one from its time).
// After a change that is later than the read the kernel's record follows
// the synthesized one in time order, so nothing needs doing.  If the side-
// band lost records, a change may be missing: nothing is backdated before
// its read any more.
//
// Contract: Observe() every side-band record the capture drained, before
// asking about a process whose read ended at `read_end`; every record the
// kernel timestamped up to then must have been drained (as perf's
// finished-round ordering also assumes).  Times are the events' clock
// (CLOCK_MONOTONIC here).  Without a usable clock (clock == false) there are
// no read times: a record is synthesized at 0 only if no change to it was
// seen at all.
#ifndef MMAP3_READER_STARTUP_STAMPS_H_
#define MMAP3_READER_STARTUP_STAMPS_H_

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "record.h"

namespace mmap3 {

class StartupStamps {
 public:
  // How far around a read a change counts as "during" it: the kernel's
  // reading of CLOCK_MONOTONIC (its fast, NMI-safe variant) and ours may
  // differ by a little (nanoseconds, around NTP adjustments).
  static constexpr uint64_t kMarginNs = 20'000;

  explicit StartupStamps(bool clock) : clock_(clock) {}

  // A record the kernel wrote (decoded); others than task, comm, mmap and
  // lost records are ignored.  `lost_is_sideband`: a LOST record lost
  // side-band records (not just samples).
  void Observe(const Record& record, bool lost_is_sideband);
  // Side-band records were lost (read_format LOST said so).
  void NoteLoss() { lost_ = true; }
  bool lost() const { return lost_; }

  // When the mapping [start, end) of process `pid`, read from /proc between
  // read_start and read_end, takes effect; nullopt: do not synthesize it.
  std::optional<uint64_t> MappingTime(uint32_t pid, uint64_t start, uint64_t end,
                                      uint64_t read_start, uint64_t read_end) const;
  // The same for the command name of thread `tid`.
  std::optional<uint64_t> CommTime(uint32_t tid, uint64_t read_start, uint64_t read_end) const;
  // True if [start, end) of `pid` changed in [from, to] (what a
  // map_files entry opened in that interval may show instead of the
  // mapping that was read).  Always true for a known change without a clock.
  bool ChangedBetween(uint32_t pid, uint64_t start, uint64_t end, uint64_t from,
                      uint64_t to) const;

 private:
  struct Change {
    uint64_t time;
    uint64_t start, end;  // [0, UINT64_MAX) for the whole address space
  };
  std::optional<uint64_t> Decide(const std::vector<Change>* changes, uint64_t start,
                                 uint64_t end, uint64_t read_start, uint64_t read_end) const;

  bool clock_;
  bool lost_ = false;
  std::unordered_map<uint32_t, std::vector<Change>> spaces_;  // by pid
  std::unordered_map<uint32_t, std::vector<Change>> names_;   // by tid
};

}  // namespace mmap3

#endif  // MMAP3_READER_STARTUP_STAMPS_H_
