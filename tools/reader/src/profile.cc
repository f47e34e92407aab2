#include "profile.h"

#include <cstring>
#include <span>

#include <algorithm>
#include <set>
#include <unordered_set>

#include "bpf_progs.h"
#include "linux/perf_event_mmap3.h"
#include "perf_map.h"

namespace mmap3 {
namespace {

// Callchain entries at or above this are PERF_CONTEXT_* markers.
constexpr uint64_t kContextMax = static_cast<uint64_t>(-4095);

// Whether a record's cpumode says it describes a guest (a whole record, so
// at least a header).
bool IsGuestRecord(Bytes record) {
  perf_event_header h;
  std::memcpy(&h, record.data(), sizeof(h));
  const uint16_t mode = h.misc & PERF_RECORD_MISC_CPUMODE_MASK;
  return mode == PERF_RECORD_MISC_GUEST_KERNEL || mode == PERF_RECORD_MISC_GUEST_USER;
}

}  // namespace

Profile::Space Profile::SampleSpace(uint16_t misc) {
  // By table: the cpumode is three bits, and this is once a sample.
  static_assert(PERF_RECORD_MISC_CPUMODE_MASK == 7);
  static constexpr Space kSpaces[8] = {
      Space::kUnknown,      // CPUMODE_UNKNOWN: whose ip is not said
      Space::kKernel,       // MISC_KERNEL
      Space::kUser,         // MISC_USER
      Space::kHypervisor,   // MISC_HYPERVISOR
      Space::kGuestKernel,  // MISC_GUEST_KERNEL
      Space::kGuestUser,    // MISC_GUEST_USER
      Space::kUnknown,      // 6 and 7: not defined
      Space::kUnknown,
  };
  static_assert(PERF_RECORD_MISC_KERNEL == 1 && PERF_RECORD_MISC_USER == 2 &&
                PERF_RECORD_MISC_HYPERVISOR == 3 && PERF_RECORD_MISC_GUEST_KERNEL == 4 &&
                PERF_RECORD_MISC_GUEST_USER == 5);
  return kSpaces[misc & PERF_RECORD_MISC_CPUMODE_MASK];
}

Profile::Space Profile::ContextSpace(uint64_t marker) {
  switch (marker) {
    case PERF_CONTEXT_USER: return Space::kUser;
    case PERF_CONTEXT_KERNEL: return Space::kKernel;
    case PERF_CONTEXT_GUEST_KERNEL: return Space::kGuestKernel;
    case PERF_CONTEXT_GUEST_USER: return Space::kGuestUser;
    case PERF_CONTEXT_GUEST: return Space::kGuest;
    case PERF_CONTEXT_HV: return Space::kHypervisor;
    default: return Space::kUnknown;
  }
}

Profile::Profile(ProfileOptions options) : options_(std::move(options)) {
  memoized_ = (options_.callchains || options_.controls.children) && !options_.script &&
              !options_.sample_frames;
  flat_only_ = !options_.callchains && !options_.sample_frames && !options_.controls.children &&
               !options_.script;
  if (options_.events.empty()) options_.events.emplace_back();
  event_samples_.assign(options_.events.size(), 0);
  event_period_.assign(options_.events.size(), 0);
  MappedObject kernel;
  kernel.path = "[kernel.kallsyms]";
  kernel.kernel = true;
  kernel.build_id = options_.kernel_build_id;
  kernel.source = kernel.build_id.empty() ? BuildIdSource::kNone : BuildIdSource::kKernelNotes;
  kernel_object_ = InternObject(std::move(kernel));
  auto foreign = [this](const char* path, AddressOwner owner) {
    MappedObject o;
    o.path = path;
    o.owner = owner;
    return InternObject(std::move(o));
  };
  guest_kernel_ = foreign("[guest.kernel]", AddressOwner::kGuest);
  guest_user_ = foreign("[guest.user]", AddressOwner::kGuest);
  guest_ = foreign("[guest]", AddressOwner::kGuest);
  hypervisor_ = foreign("[hypervisor]", AddressOwner::kHypervisor);
}

uint32_t Profile::InternTask(uint32_t event, const std::string& comm, int64_t pid, int64_t tid) {
  auto [it, inserted] = comm_ids_.try_emplace(std::make_tuple(event, comm, pid, tid),
                                              static_cast<uint32_t>(comms_.size()));
  if (inserted) {
    comms_.push_back(comm);
    task_pids_.push_back(pid);
    task_tids_.push_back(tid);
    task_events_.push_back(event);
  }
  return it->second;
}

std::shared_ptr<const MappedObject> Profile::InternObject(MappedObject object) {
  auto key = std::make_tuple(object.path, object.build_id, object.source, object.kernel,
                             object.owner, object.kernel_module, object.reloc_symbol,
                             object.reloc_address, object.jit_pid, object.ksymbol);
  auto& slot = objects_[key];
  if (!slot) {
    object.number = static_cast<uint32_t>(numbered_.size());
    slot = std::make_shared<const MappedObject>(std::move(object));
    numbered_.push_back(slot.get());
  }
  return slot;
}

void Profile::ForgetComms() {
  // Generation 0 is the empty cache's: past it, the entries are cleared
  // (once in 2^32 - 1 such records), so no old entry passes for current.
  if (++comm_generation_ == 0) {
    comm_cache_.fill(CommCacheEntry{});
    comm_of_tid_.clear();
    comm_generation_ = 1;
  }
}

void Profile::Process(Bytes record) {
  if (record.size() >= sizeof(perf_event_header)) {
    perf_event_header h;
    std::memcpy(&h, record.data(), sizeof(h));
    if (h.type == PERF_RECORD_SAMPLE) {
      SampleRecord s;
      DecodeStatus status = DecodeSampleRecord(record, layout_, &s);
      if (status == DecodeStatus::kOk) {
        OnSample(s);
      } else if (status != DecodeStatus::kIgnored) {
        ++bad_records_;
      }
      return;
    }
  }
  // Whatever else this is may change what an address resolves to (a
  // mapping, a fork, an exec, an exit): chains resolved before are looked
  // up again.  Cheap: such records are rare next to samples.
  ++epoch_;
  Record r;
  DecodeStatus status = DecodeRecord(record, layout_, &r);
  if (status == DecodeStatus::kIgnored) return;
  if (status != DecodeStatus::kOk) {
    ++bad_records_;
    return;
  }
  if (!std::holds_alternative<SampleRecord>(r) && !std::holds_alternative<LostRecord>(r) &&
      IsGuestRecord(record)) {
    // A guest's task or mapping record (perf kvm, perf inject --guest-data):
    // its pids and addresses are the guest's, so it must not rename, fork,
    // reset or map anything of the host process that has the same pid.
    // Guest samples are not looked up in host address spaces either.
    return;
  }
  if (auto* s = std::get_if<SampleRecord>(&r)) {
    OnSample(*s);
  } else if (auto* m = std::get_if<MmapRecord>(&r)) {
    OnMmap(*m);
  } else if (auto* c = std::get_if<CommRecord>(&r)) {
    ForgetComms();
    processes_.OnComm(c->pid, c->tid, c->comm, c->exec);
  } else if (auto* t = std::get_if<TaskRecord>(&r)) {
    ForgetComms();
    if (t->exit) {
      processes_.OnExit(t->pid, t->tid);
    } else {
      processes_.OnFork(t->pid, t->ppid, t->tid, t->ptid);
    }
  } else if (auto* l = std::get_if<LostRecord>(&r)) {
    (l->samples ? lost_samples_ : lost_records_) += l->lost;
  } else if (auto* k = std::get_if<KsymbolRecord>(&r)) {
    if (k->excess != 0) ++oversized_sideband_;
    OnKsymbol(*k);
  } else if (auto* b = std::get_if<BpfEventRecord>(&r)) {
    if (b->excess != 0) ++oversized_sideband_;
    OnBpfEvent(*b);
  }
}

void Profile::DescribeBpfPrograms(const BpfPrograms& programs, ReportModel& model) const {
  const auto& list = programs.programs();
  std::vector<ReportBpfProgram> out(list.size());
  std::set<uint32_t> described;
  for (size_t i = 0; i < list.size(); ++i) {
    const BpfProgram& p = list[i];
    ReportBpfProgram& r = out[i];
    r.id = p.id;
    r.tag = BpfTagHex(p.tag);
    r.name = p.name;
    for (size_t f = 0; f < p.functions.size(); ++f) r.functions.push_back(programs.FunctionName(p, f));
    r.lines_missing = programs.LinesMissing(p);
    r.has_lines = r.lines_missing.empty();
    described.insert(p.id);
    auto samples = bpf_samples_.find(p.id);
    if (samples == bpf_samples_.end()) continue;
    std::map<std::pair<std::string, uint32_t>, uint64_t> lines;
    for (const auto& [addr, n] : samples->second) {
      r.samples += n;
      if (auto line = programs.LineOf(p, addr)) lines[{*line->file, line->line}] += n;
    }
    for (const auto& [where, n] : lines) r.lines.push_back({where.first, where.second, n});
    // Most samples first; ties in file and line order (the map's).
    std::stable_sort(r.lines.begin(), r.lines.end(),
                     [](const ReportBpfLine& a, const ReportBpfLine& b) { return a.samples > b.samples; });
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const ReportBpfProgram& a, const ReportBpfProgram& b) { return a.id < b.id; });
  model.bpf_programs = std::move(out);
  std::set<uint32_t> noted;
  for (const BpfNotRead& n : programs.not_read()) {
    ReportBpfNotRead r{n.id, n.tag == BpfTag{} ? "" : BpfTagHex(n.tag), n.reason, 0};
    if (auto it = bpf_samples_.find(n.id);
        n.id != 0 && !described.count(n.id) && noted.insert(n.id).second && it != bpf_samples_.end())
      for (const auto& [addr, count] : it->second) r.samples += count;
    model.bpf_not_read.push_back(std::move(r));
  }
  // Functions of no program that is described or said not to be: their
  // load record never came (lost, or a file without it), or they are a
  // subprogram of one not described, whose tag only its description gives.
  // Their samples are on their rows, named by the kernel.
  for (const auto& [id, samples] : bpf_samples_) {
    if (id != 0 && (described.count(id) || noted.count(id))) continue;
    for (const auto& [addr, count] : samples) model.bpf_samples_of_unknown_programs += count;
  }
  model.bpf_untracked = options_.bpf_untracked;
}

