#include "report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

namespace mmap3 {
namespace {

ReportModel Model() {
  ReportModel m;
  m.mode = "mmap2-build-id";
  m.samples = 4;
  m.lost_records = 2;
  m.event_lost = 2;
  m.mappings_by_source[static_cast<int>(BuildIdSource::kMmap2)] = 1;
  m.mappings_by_source[static_cast<int>(BuildIdSource::kMapFiles)] = 1;
  ReportRow a;
  a.samples = 3;
  a.percent = 75;
  a.comm = "app";
  a.path = "/usr/lib/libfoo.so.1";
  a.build_id = *BuildId::FromHex("0123456789abcdef0123456789abcdef01234567");
  a.symbol = "foo_work";
  a.source = BuildIdSource::kMmap2;
  ReportRow b;
  b.samples = 1;
  b.percent = 25;
  b.comm = "app";
  b.path = "/bin/app";
  b.symbol = "[unknown]+0x10";
  b.symbol_status = SymbolStatus::kNoBuildId;
  m.rows = {a, b};
  m.mappings.push_back({12, 0x1000, 0x2000, 0, "/usr/lib/libfoo.so.1", a.build_id,
                        BuildIdSource::kMapFiles});
  m.stacks.push_back({"app;main;foo_work", 3});
  return m;
}

TEST(ReportTest, TextTableShowsShortBuildIdsInOrder) {
  std::ostringstream out;
  WriteTextReport(Model(), out);
  std::string s = out.str();
  EXPECT_NE(s.find("mode: mmap2-build-id"), std::string::npos);
  EXPECT_NE(s.find("libfoo.so.1 (0123456789ab)"), std::string::npos);
  EXPECT_NE(s.find("app (no build-id)"), std::string::npos);
  EXPECT_NE(s.find("75.00%"), std::string::npos);
  EXPECT_LT(s.find("foo_work"), s.find("[unknown]+0x10"));
  EXPECT_NE(s.find("map_files=1"), std::string::npos);
  EXPECT_EQ(s.find("# startup:"), std::string::npos);  // unknown: no line
}

TEST(ReportTest, StartupIsShownWhenKnown) {
  ReportModel m = Model();
  m.startup = StartupStats{1009, 0.14, 168};
  std::ostringstream text;
  WriteTextReport(m, text);
  EXPECT_NE(text.str().find("# startup: mappings of 1009 processes read in 0.14 s, 168 records "
                            "drained meanwhile\n"),
            std::string::npos)
      << text.str();
  std::ostringstream out;
  WriteJsonReport(m, out);
  auto j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j["capture"]["startup"]["processes"], 1009);
  EXPECT_EQ(j["capture"]["startup"]["records_drained"], 168);
  EXPECT_DOUBLE_EQ(j["capture"]["startup"]["seconds"].get<double>(), 0.14);
}

TEST(ReportTest, JsonFollowsTheDocumentedSchema) {
  std::ostringstream out;
  WriteJsonReport(Model(), out);
  auto j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j["schema"], "mmap3-reader-report/1");
  EXPECT_EQ(j["capture"]["mode"], "mmap2-build-id");
  EXPECT_EQ(j["capture"]["samples"], 4);
  EXPECT_EQ(j["capture"]["lost_records"], 2);
  EXPECT_EQ(j["capture"]["event_lost"], 2);
  EXPECT_TRUE(j["capture"]["startup"].is_null());
  EXPECT_EQ(j["capture"]["mappings_by_source"]["map_files"], 1);
  EXPECT_EQ(j["capture"]["mappings"][0]["start"], "0x1000");
  EXPECT_EQ(j["capture"]["mappings"][0]["source"], "map_files");
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][0]["build_id"], "0123456789abcdef0123456789abcdef01234567");  // full
  EXPECT_EQ(j["rows"][0]["path"], "/usr/lib/libfoo.so.1");
  EXPECT_EQ(j["rows"][0]["symbol"], "foo_work");
  EXPECT_EQ(j["rows"][0]["samples"], 3);
  EXPECT_EQ(j["rows"][0]["symbol_status"], "found");
  EXPECT_EQ(j["rows"][1]["build_id"], "");
  EXPECT_EQ(j["rows"][1]["symbol_status"], "no_build_id");
}

TEST(ReportTest, SymbolFilesFromDebuginfodAreSaidInTextAndJson) {
  ReportModel m = Model();
  const BuildId id = *BuildId::FromHex("0123456789abcdef0123456789abcdef01234567");
  const BuildId other = *BuildId::FromHex("89abcdef0123456789abcdef0123456789abcdef");
  m.symbol_files = {{id, "/usr/lib/libfoo.so.1", "/c/.build-id/01/23/elf", SymbolSource::kDebuginfod},
                    {other, "/usr/bin/app", "/usr/bin/app", SymbolSource::kRecordedPath}};
  std::ostringstream text;
  WriteTextReport(m, text);
  EXPECT_NE(text.str().find("\n# symbols from debuginfod (DEBUGINFOD_URLS): libfoo.so.1 (0123456789ab)\n"),
            std::string::npos)
      << text.str();
  std::ostringstream out;
  WriteJsonReport(m, out);
  auto j = nlohmann::json::parse(out.str());
  const auto& files = j["capture"]["symbol_files"];
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0]["source"], "debuginfod");
  EXPECT_EQ(files[0]["build_id"], id.Hex());
  EXPECT_EQ(files[0]["file"], "/c/.build-id/01/23/elf");
  EXPECT_EQ(files[1]["source"], "recorded_path");
  // Without one from debuginfod, no line.
  m.symbol_files.erase(m.symbol_files.begin());
  std::ostringstream plain;
  WriteTextReport(m, plain);
  EXPECT_EQ(plain.str().find("debuginfod"), std::string::npos);
}

// Two rows whose paths differ only in bytes that are not UTF-8 (and a
// comm and symbol such as a process may have) stay two different strings:
// escaped as pprof's are, never both turned into U+FFFD.
TEST(ReportTest, JsonKeepsNamesThatAreNotUtf8Distinct) {
  ReportModel m = Model();
  m.rows[0].path = "/tmp/\xff\xfe.so";
  m.rows[1].path = "/tmp/\xfe\xff.so";
  m.rows[0].comm = "a\\b\x80";
  m.rows[1].symbol = "caf\xc3\xa9";  // UTF-8 stays as it is
  m.mappings[0].path = "/tmp/\xff\xfe.so";
  std::ostringstream out;
  WriteJsonReport(m, out);
  nlohmann::json d;
  ASSERT_NO_THROW(d = nlohmann::json::parse(out.str()));
  EXPECT_EQ(d["rows"][0]["path"], "/tmp/\\xff\\xfe.so");
  EXPECT_EQ(d["rows"][1]["path"], "/tmp/\\xfe\\xff.so");
  EXPECT_EQ(d["rows"][0]["comm"], "a\\\\b\\x80");
  EXPECT_EQ(d["rows"][1]["symbol"], "caf\xc3\xa9");
  EXPECT_EQ(d["capture"]["mappings"][0]["path"], "/tmp/\\xff\\xfe.so");
  EXPECT_EQ(d["rows"][1]["comm"], "app");
}

TEST(ReportTest, FoldedIsOneLinePerStack) {
  std::ostringstream out;
  WriteFoldedReport(Model(), out);
  EXPECT_EQ(out.str(), "app;main;foo_work 3\n");
}

}  // namespace
}  // namespace mmap3
