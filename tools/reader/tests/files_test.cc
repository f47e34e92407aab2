#include "files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixtures.h"

namespace mmap3 {
namespace {

using testing::TempDir;

TEST(OpenRegularFileTest, OpensARegularFile) {
  TempDir dir;
  testing::WriteFile(dir.File("f"), "data");
  auto fd = OpenRegularFile(dir.File("f"));
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  char buf[8];
  EXPECT_EQ(read(*fd, buf, sizeof(buf)), 4);
  close(*fd);
}

TEST(OpenRegularFileTest, RefusesAFifoWithoutWaitingForAWriter) {
  // Blocking open() of a FIFO with no writer never returns: the test would
  // hang, not fail, if the open blocked.
  TempDir dir;
  ASSERT_EQ(mkfifo(dir.File("fifo").c_str(), 0600), 0);
  auto fd = OpenRegularFile(dir.File("fifo"));
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().ToString().find("a FIFO"), std::string::npos) << fd.status().ToString();
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
