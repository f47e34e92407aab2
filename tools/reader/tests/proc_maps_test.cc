#include "proc_maps.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

#include "capture.h"
#include "elf_file.h"
#include "fixtures.h"

namespace mmap3 {
namespace {

using testing::Id;
using testing::kIdV1;
using testing::kIdV2;
using testing::TempDir;

TEST(ProcMapsTest, ParsesMapsLines) {
  auto maps = ParseProcMaps(
      "55d0c0a00000-55d0c0a22000 r-xp 00004000 fe:01 1234567                    /usr/bin/ls\n"
      "7ffd5a3f0000-7ffd5a3f2000 r-xp 00000000 00:00 0                          [vdso]\n"
      "7f0000000000-7f0000001000 rw-s 00000000 00:05 42                         /dev/shm/x (deleted)\n"
      "garbage line\n"
      "7f0000002000-7f0000003000 ---p 00000000 00:00 0\n");
  ASSERT_EQ(maps.size(), 4u);
  EXPECT_EQ(maps[0].start, 0x55d0c0a00000u);
  EXPECT_EQ(maps[0].end, 0x55d0c0a22000u);
  EXPECT_EQ(maps[0].pgoff, 0x4000u);
  EXPECT_EQ(maps[0].maj, 0xfeu);
  EXPECT_EQ(maps[0].min, 1u);
  EXPECT_EQ(maps[0].ino, 1234567u);
  EXPECT_TRUE(maps[0].executable);
  EXPECT_FALSE(maps[0].writable);
  EXPECT_EQ(maps[0].path, "/usr/bin/ls");
  EXPECT_EQ(maps[1].path, "[vdso]");
  EXPECT_TRUE(maps[2].shared);
  EXPECT_EQ(maps[2].path, "/dev/shm/x (deleted)");
  EXPECT_EQ(maps[3].path, "");
  EXPECT_FALSE(maps[3].readable);
}

TEST(ProcMapsTest, MapFilesPathUsesBareHex) {
  EXPECT_EQ(MapFilesPath(12, 0x7f00aa000, 0x7f00bb000), "/proc/12/map_files/7f00aa000-7f00bb000");
}

const ProcMapping* FindExecMapping(const std::vector<ProcMapping>& maps, const std::string& path) {
  for (const ProcMapping& m : maps)
    if (m.path == path && m.executable) return &m;
  return nullptr;
}

TEST(ProcMapsTest, BuildIdComesFromTheMappedInodeNotThePath) {
  if (geteuid() != 0) GTEST_SKIP() << "map_files needs CAP_SYS_ADMIN";
  TempDir dir;
  const std::string lib = dir.File("libmapped.so");
  ASSERT_TRUE(testing::BuildSharedLibrary(lib, "mapped_fn", kIdV1));
  ASSERT_TRUE(testing::BuildSharedLibrary(dir.File("v2.so"), "mapped_fn other_fn", kIdV2));
  void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  // Replace the file at the path by rename while it is mapped.
  std::filesystem::rename(dir.File("v2.so"), lib);
  auto maps = ReadProcMaps(getpid());
  ASSERT_TRUE(maps.ok());
  const ProcMapping* m = FindExecMapping(*maps, lib + " (deleted)");
  ASSERT_NE(m, nullptr) << "the replaced mapping shows as deleted";
  auto id = ReadMappedBuildId(getpid(), m->start, m->end);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, Id(kIdV1));                          // the mapped version
  EXPECT_EQ(ElfFile::Open(lib)->build_id(), Id(kIdV2));  // what the path says now
  dlclose(handle);
}

TEST(ProcMapsTest, MissingMappingIsAnError) {
  auto id = ReadMappedBuildId(getpid(), 0x1000, 0x2000);
  EXPECT_FALSE(id.ok());
  EXPECT_FALSE(ProcessExists(0));
  EXPECT_TRUE(ProcessExists(getpid()));
}

// A thread of this process that waits until destroyed (then joined).
class ParkedThread {
 public:
  // The promises are members declared before thread_, so they exist before
  // the thread starts.
  ParkedThread()
      : thread_([this] {
          started_.set_value(gettid());
          done_.get_future().wait();
        }),
        tid_(started_.get_future().get()) {}
  ~ParkedThread() {
    done_.set_value();
    thread_.join();
  }
  pid_t tid() const { return tid_; }