void Profile::OnBpfEvent(const BpfEventRecord& b) {
  if (b.type != PERF_BPF_EVENT_PROG_LOAD || b.id == 0) return;
  BpfTag tag;
  std::memcpy(tag.data(), b.tag, tag.size());
  const BpfProgram* p = options_.bpf_programs ? options_.bpf_programs->ById(b.id) : nullptr;
  if (p != nullptr && p->tag == tag) {
    // Its description says where each of its functions is, with its tag
    // (perf names a main function it synthesizes by its own instructions'
    // tag).
    for (size_t i = 0; i < p->functions.size(); ++i) {
      const BpfFunction& f = p->functions[i];
      auto it = bpf_ranges_.find(f.addr);
      if (it == bpf_ranges_.end() || it->second.program != 0) continue;
      if (it->second.tag == f.tag || (i == 0 && it->second.tag == p->main_function_tag))
        it->second.program = b.id;
    }
    return;
  }
  // Not described: its main function is the last one registered with its
  // tag by the same task (the kernel names the functions, then the load).
  BpfRange* last = nullptr;
  for (auto& [start, r] : bpf_ranges_) {
    if (r.program == 0 && r.tag == tag && r.tid == b.sample_id.tid &&
        (last == nullptr || r.order > last->order))
      last = &r;
  }
  if (last != nullptr) last->program = b.id;
}

void Profile::CountBpfSample(uint64_t ip) {
  auto it = bpf_ranges_.upper_bound(ip);
  if (it == bpf_ranges_.begin()) return;
  --it;
  if (ip >= it->second.end) return;
  ++bpf_samples_[it->second.program][ip];
}

void Profile::OnKsymbol(const KsymbolRecord& k) {
  // Without every program's unload (a per-task capture) a range may hold
  // another program than the one named: none is named.
  if (!options_.bpf_untracked.empty()) return;
  const uint64_t end = k.addr + k.len < k.addr ? UINT64_MAX : k.addr + k.len;
  // The BPF functions the range reaches into are gone.
  auto it = bpf_ranges_.upper_bound(k.addr);
  if (it != bpf_ranges_.begin() && std::prev(it)->second.end > k.addr) --it;
  while (it != bpf_ranges_.end() && it->first < end) it = bpf_ranges_.erase(it);
  if (k.unregister) {
    // Whatever runs there next is named by its own record; until then the
    // range is nobody's (the kernel, without a symbol), never the old
    // program's.
    processes_.EraseKernel(k.addr, end);
    return;
  }
  MappedObject o;
  o.path = std::string(k.name);
  o.kernel = true;
  o.ksymbol = true;
  if (k.ksym_type == PERF_RECORD_KSYMBOL_TYPE_BPF) {
    if (auto tag = BpfTagOfSymbol(k.name)) {
      o.build_id = BuildId(tag->data(), tag->size());
      o.source = BuildIdSource::kBpf;
      bpf_ranges_[k.addr] = {end, 0, *tag, k.sample_id.tid, ++bpf_order_};
    }
  }
  Mapping mapping;
  mapping.start = k.addr;
  mapping.end = end;
  mapping.object = InternObject(std::move(o));
  mappings_.push_back({kKernelPid, mapping.start, mapping.end, 0, mapping.object.get()});
  processes_.OnMmap(kKernelPid, std::move(mapping));
}

