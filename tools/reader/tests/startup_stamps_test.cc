#include "startup_stamps.h"

#include <gtest/gtest.h>

#include <map>

#include "fixtures.h"
#include "process_table.h"
#include "profile.h"
#include "record_sorter.h"
#include "record_writer.h"

namespace mmap3 {
namespace {

using testing::Id;
using testing::kIdV1;
using testing::kIdV2;

constexpr uint64_t kBase = 0x7f0000000000;
constexpr uint64_t kLen = 0x10000;
constexpr uint64_t kM = StartupStamps::kMarginNs;
// The read of the process's /proc files.
constexpr uint64_t kReadStart = 50 * kM, kReadEnd = 60 * kM;

const SampleFormat kFormat{PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU |
                               PERF_SAMPLE_PERIOD,
                           0, true};

using testing::Sid;

MmapRecord MmapOf(uint32_t pid, uint64_t start, const char* id, uint64_t time) {
  MmapRecord m;
  m.format = MmapFormat::kMmap2BuildId;
  m.misc = PERF_RECORD_MISC_USER;
  m.pid = m.tid = pid;
  m.start = start;
  m.len = kLen;
  m.build_id = Id(id);
  m.filename = "/lib/libx.so";
  m.sample_id = Sid(pid, time);
  return m;
}

CommRecord CommOf(uint32_t pid, uint32_t tid, bool exec, uint64_t time) {
  CommRecord c;
  c.pid = pid;
  c.tid = tid;
  c.exec = exec;
  c.comm = "app";
  c.sample_id = Sid(pid, time);
  c.sample_id.tid = tid;
  return c;
}

TaskRecord ForkOf(uint32_t pid, uint32_t ppid, uint32_t tid, uint64_t time) {
  TaskRecord t;
  t.pid = pid;
  t.ppid = ppid;
  t.tid = tid;
  t.ptid = ppid;
  t.time = time;
  t.sample_id = Sid(pid, time);
  return t;
}

TEST(StartupStampsTest, UntouchedMappingsHeldBeforeTheCapture) {
  StartupStamps s(/*clock=*/true);
  s.Observe(MmapOf(7, kBase + kLen, kIdV1, 30 * kM), false);  // next to it
  s.Observe(MmapOf(8, kBase, kIdV1, 30 * kM), false);         // another process
  EXPECT_EQ(s.MappingTime(7, kBase, kBase + kLen, kReadStart, kReadEnd), 0u);
  EXPECT_EQ(s.CommTime(7, kReadStart, kReadEnd), 0u);
}

TEST(StartupStampsTest, ARemapBeforeTheReadIsWhereTheMappingStarts) {
  StartupStamps s(true);
  s.Observe(MmapOf(7, kBase, kIdV2, 20 * kM), false);
  s.Observe(MmapOf(7, kBase + 0x8000, kIdV2, 30 * kM), false);  // overlaps its second half
  EXPECT_EQ(s.MappingTime(7, kBase, kBase + kLen, kReadStart, kReadEnd), 30 * kM);
}

TEST(StartupStampsTest, ExecAndForkBeforeTheReadStartEverything) {
  StartupStamps s(true);
  s.Observe(ForkOf(7, 1, 7, 10 * kM), false);
  s.Observe(CommOf(7, 7, /*exec=*/true, 30 * kM), false);
  EXPECT_EQ(s.MappingTime(7, kBase, kBase + kLen, kReadStart, kReadEnd), 30 * kM);
  EXPECT_EQ(s.CommTime(7, kReadStart, kReadEnd), 30 * kM);
  // A new thread changes its own name only.
  s.Observe(ForkOf(9, 9, 12, 40 * kM), false);
  EXPECT_EQ(s.MappingTime(9, kBase, kBase + kLen, kReadStart, kReadEnd), 0u);
  EXPECT_EQ(s.CommTime(12, kReadStart, kReadEnd), 40 * kM);
  EXPECT_EQ(s.CommTime(9, kReadStart, kReadEnd), 0u);
}

TEST(StartupStampsTest, AChangeDuringTheReadIsLeftToTheKernelsRecord) {
  StartupStamps s(true);
  s.Observe(MmapOf(7, kBase, kIdV2, 55 * kM), false);
  EXPECT_EQ(s.MappingTime(7, kBase, kBase + kLen, kReadStart, kReadEnd), std::nullopt);
  // Too close to the start or the end to tell which side it was on.
  StartupStamps near(true);
  near.Observe(MmapOf(7, kBase, kIdV2, kReadStart - kM / 2), false);
  near.Observe(CommOf(8, 8, false, kReadEnd + kM / 2), false);
  EXPECT_EQ(near.MappingTime(7, kBase, kBase + kLen, kReadStart, kReadEnd), std::nullopt);
  EXPECT_EQ(near.CommTime(8, kReadStart, kReadEnd), std::nullopt);
  // After the read: not in it, and after it in time order.
  StartupStamps later(true);
  later.Observe(MmapOf(7, kBase, kIdV2, kReadEnd + 2 * kM), false);
  EXPECT_EQ(later.MappingTime(7, kBase, kBase + kLen, kReadStart, kReadEnd), 0u);
  EXPECT_TRUE(later.ChangedBetween(7, kBase, kBase + kLen, kReadEnd, kReadEnd + 3 * kM));
  EXPECT_FALSE(later.ChangedBetween(7, kBase, kBase + kLen, kReadEnd, kReadEnd + kM / 2));
}

TEST(StartupStampsTest, AfterSidebandLossNothingIsBackdated) {
  StartupStamps s(true);
  LostRecord samples;
  samples.lost = 3;
  s.Observe(samples, /*lost_is_sideband=*/false);  // samples only
  EXPECT_EQ(s.MappingTime(7, kBase, kBase + kLen, kReadStart, kReadEnd), 0u);
  s.Observe(samples, /*lost_is_sideband=*/true);
  EXPECT_TRUE(s.lost());
  EXPECT_EQ(s.MappingTime(7, kBase, kBase + kLen, kReadStart, kReadEnd), kReadStart);
  StartupStamps by_count(true);
  by_count.NoteLoss();
  EXPECT_EQ(by_count.CommTime(7, kReadStart, kReadEnd), kReadStart);
}

TEST(StartupStampsTest, WithoutAClockAnySeenChangeIsLeftToTheKernel) {
  StartupStamps s(/*clock=*/false);
  s.Observe(MmapOf(7, kBase, kIdV2, 0), false);
  EXPECT_EQ(s.MappingTime(7, kBase, kBase + kLen, 0, 0), std::nullopt);
  EXPECT_EQ(s.MappingTime(8, kBase, kBase + kLen, 0, 0), 0u);
  EXPECT_TRUE(s.ChangedBetween(7, kBase, kBase + kLen, 0, 0));
}

// The capture's records through the sorter and the profile, as record and
// report replay them.  Process 7 existed before the capture with v1 of a
// library at kBase (no record says so).  Events enabled; samples at 20 and
// 25 run v1; at 30 it maps v2 over it (the kernel's MMAP record); a sample
// at 40; /proc/7/maps is read at [50, 60] and shows v2; samples at 70.
class StartupReplayTest : public ::testing::Test {
 protected:
  std::vector<uint8_t> Sample(uint64_t time) {
    SampleRecord s;
    s.misc = PERF_RECORD_MISC_USER;
    s.pid = s.tid = 7;
    s.ip = kBase + 0x100;
    s.time = time;
    return EncodeSample(s, {}, kFormat);
  }
  // What each sample was attributed to, by its time.
  std::map<uint64_t, std::string> Replay(const std::vector<std::vector<uint8_t>>& drained,
                                         const std::vector<std::vector<uint8_t>>& synthesized,
                                         const std::vector<std::vector<uint8_t>>& after) {
    RecordSorter sorter;
    Profile p({});
    p.SetFormat(kFormat);
    std::map<uint64_t, std::string> by_time;
    auto process = [&](Bytes r) {
      const uint64_t before = p.unattributed();
      p.Process(r);
      perf_event_header h;
      ASSERT_TRUE(ReadHeader(r, &h));
      if (h.type != PERF_RECORD_SAMPLE) return;
      const uint64_t t = *RecordTime(r, kFormat);
      if (p.unattributed() != before) {
        by_time[t] = "unknown";
      } else {
        by_time[t] = p.processes().FindUser(7, kBase + 0x100)->object->build_id.Hex();
      }
    };
    // One synthesis round: drained records and synthesized ones, no round
    // end in between; then the rest.
    for (const auto& r : drained) sorter.Push(RecordTime(r, kFormat), r);
    for (const auto& r : synthesized) sorter.Push(RecordTime(r, kFormat), r);
    sorter.FinishRound(process);
    for (const auto& r : after) sorter.Push(RecordTime(r, kFormat), r);
    sorter.FinishRound(process);
    sorter.Flush(process);
    return by_time;
  }
  // The synthesized mapping, timed as the capture times it.
  std::vector<uint8_t> Synthesized(const StartupStamps& stamps) {
    MmapRecord m = MmapOf(7, kBase, kIdV2, 0);
    m.sample_id.time = stamps.MappingTime(7, kBase, kBase + kLen, kReadStart, kReadEnd).value();
    return EncodeMmap(m, kFormat);
  }
};

TEST_F(StartupReplayTest, SamplesBeforeARemapAreNotPutOnTheMappingReadAfterIt) {
  const MmapRecord remap = MmapOf(7, kBase, kIdV2, 30 * kM);
  StartupStamps stamps(true);
  stamps.Observe(remap, false);
  auto by_time = Replay({Sample(20 * kM), Sample(25 * kM), EncodeMmap(remap, kFormat),
                         Sample(40 * kM)},
                        {Synthesized(stamps)}, {Sample(70 * kM)});
  ASSERT_EQ(by_time.size(), 4u);
  EXPECT_EQ(by_time[20 * kM], "unknown");  // ran v1, which nothing describes
  EXPECT_EQ(by_time[25 * kM], "unknown");
  EXPECT_EQ(by_time[40 * kM], kIdV2);
  EXPECT_EQ(by_time[70 * kM], kIdV2);
}

TEST_F(StartupReplayTest, SamplesBeforeAnExecAreNotPutOnTheNewImage) {
  CommRecord exec = CommOf(7, 7, true, 30 * kM);
  const MmapRecord mapped = MmapOf(7, kBase, kIdV2, 31 * kM);  // the new image's library
  StartupStamps stamps(true);
  stamps.Observe(exec, false);
  stamps.Observe(mapped, false);
  auto by_time = Replay({Sample(20 * kM), EncodeComm(exec, kFormat), EncodeMmap(mapped, kFormat),
                         Sample(40 * kM)},
                        {Synthesized(stamps)}, {Sample(70 * kM)});
  EXPECT_EQ(by_time[20 * kM], "unknown");
  EXPECT_EQ(by_time[40 * kM], kIdV2);
  EXPECT_EQ(by_time[70 * kM], kIdV2);
}

TEST_F(StartupReplayTest, UnchangedMappingsCoverSamplesFromTheStart) {
  StartupStamps stamps(true);
  auto by_time = Replay({Sample(20 * kM), Sample(40 * kM)}, {Synthesized(stamps)},
                        {Sample(70 * kM)});
  EXPECT_EQ(by_time[20 * kM], kIdV2);
  EXPECT_EQ(by_time[40 * kM], kIdV2);
  EXPECT_EQ(by_time[70 * kM], kIdV2);
}

}  // namespace
}  // namespace mmap3