 private:
  std::promise<pid_t> started_;
  std::promise<void> done_;
  std::thread thread_;
  pid_t tid_;
};

TEST(ProcMapsTest, TgidOfAThreadIsItsProcess) {
  EXPECT_EQ(ParseTgid("Name:\tx\nUmask:\t0022\nState:\tR\nTgid:\t4242\nNgid:\t0\nPid:\t4250\n"), 4242);
  EXPECT_EQ(ParseTgid("Tgid: 7\n"), 7);
  EXPECT_EQ(ParseTgid("Name:\tx\nPid:\t5\n"), std::nullopt);
  EXPECT_EQ(ParseTgid("Name:\tTgid:\nTgid:\tx\n"), std::nullopt);
  // A live thread of this process gives this process.
  {
    ParkedThread t;
    EXPECT_NE(t.tid(), getpid());
    EXPECT_EQ(ReadTgid(t.tid()), getpid());
  }
  EXPECT_EQ(ReadTgid(getpid()), getpid());
  EXPECT_EQ(ReadTgid(0x3fffffff), std::nullopt);
}

TEST(ProcMapsTest, ZombieLeaderShowsNoMappingsButItsThreadsDo) {
  EXPECT_FALSE(HasNoMappings(getpid()));
  EXPECT_FALSE(HasNoMappings(0x3fffffff));  // no such process
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The main thread exits (SYS_exit ends only the calling thread, with no
    // unwinding through the test's frames); the process lives on in its
    // other thread.
    pthread_t t;
    if (pthread_create(&t, nullptr, [](void*) -> void* { for (;;) pause(); }, nullptr) != 0)
      _exit(1);
    syscall(SYS_exit, 0);
  }
  // Wait for the state, bounded generously: a loaded machine may take
  // seconds to run the child at all.
  bool zombie_leader = false;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
       !zombie_leader && std::chrono::steady_clock::now() < deadline;) {
    zombie_leader = HasNoMappings(child);
    if (!zombie_leader) usleep(10000);
  }
  const std::vector<pid_t> threads = ListThreads(child);
  pid_t worker = 0;
  for (pid_t tid : threads) worker = tid != child ? tid : worker;
  const bool worker_listed = worker != 0 && IsThreadOf(child, worker);
  const bool worker_has_mappings = worker != 0 && !HasNoMappings(worker);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(zombie_leader) << "the child's main thread had not exited after 60 s";
  EXPECT_EQ(threads.size(), 2u);
  EXPECT_TRUE(worker_listed);
  EXPECT_TRUE(worker_has_mappings);  // /proc/TID of a live thread shows them
  EXPECT_FALSE(IsThreadOf(child, worker));  // gone with the process
  EXPECT_FALSE(IsThreadOf(getpid(), worker));
}

TEST(ProcMapsTest, ThreadsOfAProcessAreListedUnderIt) {
  pid_t tid;
  {
    ParkedThread t;
    tid = t.tid();
    EXPECT_TRUE(IsThreadOf(getpid(), tid));
    EXPECT_FALSE(IsThreadOf(1, tid));
  }
  // join() returns when the thread's exit clears its tid (CLONE_CHILD_CLEARTID),
  // which the kernel does before it unlists the thread from /proc/PID/task:
  // wait for that state (seen failing in a fresh-clone run that checked once).
  bool gone = false;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       !gone && std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(1))) {
    gone = !IsThreadOf(getpid(), tid);
  }
  EXPECT_TRUE(gone) << "thread " << tid << " still listed 30 s after it was joined";
}

TEST(CaptureHelpersTest, ParsesCpuLists) {
  EXPECT_EQ(ParseCpuList("0-3,5,7-8\n"), (std::vector<int>{0, 1, 2, 3, 5, 7, 8}));
  EXPECT_EQ(ParseCpuList("0\n"), (std::vector<int>{0}));
  EXPECT_TRUE(ParseCpuList("").empty());
  EXPECT_FALSE(OnlineCpus().empty());
}

TEST(CaptureHelpersTest, ParsesControlSpecsAsPerfDoes) {
  auto fifo = ParseControlSpec("fifo:/tmp/ctl,/tmp/ack");
  ASSERT_TRUE(fifo.ok());
  EXPECT_TRUE(fifo->fifo);
  EXPECT_EQ(fifo->ctl, "/tmp/ctl");
  EXPECT_EQ(fifo->ack, "/tmp/ack");
  auto no_ack = ParseControlSpec("fifo:ctl");
  ASSERT_TRUE(no_ack.ok());
  EXPECT_EQ(no_ack->ack, "");
  auto fds = ParseControlSpec("fd:10,11");
  ASSERT_TRUE(fds.ok());
  EXPECT_FALSE(fds->fifo);
  EXPECT_EQ(fds->ctl_fd, 10);
  EXPECT_EQ(fds->ack_fd, 11);
  auto one_fd = ParseControlSpec("fd:7");
  ASSERT_TRUE(one_fd.ok());
  EXPECT_EQ(one_fd->ack_fd, -1);
  for (const char* bad : {"", "fifo:", "fd:", "fd:x", "fd:1,", "fd:-1", "fd:1,y", "pipe:1",
                          "fifo:a,", "fd:99999999999"}) {
    auto r = ParseControlSpec(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().ToString().find("--control"), std::string::npos) << bad;
    }
  }
}

}  // namespace
}  // namespace mmap3