void Profile::OnKernelMmap(const MmapRecord& m) {
  static constexpr std::string_view kImage = "[kernel.kallsyms]";
  if (m.mmap3_flags & PERF_MMAP3_UNLOADED) {
    // A module's unload (MMAP3 ABI version 2): from now on nothing is known
    // to be at its range.  A sample there, which only a record out of time
    // order could give, is the kernel's, without a symbol.
    // A module recorded at the start has the range /proc/modules gave,
    // which can reach past its text: the whole of that module's mapping
    // goes.
    uint64_t end = m.start + m.len < m.start ? UINT64_MAX : m.start + m.len;
    const Mapping* at = processes_.FindKernel(m.start);
    if (at != nullptr && at->start == m.start && at->object->kernel_module &&
        at->object->path == m.filename) {
      end = std::max(end, at->end);
      if (at->object->build_id == m.build_id) {
        unloaded_modules_.insert({std::string(m.filename), m.start});
      } else {
        // Another build was unloaded than the one recorded there: it was
        // loaded without a record this capture could see (a per-task
        // capture sees only its own tasks' loads), so which code ran there
        // is not known.
        doubtful_modules_.insert({std::string(m.filename), m.start});
      }
    } else if (at != nullptr && at->object->kernel_module) {
      doubtful_modules_.insert({at->object->path, at->start});
    }
    processes_.EraseKernel(m.start, end);
    return;
  }
  const std::string_view name = m.filename;
  std::shared_ptr<const MappedObject> object;
  if (name.starts_with(kImage)) {
    // perf's "[kernel.kallsyms]_text": pgoff is where _text was in this
    // capture.  Samples from now on belong to an image object that carries
    // it, so its symbols are relocated to this boot (KASLR).
    MappedObject image = *kernel_object_;
    if (image.build_id.empty() && !m.build_id.empty()) {
      // perf record --buildid-mmap writes no build-id table (nor the
      // kernel's id in it), but its image record has the id perf read
      // from /sys/kernel/notes when it recorded.
      image.build_id = m.build_id;
      image.source = BuildIdSource::kMmap2;
    }
    image.reloc_symbol = std::string(name.substr(kImage.size()));
    image.reloc_address = image.reloc_symbol.empty() ? 0 : m.pgoff;
    kernel_object_ = InternObject(std::move(image));
    object = kernel_object_;
  } else if (name.starts_with('/') || name.starts_with('[')) {
    // A module ("[ext4]" as we and perf's --buildid-mmap write it, or its
    // .ko path): an object of its own, with its own build-id.
    MappedObject module;
    module.path = std::string(name);
    module.kernel = module.kernel_module = true;
    module.build_id = m.build_id;
    if (!m.build_id.empty()) {
      module.source = BuildIdSource::kKernelNotes;
    } else if (options_.module_build_id) {
      module.build_id = options_.module_build_id(m.filename);
      if (!module.build_id.empty()) module.source = BuildIdSource::kPerfHeader;
    }
    object = InternObject(std::move(module));
  } else {
    return;  // a guest's kernel, or nothing we know
  }
  Mapping mapping;
  mapping.start = m.start;
  mapping.end = m.start + m.len < m.start ? UINT64_MAX : m.start + m.len;
  mapping.pgoff = m.pgoff;
  mapping.object = object;
  mappings_.push_back({kKernelPid, mapping.start, mapping.end, mapping.pgoff, object.get()});
  processes_.OnMmap(kKernelPid, std::move(mapping));
}

void Profile::OnMmap(const MmapRecord& m) {
  if (m.stray_build_id_bit) ++stray_build_id_bits_;
  if (m.pid == kKernelPid) {
    OnKernelMmap(m);
    return;
  }
  MappedObject object;
  object.path = std::string(m.filename);
  object.build_id = m.build_id;
  if (!m.build_id.empty()) {
    object.source = m.format == MmapFormat::kMmap3 ? BuildIdSource::kMmap3 : BuildIdSource::kMmap2;
    if (options_.overrides) {
      if (const BuildIdSource* s = options_.overrides->Find(m.pid, m.start, m.build_id))
        object.source = *s;
    }
  } else if (options_.path_build_id && !m.stray_build_id_bit) {
    // (Not for a record whose build-id bit was refused: its bytes may have
    // been an id the table contradicts, as much as the inode read here.)
    object.build_id = options_.path_build_id(m.filename);
    if (!object.build_id.empty()) object.source = BuildIdSource::kPerfHeader;
  }
  // Anonymous executable memory: JIT code, which only its own process's
  // perf map can name (one object per process).  Anything with a build-id
  // is a file's code, whatever its name.
  if (object.build_id.empty() && IsJitMappingPath(m.filename)) object.jit_pid = m.pid;
  Mapping mapping;
  mapping.start = m.start;
  mapping.end = m.start + m.len;
  mapping.pgoff = m.pgoff;
  mapping.object = InternObject(std::move(object));
  mappings_.push_back({m.pid, mapping.start, mapping.end, mapping.pgoff, mapping.object.get()});
  processes_.OnMmap(m.pid, std::move(mapping));
}

std::span<const AddressSpace::Range> Profile::UserRangesMiss(uint32_t pid) const {
  SpaceCacheEntry& e = space_cache_[pid % kSpaceCache];
  const AddressSpace* space = processes_.Space(pid);
  e = SpaceCacheEntry{epoch_, pid,
                      space != nullptr ? space->Ranges() : std::span<const AddressSpace::Range>()};
  return e.ranges;
}

Profile::Frame Profile::Resolve(uint32_t pid, uint64_t ip, Space space) const {
  switch (space) {
    case Space::kKernel:
      if (const Mapping* m = processes_.FindKernel(ip)) {
        return {m->object.get(), m->object->kernel_module ? ip - m->start : ip, ip, m->start,
                m->end, m->pgoff};
      }
      // Outside the image's text, every module known at the start and every
      // KSYMBOL range (a module loaded since, code whose record was lost):
      // the kernel, with no symbol.
      return {kernel_object_.get(), ip, ip};
    case Space::kUser: return ResolveUser(pid, ip);
    // Not the host's addresses: the host's kernel and the sampled task's
    // mappings (a vCPU thread's) must not name them.  One location per
    // space, since the host cannot tell one such address from another.
    case Space::kGuestKernel: return {guest_kernel_.get(), 0};
    case Space::kGuestUser: return {guest_user_.get(), 0};
    case Space::kGuest: return {guest_.get(), 0};
    case Space::kHypervisor: return {hypervisor_.get(), 0};
    case Space::kUnknown: break;
  }
  return {nullptr, ip, ip};
}

[[gnu::always_inline]] inline uint32_t Profile::TaskOf(uint32_t event, uint32_t pid, uint32_t tid) {
  const uint64_t task_key = uint64_t{event} << 32 | tid;
  const CommCacheEntry& hit = comm_cache_[CommSlot(event, tid)];
  if (hit.generation != comm_generation_ || hit.task_key != task_key) [[unlikely]]
    return TaskOfMiss(event, pid, tid);
  return hit.comm;
}

uint32_t Profile::TaskOfMiss(uint32_t event, uint32_t pid, uint32_t tid) {
  const uint64_t task_key = uint64_t{event} << 32 | tid;
  TaskOfTid& task = comm_of_tid_[task_key];  // generation 0 if new: stale
  if (task.generation != comm_generation_)
    task = TaskOfTid{InternTask(event, processes_.Comm(pid, tid),
                                options_.controls.Has(SortKey::kPid) ? int64_t{pid} : -1,
                                options_.controls.Has(SortKey::kTid) ? int64_t{tid} : -1),
                     comm_generation_};
  comm_cache_[CommSlot(event, tid)] = CommCacheEntry{task_key, task.comm, comm_generation_};
  return task.comm;
}

// Inlined: OnSample() is the flat replay's hot path, where a call between
// the two halves costs about 35 instructions a sample (callgrind).
[[gnu::always_inline]] inline bool Profile::BeginSample(const SampleRecord& s, SampleStart* start) {
  uint32_t event = 0;
  if (options_.events.size() > 1) {
    auto it = options_.event_of_id.find(s.id);
    if (it == options_.event_of_id.end() || it->second >= event_samples_.size()) {
      ++bad_records_;  // of no event the capture has
      ++samples_of_no_event_;
      return false;
    }
    event = it->second;
  }
  // A fixed period (-c) that the samples do not carry is the attr's.
  const uint64_t fixed = options_.events[event].fixed_period;
  const bool carries_period = (layout_.format.sample_type & PERF_SAMPLE_PERIOD) != 0;
  const uint64_t period = fixed != 0 && !carries_period ? fixed : s.period;
  ++samples_;
  period_ += period;
  ++event_samples_[event];
  event_period_[event] += period;
  start->period = period;
  start->comm = TaskOf(event, s.pid, s.tid);
  start->space = SampleSpace(s.misc);
  start->memo_hash = 0;
  if (Memoized()) {
    start->memo_head = MemoHead(s, *start);
    start->memo_hash = memo_.HashOf(start->memo_head, s.callchain.bytes());
  }
  return true;
}

