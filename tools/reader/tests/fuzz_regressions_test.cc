// Replays every input the fuzzers (make fuzz) ever crashed on, kept under
// tools/reader/fuzz/regressions/<harness>/, through the same harness code
// (fuzz/fuzz_targets.cc) the fuzzers run, so make reader-test checks each in
// both of its builds without libFuzzer.  Each input runs in a child process:
// a crash, an abort from a broken check or a sanitizer report fails that
// input's test, named after its file, and not the whole suite.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fixtures.h"
#include "fuzz_targets.h"

namespace mmap3 {
namespace {

using Harness = void (*)(const uint8_t*, size_t);

struct Input {
  std::string harness;  // directory name: perf_data, records, elf
  std::string path;
};

Harness HarnessNamed(const std::string& name) {
  if (name == "perf_data") return fuzz::FuzzPerfData;
  if (name == "records") return fuzz::FuzzRecords;
  if (name == "elf") return fuzz::FuzzElf;
  return nullptr;
}

const char* const kHarnesses[] = {"perf_data", "records", "elf"};

std::vector<Input> Regressions() {
  std::vector<Input> out;
  const std::filesystem::path root = MMAP3_FUZZ_REGRESSIONS;
  std::error_code ec;
  for (const auto& dir : std::filesystem::directory_iterator(root, ec)) {
    if (!dir.is_directory()) continue;
    for (const auto& f : std::filesystem::directory_iterator(dir.path(), ec)) {
      if (f.is_regular_file() && f.path().filename() != "README")
        out.push_back({dir.path().filename().string(), f.path().string()});
    }
  }
  std::sort(out.begin(), out.end(), [](const Input& a, const Input& b) { return a.path < b.path; });
  return out;
}

// Runs `harness` on `bytes` in a child; "" if it returned, else how it died.
// The child's scratch files go to a directory of ours (it leaves by _exit,
// which runs no destructors).
std::string RunInChild(Harness harness, const std::string& bytes) {
  testing::TempDir tmp;
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    setenv("TMPDIR", tmp.path().c_str(), 1);
    harness(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    _exit(0);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return "waitpid failed";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class FuzzRegressionTest : public ::testing::TestWithParam<Input> {};

TEST_P(FuzzRegressionTest, ReplaysCleanly) {
  const Input& in = GetParam();
  const Harness harness = HarnessNamed(in.harness);
  ASSERT_NE(harness, nullptr) << in.path << ": no harness named " << in.harness
                              << " (directories: perf_data, records, elf)";
  const std::string bytes = ReadAll(in.path);
  EXPECT_EQ(RunInChild(harness, bytes), "")
      << in.path << " (reproduce with build/reader-fuzz/mmap3_fuzz_" << in.harness << " "
      << in.path << ")";
}

INSTANTIATE_TEST_SUITE_P(Inputs, FuzzRegressionTest, ::testing::ValuesIn(Regressions()),
                         [](const ::testing::TestParamInfo<Input>& info) {
                           std::string name = info.param.harness + "_" +
                               std::filesystem::path(info.param.path).filename().string();
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FuzzRegressionTest);

// The replay itself works: a child that crashes is told apart from one that
// returns, and every harness takes empty and short inputs.
TEST(FuzzRegressionReplayTest, TellsACrashFromAReturn) {
  EXPECT_NE(RunInChild([](const uint8_t*, size_t) { std::abort(); }, ""), "");
  for (const char* name : kHarnesses) {
    SCOPED_TRACE(name);
    EXPECT_EQ(RunInChild(HarnessNamed(name), ""), "");
    EXPECT_EQ(RunInChild(HarnessNamed(name), std::string(64, '\0')), "");
  }
}

// A real ELF file (this test binary) goes through the ELF harness's checks.
TEST(FuzzRegressionReplayTest, ElfHarnessAcceptsARealFile) {
  EXPECT_EQ(RunInChild(fuzz::FuzzElf, ReadAll("/proc/self/exe")), "");
}

}  // namespace
}  // namespace mmap3
