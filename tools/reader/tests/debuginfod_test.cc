#include "debuginfod.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "dso_store.h"
#include "elf_file.h"
#include "profile.h"
#include "record_writer.h"
#include "fixtures.h"
#include "symbolizer.h"

namespace mmap3 {
namespace {

using testing::Id;
using testing::kIdV1;
using testing::kIdV2;
using testing::TempDir;
using Clock = DebuginfodTransport::Clock;

// Serves files from a table, or fails as told; counts the questions.
class FakeTransport : public DebuginfodTransport {
 public:
  struct Reply {
    int error = 0;
    std::string file;  // copied to a "libdebuginfod cache" file and opened
  };
  std::map<std::pair<DebuginfodKind, std::string>, Reply> replies;  // (kind, hex)
  std::vector<std::string> asked;                                   // "executable <hex>"
  std::string dir;                                                  // its "cache"
  std::function<void()> during;                                     // runs inside Find()
  Clock::time_point last_deadline{};
  bool cancel_at_deadline = false;
  std::function<Clock::time_point()> now;

  Answer Find(DebuginfodKind kind, const BuildId& id, Clock::time_point deadline) override {
    asked.push_back(std::string(DebuginfodKindName(kind)) + " " + id.Hex());
    last_deadline = deadline;
    if (during) during();
    Answer a;
    a.url = "http://fake.invalid";
    if (cancel_at_deadline && now && now() >= deadline) {
      a.error = ECANCELED;
      a.cancelled = true;
      return a;
    }
    auto it = replies.find({kind, id.Hex()});
    if (it == replies.end()) {
      a.error = ENOENT;
      return a;
    }
    if (it->second.error != 0) {
      a.error = it->second.error;
      return a;
    }
    a.path = dir + "/" + id.Hex() + "-" + DebuginfodKindName(kind);
    std::filesystem::copy_file(it->second.file, a.path,
                               std::filesystem::copy_options::overwrite_existing);
    a.fd = UniqueFd(open(a.path.c_str(), O_RDONLY | O_CLOEXEC));
    return a;
  }
};

class DebuginfodTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(served_.path());
    v1_ = dir_.File("v1.so");
    v2_ = dir_.File("v2.so");
    ASSERT_TRUE(testing::BuildSharedLibrary(v1_, "common_fn only_in_v1", kIdV1));
    ASSERT_TRUE(testing::BuildSharedLibrary(v2_, "common_fn only_in_v2", kIdV2));
  }
  // A fetcher over a fake; `fake_` stays reachable.
  DebuginfodFetcher Make(std::string urls = "http://fake.invalid") {
    auto fake = std::make_unique<FakeTransport>();
    fake->dir = served_.path();
    fake->now = [this] { return now_; };
    fake_ = fake.get();
    DebuginfodOptions o;
    o.urls = std::move(urls);
    o.cache_dir = cache_.path();
    o.budget = std::chrono::seconds(10);
    o.now = [this] { return now_; };
    o.on_warning = [this](const std::string& m) { warnings_.push_back(m); };
    return DebuginfodFetcher(std::move(o), std::move(fake));
  }
  // Symbols from the build-id cache and `f`: no debug directory.
  SymbolSearch SearchWith(DebuginfodFetcher& f) {
    SymbolSearch search;
    search.debug_dir = "";
    search.cache_dir = cache_.path();
    search.debuginfod = &f;
    return search;
  }
  TempDir dir_, cache_, served_;
  std::string v1_, v2_;
  FakeTransport* fake_ = nullptr;
  std::vector<std::string> warnings_;
  Clock::time_point now_ = Clock::time_point() + std::chrono::hours(1);
};

TEST_F(DebuginfodTest, OffWhenTheVariableIsUnsetOrBlank) {
  for (const char* urls : {"", "  \t"}) {
    DebuginfodFetcher f = Make(urls);
    fake_->replies[{DebuginfodKind::kExecutable, kIdV1}] = {0, v1_};
    EXPECT_FALSE(f.enabled());
    EXPECT_FALSE(f.Fetch(DebuginfodKind::kExecutable, Id(kIdV1), "/lib/libdemo.so"));
    EXPECT_TRUE(fake_->asked.empty()) << urls;
  }
  EXPECT_TRUE(warnings_.empty());
}