void Profile::OnSample(const SampleRecord& s) {
  SampleStart start;
  if (BeginSample(s, &start)) FinishSample(s, start);
}

void Profile::ProcessBatch(std::span<const Bytes> records) {
  // With chains, samples are taken in chunks: each sample's event, task
  // and memo hash first (in order, as OnSample would), with its memo slot
  // prefetched; then the rest, in order, each with the memo entry of the
  // sample kAhead after it prefetched, so that the misses of a chunk's
  // slots and entries overlap instead of following each other.  Between
  // two records other than samples nothing a sample resolves against
  // changes (they are what starts a new epoch), and the first pass touches
  // only what the second does not read (the counts per event, the task
  // names), so the counts are those of Process() record by record.
  // Without chains there is nothing to prefetch ahead of a sample, and
  // record by record is faster (measured on the flat replay row).
  if (flat_only_ && options_.events.size() == 1) {
    ProcessFlatBatch(records);
    return;
  }
  if (!Memoized()) {
    // A sample decoded and counted here, inline; any other record, and a
    // sample the decoder does not take, as Process() takes it.  One
    // SampleRecord for the batch: the decoder sets every field of it (its
    // constructor, per sample, cost 7 instructions a record).
    SampleRecord s;
    for (Bytes record : records) {
      perf_event_header h;
      if (record.size() < sizeof(h)) {
        Process(record);
        continue;
      }
      std::memcpy(&h, record.data(), sizeof(h));
      if (h.type != PERF_RECORD_SAMPLE) {
        Process(record);
        continue;
      }
      const DecodeStatus status = DecodeSampleRecord(record, layout_, &s);
      if (status == DecodeStatus::kOk) {
        SampleStart start;
        if (!BeginSample(s, &start)) continue;
        if (flat_only_)
          CountFlat(s, start);
        else
          FinishSample(s, start);
      } else if (status != DecodeStatus::kIgnored) {
        ++bad_records_;
      }
    }
    return;
  }
  constexpr size_t kChunk = kBatchChunk, kAhead = 16, kRecordAhead = 8;
  // Members, kept from batch to batch: a local array of samples would be
  // constructed (zeroed) every batch, 13 instructions a sample.
  SampleRecord* const samples = batch_samples_.data();
  SampleStart* const starts = batch_starts_.data();
  size_t i = 0;
  while (i < records.size()) {
    size_t n = 0;
    for (; i < records.size() && n < kChunk; ++i) {
      const Bytes record = records[i];
      // Every line of the record kRecordAhead after this one: the sorter
      // releases a round after the framing read it, when a chain's record
      // (192 bytes at depth 16) has left the first-level cache.  Chains
      // replay, Intel Xeon (family 6 model 207), best of 4 alternating
      // runs: 15.98 against 15.33 M samples/s (4 ahead 15.65, 16 ahead
      // 15.88).  The flat path gained nothing from it (48-byte records).
      if (i + kRecordAhead < records.size()) PrefetchLines(records[i + kRecordAhead]);
      perf_event_header h;
      if (record.size() < sizeof(h)) break;
      std::memcpy(&h, record.data(), sizeof(h));
      if (h.type != PERF_RECORD_SAMPLE) break;
      const DecodeStatus status = DecodeSampleRecord(record, layout_, &samples[n]);
      if (status != DecodeStatus::kOk) {
        if (status != DecodeStatus::kIgnored) ++bad_records_;
        continue;
      }
      if (!BeginSample(samples[n], &starts[n])) continue;
      memo_.PrefetchSlot(starts[n].memo_hash);
      ++n;
    }
    // Each entry kAhead samples before its turn: far enough for it to come,
    // near enough for its slot to have come first.
    for (size_t k = 0; k < n && k < kAhead; ++k) memo_.PrefetchEntry(starts[k].memo_hash);
    for (size_t k = 0; k < n; ++k) {
      if (k + kAhead < n) memo_.PrefetchEntry(starts[k + kAhead].memo_hash);
      FinishSample(samples[k], starts[k]);
    }
    // A record that is not a sample ends the chunk: on its own, after it.
    if (n < kChunk && i < records.size()) Process(records[i++]);
  }
}

// ProcessBatch() for the flat report of a capture with one event: the
// flat replay's loop.  What BeginSample() and CountFlat() do, with what
// does not change within a batch read once (the event, its fixed period)
// and only the fields it uses read from each sample (SampleView), so that
// they stay in registers; the counts of samples and periods are added up
// here and settled before any other record and at the end.  ProfileTest's
// batch tests hold it to Process(): 326 -> 281 instructions a record on
// the flat replay (callgrind).
void Profile::ProcessFlatBatch(std::span<const Bytes> records) {
  const SampleLayout& l = layout_;
  const uint64_t fixed = options_.events[0].fixed_period;
  const bool carries_period = (l.format.sample_type & PERF_SAMPLE_PERIOD) != 0;
  const uint64_t fixed_period = fixed != 0 && !carries_period ? fixed : 0;
  uint64_t samples = 0, periods = 0;
  // The locations counted go to a local array, to the table a chunk at a
  // time and before any record other than a sample: see
  // LocationCounts::AddMany().
  LocationCounts::Sample counted[kFlatChunk];
  size_t n = 0;
  auto settle = [&] {
    samples_ += samples;
    period_ += periods;
    event_samples_[0] += samples;
    event_period_[0] += periods;
    samples = periods = 0;
    flat_.AddMany(std::span(counted, n));
    n = 0;
  };
  auto count = [&](uint32_t comm, uint32_t object, uint64_t offset, uint64_t period) {
    counted[n++] = {LocationCounts::Key(comm, object), offset, period};
    if (n == kFlatChunk) {
      flat_.AddMany(std::span(counted, n));
      n = 0;
    }
  };
  for (Bytes record : records) {
    perf_event_header h;
    if (record.size() < sizeof(h)) {
      settle();
      Process(record);
      continue;
    }
    std::memcpy(&h, record.data(), sizeof(h));
    if (h.type != PERF_RECORD_SAMPLE) {
      settle();
      Process(record);
      continue;
    }
    uint64_t ip, period;
    uint32_t pid, tid;
    uint16_t misc;
    if (SampleView v; SampleView::Of(record, l, &v)) {
      ip = v.ip();
      pid = v.pid();
      tid = v.tid();
      period = v.period();
      misc = v.misc();
    } else {
      SampleRecord& s = flat_scratch_;
      const DecodeStatus status = DecodeSampleRecordFull(record, l, &s);
      if (status != DecodeStatus::kOk) {
        if (status != DecodeStatus::kIgnored) ++bad_records_;
        continue;
      }
      ip = s.ip;
      pid = s.pid;
      tid = s.tid;
      period = s.period;
      misc = s.misc;
    }
    if (fixed_period != 0) period = fixed_period;
    ++samples;
    periods += period;
    const uint32_t comm = TaskOf(0, pid, tid);
    const Space space = SampleSpace(misc);
    if (space == Space::kUser) {
      // ResolveUser() and NoteLeaf() from the range alone, without loading
      // its object: a dependent load less on each sample's chain of them.
      if (const AddressSpace::Range* r = AddressSpace::FindRange(UserRanges(pid), ip)) {
        if (r->bpf) CountBpfSample(ip);
        count(comm, r->number, r->Offset(ip), period);
      } else {
        ++unattributed_;
        count(comm, 0, ip, period);
      }
      continue;
    }
    const Frame leaf = Resolve(pid, ip, space);
    NoteLeaf(leaf.object, ip);
    count(comm, Number(leaf.object), leaf.offset, period);
  }
  settle();
}

