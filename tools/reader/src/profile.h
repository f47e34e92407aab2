// Attribution: replays records in time order through the process model and
// counts each sample against (build-id, file offset).
//
// Contract: Process() takes records already in timestamp order (see
// RecordSorter).  Bad records are counted (bad_records()) and skipped.
// Symbolization happens only in BuildReport(), once per distinct location.
// MappedObjects are interned per (path, build-id, source) and owned by the
// Profile.
#ifndef MMAP3_READER_PROFILE_H_
#define MMAP3_READER_PROFILE_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "bpf_progs.h"
#include "keyed_hash.h"
#include "location_counts.h"
#include "process_table.h"
#include "record.h"
#include "stack_counts.h"
#include "report.h"
#include "symbolizer.h"

namespace mmap3 {

struct ProfileOptions {
  bool callchains = false;  // build stacks for folded output
  // Keep every sample's frames with their addresses and mappings, call
  // chains included when the samples have them (ReportModel::frame_stacks,
  // for --format pprof).
  bool sample_frames = false;
  // Build-id of the kernel the samples came from (empty: unknown).
  BuildId kernel_build_id;
  // Fallback for MMAP records without a build-id: perf.data's build-id table
  // looked up by path (source kPerfHeader).  May be empty.
  std::function<BuildId(std::string_view path)> path_build_id;
  // The same for kernel modules (MMAP records of pid -1 other than the
  // image), source kPerfHeader too.  May be empty.
  std::function<BuildId(std::string_view path)> module_build_id;
  const SourceOverrides* overrides = nullptr;
  // --sort, filters, --children, --percent-limit (see report_controls.h).
  // --children keeps every sample's chain; pid and tid keys split rows.
  ReportControls controls;
  // Keep every sample, for `script` (ReportModel::script).
  bool script = false;
  // The BPF programs the capture describes (by id), to tie each load's
  // functions to its program as its BPF_EVENT record comes.  May be null.
  const BpfPrograms* bpf_programs = nullptr;
  // Why the capture's KSYMBOL records cannot be trusted to show every
  // program's coming and going (a per-task capture without a CPU-wide
  // side-band event); empty if they can.  Then no KSYMBOL range names
  // anything: their samples are the kernel's, without a symbol.
  std::string bpf_untracked;
  // The capture's sampling events (names and what their periods count;
  // the counts are filled in by the report).  Empty: one event, unnamed.
  std::vector<ReportEvent> events;
  // Which of `events` a sample is of, by its id (PERF_SAMPLE_IDENTIFIER or
  // ID), where there are several events; with one, every sample is of it.
  // A sample whose id is not here is counted as a bad record, also when
  // no id is (every id listed by two events: helper-61's review found
  // such samples given to the first event).
  KeyedMap<uint64_t, uint32_t> event_of_id;
};

class Profile {
 public:
  explicit Profile(ProfileOptions options);

  void SetFormat(const SampleFormat& format) { layout_ = SampleLayout(format); }
  void SetFormat(const SampleLayout& layout) { layout_ = layout; }
  void Process(Bytes record);
  // Process() of each record, in order, with the same outcome; faster for
  // runs of samples, whose memory accesses it overlaps.  The records stay
  // valid until it returns.
  void ProcessBatch(std::span<const Bytes> records);

  uint64_t samples() const { return samples_; }
  uint64_t lost_records() const { return lost_records_; }
  uint64_t lost_samples() const { return lost_samples_; }
  uint64_t bad_records() const { return bad_records_; }
  // Of bad_records(): samples of an id that no single event of the
  // capture lists (two events list it, or none does), so of no event.
  uint64_t samples_of_no_event() const { return samples_of_no_event_; }
  // MMAP2 records whose build-id bit was over the inode layout (see
  // DecodeMmap), read as that.
  uint64_t stray_build_id_bits() const { return stray_build_id_bits_; }
  // KSYMBOL and BPF_EVENT records longer than their contents (see
  // SampleIdOffset()), read by their contents.
  uint64_t oversized_sideband() const { return oversized_sideband_; }
  uint64_t unattributed() const { return unattributed_; }
  // Distinct (comm, object, offset) locations sampled.
  size_t locations() const { return flat_.size(); }
  // The samples the flat counts hold, once a memo hit's counts left in its
  // entry are settled: samples(), unless a count was lost.  For checks,
  // and for a benchmark to include the settling.
  uint64_t CountedSamples() const;
  size_t mapping_count() const { return mappings_.size(); }
  const ProcessTable& processes() const { return processes_; }
  // Every distinct object seen (including the kernel), for build-id tables.
  std::vector<const MappedObject*> Objects() const;

  // Kernel modules whose recorded range held other code by the end of the
  // capture (CaptureStats::changed_kernel_modules, or what a file's metadata
  // says): their samples are reported without the module's build-id, so
  // never on its symbols.  Call after every record has been processed.
  void SetChangedKernelModules(const std::vector<KernelModuleMapping>& modules);

