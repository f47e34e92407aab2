// Enricher: the records of what existed before the capture (see enrich.h).
#include <sys/mman.h>

#include <charconv>
#include <chrono>
#include <cstring>
#include <map>
#include <string>

#include "dso_store.h"
#include "enrich.h"
#include "linux/perf_event_mmap3.h"
#include "process_table.h"
#include "proc_maps.h"
#include "record_writer.h"

namespace mmap3 {
namespace {

std::string ModuleNotesPath(const std::string& module) {
  return "/sys/module/" + module + "/notes/.note.gnu.build-id";
}

// /sys/module/<name>/coresize of each module /proc/modules lists (see
// KernelModule: where a module's code can end).
std::map<std::string, uint64_t, std::less<>> ReadCoreSizes(std::string_view proc_modules) {
  std::map<std::string, uint64_t, std::less<>> out;
  while (!proc_modules.empty()) {
    const size_t nl = proc_modules.find('\n');
    const std::string_view line = proc_modules.substr(0, nl);
    proc_modules.remove_prefix(nl == std::string_view::npos ? proc_modules.size() : nl + 1);
    const std::string name(line.substr(0, line.find(' ')));
    if (name.empty() || name[0] == '.' || name.find('/') != std::string::npos) continue;
    auto text = ReadSmallFile("/sys/module/" + name + "/coresize");
    uint64_t size = 0;
    if (!text.ok() ||
        std::from_chars(text->data(), text->data() + text->size(), size).ec != std::errc())
      continue;
    out.emplace(name, size);
  }
  return out;
}

}  // namespace

void Enricher::SynthesizeKernel() {
  // What perf writes first: the kernel text as a PERF_RECORD_MMAP of pid -1
  // named "[kernel.kallsyms]_text" whose pgoff is where _text is in this
  // boot, so that a report can relocate any kallsyms snapshot of this
  // kernel (KASLR); then one record per module, as perf --buildid-mmap
  // does, each with the loaded module's own build-id.
  auto text = ReadSmallFile("/proc/kallsyms");
  if (!text.ok()) return;
  // Shared with the cache's worker, which compares a stored snapshot to it.
  const auto kallsyms = std::make_shared<const Kallsyms>(ParseKallsyms(*text));
  const auto start = kallsyms->Marker("_text");
  if (kallsyms->hidden || !start) return;  // addresses hidden by kptr_restrict
  const auto end = kallsyms->Marker("_etext");
  MmapRecord m;
  m.format = MmapFormat::kMmap;
  m.misc = PERF_RECORD_MISC_KERNEL;
  m.pid = kKernelPid;
  m.tid = 0;
  m.start = *start;
  m.len = end && *end > *start ? *end - *start : ~uint64_t{0} - *start;
  m.pgoff = *start;
  m.filename = "[kernel.kallsyms]_text";
  m.sample_id.has_tid = m.sample_id.has_time = m.sample_id.has_cpu = true;
  m.sample_id.pid = kKernelPid;
  next_.OnRecord(EncodeMmap(m, options_.format));
  ++stats_.synthesized;

  cache_.AddKallsyms(ReadKernelBuildId("/sys/kernel/notes"), kallsyms, std::move(*text));

  auto modules = ReadSmallFile("/proc/modules");
  if (!modules.ok()) return;
  for (KernelModule& module : ParseKernelModules(*modules, *kallsyms, ReadCoreSizes(*modules))) {
    const BuildId id = ReadKernelBuildId(ModuleNotesPath(module.name));
    const std::string name = "[" + module.name + "]";
    MmapRecord mm = m;
    mm.format = id.empty() ? MmapFormat::kMmap : MmapFormat::kMmap2BuildId;
    mm.build_id = id;
    mm.start = module.start;
    mm.len = module.end - module.start;
    mm.pgoff = 0;
    mm.filename = name;
    next_.OnRecord(EncodeMmap(mm, options_.format));
    ++stats_.synthesized;
    cache_.AddModuleSymbols(id, name, module);
    module.build_id = id;
    module.symbols.clear();
    start_modules_.push_back(std::move(module));
  }
}

void Enricher::SynthesizeBpfPrograms() {
  if (options_.bpf_programs == nullptr) return;
  std::string error;
  const std::vector<uint32_t> ids = ListBpfPrograms(&error);
  if (!error.empty()) {
    options_.bpf_programs->NotRead({0, {}, "programs loaded before the capture: " + error});
    return;
  }
  for (uint32_t id : ids) {
    // A program unloaded since it was listed ran before the capture: it
    // is not noted as missing.
    const BpfProgram* read = ReadBpfProgramNow(id, nullptr);
    if (read == nullptr) continue;
    const BpfProgram& p = *read;
    for (size_t i = 0; i < p.functions.size(); ++i) {
      const std::string name = options_.bpf_programs->FunctionName(p, i);
      KsymbolRecord k;
      k.addr = p.functions[i].addr;
      k.len = p.functions[i].len;
      k.ksym_type = PERF_RECORD_KSYMBOL_TYPE_BPF;
      k.name = name;
      k.sample_id.has_tid = k.sample_id.has_time = k.sample_id.has_cpu = true;
      k.sample_id.pid = kKernelPid;
      next_.OnRecord(EncodeKsymbol(k, options_.format));
      ++stats_.synthesized;
    }
    BpfEventRecord b;
    b.type = PERF_BPF_EVENT_PROG_LOAD;
    b.id = p.id;
    std::memcpy(b.tag, p.tag.data(), sizeof(b.tag));
    b.sample_id.has_tid = b.sample_id.has_time = b.sample_id.has_cpu = true;
    b.sample_id.pid = kKernelPid;
    next_.OnRecord(EncodeBpfEvent(b, options_.format));
    ++stats_.synthesized;
  }
}

void Enricher::OnKernelModule(const MmapRecord& m) {
  const std::string_view path = m.filename;
  if (path.size() < 3 || !path.starts_with('[') || !path.ends_with(']')) return;
  if (m.mmap3_flags & PERF_MMAP3_UNLOADED) {
    std::erase_if(pending_modules_, [&](const PendingModule& p) {
      return p.path == path && p.start == m.start;
    });
    return;
  }
  ++stats_.module_loads;
  // A per-task capture sees only its own tasks' loads and unloads: what is
  // there at the end is compared with this load, as with the modules of
  // the start.
  KernelModule loaded;
  loaded.name = std::string(path.substr(1, path.size() - 2));
  loaded.start = m.start;
  loaded.end = m.start + m.len < m.start ? UINT64_MAX : m.start + m.len;
  loaded.build_id = m.build_id;
  start_modules_.push_back(std::move(loaded));
  if (m.build_id.empty()) return;  // no build-id to keep its symbols by
  PendingModule p{std::string(path), m.start, m.build_id};
  if (!ReadModuleSymbols(p)) pending_modules_.push_back(std::move(p));
}

bool Enricher::ReadModuleSymbols(const PendingModule& m) {
  const std::string name = m.path.substr(1, m.path.size() - 2);
  // What kallsyms lists under this name must be this very load: the same
  // build before and after the read (a module unloaded and another build
  // loaded meanwhile would lend its symbols), at the record's address,
  // and live.  Until its init has run the module is "Loading" and its
  // notes are not in sysfs yet: try again later.
  if (name.find('/') != std::string::npos) return true;
  const std::string notes = ModuleNotesPath(name);
  if (ReadKernelBuildId(notes) != m.build_id) return false;
  auto text = ReadSmallFile("/proc/kallsyms");
  auto modules = ReadSmallFile("/proc/modules");
  if (!text.ok() || !modules.ok()) return false;
  if (ReadKernelBuildId(notes) != m.build_id) return false;
  const Kallsyms now = ParseKallsyms(*text);
  if (now.hidden) return true;  // never readable in this capture
  for (const KernelModule& module : ParseKernelModules(*modules, now, ReadCoreSizes(*modules))) {
    if (module.name != name || module.start != m.start) continue;
    cache_.AddModuleSymbols(m.build_id, m.path, module);
    if (!module.symbols.empty()) ++stats_.module_symbols_read;
    return true;
  }
  return false;
}

void Enricher::PollModuleSymbols() {
  std::erase_if(pending_modules_, [&](const PendingModule& p) { return ReadModuleSymbols(p); });
}

void Enricher::CheckKernelModules() {
  // Without MMAP3 ABI version 2 the kernel reports no module loads or
  // unloads, and with it a per-task capture sees only its own tasks': the
  // modules recorded at the start and loaded since are compared with those
  // loaded now.  A range that holds other code now may have run it during
  // the capture (ModulesOverlaid); the report trusts a reported unload of
  // that very build over this.
  if (start_modules_.empty()) return;
  std::vector<size_t> overlaid;
  auto text = ReadSmallFile("/proc/kallsyms");
  auto modules = ReadSmallFile("/proc/modules");
  const Kallsyms now = text.ok() ? ParseKallsyms(*text) : Kallsyms{};
  if (!modules.ok() || now.hidden) {
    // Nothing to compare with: none of them is vouched for.
    for (size_t i = 0; i < start_modules_.size(); ++i) overlaid.push_back(i);
  } else {
    std::vector<KernelModule> after = ParseKernelModules(*modules, now, ReadCoreSizes(*modules));
    for (KernelModule& a : after) a.build_id = ReadKernelBuildId(ModuleNotesPath(a.name));
    overlaid = ModulesOverlaid(start_modules_, after, now);
  }
  for (size_t i : overlaid) {
    stats_.changed_kernel_modules.push_back(
        {"[" + start_modules_[i].name + "]", start_modules_[i].start});
  }
}

void Enricher::SynthesizeProcesses(const std::vector<pid_t>& pids, RingSource& rings) {
  const SampleFormat f = options_.format;
  // The events are already enabled, and reading thousands of processes'
  // mappings takes seconds: keep taking records out of the buffers, but end
  // no round, so nothing is released before the synthesized records, whose
  // times are those from which what was read is known to hold (see
  // startup_stamps.h; 0 for most).
  const bool clock = options_.monotonic_clock;
  stamps_ = std::make_unique<StartupStamps>(clock);
  auto now = [&] { return clock ? system_.MonotonicNs() : 0; };
  StartupStats& startup = stats_.startup.emplace();
  const auto started = std::chrono::steady_clock::now();
  auto last_drain = started;
  // A side-band record can only have been lost if its buffer filled up
  // since it was last drained: only then is the loss count read (a read of
  // an event on another CPU costs an IPI).
  bool maybe_lost = false;
  auto drain = [&] {
    if (rings.SidebandNearlyFull()) maybe_lost = true;
    startup.records_drained += rings.Drain();
    last_drain = std::chrono::steady_clock::now();
  };
  auto keep_draining = [&] {
    if (std::chrono::steady_clock::now() - last_drain >= std::chrono::milliseconds(20)) drain();
  };
  struct Pending {
    MmapRecord record;
    std::string path;
    BuildId id;
    BuildIdSource source;
  };
  for (pid_t pid : pids) {
    keep_draining();
    // Everything read of this process describes it between read_start and
    // read_end.
    const uint64_t read_start = now();
    auto maps = system_.Maps(pid);
    if (!maps.ok()) continue;  // exited meanwhile
    const std::vector<pid_t> threads = system_.Threads(pid);
    // A kernel thread has no mappings, nor has a main thread that exited
    // before the others (a zombie leader): then a live thread shows them
    // (and LiveSystem::OpenMapping finds their files the same way).
    for (size_t i = 0; maps->empty() && i < threads.size(); ++i) {
      if (threads[i] == pid) continue;
      if (auto by_thread = system_.Maps(threads[i]); by_thread.ok()) maps = std::move(by_thread);
    }
    std::vector<std::string> comms;
    for (pid_t tid : threads) comms.push_back(system_.Comm(pid, tid));
    const uint64_t read_end = now();
    if (!maps->empty()) ++startup.processes;

    // Build-ids, through map_files, which shows what is mapped when it is
    // opened: a remap after read_end would lend its file's id.
    std::vector<Pending> pending;
    for (const ProcMapping& pm : *maps) {
      keep_draining();  // a cold file's build-id can take a while to read
      const bool vdso = pm.path == "[vdso]";
      // Anonymous executable memory is JIT code (as perf, which synthesizes
      // it too): its perf map names it, and the process is watched for one.
      const bool jit = !vdso && IsJitMappingPath(pm.path);
      if (!pm.executable || (IsSpecialPath(pm.path) && !vdso && !jit)) continue;
      Pending& p = pending.emplace_back();
      // The kernel's name for memory /proc/PID/maps shows without one.
      p.path = pm.path.empty() ? "//anon" : pm.path;
      MmapRecord& m = p.record;
      m.format = MmapFormat::kMmap2;
      m.misc = PERF_RECORD_MISC_USER;
      m.pid = m.tid = static_cast<uint32_t>(pid);
      m.start = pm.start;
      m.len = pm.end - pm.start;
      m.pgoff = pm.pgoff;
      m.maj = pm.maj;
      m.min = pm.min;
      m.ino = pm.ino;
      m.prot = PROT_READ | PROT_EXEC;
      m.flags = pm.shared ? MAP_SHARED : MAP_PRIVATE;
      if (jit) {
        WatchPerfMap(m.pid);
        if (options_.mode == CaptureMode::kMmap3) {
          m.format = MmapFormat::kMmap3;
          m.build_id_status = PERF_MMAP3_BUILD_ID_NO_FILE;
        }
        continue;  // no file, no build-id
      }
      std::string error;
      const FileIdentity identity{pm.maj, pm.min, pm.ino};
      p.id = vdso ? ids_.OfVdso(m.pid, pm.start, pm.end, &error)
                  : ids_.OfFile(m.pid, pm.start, pm.end, &identity, &error);
      p.source = vdso ? BuildIdSource::kVdso : BuildIdSource::kMapFiles;
      if (options_.mode == CaptureMode::kMmap3) {
        // Keep both identities, as the kernel's MMAP3 records do.
        m.format = MmapFormat::kMmap3;
        m.build_id_status = p.id.empty() ? (error.empty() ? PERF_MMAP3_BUILD_ID_NO_NOTE
                                                          : PERF_MMAP3_BUILD_ID_UNAVAILABLE)
                                         : PERF_MMAP3_BUILD_ID_FOUND;
      }
      if (p.id.empty() && !error.empty()) ++stats_.fill_failures;
    }
    const uint64_t ids_read = now();

    // Take in every change the kernel has timestamped up to now, then decide.
    drain();
    if (maybe_lost) {
      // Without read_format LOST (before 6.0) a full buffer may have lost.
      const std::optional<uint64_t> lost = rings.SidebandLost();
      if (!lost || *lost != 0) stamps_->NoteLoss();
      maybe_lost = false;
    }

    for (size_t i = 0; i < threads.size(); ++i) {
      const auto time = stamps_->CommTime(static_cast<uint32_t>(threads[i]), read_start, read_end);
      if (!time) {
        ++startup.changed_during_read;  // the kernel's COMM record has the name
        continue;
      }
      CommRecord c;
      c.pid = static_cast<uint32_t>(pid);
      c.tid = static_cast<uint32_t>(threads[i]);
      c.comm = comms[i];
      c.sample_id = {true, true, false, true, c.pid, c.tid, *time, 0, 0};
      next_.OnRecord(EncodeComm(c, f));
      ++stats_.synthesized;
    }
    for (Pending& p : pending) {
      MmapRecord& m = p.record;
      const auto time = stamps_->MappingTime(m.pid, m.start, m.start + m.len, read_start, read_end);
      if (!time) {
        ++startup.changed_during_read;  // the kernel's record describes it
        continue;
      }
      if (!p.id.empty() &&
          stamps_->ChangedBetween(m.pid, m.start, m.start + m.len, read_end, ids_read)) {
        // Remapped after the read, before map_files was opened: the id may
        // be the new file's.  The mapping read stays, without an id.
        p.id = BuildId();
        if (m.format == MmapFormat::kMmap3) m.build_id_status = PERF_MMAP3_BUILD_ID_UNAVAILABLE;
        ++stats_.fill_failures;
      }
      m.filename = p.path;
      m.sample_id = {true, true, false, true, m.pid, m.tid, *time, 0, 0};
      if (!p.id.empty()) {
        if (m.format == MmapFormat::kMmap2) m.format = MmapFormat::kMmap2BuildId;
        m.build_id = p.id;
        overrides_.Add(m.pid, m.start, p.id, p.source);
        cache_.AddFile(m.pid, m.start, m.start + m.len, p.id, p.path,
                       BuildIdCache::Priority::kBackground);
        ++stats_.filled_build_ids;
      }
      next_.OnRecord(EncodeMmap(m, f));
      ++stats_.synthesized;
      ++stats_.mmaps;
    }
  }
  stamps_.reset();
  startup.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  next_.OnRoundEnd();
}

}  // namespace mmap3