[[gnu::always_inline]] inline void Profile::NoteLeaf(const MappedObject* object, uint64_t ip) {
  if (object == nullptr)
    ++unattributed_;
  else if (object->source == BuildIdSource::kBpf)
    CountBpfSample(ip);
}

[[gnu::always_inline]] inline void Profile::CountFlat(const SampleRecord& s,
                                                       const SampleStart& start) {
  const Frame leaf = start.space == Space::kUser ? ResolveUser(s.pid, s.ip)
                                                 : Resolve(s.pid, s.ip, start.space);
  NoteLeaf(leaf.object, s.ip);
  flat_.Add(start.comm, Number(leaf.object), leaf.offset, start.period);
}

[[gnu::always_inline]] inline void Profile::FinishSample(const SampleRecord& s,
                                                          const SampleStart& start) {
  const uint64_t period = start.period;
  const uint32_t comm = start.comm;
  const Space space = start.space;
  auto note_leaf = [&](const MappedObject* object) { NoteLeaf(object, s.ip); };
  // A chain seen before, in the same processes' state, resolves to the
  // same stacks and the same leaf: counted by their ids without resolving
  // its frames again (not for script and pprof's frames, which keep more
  // than the ids).
  ChainMemo::Entry memo = ChainMemo::kFull;
  ChainMemo::Ids ids;
  if (Memoized()) {
    bool valid = false;
    memo = memo_.Lookup(start.memo_head, s.callchain.bytes(), start.memo_hash, epoch_, &valid);
    if (valid) {
      note_leaf(memo_.LeafObject(memo));
      memo_.Accumulate(memo, period);
      return;
    }
    // Its hits so far go to the ids they were counted under, not to those
    // it is filled in with below.
    if (memo != ChainMemo::kFull)
      memo_.Settle(memo, [this](const ChainMemo::Ids& old, uint64_t samples, uint64_t sum) {
        CountMemoHits(old, samples, sum);
      });
  }
  Frame leaf = space == Space::kUser ? ResolveUser(s.pid, s.ip) : Resolve(s.pid, s.ip, space);
  note_leaf(leaf.object);
  // A memo entry keeps the location's id: its next hit counts there
  // without hashing it again.
  if (memo != ChainMemo::kFull)
    ids.location = flat_.AddNow(comm, Number(leaf.object), leaf.offset, period);
  else
    flat_.Add(comm, Number(leaf.object), leaf.offset, period);
  ids.leaf_object = leaf.object;
  ids.leaf_offset = leaf.offset;
  if (flat_only_) return;
  // Scratch vectors, reused: their capacity outlives the sample, so a
  // sample allocates nothing here once the deepest chain has been seen.
  std::vector<StackCounts::Frame>& frames = frames_scratch_;
  std::vector<Frame>& addressed = addressed_scratch_;
  std::vector<uint64_t>& ips = ips_scratch_;
  frames.clear();
  addressed.clear();
  ips.clear();
  // Leaf first.  The leaf is always the sample's ip as the flat count
  // resolved it, so that a stack is attributed as the report's rows are;
  // the call chain's first ip, when it is that same place, is not repeated.
  addressed.push_back(leaf);
  ips.push_back(s.ip);  // as recorded, for script
  if (s.callchain.empty()) {
    frames.emplace_back(leaf.object, leaf.offset);
  } else {
    bool first = true;
    Space context = space;
    // The first ip of each context is where that context was interrupted
    // (the sample's ip; for user frames under kernel ones, the user ip the
    // kernel was entered from: a faulting or interrupted instruction, often
    // a function's first one).  The others are return addresses: the call
    // instruction ends just before them.
    bool interrupted_ip = true;
    for (size_t i = 0; i < s.callchain.size(); ++i) {
      uint64_t ip = s.callchain[i];
      if (ip >= kContextMax) {
        context = ContextSpace(ip);
        interrupted_ip = true;
        continue;
      }
      Frame f = Resolve(s.pid, interrupted_ip ? ip : ip - 1, context);
      frames.emplace_back(f.object, f.offset);
      // The chain starts at the sample's ip, already the leaf, unless the
      // kernel's part was left out (exclude_callchain_kernel, perf's
      // --user-callchains): then a kernel sample's chain starts at the user
      // ip the kernel was entered from, a frame of its own.
      if (!first || ip != s.ip) {
        addressed.push_back(f);
        ips.push_back(ip);
      }
      first = false;
      interrupted_ip = false;
    }
    std::reverse(frames.begin(), frames.end());  // outermost first
  }
  if (options_.callchains) {
    const uint32_t id = stacks_.Add(comm, frames, period);
    ids.stack = id;
  }
  if (options_.controls.children) {
    std::vector<StackCounts::Frame>& chain = chain_scratch_;
    chain.clear();
    for (const Frame& f : addressed) chain.emplace_back(f.object, f.offset);
    const uint32_t id = chains_.Add(comm, chain, period);
    ids.chain = id;
  }
  if (memo != ChainMemo::kFull) memo_.Set(memo, ids);
  if (options_.script) {
    const bool has_cpu = (layout_.format.sample_type & PERF_SAMPLE_CPU) != 0;
    kept_.push_back(KeptSample{s.time, s.pid, s.tid, has_cpu ? static_cast<int64_t>(s.cpu) : -1,
                               period, comm, addressed, ips});
  }
  if (options_.sample_frames) {
    FrameSums& sums = frame_stacks_[{comm, addressed}];
    ++sums.samples;
    sums.period += period;
  }
}

void Profile::CountMemoHits(const ChainMemo::Ids& ids, uint64_t samples, uint64_t period) const {
  flat_.Count(ids.location, samples, period);
  if (options_.callchains) stacks_.Count(ids.stack, samples, period);
  if (options_.controls.children) chains_.Count(ids.chain, samples, period);
}

void Profile::SettleMemo() const {
  memo_.SettleAll([this](const ChainMemo::Ids& ids, uint64_t samples, uint64_t period) {
    CountMemoHits(ids, samples, period);
  });
}

uint64_t Profile::CountedSamples() const {
  SettleMemo();
  uint64_t n = 0;
  flat_.ForEach(
      [&n](uint32_t, uint32_t, uint64_t, uint64_t count, uint64_t) { n += count; });
  return n;
}

std::vector<const MappedObject*> Profile::Objects() const {
  std::vector<const MappedObject*> out;
  for (const auto& [key, object] : objects_) out.push_back(object.get());
  return out;
}