  // Symbolizes and aggregates; `mode` is copied into the model.
  ReportModel BuildReport(Symbolizer& symbolizer, const std::string& mode) const;
  // Fills model.bpf_programs and bpf_not_read: every program `programs`
  // describes, with the samples taken in its functions while it was loaded
  // (the load its BPF_EVENT record named; never another program with the
  // same tag or at the same addresses) and their source lines.
  void DescribeBpfPrograms(const BpfPrograms& programs, ReportModel& model) const;

 private:
  struct Frame {
    const MappedObject* object;  // null: unmapped address
    uint64_t offset;             // file offset, kernel address, module offset, or raw ip
    // The address looked up (0 for a guest's or the hypervisor's) and the
    // range of the mapping it was found in (all 0 when none was).
    uint64_t address = 0;
    uint64_t map_start = 0, map_end = 0, map_pgoff = 0;
    auto Key() const {
      return std::tie(object, offset, address, map_start, map_end, map_pgoff);
    }
    bool operator<(const Frame& o) const { return Key() < o.Key(); }
  };
  struct FrameSums {
    uint64_t samples = 0, period = 0;
  };
  struct KeptSample {
    uint64_t time;
    uint32_t pid, tid;
    int64_t cpu;
    uint64_t period;
    uint32_t task;
    std::vector<Frame> frames;    // leaf first
    std::vector<uint64_t> ips;    // each frame's ip as recorded
  };
  struct MappingEntry {
    uint32_t pid;
    uint64_t start, end, pgoff;
    const MappedObject* object;
  };

  // Whose address an ip is: from the sample's cpumode, or a call chain's
  // PERF_CONTEXT_* marker.
  enum class Space : uint8_t {
    kUser,
    kKernel,
    kGuestKernel,
    kGuestUser,
    kGuest,  // PERF_CONTEXT_GUEST: a guest's, kernel or user not said
    kHypervisor,
    kUnknown,  // cpumode UNKNOWN, or a marker this reader does not know
  };
  static Space SampleSpace(uint16_t misc);
  static Space ContextSpace(uint64_t marker);

