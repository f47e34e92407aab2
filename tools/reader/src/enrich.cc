#include "enrich.h"

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "linux/perf_event_mmap3.h"
#include "process_table.h"
#include "record_writer.h"

namespace mmap3 {

Enricher::Enricher(EnrichOptions options, LiveSystem& system, SourceOverrides& overrides,
                   CaptureSink& next)
    : options_(std::move(options)),
      system_(system),
      overrides_(overrides),
      next_(next),
      ids_(system),
      cache_(options_.cache, system) {}

void Enricher::OnRecord(Bytes record) {
  perf_event_header h;
  if (!ReadHeader(record, &h)) return;
  if (h.type == PERF_RECORD_MMAP2 && (h.misc & kMiscMmapBuildId) != 0 &&
      options_.mode == CaptureMode::kMmap2) {
    // The mmap2 mode asks for no build-ids (the mmap3 mode gets MMAP3
    // records, and needs a kernel with the series).  A kernel without the
    // series' first patch sets the bit on the records of every side-band
    // event served after one that asked (another capture's, system-wide),
    // over the inode layout: read as a build-id, maj's low byte is its
    // size and the minor and inode its bytes.  The record is this event's,
    // laid out as it asked: the bit goes.
    rewritten_.assign(record.begin(), record.end());
    h.misc &= static_cast<uint16_t>(~kMiscMmapBuildId);
    std::memcpy(rewritten_.data() + offsetof(perf_event_header, misc), &h.misc, sizeof(h.misc));
    record = rewritten_;
    ++stats_.stray_build_id_bits;
  }
  if ((h.type == PERF_RECORD_KSYMBOL || h.type == PERF_RECORD_BPF_EVENT ||
       h.type == PERF_RECORD_TEXT_POKE) &&
      CutToContents(record, SampleIdSize(options_.format), &rewritten_)) {
    // A record served to this event after another side-band event got it
    // is longer than what the kernel wrote in it (see SampleIdOffset()):
    // the bytes after its trailer are the ring buffer's, and a reader that
    // takes the trailer from the end (perf, or one of ours before this)
    // would read its time and ids there.  They go.
    h.size = static_cast<uint16_t>(rewritten_.size());
    record = rewritten_;
    ++stats_.oversized_sideband;
  }
  if (stamps_ != nullptr &&
      (h.type == PERF_RECORD_COMM || h.type == PERF_RECORD_FORK || h.type == PERF_RECORD_MMAP ||
       h.type == PERF_RECORD_MMAP2 || h.type == kRecordMmap3 || h.type == PERF_RECORD_LOST)) {
    // While /proc is read: what changed, and when (see startup_stamps.h).
    Record r;
    if (DecodeRecord(record, options_.format, &r) == DecodeStatus::kOk) {
      const auto* lost = std::get_if<LostRecord>(&r);
      const auto& sideband = options_.sideband_ids;
      stamps_->Observe(r, lost != nullptr &&
                              std::find(sideband.begin(), sideband.end(), lost->id) != sideband.end());
    }
  }
  if (h.type == PERF_RECORD_SAMPLE) {
    ++stats_.samples;
    next_.OnRecord(record);
    return;
  }
  if (h.type == PERF_RECORD_LOST) {
    Record r;
    if (DecodeRecord(record, options_.format, &r) == DecodeStatus::kOk)
      stats_.lost_records += std::get<LostRecord>(r).lost;
    next_.OnRecord(record);
    return;
  }
  if (h.type == PERF_RECORD_EXIT && !perf_map_watch_.empty()) {
    next_.OnRecord(record);
    // The main thread's exit: the last moment the map can still be there
    // (a JIT often deletes it first, and then what was read before stays).
    Record r;
    if (DecodeRecord(record, options_.format, &r) != DecodeStatus::kOk) return;
    const TaskRecord& t = std::get<TaskRecord>(r);
    auto it = perf_map_watch_.find(t.pid);
    if (t.pid != t.tid || it == perf_map_watch_.end() || it->second.exited) return;
    TakePerfMap(t.pid, it->second, PerfMapTaken::kExit);
    it->second.exited = true;
    return;
  }
  if (h.type == PERF_RECORD_COMM && (h.misc & PERF_RECORD_MISC_COMM_EXEC) != 0 &&
      !perf_map_watch_.empty()) {
    next_.OnRecord(record);
    // An exec by a process whose JIT code is watched: the map at its pid's
    // name described the image before, and may be left for the image after
    // to run code at the same addresses (helper-57's review).  One map per
    // pid cannot tell the two images' code apart: neither gets any names.
    Record r;
    if (DecodeRecord(record, options_.format, &r) != DecodeStatus::kOk) return;
    const uint32_t pid = std::get<CommRecord>(r).pid;
    auto it = perf_map_watch_.find(pid);
    if (it == perf_map_watch_.end() || it->second.reused) return;
    GiveUpPerfMap(pid, it->second,
                  fmt::format("/tmp/{}: pid {} ran exec after its JIT code was mapped; one map "
                              "cannot tell the two programs' code apart",
                              PerfMapFileName(pid), pid));
    return;
  }
  if (h.type == PERF_RECORD_BPF_EVENT) {
    OnBpfEvent(record);
    return;
  }
  if (h.type != PERF_RECORD_MMAP2 && h.type != kRecordMmap3) {
    next_.OnRecord(record);
    return;
  }
  OnMmap(record);
}

void Enricher::WatchPerfMap(uint32_t pid, std::optional<uint64_t> mapped_at) {
  if (options_.perf_maps == nullptr) return;
  auto [it, inserted] = perf_map_watch_.try_emplace(pid);
  PerfMapWatch& w = it->second;
  if (inserted) {
    w.owner = system_.ProcessOwner(static_cast<pid_t>(pid));
    // The owner is read now, not when the code was mapped: if the process
    // has exited and its pid been taken since (the recorder behind by as
    // long as pids take to wrap), the owner is the new process's, and its
    // user's map would name the old one's code (helper-57's review).  A
    // process that started after the mapping is not the one that made it.
    // (Two clock ticks of slack: the start time is in ticks.)
    const uint64_t slack = 2'000'000'000ull / std::max(1L, sysconf(_SC_CLK_TCK)) + 1'000'000;
    if (w.owner && w.owner->started_ns && mapped_at && *w.owner->started_ns > *mapped_at + slack)
      GiveUpPerfMap(pid, w,
                    fmt::format("/tmp/{}: pid {} is now a process that started after its JIT "
                                "code was mapped (the pid was used again); its map is not the "
                                "code's",
                                PerfMapFileName(pid), pid));
    return;
  }
  if (!w.exited || w.reused) return;  // (reused: also an exec, see OnRecord)
  // A pid that exited and is in use again by another process.  The capture
  // keeps one map per pid and the report looks JIT code up by pid: either
  // process's code would get the other's names.  Neither gets any.
  GiveUpPerfMap(pid, w,
                fmt::format("/tmp/{}: pid {} was used by two processes with JIT code during the "
                            "capture; one map cannot tell their code apart",
                            PerfMapFileName(pid), pid));
}

void Enricher::GiveUpPerfMap(uint32_t pid, PerfMapWatch& w, std::string reason) {
  w.reused = w.exited = true;  // never read again
  options_.perf_maps->Forget(pid);
  options_.perf_maps->Refuse(pid, std::move(reason));
}

void Enricher::TakePerfMap(uint32_t pid, PerfMapWatch& w, PerfMapTaken when) {
  PerfMaps& maps = *options_.perf_maps;
  PerfMapRead r = system_.ReadPerfMap(pid, w.owner, w.stamp ? &*w.stamp : nullptr);
  switch (r.outcome) {
    case PerfMapRead::Outcome::kRead: {
      const PerfMap* old = maps.Find(pid);
      const uint64_t others = maps.bytes() - (old != nullptr ? old->bytes() : 0);
      if (others + r.text.size() > kPerfMapsMaxBytes) {
        maps.Refuse(pid, fmt::format("/tmp/{}: the capture holds {} bytes of perf maps already, "
                                     "and keeps at most {}",
                                     PerfMapFileName(pid), others, kPerfMapsMaxBytes));
        return;
      }
      const uint64_t bytes = r.text.size();
      maps.Set(pid, PerfMap(ParsePerfMap(r.text), when, bytes));
      w.stamp = r.stamp;
      ++stats_.perf_map_reads;
      return;
    }
    case PerfMapRead::Outcome::kUnchanged:
      // What was read is what the file still holds at this moment.
      if (PerfMap* m = maps.FindMutable(pid)) m->set_taken(when);
      return;
    case PerfMapRead::Outcome::kMissing:
      return;  // what was read before, if anything, stays
    case PerfMapRead::Outcome::kRefused:
    case PerfMapRead::Outcome::kFailed:
      maps.Refuse(pid, std::move(r.reason));
      return;
  }
}

void Enricher::PollPerfMaps() {
  for (auto& [pid, w] : perf_map_watch_)
    if (!w.exited) TakePerfMap(pid, w, PerfMapTaken::kRunning);
}

void Enricher::FinishPerfMaps() {
  for (auto& [pid, w] : perf_map_watch_) {
    if (w.exited) continue;
    TakePerfMap(pid, w, PerfMapTaken::kEnd);
    w.exited = true;
  }
}

void Enricher::OnMmap(Bytes record) {
  ++stats_.mmaps;
  Record r;
  if (DecodeRecord(record, options_.format, &r) != DecodeStatus::kOk) {
    next_.OnRecord(record);  // counted as bad by the consumer
    return;
  }
  MmapRecord& m = std::get<MmapRecord>(r);
  if (m.pid != kKernelPid && m.build_id.empty() && IsJitMappingPath(m.filename))
    WatchPerfMap(m.pid, options_.monotonic_clock && m.sample_id.has_time
                            ? std::optional<uint64_t>(m.sample_id.time)
                            : std::nullopt);
  // MMAP3 says why an id is missing.  NO_NOTE, NOT_ELF, NO_FILE and REFUSED
  // are final; UNAVAILABLE, IO_ERROR, MALFORMED and statuses newer than this
  // header are worth a second try through map_files.
  const uint8_t st = m.build_id_status;
  const bool final_status =
      m.format == MmapFormat::kMmap3 &&
      (st == PERF_MMAP3_BUILD_ID_NO_NOTE || st == PERF_MMAP3_BUILD_ID_NOT_ELF ||
       st == PERF_MMAP3_BUILD_ID_NO_FILE || st == PERF_MMAP3_BUILD_ID_REFUSED);
  BuildId id;
  BuildIdSource source;
  std::string error;
  if (m.filename == "[vdso]" && m.build_id.empty() && !final_status && m.pid != kKernelPid) {
    // MMAP2 has no build-id for the vDSO (it has no file); read its image.
    id = ids_.OfVdso(m.pid, m.start, m.start + m.len, &error);
    source = BuildIdSource::kVdso;
  } else if (!m.build_id.empty() || final_status || IsSpecialPath(m.filename) ||
             m.pid == kKernelPid) {
    if (m.pid == kKernelPid && m.format == MmapFormat::kMmap3) OnKernelModule(m);
    cache_.AddFile(m.pid, m.start, m.start + m.len, m.build_id, m.filename);
    next_.OnRecord(record);
    return;
  } else {
    // The kernel gave none: read it from the mapped inode while it is mapped.
    const FileIdentity identity{m.maj, m.min, m.ino};
    id = ids_.OfFile(m.pid, m.start, m.start + m.len, m.has_inode ? &identity : nullptr, &error);
    source = BuildIdSource::kMapFiles;
  }
  if (id.empty()) {
    if (!error.empty()) ++stats_.fill_failures;
    next_.OnRecord(record);
    return;
  }
  ++stats_.filled_build_ids;
  overrides_.Add(m.pid, m.start, id, source);
  cache_.AddFile(m.pid, m.start, m.start + m.len, id, m.filename);
  next_.OnRecord(WithBuildId(m, id, options_.format));
}

void Enricher::OnBpfEvent(Bytes record) {
  next_.OnRecord(record);
  if (options_.bpf_programs == nullptr) return;
  Record r;
  if (DecodeRecord(record, options_.format, &r) != DecodeStatus::kOk) return;
  const BpfEventRecord& b = std::get<BpfEventRecord>(r);
  if (b.type != PERF_BPF_EVENT_PROG_LOAD) return;
  BpfTag tag;
  std::memcpy(tag.data(), b.tag, tag.size());
  ReadBpfProgramNow(b.id, &tag);
}

const BpfProgram* Enricher::ReadBpfProgramNow(uint32_t id, const BpfTag* tag) {
  BpfPrograms& progs = *options_.bpf_programs;
  for (const BpfProgram& p : progs.programs())
    if (p.id == id && (tag == nullptr || p.tag == *tag)) return &p;  // synthesized, and loaded meanwhile
  for (const BpfNotRead& n : progs.not_read())
    if (n.id == id) return nullptr;  // tried already
  std::vector<uint8_t> btf;
  auto p = ReadBpfProgram(id, tag, &btf);
  if (!p.ok()) {
    ++stats_.bpf_programs_not_read;
    progs.NotRead({id, tag != nullptr ? *tag : BpfTag{}, p.status().ToString()});
    return nullptr;
  }
  ++stats_.bpf_programs_read;
  if (!btf.empty() && !progs.HasBtf(p->btf_id)) progs.AddBtf(p->btf_id, std::move(btf));
  progs.Add(std::move(*p));
  return &progs.programs().back();
}

std::vector<uint8_t> WithBuildId(MmapRecord m, const BuildId& id, const SampleFormat& format) {
  if (m.format == MmapFormat::kMmap2) {
    // The inode identity is lost, as with a kernel-provided build-id; the
    // build-id is what attribution needs.
    m.format = MmapFormat::kMmap2BuildId;
    m.build_id = id;
  } else if (m.format == MmapFormat::kMmap3) {
    m.build_id = id;
    m.build_id_status = PERF_MMAP3_BUILD_ID_FOUND;
  }
  return EncodeMmap(m, format);
}

}  // namespace mmap3