void Profile::SetChangedKernelModules(const std::vector<KernelModuleMapping>& modules) {
  std::set<KernelModuleMapping> changed(modules.begin(), modules.end());
  for (const auto& [path, start] : doubtful_modules_) changed.insert({path, start});
  std::set<std::string> paths;
  for (const MappingEntry& e : mappings_) {
    if (e.pid != kKernelPid || !e.object->kernel_module ||
        !changed.count({e.object->path, e.start}))
      continue;
    // The kernel said when it was unloaded (MMAP3 ABI version 2): its
    // samples came before, and nothing is named there after.
    if (unloaded_modules_.count({e.object->path, e.start}) &&
        !doubtful_modules_.count({e.object->path, e.start}))
      continue;
    paths.insert(e.object->path);
    auto& stand_in = changed_modules_[e.object];
    if (stand_in) continue;
    // Which code ran there is not known: no build-id, so no symbols (the
    // module's would be a guess), and the report says why.
    MappedObject o = *e.object;
    o.number = 0;  // not interned
    o.build_id = BuildId();
    o.source = BuildIdSource::kNone;
    stand_in = std::make_shared<const MappedObject>(std::move(o));
  }
  changed_module_paths_.assign(paths.begin(), paths.end());
}

const MappedObject* Profile::Shown(const MappedObject* object) const {
  auto it = changed_modules_.find(object);
  return it == changed_modules_.end() ? object : it->second.get();
}

ReportModel Profile::BuildReport(Symbolizer& symbolizer, const std::string& mode) const {
  SettleMemo();
  ReportModel model;
  model.mode = mode;
  model.samples = samples_;
  model.period = period_;
  model.lost_records = lost_records_;
  model.lost_samples = lost_samples_;
  model.bad_records = bad_records_;
  model.bad_samples_of_no_event = samples_of_no_event_;
  model.stray_build_id_bits = stray_build_id_bits_;
  model.oversized_sideband = oversized_sideband_;
  model.changed_kernel_modules = changed_module_paths_;
  model.events = options_.events;
  for (size_t e = 0; e < model.events.size(); ++e) {
    model.events[e].samples = event_samples_[e];
    model.events[e].period = event_period_[e];
  }
  for (const MappingEntry& e : mappings_) {
    const MappedObject* object = Shown(e.object);
    const BuildIdSource source = symbolizer.SourceOf(*object);
    ++model.mappings_by_source[static_cast<int>(source)];
    model.mappings.push_back({e.pid == kKernelPid ? -1 : static_cast<int64_t>(e.pid), e.start,
                              e.end, e.pgoff, object->path, object->build_id, source});
  }

  // Every path a build-id was mapped under is a candidate for its file:
  // declared before the first lookup, so that what is found does not
  // depend on which location the hash table below hands out first.
  for (const auto& [key, object] : objects_) symbolizer.Declare(*object);
  // The sampled objects' symbols are then loaded in build-id order, not in
  // the order the counts below hand out locations: what a debuginfod
  // server that dies or runs out of time was still asked for is then the
  // same in every report of the file.
  {
    std::unordered_set<const MappedObject*> seen;
    flat_.ForEach([&](uint32_t, uint32_t number, uint64_t, uint64_t, uint64_t) {
      if (number != 0) seen.insert(Shown(numbered_[number]));
    });
    // Callers too: with --children and no -g they are only in chains_.
    for (const StackCounts* table : {&stacks_, &chains_})
      for (uint32_t id = 0; id < table->size(); ++id)
        for (const auto& frame : table->frames(id))
          if (frame.first != nullptr) seen.insert(Shown(frame.first));
    for (const auto& [key, sums] : frame_stacks_)
      for (const Frame& f : key.second)
        if (f.object != nullptr) seen.insert(Shown(f.object));
    std::vector<const MappedObject*> hit(seen.begin(), seen.end());
    std::sort(hit.begin(), hit.end(), [](const MappedObject* a, const MappedObject* b) {
      return std::tie(a->build_id, a->path, a->number) < std::tie(b->build_id, b->path, b->number);
    });
    for (const MappedObject* object : hit) symbolizer.HasSymbols(*object);
  }

  BuildRows(symbolizer, model);

  std::map<std::string, uint64_t> folded;
  const ReportControls& controls = options_.controls;
  static const std::string kUnknown = "[unknown]";
  // In (task, frames) order, as the std::map this table replaced was
  // walked: symbols are looked up in the same order.
  for (const uint32_t id : stacks_.Sorted()) {
    const uint32_t task = stacks_.task(id);
    const std::span<const StackCounts::Frame> frames = stacks_.frames(id);
    const uint64_t count = stacks_.samples(id);
    if (controls.Filters()) {
      // Folded lines show their innermost frame last: filtered on it.
      if (frames.empty()) continue;
      const MappedObject* leaf = frames.back().first;
      if (leaf != nullptr) leaf = Shown(leaf);
      Symbolizer::Symbol symbol{&kUnknown, SymbolStatus::kNoMapping};
      if (leaf != nullptr) symbol = symbolizer.Lookup(*leaf, frames.back().second);
      if (!controls.Matches(comms_[task], leaf, *symbol.name, symbol.status)) continue;
    }
    // Stacks of different events are not added up: with several, each
    // line starts with its event (a root frame of its own in a flame graph).
    std::string line = model.events.size() > 1
                           ? model.events[task_events_[task]].name + ";" + comms_[task]
                           : comms_[task];
    for (size_t i = 0; i < frames.size(); ++i) {
      const auto& [object, offset] = frames[i];
      const bool leaf = i + 1 == frames.size();
      line += ';';
      line += object != nullptr ? symbolizer.Symbolize(*Shown(object),
                                                       SymbolOffset(symbolizer, object, offset, leaf))
                                : "[unknown]";
    }
    folded[line] += count;
  }
  for (auto& [line, count] : folded) model.stacks.push_back({line, count});
  if (options_.sample_frames) BuildFrames(symbolizer, model);
  if (options_.script) BuildScript(symbolizer, model);
  return model;
}