  // The object a report shows for `object`: itself, or the stand-in of a
  // changed module (see SetChangedKernelModules).
  const MappedObject* Shown(const MappedObject* object) const;
  // A COMM, FORK or EXIT record: the task names cached for samples go.
  void ForgetComms();
  void OnMmap(const MmapRecord& m);
  void OnKernelMmap(const MmapRecord& m);
  void OnKsymbol(const KsymbolRecord& k);
  void OnBpfEvent(const BpfEventRecord& b);
  // A sample whose leaf is in a BPF function: counted for the program
  // loaded there.
  void CountBpfSample(uint64_t ip);
  // A sample's part that does not depend on where its addresses are: its
  // event, period and task (counted here), and its chain's memo hash.
  struct SampleStart {
    uint64_t period;
    uint64_t memo_hash;  // when Memoized()
    // When Memoized(): MemoHead(), made once for the hash and the lookup.
    std::array<uint64_t, 3> memo_head;
    uint32_t comm;
    Space space;
  };
  void OnSample(const SampleRecord& s);
  // OnSample() in two steps: false if the sample is counted as bad.
  bool BeginSample(const SampleRecord& s, SampleStart* start);
  // The task (event, comm, pid and tid as the sort keys want) of a sample
  // of `event` by pid/tid: from a direct-mapped cache by tid.
  uint32_t TaskOf(uint32_t event, uint32_t pid, uint32_t tid);
  // TaskOf() when its cache misses, out of line: inlined, its calls made
  // the flat loop keep its values on the stack across them, and that loop
  // ran 6% slower (48.3 against 45.4 M records/s, alternating runs).
  [[gnu::noinline]] uint32_t TaskOfMiss(uint32_t event, uint32_t pid, uint32_t tid);
  // ProcessBatch() where flat_only_ and the capture has one event.
  void ProcessFlatBatch(std::span<const Bytes> records);
  // The samples ProcessFlatBatch() keeps before counting them (AddMany()).
  static constexpr size_t kFlatChunk = 64;
  // What the full decoder fills for ProcessFlatBatch(): a member, so that
  // the loop's own fields are not a SampleRecord whose address escapes.
  SampleRecord flat_scratch_;
  void FinishSample(const SampleRecord& s, const SampleStart& start);
  // FinishSample() when flat_only_: the leaf's flat count, nothing else.
  void CountFlat(const SampleRecord& s, const SampleStart& start);
  // The counts of a sample's leaf other than the flat one: unattributed,
  // or the BPF program's.
  void NoteLeaf(const MappedObject* object, uint64_t ip);
  // Counts on a memo entry's ids what its hits left in it: before the ids
  // change (a stale entry filled in again), and in every reader of flat_,
  // stacks_ or chains_ (BuildReport), before it reads them.
  void SettleMemo() const;
  void CountMemoHits(const ChainMemo::Ids& ids, uint64_t samples, uint64_t period) const;
  // Whether chains are counted by their ids through memo_ (not for script
  // and pprof's frames, which keep more than the ids).
  bool Memoized() const { return memoized_; }
  // What FinishSample() does beyond the flat count: nothing for most
  // reports.  Both fixed at construction (options_ never changes), so a
  // sample tests a bool, not four options.
  bool memoized_ = false, flat_only_ = false;
  // The memo key's head: what a chain's resolution depends on besides its
  // words.
  static std::array<uint64_t, 3> MemoHead(const SampleRecord& s, const SampleStart& start) {
    return {uint64_t{s.pid} << 32 | start.comm, static_cast<uint64_t>(start.space), s.ip};
  }
  Frame Resolve(uint32_t pid, uint64_t ip, Space space) const;
  // Resolve() of a user address (most samples' leaf): inline.
  [[gnu::always_inline]] Frame ResolveUser(uint32_t pid, uint64_t ip) const {
    if (const AddressSpace::Range* r = AddressSpace::FindRange(UserRanges(pid), ip))
      return {r->object, r->Offset(ip), ip, r->start, r->end, r->pgoff};
    return {nullptr, ip, ip};
  }
  // The index of `pid`'s mappings (empty for a process never seen), from a
  // direct-mapped cache by pid that holds it for the current epoch.
  [[gnu::always_inline]] std::span<const AddressSpace::Range> UserRanges(uint32_t pid) const {
    const SpaceCacheEntry& e = space_cache_[pid % kSpaceCache];
    if (e.epoch == epoch_ && e.pid == pid) return e.ranges;
    return UserRangesMiss(pid);
  }
  std::span<const AddressSpace::Range> UserRangesMiss(uint32_t pid) const;
  // Fills model.frame_mappings, frame_locations and frame_stacks.
  void BuildFrames(Symbolizer& symbolizer, ReportModel& model) const;
  // A task id: the event, the comm, and the pid and tid when --sort has
  // them (else -1).  Every count is kept per task, so per event.
  uint32_t InternTask(uint32_t event, const std::string& comm, int64_t pid, int64_t tid);
  // Applies the report controls to the flat counts and chains.
  void BuildRows(Symbolizer& symbolizer, ReportModel& model) const;
  // Fills model.script and script_locations.
  void BuildScript(Symbolizer& symbolizer, ReportModel& model) const;
  std::shared_ptr<const MappedObject> InternObject(MappedObject object);
  // The offset a chain frame's symbol is looked up at: its own, or for a
  // kernel return address that Symbolizer::CallerOffset finds was an
  // interrupted ip, the byte after (`object` as recorded, not Shown()).
  // `leaf`: the frame is the sample's own ip.  In a kernel object every
  // other frame was looked up as a return address: a kernel chain's only
  // ip as recorded is its first, the leaf.
  uint64_t SymbolOffset(Symbolizer& symbolizer, const MappedObject* object, uint64_t offset,
                        bool leaf) const;