TEST_F(DebuginfodTest, AFileWithTheIdIsKeptInTheCacheAndItsCopyGiven) {
  DebuginfodFetcher f = Make();
  fake_->replies[{DebuginfodKind::kExecutable, kIdV1}] = {0, v1_};
  auto file = f.Fetch(DebuginfodKind::kExecutable, Id(kIdV1), "/lib/libdemo.so");
  ASSERT_TRUE(file);
  EXPECT_EQ(*file, BuildIdCache::LinkPath(cache_.path(), Id(kIdV1)) + "/elf");
  auto elf = ElfFile::Open(cache_.File("lib/libdemo.so/" + std::string(kIdV1) + "/elf"));
  ASSERT_TRUE(elf.ok());
  EXPECT_EQ(elf->build_id(), Id(kIdV1));
  EXPECT_EQ(f.stats().found, 1u);
  EXPECT_TRUE(warnings_.empty());
  // Asked once per (kind, id).
  EXPECT_FALSE(f.Fetch(DebuginfodKind::kExecutable, Id(kIdV1), "/lib/libdemo.so"));
  EXPECT_EQ(fake_->asked.size(), 1u);
}

TEST_F(DebuginfodTest, DebuginfoIsKeptAsPerfsDebugFile) {
  DebuginfodFetcher f = Make();
  fake_->replies[{DebuginfodKind::kDebuginfo, kIdV1}] = {0, v1_};
  auto file = f.Fetch(DebuginfodKind::kDebuginfo, Id(kIdV1), "/lib/libdemo.so");
  ASSERT_TRUE(file);
  EXPECT_EQ(*file, BuildIdCache::LinkPath(cache_.path(), Id(kIdV1)) + "/debug");
  EXPECT_TRUE(std::filesystem::is_regular_file(
      cache_.File("lib/libdemo.so/" + std::string(kIdV1) + "/debug")));
}

TEST_F(DebuginfodTest, AFileWithAnotherIdIsRefusedOnceSaidAndNotKept) {
  DebuginfodFetcher f = Make();
  // The server answers v1's id with v2's file, and then with a text file.
  fake_->replies[{DebuginfodKind::kExecutable, kIdV1}] = {0, v2_};
  testing::WriteFile(dir_.File("text"), "not an ELF file\n");
  fake_->replies[{DebuginfodKind::kExecutable, kIdV2}] = {0, dir_.File("text")};
  EXPECT_FALSE(f.Fetch(DebuginfodKind::kExecutable, Id(kIdV1), "/lib/libdemo.so"));
  EXPECT_FALSE(f.Fetch(DebuginfodKind::kExecutable, Id(kIdV2), "/lib/libdemo.so"));
  EXPECT_EQ(f.stats().refused, 2u);
  EXPECT_TRUE(f.failed());
  EXPECT_EQ(f.stats().found, 0u);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_EQ(warnings_[0], fmt::format("debuginfod: http://fake.invalid sent a file with build-id {} "
                                      "as the executable of {}; not used (further refusals are "
                                      "only counted; exit status 1)",
                                      kIdV2, kIdV1));
  // Nothing in the reader's cache; libdebuginfod's copy is gone.
  EXPECT_FALSE(std::filesystem::exists(BuildIdCache::LinkPath(cache_.path(), Id(kIdV1))));
  EXPECT_FALSE(std::filesystem::exists(served_.File(std::string(kIdV1) + "-executable")));
  // A refusal is not a dead server: the next id is still asked.
  EXPECT_EQ(fake_->asked.size(), 2u);
}

TEST_F(DebuginfodTest, NotFoundIsNoWarningAndTheNextIdIsAsked) {
  DebuginfodFetcher f = Make();
  fake_->replies[{DebuginfodKind::kExecutable, kIdV2}] = {0, v2_};
  EXPECT_FALSE(f.Fetch(DebuginfodKind::kExecutable, Id(kIdV1), "/lib/a.so"));
  EXPECT_TRUE(f.Fetch(DebuginfodKind::kExecutable, Id(kIdV2), "/lib/b.so"));
  EXPECT_EQ(f.stats().not_found, 1u);
  EXPECT_TRUE(warnings_.empty());
  EXPECT_FALSE(f.failed()) << "not found is no failure: exit status 0";
}

TEST_F(DebuginfodTest, AFailedServerIsOneWarningAndNotAskedAgain) {
  DebuginfodFetcher f = Make();
  fake_->replies[{DebuginfodKind::kExecutable, kIdV1}] = {ECONNREFUSED, ""};
  fake_->replies[{DebuginfodKind::kExecutable, kIdV2}] = {0, v2_};
  EXPECT_FALSE(f.Fetch(DebuginfodKind::kExecutable, Id(kIdV1), "/lib/a.so"));
  EXPECT_FALSE(f.Fetch(DebuginfodKind::kExecutable, Id(kIdV2), "/lib/b.so"));
  EXPECT_FALSE(f.Fetch(DebuginfodKind::kDebuginfo, Id(kIdV2), "/lib/b.so"));
  EXPECT_EQ(fake_->asked.size(), 1u);
  EXPECT_EQ(f.stats().failed, 1u);
  EXPECT_TRUE(f.failed());
  EXPECT_EQ(f.stats().skipped, 2u);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_EQ(warnings_[0], fmt::format("debuginfod: http://fake.invalid: {} (asking for the "
                                      "executable of {}); no more build-ids are asked for in this "
                                      "report (exit status 1)",
                                      std::strerror(ECONNREFUSED), kIdV1));
}

