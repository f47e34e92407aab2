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

std::string ReadWhole(const std::string& path) {
  auto fd = OpenRegularFile(path);
  if (!fd.ok()) return "<" + fd.status().ToString() + ">";
  auto bytes = ReadAllFd(fd->get(), 1 << 20, path);
  return bytes.ok() ? *bytes : "<" + bytes.status().ToString() + ">";
}

// An output named through a symlink (one another user planted in /tmp, say)
// replaces the link, whatever it points at: a regular file keeps its
// bytes, and a device (here /dev/null, in the review a block device) is
// not written.
TEST(OutputTest, ASymlinkIsReplacedNotWrittenThrough) {
  TempDir dir;
  const std::string target = dir.File("target");
  ASSERT_TRUE(ReplaceFile(target, "the target's own bytes").ok());
  for (const std::string& to : {target, std::string("/dev/null")}) {
    SCOPED_TRACE(to);
    const std::string link = dir.File("out.svg");
    unlink(link.c_str());
    ASSERT_EQ(symlink(to.c_str(), link.c_str()), 0);
    auto in_place = OpenOutputInPlace(link);
    ASSERT_TRUE(in_place.ok()) << in_place.status().ToString();
    EXPECT_FALSE(in_place->valid());
    ASSERT_TRUE(ReplaceFile(link, "the output").ok());
    struct stat st;
    ASSERT_EQ(lstat(link.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode)) << "the link is still there";
    EXPECT_EQ(ReadWhole(link), "the output");
  }
  EXPECT_EQ(ReadWhole(target), "the target's own bytes");
}

// A FIFO another user owns is refused before it is opened: its owner would
// read the output, or (no reader) hold the writer forever.
TEST(OutputTest, AnotherUsersFifoIsRefusedWithoutOpeningIt) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give the FIFO to another user";
  TempDir dir;
  const std::string fifo = dir.File("prof.pb.gz");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0666), 0);
  ASSERT_EQ(chown(fifo.c_str(), 65534, 65534), 0);
  // A reader waiting in open() gets through only if the output opens it.
  std::atomic<bool> reader_through{false};
  std::thread reader([&] {
    int r = open(fifo.c_str(), O_RDONLY | O_CLOEXEC);
    reader_through = true;
    if (r >= 0) close(r);
  });
  Status s = ReplaceFile(fifo, "root's profile");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("owned by uid 65534"), std::string::npos) << s.ToString();
  auto in_place = OpenOutputInPlace(fifo);
  EXPECT_FALSE(in_place.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(reader_through) << "the FIFO was opened for writing";
  int w = open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);  // let the reader finish
  reader.join();
  if (w >= 0) close(w);
  struct stat st;
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";
}

// The caller's own descriptors (/dev/stdout, /dev/fd/N, /proc/self/fd/N) are
// written where they are: a pipe gets the bytes, and a file the caller
// opened to append (`>> log`, or a script's header before the output)
// keeps what it had, the output after it (helper-58: opened again, the
// path wrote from offset 0 over the caller's bytes).
TEST(OutputTest, OwnDescriptorsAreWrittenWhereTheyAre) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  UniqueFd r(p[0]), w(p[1]);
  for (const std::string& path :
       {"/proc/self/fd/" + std::to_string(w.get()), "/dev/fd/" + std::to_string(w.get())}) {
    ASSERT_TRUE(ReplaceFile(path, "ok").ok()) << path;
    char buf[8] = {};
    ASSERT_EQ(read(r.get(), buf, sizeof(buf)), 2) << path;
    EXPECT_EQ(std::string(buf, 2), "ok") << path;
  }
  TempDir dir;
  const std::string log = dir.File("log");
  ASSERT_TRUE(ReplaceFile(log, "header\n").ok());
  UniqueFd append(open(log.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
  ASSERT_TRUE(append.valid());
  ASSERT_TRUE(ReplaceFile("/dev/fd/" + std::to_string(append.get()), "output\n").ok());
  UniqueFd plain(open(log.c_str(), O_WRONLY | O_CLOEXEC));
  ASSERT_TRUE(plain.valid());
  ASSERT_EQ(lseek(plain.get(), 0, SEEK_END), 14);
  ASSERT_TRUE(ReplaceFile("/proc/self/fd/" + std::to_string(plain.get()), "footer\n").ok());
  EXPECT_EQ(ReadWhole(log), "header\noutput\nfooter\n");
}

}  // namespace
}  // namespace mmap3
