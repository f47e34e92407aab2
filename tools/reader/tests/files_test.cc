#include "files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "fixtures.h"

namespace mmap3 {
namespace {

using testing::TempDir;

// Whether `fd` is an open descriptor of this process.
bool IsOpen(int fd) { return fcntl(fd, F_GETFD) != -1; }

TEST(UniqueFdTest, ClosesWhenItsOwnerGoes) {
  int raw = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(raw, 0);
  {
    UniqueFd fd(raw);
    EXPECT_TRUE(fd.valid());
    EXPECT_EQ(fd.get(), raw);
  }
  EXPECT_FALSE(IsOpen(raw));
}

TEST(UniqueFdTest, MovesOwnershipWithoutClosing) {
  int raw = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(raw, 0);
  UniqueFd a(raw);
  UniqueFd b(std::move(a));
  EXPECT_FALSE(a.valid());  // NOLINT: checking the moved-from state is the point
  EXPECT_EQ(b.get(), raw);
  EXPECT_TRUE(IsOpen(raw));
  // Assigning over an owner closes what it held.
  int other = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(other, 0);
  UniqueFd c(other);
  c = std::move(b);
  EXPECT_FALSE(IsOpen(other));
  EXPECT_TRUE(IsOpen(raw));
  EXPECT_EQ(c.get(), raw);
  const int released = c.Release();
  EXPECT_FALSE(c.valid());
  EXPECT_TRUE(IsOpen(released));  // no longer owned: still open
  close(released);
}

TEST(UniqueFdTest, CloseReportsAndForgets) {
  int raw = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(raw, 0);
  UniqueFd fd(raw);
  EXPECT_TRUE(fd.Close("/dev/null").ok());
  EXPECT_FALSE(fd.valid());
  EXPECT_FALSE(IsOpen(raw));
  EXPECT_TRUE(fd.Close("/dev/null").ok());  // nothing left to close
}

TEST(OpenRegularFileTest, OpensARegularFile) {
  TempDir dir;
  testing::WriteFile(dir.File("f"), "data");
  auto fd = OpenRegularFile(dir.File("f"));
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  char buf[8];
  EXPECT_EQ(read(fd->get(), buf, sizeof(buf)), 4);
}

TEST(OpenRegularFileTest, RefusesAFifoWithoutOpeningIt) {
  // A writer blocked in open() is released by any reader's open(): if the
  // FIFO were opened for reading (blocking or not), the writer would get
  // through.  Refusing must not open it at all.
  TempDir dir;
  const std::string fifo = dir.File("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::atomic<bool> writer_through{false};
  std::thread writer([&] {
    int w = open(fifo.c_str(), O_WRONLY | O_CLOEXEC);  // blocks until a reader opens
    writer_through = true;
    if (w >= 0) close(w);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the writer is waiting
  auto fd = OpenRegularFile(fifo);
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().ToString().find("a FIFO"), std::string::npos) << fd.status().ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(writer_through) << "the FIFO was opened for reading";
  int r = open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // let the writer finish
  writer.join();
  if (r >= 0) close(r);
}

TEST(OpenRegularFileTest, ReadsADeletedFileThroughMapFiles) {
  // map_files entries of deleted files are what the capture opens when a
  // library was replaced; the reopen through /proc/self/fd must work.
  TempDir dir;
  const std::string path = dir.File("gone");
  testing::WriteFile(path, "data");
  int keep = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(keep, 0);
  unlink(path.c_str());
  auto fd = OpenRegularFile("/proc/self/fd/" + std::to_string(keep));
  close(keep);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  char buf[8];
  EXPECT_EQ(read(fd->get(), buf, sizeof(buf)), 4);
}

TEST(OpenRegularFileTest, RefusesDirectoriesAndDevices) {
  TempDir dir;
  auto d = OpenRegularFile(dir.path());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().ToString().find("a directory"), std::string::npos);
  auto c = OpenRegularFile("/dev/null");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().ToString().find("a character device"), std::string::npos);
  EXPECT_FALSE(OpenRegularFile(dir.File("missing")).ok());
}

}  // namespace
}  // namespace mmap3