TEST_F(DebuginfodTest, TheBudgetCoversAllQuestionsOfAReport) {
  DebuginfodFetcher f = Make();
  fake_->replies[{DebuginfodKind::kExecutable, kIdV1}] = {0, v1_};
  fake_->replies[{DebuginfodKind::kExecutable, kIdV2}] = {0, v2_};
  const Clock::time_point start = now_;
  // The first question takes 6 s of the 10: it gets the whole budget.
  fake_->during = [this] { now_ += std::chrono::seconds(6); };
  EXPECT_TRUE(f.Fetch(DebuginfodKind::kExecutable, Id(kIdV1), "/lib/a.so"));
  EXPECT_EQ(fake_->last_deadline, start + std::chrono::seconds(10));
  // The second gets what is left, the same deadline, and runs into it.
  fake_->cancel_at_deadline = true;
  EXPECT_FALSE(f.Fetch(DebuginfodKind::kExecutable, Id(kIdV2), "/lib/b.so"));
  EXPECT_EQ(fake_->last_deadline, start + std::chrono::seconds(10));
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_EQ(warnings_[0], fmt::format("debuginfod: 10 s spent waiting for http://fake.invalid "
                                      "(asking for the executable of {}); no more build-ids are "
                                      "asked for in this report (exit status 1)",
                                      kIdV2));
  // Nothing after it.
  EXPECT_FALSE(f.Fetch(DebuginfodKind::kDebuginfo, Id(kIdV2), "/lib/b.so"));
  EXPECT_EQ(fake_->asked.size(), 2u);
}

TEST_F(DebuginfodTest, ABudgetSpentBeforeAQuestionAsksNothing) {
  DebuginfodFetcher f = Make();
  fake_->during = [this] { now_ += std::chrono::seconds(11); };
  EXPECT_FALSE(f.Fetch(DebuginfodKind::kExecutable, Id(kIdV1), "/lib/a.so"));  // ENOENT, late
  EXPECT_FALSE(f.Fetch(DebuginfodKind::kExecutable, Id(kIdV2), "/lib/b.so"));
  EXPECT_EQ(fake_->asked.size(), 1u);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_EQ(warnings_[0], "debuginfod: 10 s spent waiting for http://fake.invalid; no more "
                          "build-ids are asked for in this report (exit status 1)");
  EXPECT_TRUE(f.failed());
}

TEST_F(DebuginfodTest, WithoutACacheLibdebuginfodsCopyIsGiven) {
  auto fake = std::make_unique<FakeTransport>();
  fake->dir = served_.path();
  fake->replies[{DebuginfodKind::kExecutable, kIdV1}] = {0, v1_};
  DebuginfodOptions o;
  o.urls = "http://fake.invalid";
  DebuginfodFetcher f(std::move(o), std::move(fake));
  auto file = f.Fetch(DebuginfodKind::kExecutable, Id(kIdV1), "/lib/a.so");
  ASSERT_TRUE(file);
  EXPECT_EQ(*file, served_.File(std::string(kIdV1) + "-executable"));
}

// The symbol search asks only when no local file has the id, and what it
// gets is checked like any candidate.
TEST_F(DebuginfodTest, TheStoreAsksOnlyForWhatNoLocalFileHas) {
  DebuginfodFetcher f = Make();
  fake_->replies[{DebuginfodKind::kExecutable, kIdV1}] = {0, v1_};
  fake_->replies[{DebuginfodKind::kExecutable, kIdV2}] = {0, v2_};
  // The library's path now holds v2: v2 is local, v1 (replaced) is not.
  const std::string lib = dir_.File("libdemo.so");
  std::filesystem::copy_file(v2_, lib);
  const SymbolSearch search = SearchWith(f);
  DsoStore store(search);
  Symbolizer sym(store);
  MappedObject o1{lib, Id(kIdV1)}, o2{lib, Id(kIdV2)};
  sym.Declare(o1);
  sym.Declare(o2);
  EXPECT_EQ(sym.Symbolize(o2, testing::FunctionFileOffset(v2_, "only_in_v2")), "only_in_v2");
  EXPECT_EQ(sym.Symbolize(o1, testing::FunctionFileOffset(v1_, "only_in_v1")), "only_in_v1");
  ASSERT_EQ(fake_->asked, std::vector<std::string>{"executable " + std::string(kIdV1)});
  std::map<std::string, SymbolSource> sources;
  for (const Dso* d : store.LoadedDsos()) sources[d->build_id.Hex()] = d->symbol_source;
  EXPECT_EQ(sources[kIdV1], SymbolSource::kDebuginfod);
  EXPECT_EQ(sources[kIdV2], SymbolSource::kRecordedPath);
}

