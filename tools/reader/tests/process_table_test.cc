#include "process_table.h"

#include <gtest/gtest.h>

namespace mmap3 {
namespace {

std::shared_ptr<const MappedObject> Obj(const std::string& path) {
  auto o = std::make_shared<MappedObject>();
  o->path = path;
  return o;
}

void MapIn(ProcessTable& t, uint32_t pid, uint64_t start, const std::string& path) {
  t.OnMmap(pid, Mapping{start, start + 0x1000, 0, Obj(path)});
}

std::string PathAt(const ProcessTable& t, uint32_t pid, uint64_t addr) {
  const Mapping* m = t.FindUser(pid, addr);
  return m ? m->object->path : "";
}

TEST(ProcessTableTest, ForkedProcessGetsACopy) {
  ProcessTable t;
  t.OnComm(100, 100, "parent", false);
  MapIn(t, 100, 0x1000, "/lib/a");
  t.OnFork(200, 100, 200, 100);
  EXPECT_EQ(PathAt(t, 200, 0x1000), "/lib/a");
  EXPECT_EQ(t.Comm(200, 200), "parent");  // inherited until it execs or renames
  // Later mappings are private to each side.
  MapIn(t, 200, 0x5000, "/lib/child-only");
  MapIn(t, 100, 0x1000, "/lib/a-v2");
  EXPECT_EQ(PathAt(t, 100, 0x5000), "");
  EXPECT_EQ(PathAt(t, 200, 0x1000), "/lib/a");
  EXPECT_EQ(PathAt(t, 100, 0x1000), "/lib/a-v2");
}

// A fork copies nothing until one side maps something: 20,000 forks of a
// process with 20,000 mappings once took 28 s, a copy each.  Whichever side
// maps first gets the copy; the others keep sharing what they had.
TEST(ProcessTableTest, ForkSharesTheSpaceUntilEitherSideMaps) {
  ProcessTable t;
  MapIn(t, 100, 0x1000, "/lib/a");
  t.OnFork(200, 100, 200, 100);
  t.OnFork(300, 200, 300, 200);
  ASSERT_NE(t.Space(100), nullptr);
  EXPECT_EQ(t.Space(200), t.Space(100));
  EXPECT_EQ(t.Space(300), t.Space(100));

  MapIn(t, 200, 0x2000, "/lib/middle-only");  // the middle one maps first
  EXPECT_NE(t.Space(200), t.Space(100));
  EXPECT_EQ(t.Space(300), t.Space(100));
  EXPECT_EQ(PathAt(t, 200, 0x2000), "/lib/middle-only");
  EXPECT_EQ(PathAt(t, 200, 0x1000), "/lib/a");
  EXPECT_EQ(PathAt(t, 100, 0x2000), "");
  EXPECT_EQ(PathAt(t, 300, 0x2000), "");

  MapIn(t, 100, 0x1000, "/lib/a-v2");  // the first one replaces a mapping
  EXPECT_EQ(PathAt(t, 100, 0x1000), "/lib/a-v2");
  EXPECT_EQ(PathAt(t, 200, 0x1000), "/lib/a");
  EXPECT_EQ(PathAt(t, 300, 0x1000), "/lib/a");
  EXPECT_EQ(t.Space(300)->size(), 1u);

  // The last one left with a space maps into it in place.
  const AddressSpace* before = t.Space(300);
  MapIn(t, 300, 0x3000, "/lib/last");
  EXPECT_EQ(t.Space(300), before);
  EXPECT_EQ(PathAt(t, 300, 0x3000), "/lib/last");
  EXPECT_EQ(PathAt(t, 100, 0x3000), "");

  // A shared space outlives the process that made it.
  t.OnFork(400, 100, 400, 100);
  t.OnExit(100, 100);
  EXPECT_FALSE(t.HasProcess(100));
  EXPECT_EQ(PathAt(t, 400, 0x1000), "/lib/a-v2");
}

TEST(ProcessTableTest, ThreadsShareTheAddressSpace) {
  ProcessTable t;
  t.OnComm(100, 100, "app", false);
  t.OnFork(100, 100, 101, 100);  // pid == ppid: a thread
  MapIn(t, 100, 0x9000, "/lib/late");
  EXPECT_EQ(PathAt(t, 100, 0x9000), "/lib/late");
  t.OnComm(100, 101, "app-worker", false);
  EXPECT_EQ(t.Comm(100, 101), "app-worker");
  EXPECT_EQ(t.Comm(100, 100), "app");
  EXPECT_EQ(t.process_count(), 1u);
}

TEST(ProcessTableTest, ExecResetsTheAddressSpace) {
  ProcessTable t;
  t.OnComm(100, 100, "sh", false);
  MapIn(t, 100, 0x1000, "/bin/sh");
  t.OnComm(100, 100, "ls", /*exec=*/true);
  EXPECT_EQ(PathAt(t, 100, 0x1000), "");
  EXPECT_EQ(t.Comm(100, 100), "ls");
  MapIn(t, 100, 0x1000, "/bin/ls");
  EXPECT_EQ(PathAt(t, 100, 0x1000), "/bin/ls");
}

TEST(ProcessTableTest, ExecInForkedChildDoesNotTouchParent) {
  ProcessTable t;
  MapIn(t, 100, 0x1000, "/bin/sh");
  t.OnFork(200, 100, 200, 100);
  t.OnComm(200, 200, "ls", true);
  EXPECT_EQ(PathAt(t, 100, 0x1000), "/bin/sh");
  EXPECT_EQ(PathAt(t, 200, 0x1000), "");
}

TEST(ProcessTableTest, ExitDropsTheProcessWithItsLastThread) {
  ProcessTable t;
  MapIn(t, 100, 0x1000, "/bin/app");
  t.OnFork(100, 100, 101, 100);
  t.OnExit(100, 100);  // the leader exits first; the worker thread still runs
  EXPECT_TRUE(t.HasProcess(100));
  EXPECT_EQ(PathAt(t, 100, 0x1000), "/bin/app");
  t.OnExit(100, 101);
  EXPECT_FALSE(t.HasProcess(100));
  EXPECT_EQ(PathAt(t, 100, 0x1000), "");
  // A reused pid starts clean.
  t.OnComm(100, 100, "new", true);
  EXPECT_EQ(PathAt(t, 100, 0x1000), "");
}

TEST(ProcessTableTest, ExecByAnotherThreadLeavesOneThread) {
  // Thread 101 of process 100 execs.  The kernel kills the other threads
  // (the leader included: EXIT 100/100), then 101 takes pid 100 and the
  // COMM record says 100/100.  Thread id 101 never exits on its own.
  ProcessTable t;
  t.OnComm(100, 100, "app", false);
  t.OnFork(100, 100, 101, 100);
  t.OnFork(100, 100, 102, 100);
  MapIn(t, 100, 0x1000, "/bin/app");
  t.OnExit(100, 102);
  t.OnExit(100, 100);
  EXPECT_TRUE(t.HasProcess(100));  // 101 still runs
  t.OnComm(100, 100, "new", /*exec=*/true);
  EXPECT_EQ(PathAt(t, 100, 0x1000), "");
  EXPECT_EQ(t.Comm(100, 100), "new");
  // The new image's only thread exits: the process is gone.
  t.OnExit(100, 100);
  EXPECT_FALSE(t.HasProcess(100));
  EXPECT_EQ(t.process_count(), 0u);
}

TEST(ProcessTableTest, ExecRecordWithTheOldTidAlsoLeavesOneThread) {
  // Should a kernel write the exec'ing thread's old tid, the result is the
  // same: one thread, the leader's pid.
  ProcessTable t;
  t.OnComm(100, 100, "app", false);
  t.OnFork(100, 100, 101, 100);
  t.OnExit(100, 100);
  t.OnComm(100, 101, "new", /*exec=*/true);
  EXPECT_EQ(t.Comm(100, 100), "new");
  t.OnExit(100, 100);
  EXPECT_FALSE(t.HasProcess(100));
}

TEST(ProcessTableTest, UnknownThreadsGetAPlaceholderName) {
  ProcessTable t;
  EXPECT_EQ(t.Comm(5, 6), ":6");
  EXPECT_EQ(t.Comm(0, 0), "swapper");  // the idle task, as perf names it
}

TEST(ProcessTableTest, NameOutlivesExitUntilTheTidIsReused) {
  ProcessTable t;
  t.OnComm(100, 100, "app", true);
  t.OnFork(100, 100, 101, 100);
  t.OnExit(100, 101);
  t.OnExit(100, 100);
  // The kernel tears the memory down after EXIT; those samples are app's.
  EXPECT_EQ(t.Comm(100, 100), "app");
  EXPECT_EQ(t.Comm(100, 101), "app");
  // A new task with that tid takes its parent's name, or none.
  t.OnComm(50, 50, "sh", true);
  t.OnFork(100, 50, 100, 50);
  EXPECT_EQ(t.Comm(100, 100), "sh");
  t.OnFork(101, 77, 101, 77);  // parent unknown: not the dead thread's name
  EXPECT_EQ(t.Comm(101, 101), ":101");
}

TEST(ProcessTableTest, KernelMappingsAreSeparate) {
  ProcessTable t;
  t.OnMmap(kKernelPid, Mapping{0xffffffff81000000, 0xffffffff82000000, 0, Obj("[kernel]")});
  EXPECT_NE(t.FindKernel(0xffffffff81000010), nullptr);
  EXPECT_EQ(t.FindUser(1, 0xffffffff81000010), nullptr);
  EXPECT_EQ(t.process_count(), 0u);
}

}  // namespace
}  // namespace mmap3