  ProfileOptions options_;
  SampleLayout layout_;
  ProcessTable processes_;
  // The kernel image: samples outside every kernel mapping go here too.
  std::shared_ptr<const MappedObject> kernel_object_;
  // "[guest.kernel]", "[guest.user]", "[guest]", "[hypervisor]": samples
  // whose addresses are not the host's (see AddressOwner).
  std::shared_ptr<const MappedObject> guest_kernel_, guest_user_, guest_, hypervisor_;
  std::map<std::tuple<std::string, BuildId, BuildIdSource, bool, AddressOwner, bool, std::string,
                      uint64_t, int64_t, bool>,
           std::shared_ptr<const MappedObject>>
      objects_;
  // Each interned object by its number (MappedObject::number); [0]: none.
  std::vector<const MappedObject*> numbered_{nullptr};
  // An object's key in flat_: its number, 0 for none (an unmapped address).
  [[gnu::always_inline]] static uint32_t Number(const MappedObject* object) {
    return object != nullptr ? object->number : 0;
  }
  std::vector<std::string> comms_;  // by task id
  std::vector<int64_t> task_pids_, task_tids_;
  std::vector<uint32_t> task_events_;
  std::map<std::tuple<uint32_t, std::string, int64_t, int64_t>, uint32_t> comm_ids_;
  // (event << 32 | tid) -> task id, valid in the generation it was found
  // in: names change only through COMM/FORK/EXIT records, which start a new
  // one (comm_generation_), and samples vastly outnumber them.  An entry of
  // an older generation is looked up again.  (The table was cleared at
  // each of those records instead: libstdc++'s clear() writes every bucket,
  // so a capture of many threads and many forks paid the table's size at
  // each: 6.2 s for a crafted 21 MB one of 200,000 tids and 200,000 COMMs.)
  struct TaskOfTid {
    uint32_t comm, generation;
  };
  KeyedMap<uint64_t, TaskOfTid> comm_of_tid_;
  // In front of it, a direct-mapped cache by tid of its entries of the
  // current generation: most samples find their task here, in one cache
  // line.
  struct CommCacheEntry {
    uint64_t task_key;
    uint32_t comm, generation;
  };
  static constexpr size_t kCommCache = 1024;
  // A task's entry: TaskOf() looks there, TaskOfMiss() fills it.
  static size_t CommSlot(uint32_t event, uint32_t tid) {
    return (tid ^ event * 0x9e37u) % kCommCache;
  }
  std::array<CommCacheEntry, kCommCache> comm_cache_{};
  uint32_t comm_generation_ = 1;
  // pid -> its mappings' index, valid in one epoch (no record other than a
  // sample since): a sample's address is looked up in one array, without
  // the process table's hash map and nodes.
  struct SpaceCacheEntry {
    uint64_t epoch = UINT64_MAX;  // never the current one: empty
    uint32_t pid = 0;
    std::span<const AddressSpace::Range> ranges;
  };
  static constexpr size_t kSpaceCache = 256;
  mutable std::array<SpaceCacheEntry, kSpaceCache> space_cache_{};
  // Per event: samples and the sum of their periods.
  std::vector<uint64_t> event_samples_, event_period_;
  // flat_, stacks_ and chains_ are mutable for SettleMemo(): a memo hit's
  // counts may still be in its entry, and every reader settles them first.
  mutable LocationCounts flat_;
  // With callchains: (task, (object, offset) outermost first) -> samples.
  mutable StackCounts stacks_;
  std::vector<MappingEntry> mappings_;
  // With --children: (task, (object, offset) leaf first) -> counts.
  mutable StackCounts chains_;
  // (pid, task, sample's space, ip, call chain as recorded) -> the ids in
  // stacks_ and chains_, valid while epoch_ is unchanged: every record
  // other than a sample starts a new epoch.  A hit is counted in its entry
  // (ChainMemo::Accumulate).
  mutable ChainMemo memo_;
  uint64_t epoch_ = 0;
  // OnSample's per-sample lists, kept for their capacity.
  std::vector<StackCounts::Frame> frames_scratch_, chain_scratch_;
  std::vector<Frame> addressed_scratch_;
  std::vector<uint64_t> ips_scratch_;
  std::vector<KeptSample> kept_;  // with `script`
  // ProcessBatch()'s chunk of samples (with chains).
  static constexpr size_t kBatchChunk = 64;
  std::array<SampleRecord, kBatchChunk> batch_samples_;
  std::array<SampleStart, kBatchChunk> batch_starts_;
  // With sample_frames: (comm, frames leaf first) -> counts.
  std::map<std::pair<uint32_t, std::vector<Frame>>, FrameSums> frame_stacks_;
  // Changed modules' objects -> their stand-ins, without a build-id.
  std::map<const MappedObject*, std::shared_ptr<const MappedObject>> changed_modules_;
  std::vector<std::string> changed_module_paths_;  // sorted
  // Modules whose unload the kernel reported (path, start): never changed
  // behind our back.
  std::set<std::pair<std::string, uint64_t>> unloaded_modules_;
  // Modules whose range an unload of another build (or module) ended:
  // something was loaded there unseen, and they count as changed.
  std::set<std::pair<std::string, uint64_t>> doubtful_modules_;
  uint64_t samples_ = 0, lost_records_ = 0, lost_samples_ = 0, bad_records_ = 0;
  uint64_t samples_of_no_event_ = 0;
  uint64_t stray_build_id_bits_ = 0, oversized_sideband_ = 0;
  uint64_t period_ = 0;  // sum of the samples' periods: what overhead is a share of
  uint64_t unattributed_ = 0;
  // BPF functions loaded now, by start: their end and the program whose
  // load registered them (0 until its BPF_EVENT record is seen), with the
  // tag of their KSYMBOL name and the task that loaded them.
  struct BpfRange {
    uint64_t end;
    uint32_t program;
    BpfTag tag;
    uint32_t tid;
    uint64_t order;  // registration order, to find a load's last functions
  };
  std::map<uint64_t, BpfRange> bpf_ranges_;
  uint64_t bpf_order_ = 0;
  // program id (0: not known) -> sampled address -> samples
  std::map<uint32_t, std::map<uint64_t, uint64_t>> bpf_samples_;
};

}  // namespace mmap3

#endif  // MMAP3_READER_PROFILE_H_