void Profile::BuildRows(Symbolizer& symbolizer, ReportModel& model) const {
  const ReportControls& c = options_.controls;
  model.controls = c;
  static const std::string kUnknown = "[unknown]";
  auto lookup = [&](const MappedObject* object, uint64_t offset) {
    if (object == nullptr) return Symbolizer::Symbol{&kUnknown, SymbolStatus::kNoMapping};
    return symbolizer.Lookup(*object, offset);
  };
  const bool by_comm = c.Has(SortKey::kComm), by_dso = c.Has(SortKey::kDso),
             by_id = c.Has(SortKey::kBuildId), by_sym = c.Has(SortKey::kSym);
  // A row's key under --sort: the fields of the keys not given are left
  // out (pid and tid are -1 in the task unless given).  Equal names are one
  // string in the Symbolizer, and a task's comm one in comms_, so strings
  // are keyed by address.
  using GroupKey = std::tuple<uint32_t, const std::string*, int64_t, int64_t, const MappedObject*,
                              BuildId, const std::string*, bool>;
  struct Group {
    uint64_t samples = 0, period = 0, children_period = 0;
    const MappedObject* object = nullptr;  // one of the row's, for its path and source
    SymbolStatus status = SymbolStatus::kNoMapping;
    bool described = false;
  };
  std::map<GroupKey, Group> groups;
  // JIT code is an object per process (its own perf map names it); as a
  // row's DSO it is one per path and source, as any other file.
  std::map<std::pair<std::string, BuildIdSource>, const MappedObject*> jit_dsos;
  auto row_object = [&](const MappedObject* object) {
    if (object == nullptr || object->jit_pid < 0) return object;
    return jit_dsos.try_emplace({object->path, symbolizer.SourceOf(*object)}, object).first->second;
  };
  auto group_of = [&](uint32_t task, const MappedObject* object,
                      const Symbolizer::Symbol& symbol) -> Group& {
    object = row_object(object);
    Group& g = groups[GroupKey{task_events_[task], by_comm ? &comms_[task] : nullptr, task_pids_[task],
                               task_tids_[task], by_dso ? object : nullptr,
                               by_id && object != nullptr ? object->build_id : BuildId(),
                               by_sym ? symbol.name : nullptr,
                               (by_dso || by_id) && object == nullptr}];
    // Several objects or statuses can reach one row (one build-id mapped
    // with two sources, rows by build-id).  The row shows the least of
    // them by value, not the first met: the walk's order is the location
    // table's, which follows heap addresses, and a report of one file must
    // be the same in every run.
    auto shown = [&](const MappedObject* o, SymbolStatus status) {
      return o == nullptr ? std::make_tuple(false, std::string_view(), BuildId(),
                                            BuildIdSource::kNone, status)
                          : std::make_tuple(true, std::string_view(o->path), o->build_id,
                                            symbolizer.SourceOf(*o), status);
    };
    if (!g.described || shown(object, symbol.status) < shown(g.object, g.status)) {
      g.object = object;
      g.status = symbol.status;
      g.described = true;
    }
    return g;
  };
  flat_.ForEach([&](uint32_t task, uint32_t number, uint64_t offset, uint64_t count,
                    uint64_t period) {
    const MappedObject* object = number != 0 ? Shown(numbered_[number]) : nullptr;
    const Symbolizer::Symbol symbol = lookup(object, offset);
    if (!c.Matches(comms_[task], object, *symbol.name, symbol.status)) return;
    ReportEvent& e = model.events[task_events_[task]];
    e.matched_samples += count;
    e.matched_period += period;
    Group& g = group_of(task, object, symbol);
    g.samples += count;
    g.period += period;
  });
  for (const ReportEvent& e : model.events) {
    model.matched_samples += e.matched_samples;
    model.matched_period += e.matched_period;
  }
  if (c.children) {
    // perf's cumulative entries: each row whose key is somewhere in the
    // chain gets the sample's period once, however often the key recurs.
    std::vector<const Group*> seen;
    // In (task, frames) order, as the std::map this table replaced was
    // walked: which chain first names a row describes it (group_of).
    for (const uint32_t id : chains_.Sorted()) {
      const uint32_t task = chains_.task(id);
      const std::span<const StackCounts::Frame> frames = chains_.frames(id);
      const uint64_t period = chains_.period(id);
      const MappedObject* leaf = frames[0].first != nullptr ? Shown(frames[0].first) : nullptr;
      const Symbolizer::Symbol leaf_symbol = lookup(leaf, frames[0].second);
      if (!c.Matches(comms_[task], leaf, *leaf_symbol.name, leaf_symbol.status)) continue;
      seen.clear();
      for (size_t i = 0; i < frames.size(); ++i) {
        const auto& [frame_object, offset] = frames[i];
        const MappedObject* object = frame_object != nullptr ? Shown(frame_object) : nullptr;
        Group& g = group_of(task, object,
                            lookup(object, SymbolOffset(symbolizer, frame_object, offset, i == 0)));
        if (std::find(seen.begin(), seen.end(), &g) != seen.end()) continue;
        seen.push_back(&g);
        g.children_period += period;
      }
    }
  }
  // Overhead is the share of the period, as perf computes it: samples of a
  // frequency-mode event stand for different amounts of the event.  Of
  // every sample of the row's event (perf's --percentage absolute) or of
  // those the filters let through (relative).
  for (const auto& [key, g] : groups) {
    const uint32_t event = std::get<0>(key);
    ReportEvent& e = model.events[event];
    const uint64_t total = c.relative ? e.matched_period : e.period;
    auto percent = [total](uint64_t period) {
      return total ? 100.0 * static_cast<double>(period) / static_cast<double>(total) : 0.0;
    };
    ReportRow row;
    row.event = event;
    row.samples = g.samples;
    row.period = g.period;
    row.percent = percent(g.period);
    row.children_period = g.children_period;
    row.children_percent = percent(g.children_period);
    // perf's --percent-limit: below it is left out, at it is shown.
    if ((c.children ? row.children_percent : row.percent) < c.percent_limit) {
      ++e.rows_below_limit;
      ++model.rows_below_limit;
      continue;
    }
    if (const std::string* comm = std::get<1>(key)) row.comm = *comm;
    row.pid = std::get<2>(key);
    row.tid = std::get<3>(key);
    if (const std::string* symbol = std::get<6>(key)) {
      row.symbol = *symbol;
      row.symbol_status = g.status;
    }
    if (by_dso || by_id) {
      if (g.object == nullptr) {
        row.path = "[unknown]";
      } else {
        if (by_dso) row.path = g.object->path;
        row.build_id = g.object->build_id;
        row.source = symbolizer.SourceOf(*g.object);
      }
    }
    model.rows.push_back(std::move(row));
  }
  // Event by event; by overhead (Children with --children, then self), as
  // perf sorts; for a constant period that is by samples.  Then samples and
  // names: deterministic, never pointer values.  Every field a row shows is
  // in the key, so rows that tie are alike in every byte written.
  const bool children = c.children;
  std::sort(model.rows.begin(), model.rows.end(), [children](const ReportRow& a,
                                                             const ReportRow& b) {
    const uint64_t ac = children ? a.children_period : 0, bc = children ? b.children_period : 0;
    return std::tie(a.event, bc, b.period, b.samples, a.comm, a.pid, a.tid, a.path, a.build_id,
                    a.symbol, a.source, a.symbol_status) <
           std::tie(b.event, ac, a.period, a.samples, b.comm, b.pid, b.tid, b.path, b.build_id,
                    b.symbol, b.source, b.symbol_status);
  });
}

uint64_t Profile::SymbolOffset(Symbolizer& symbolizer, const MappedObject* object,
                               uint64_t offset, bool leaf) const {
  if (leaf || object == nullptr || !object->kernel) return offset;
  return symbolizer.CallerOffset(*Shown(object), offset);
}

void Profile::BuildScript(Symbolizer& symbolizer, ReportModel& model) const {
  static const std::string kUnknown = "[unknown]";
  // (object, ip, offset, and for code a KSYMBOL named, where that load
  // began: one program's loads at two addresses share an object)
  std::map<std::tuple<const MappedObject*, uint64_t, uint64_t, uint64_t>, uint32_t> ids;
  for (const KeptSample& k : kept_) {
    ScriptSample out;
    out.event = task_events_[k.task];
    out.time = k.time;
    out.pid = k.pid;
    out.tid = k.tid;
    out.cpu = k.cpu;
    out.period = k.period;
    out.comm = comms_[k.task];
    for (size_t i = 0; i < k.frames.size(); ++i) {
      const Frame& f = k.frames[i];
      const MappedObject* object = f.object != nullptr ? Shown(f.object) : nullptr;
      const uint64_t ksymbol_start = object != nullptr && object->ksymbol ? f.map_start : 0;
      auto [it, inserted] = ids.try_emplace({object, k.ips[i], f.offset, ksymbol_start},
                                            static_cast<uint32_t>(model.script_locations.size()));
      if (inserted) {
        ScriptLocation l;
        l.ip = k.ips[i];
        if (object == nullptr) {
          l.symbol = kUnknown;
          l.path = kUnknown;
        } else {
          const uint64_t offset = SymbolOffset(symbolizer, f.object, f.offset, i == 0);
          const Symbolizer::Symbol& symbol = symbolizer.Lookup(*object, offset);
          l.symbol = *symbol.name;
          l.status = symbol.status;
          // A return address was looked up one byte back, in the call;
          // its offset is the recorded address's, as perf prints it.
          // Code a KSYMBOL named is one symbol, over the range it named.
          if (symbol.status == SymbolStatus::kFound && object->ksymbol)
            l.symbol_offset = k.ips[i] - f.map_start;
          else if (symbol.status == SymbolStatus::kFound)
            l.symbol_offset = symbolizer.OffsetInSymbol(*object, offset) + (k.ips[i] - f.address) -
                              (offset - f.offset);
          l.path = object->path;
          l.build_id = object->build_id;
          l.source = symbolizer.SourceOf(*object);
        }
        model.script_locations.push_back(std::move(l));
      }
      out.locations.push_back(it->second);
    }
    model.script.push_back(std::move(out));
  }
}