TEST_F(DebuginfodTest, TheStoreRefusesWhatTheServerSendsForAnotherId) {
  DebuginfodFetcher f = Make();
  fake_->replies[{DebuginfodKind::kExecutable, kIdV1}] = {0, v2_};
  fake_->replies[{DebuginfodKind::kDebuginfo, kIdV1}] = {0, v2_};
  const SymbolSearch search = SearchWith(f);
  DsoStore store(search);
  Symbolizer sym(store);
  MappedObject o1{dir_.File("gone.so"), Id(kIdV1)};
  const uint64_t offset = testing::FunctionFileOffset(v2_, "only_in_v2");
  EXPECT_EQ(sym.Lookup(o1, offset).status, SymbolStatus::kNoFile);
  EXPECT_EQ(f.stats().refused, 1u);  // the debuginfo is pointless without an image
}

TEST_F(DebuginfodTest, AStrippedImageFromTheServerIsCompletedByItsDebuginfo) {
  // The image the server has is stripped (dynsym only); its debuginfo has
  // the .symtab with the local function.
  const std::string full = dir_.File("full.so"), stripped = dir_.File("stripped.so");
  ASSERT_TRUE(testing::CompileC("static int __attribute__((noinline)) hidden_fn(int x) { return x * 7; }\n"
                                "int exported_fn(int x) { return hidden_fn(x) + 1; }\n",
                                full, fmt::format("-O1 -shared -fPIC -Wl,--build-id=0x{}", kIdV1)));
  ASSERT_EQ(std::system(fmt::format("strip -s -o {} {}", stripped, full).c_str()), 0);
  DebuginfodFetcher f = Make();
  fake_->replies[{DebuginfodKind::kExecutable, kIdV1}] = {0, stripped};
  fake_->replies[{DebuginfodKind::kDebuginfo, kIdV1}] = {0, full};
  const SymbolSearch search = SearchWith(f);
  DsoStore store(search);
  Symbolizer sym(store);
  MappedObject o{dir_.File("gone.so"), Id(kIdV1)};
  EXPECT_EQ(sym.Symbolize(o, testing::FunctionFileOffset(full, "hidden_fn")), "hidden_fn");
  EXPECT_EQ(fake_->asked, (std::vector<std::string>{"executable " + std::string(kIdV1),
                                                     "debuginfo " + std::string(kIdV1)}));
}