void Profile::BuildFrames(Symbolizer& symbolizer, ReportModel& model) const {
  // Interned by identity first (a mapping is an object and a range; a
  // location a mapping and an address), then sorted by value so that the
  // output does not depend on where objects happened to be allocated.
  using MapKey = std::tuple<const MappedObject*, uint64_t, uint64_t, uint64_t>;
  std::map<MapKey, uint32_t> map_ids;
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> location_ids;  // (mapping + 1, address)
  std::vector<FrameMapping> mappings;
  std::vector<uint64_t> leaf_samples;  // per mapping
  std::vector<uint32_t> map_number;    // per mapping: its recorded object's number
  std::vector<FrameLocation> locations;
  std::vector<FrameStack> stacks;
  const ReportControls& controls = options_.controls;
  static const std::string kUnknownName = "[unknown]";
  for (const auto& [key, sums] : frame_stacks_) {
    if (controls.Filters()) {
      const MappedObject* leaf = key.second.front().object;
      if (leaf != nullptr) leaf = Shown(leaf);
      Symbolizer::Symbol symbol{&kUnknownName, SymbolStatus::kNoMapping};
      if (leaf != nullptr) symbol = symbolizer.Lookup(*leaf, key.second.front().offset);
      if (!controls.Matches(comms_[key.first], leaf, *symbol.name, symbol.status)) continue;
    }
    FrameStack stack;
    stack.event = task_events_[key.first];
    stack.comm = comms_[key.first];
    stack.samples = sums.samples;
    stack.period = sums.period;
    for (const Frame& f : key.second) {
      const MappedObject* object = f.object != nullptr ? Shown(f.object) : nullptr;
      uint32_t mapping = 0;
      if (object != nullptr) {
        // The kernel image's pgoff is where _text was (perf's convention),
        // not an offset in a file: not written, and not part of the key (a
        // module recorded twice at one range with two pgoffs is one
        // mapping, or two written alike would be told apart by the heap).
        const uint64_t file_offset = object->kernel ? 0 : f.map_pgoff;
        auto [it, inserted] =
            map_ids.try_emplace(MapKey{object, f.map_start, f.map_end, file_offset},
                                static_cast<uint32_t>(mappings.size()));
        if (inserted) {
          FrameMapping m;
          m.start = f.map_start;
          m.limit = f.map_end;
          m.file_offset = file_offset;
          m.path = object->path;
          m.build_id = object->build_id;
          m.source = symbolizer.SourceOf(*object);
          m.kernel = object->kernel;
          mappings.push_back(std::move(m));
          leaf_samples.push_back(0);
          map_number.push_back(f.object->number);
        }
        mapping = it->second + 1;
        if (&f == &key.second.front()) leaf_samples[it->second] += sums.samples;
      }
      // A frame found to be an interrupted ip is looked up, and located,
      // at the address recorded, not one byte before it.
      const uint64_t offset = object != nullptr ? SymbolOffset(symbolizer, f.object, f.offset,
                                                               &f == &key.second.front())
                                                : f.offset;
      const uint64_t address = f.address + (offset - f.offset);
      auto [it, inserted] = location_ids.try_emplace({mapping, address},
                                                     static_cast<uint32_t>(locations.size()));
      if (inserted) {
        FrameLocation l;
        l.mapping = mapping;
        l.address = address;
        static const std::string kUnknown = "[unknown]";
        Symbolizer::Symbol symbol{&kUnknown, SymbolStatus::kNoMapping};
        if (object != nullptr) symbol = symbolizer.Lookup(*object, offset);
        l.symbol = *symbol.name;
        l.status = symbol.status;
        if (mapping != 0 && l.status == SymbolStatus::kFound) mappings[mapping - 1].has_symbols = true;
        locations.push_back(std::move(l));
      }
      stack.locations.push_back(it->second);
    }
    stacks.push_back(std::move(stack));
  }

  // Renumber in value order, the mappings with most samples first: pprof
  // takes the first mapping for the profile's main binary ("File:").  Two
  // mappings can be equal in every value written (the JIT code of two
  // processes at one address: their objects differ in whose perf map names
  // them); the order their objects were first recorded in settles it, not
  // where the heap put them.
  auto map_tie = [&](uint32_t i) {
    const FrameMapping& m = mappings[i];
    return std::make_tuple(UINT64_MAX - leaf_samples[i], std::cref(m.path), std::cref(m.build_id),
                           m.start, m.limit, m.file_offset, m.source, m.kernel, map_number[i]);
  };
  std::vector<uint32_t> map_order(mappings.size());
  for (uint32_t i = 0; i < map_order.size(); ++i) map_order[i] = i;
  std::stable_sort(map_order.begin(), map_order.end(),
                   [&](uint32_t a, uint32_t b) { return map_tie(a) < map_tie(b); });
  std::vector<uint32_t> new_map(mappings.size());
  for (uint32_t i = 0; i < map_order.size(); ++i) {
    new_map[map_order[i]] = i;
    model.frame_mappings.push_back(std::move(mappings[map_order[i]]));
  }
  for (FrameLocation& l : locations)
    if (l.mapping != 0) l.mapping = new_map[l.mapping - 1] + 1;
  std::vector<uint32_t> loc_order(locations.size());
  for (uint32_t i = 0; i < loc_order.size(); ++i) loc_order[i] = i;
  std::stable_sort(loc_order.begin(), loc_order.end(), [&](uint32_t a, uint32_t b) {
    return std::tie(locations[a].mapping, locations[a].address) <
           std::tie(locations[b].mapping, locations[b].address);
  });
  std::vector<uint32_t> new_loc(locations.size());
  for (uint32_t i = 0; i < loc_order.size(); ++i) {
    new_loc[loc_order[i]] = i;
    model.frame_locations.push_back(std::move(locations[loc_order[i]]));
  }
  for (FrameStack& st : stacks)
    for (uint32_t& l : st.locations) l = new_loc[l];
  // Two frame lists can name one list of locations (a kernel return
  // address looked up one byte back, in a function's padding, is located
  // at the function it returns into): one stack, or the sort would leave
  // their order to the walk above, whose keys are object addresses.
  auto stack_key = [](const FrameStack& s) { return std::tie(s.event, s.comm, s.locations); };
  std::sort(stacks.begin(), stacks.end(),
            [&](const FrameStack& a, const FrameStack& b) { return stack_key(a) < stack_key(b); });
  size_t kept = 0;
  for (size_t i = 0; i < stacks.size(); ++i) {
    if (kept != 0 && stack_key(stacks[kept - 1]) == stack_key(stacks[i])) {
      stacks[kept - 1].samples += stacks[i].samples;
      stacks[kept - 1].period += stacks[i].period;
    } else if (kept++ != i) {
      stacks[kept - 1] = std::move(stacks[i]);
    }
  }
  stacks.resize(kept);
  model.frame_stacks = std::move(stacks);
}

}  // namespace mmap3