// libdebuginfod itself, against sockets on 127.0.0.1: a closed port fails
// at once; a server that accepts and never answers is cut at the deadline
// by the progress callback, not by libdebuginfod's own timeout (90 s).
class LibDebuginfodTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"DEBUGINFOD_URLS", "DEBUGINFOD_CACHE_PATH", "DEBUGINFOD_TIMEOUT",
                          "DEBUGINFOD_RETRY_LIMIT", "DEBUGINFOD_PROGRESS", "DEBUGINFOD_VERBOSE"}) {
      if (const char* old = std::getenv(v)) saved_[v] = old;
      unsetenv(v);
    }
    setenv("DEBUGINFOD_CACHE_PATH", cache_.path().c_str(), 1);
  }
  void TearDown() override {
    for (const char* v : {"DEBUGINFOD_URLS", "DEBUGINFOD_CACHE_PATH"}) unsetenv(v);
    for (const auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
  }
  // A listening socket on 127.0.0.1 (never accepted: the kernel completes
  // the handshake, nothing is ever sent); its port.
  int Listen(UniqueFd* fd) {
    *fd = UniqueFd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (!fd->valid() || bind(fd->get(), reinterpret_cast<sockaddr*>(&a), len) != 0 ||
        listen(fd->get(), 8) != 0 ||
        getsockname(fd->get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
      return 0;
    return ntohs(a.sin_port);
  }
  TempDir cache_;
  std::map<std::string, std::string> saved_;
};

TEST_F(LibDebuginfodTest, AClosedPortFailsAtOnce) {
  UniqueFd fd;
  const int port = Listen(&fd);
  ASSERT_NE(port, 0);
  fd = UniqueFd();  // closed: connections are refused
  setenv("DEBUGINFOD_URLS", fmt::format("http://127.0.0.1:{}", port).c_str(), 1);
  auto t = MakeLibDebuginfodTransport();
  const auto start = Clock::now();
  auto a = t->Find(DebuginfodKind::kExecutable, Id(kIdV1), start + std::chrono::seconds(60));
  EXPECT_NE(a.error, 0);
  EXPECT_NE(a.error, ENOENT);
  EXPECT_FALSE(a.cancelled);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
}

TEST_F(LibDebuginfodTest, AServerThatNeverAnswersIsCutAtTheDeadline) {
  UniqueFd fd;
  const int port = Listen(&fd);
  ASSERT_NE(port, 0);
  setenv("DEBUGINFOD_URLS", fmt::format("http://127.0.0.1:{}", port).c_str(), 1);
  auto t = MakeLibDebuginfodTransport();
  const auto start = Clock::now();
  auto a = t->Find(DebuginfodKind::kExecutable, Id(kIdV1), start + std::chrono::seconds(1));
  const auto took = Clock::now() - start;
  EXPECT_TRUE(a.cancelled) << a.error;
  EXPECT_NE(a.error, 0);
  EXPECT_GE(took, std::chrono::seconds(1));
  // The callback runs at least once a second; libdebuginfod's own timeout
  // would be 90 s.
  EXPECT_LT(took, std::chrono::seconds(10));
}

// A report's objects are asked for in build-id order, before the rows are
// built, so that what a server that then fails or runs out of time was
// asked for is the same in every report of the file.  With --children and
// no -g the callers live only in the profile's chain table, and they were
// left to the rows' walk over it, whose order is their objects' addresses:
// here the objects are recorded in the reverse of build-id order.
TEST_F(DebuginfodTest, AReportAsksForCallersTooInBuildIdOrder) {
  DebuginfodFetcher f = Make();
  const SampleFormat format{PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                                PERF_SAMPLE_PERIOD | PERF_SAMPLE_CALLCHAIN,
                            0, true};
  ProfileOptions o;
  o.controls.children = true;  // and no callchains: the report's rows only
  Profile p(o);
  p.SetFormat(format);
  CommRecord c;
  c.pid = c.tid = 7;
  c.comm = "app";
  c.sample_id = testing::Sid(7, 1);
  p.Process(EncodeComm(c, format));
  constexpr uint64_t kLeaf = 0x400000, kCallers = 0x7f0000000000;
  auto map = [&](uint64_t start, const std::string& path, const char* id, uint64_t time) {
    MmapRecord m;
    m.format = id != nullptr ? MmapFormat::kMmap2BuildId : MmapFormat::kMmap2;
    m.misc = PERF_RECORD_MISC_USER;
    m.pid = m.tid = 7;
    m.start = start;
    m.len = 0x10000;
    if (id != nullptr) m.build_id = testing::Id(id);
    m.filename = path;
    m.sample_id = testing::Sid(7, time);
    p.Process(EncodeMmap(m, format));
  };
  map(kLeaf, "/nonexistent/app", nullptr, 2);  // no build-id: never asked for
  const char* ids[] = {testing::kIdV3, testing::kIdV2, testing::kIdV1};
  for (int i = 0; i < 3; ++i)
    map(kCallers + i * 0x100000, fmt::format("/nonexistent/lib{}.so", i), ids[i], 3 + i);
  for (int i = 0; i < 3; ++i) {
    SampleRecord s;
    s.misc = PERF_RECORD_MISC_USER;
    s.pid = s.tid = 7;
    s.ip = kLeaf + 0x10;
    s.time = 10 + i;
    s.period = 1;
    const std::vector<uint64_t> chain{static_cast<uint64_t>(PERF_CONTEXT_USER), s.ip,
                                      kCallers + i * 0x100000 + 0x20};
    p.Process(EncodeSample(s, chain, format));
  }
  const SymbolSearch search = SearchWith(f);
  DsoStore store(search);
  Symbolizer sym(store);
  const ReportModel m = p.BuildReport(sym, "t");
  EXPECT_EQ(m.samples, 3u);
  std::vector<std::string> executables;
  for (const std::string& a : fake_->asked)
    if (a.starts_with("executable ")) executables.push_back(a.substr(11));
  EXPECT_EQ(executables,
            (std::vector<std::string>{testing::kIdV1, testing::kIdV2, testing::kIdV3}));
}

}  // namespace
}  // namespace mmap3
