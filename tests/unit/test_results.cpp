#include <gtest/gtest.h>

#include <sys/stat.h>

#include <thread>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/results.hpp"
#include "test_data.hpp"

using namespace gpu_basics;
using namespace gpu_basics::presentation;

namespace {
table sample_table() {
  table t;
  t.id = "h2d";
  t.title = "Host to device";
  t.columns = {{"size_bytes", "size (B)"},
               {"bandwidth_bytes_per_s", "GB/s", 1e-9, 1},
               {"pinned", "pinned"},
               {"label", "label"},
               {"link_percent", "% link", 1.0, 1}};
  t.add_row({std::int64_t{1048576}, 12.34e9, true, std::string("a, \"quoted\""), std::monostate{}});
  t.add_row({std::int64_t{268435456}, 55.4e9, false, std::string("b"), 87.9});
  t.notes.push_back("Pinned memory is DMA'd directly.");
  return t;
}

using gpu_basics::testing::slurp;

struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    path = std::filesystem::temp_directory_path() /
           ("gpu_basics_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path);
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
};
}  // namespace

TEST(Results, RowWidthMustMatchColumns) {
  table t = sample_table();
  EXPECT_THROW(t.add_row({std::int64_t{1}}), logic_error);
}

TEST(Results, JsonKeepsNumbersAsNumbersAndNullForNoValue) {
  const nlohmann::json j = to_json(sample_table());
  EXPECT_EQ(j["id"], "h2d");
  const auto& r0 = j["rows"][0];
  EXPECT_TRUE(r0["size_bytes"].is_number_integer());
  EXPECT_EQ(r0["size_bytes"].get<std::int64_t>(), 1048576);
  EXPECT_TRUE(r0["bandwidth_bytes_per_s"].is_number_float());
  EXPECT_DOUBLE_EQ(r0["bandwidth_bytes_per_s"].get<double>(), 12.34e9);  // base units, not GB/s
  EXPECT_TRUE(r0["pinned"].is_boolean());
  EXPECT_TRUE(r0["link_percent"].is_null());
  EXPECT_DOUBLE_EQ(j["rows"][1]["link_percent"].get<double>(), 87.9);
  EXPECT_EQ(j["notes"][0], "Pinned memory is DMA'd directly.");
}

TEST(Results, NonFiniteDoublesBecomeNull) {
  table t;
  t.id = "x";
  t.columns = {{"v", "v"}};
  t.add_row({std::numeric_limits<double>::quiet_NaN()});
  EXPECT_TRUE(to_json(t)["rows"][0]["v"].is_null());
}

TEST(Results, AtomicWriteCreatesParentsAndLeavesNoTemporary) {
  temp_dir d;
  const nlohmann::json j = {{"tables", nlohmann::json::array({to_json(sample_table())})}};
  const auto path = (d.path / "sub" / "out.json").string();
  write_file_atomically(path, j.dump(2));
  const nlohmann::json back = nlohmann::json::parse(slurp(path));
  EXPECT_EQ(back, j);
  // No temporary file is left beside it.
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(d.path / "sub"))
    ++files;
  EXPECT_EQ(files, 1u);
}

TEST(Results, WriteIntoADirectoryPathFailsCleanly) {
  temp_dir d;
  std::filesystem::create_directories(d.path / "taken");
  EXPECT_THROW(write_file_atomically((d.path / "taken").string(), "x"), io_error);
}

TEST(Results, SpecialFilesAreWrittenInPlaceNotReplaced) {
  temp_dir d;
  std::filesystem::create_directories(d.path);
  const std::string fifo = (d.path / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_TRUE(writes_in_place(fifo));
  EXPECT_TRUE(writes_in_place("/dev/null"));
  EXPECT_TRUE(writes_in_place("/dev/stdout"));  // whatever stdout is, never renamed over
  EXPECT_FALSE(writes_in_place((d.path / "new.json").string()));
  std::string got;
  std::thread reader([&] { got = slurp(fifo); });
  write_file_atomically(fifo, "through the fifo\n");
  reader.join();
  EXPECT_EQ(got, "through the fifo\n");
  struct stat st {};
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));  // still a FIFO, not a regular file renamed over it
  write_file_atomically("/dev/null", "discarded");
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  std::size_t files = 0;  // no temporary left beside the FIFO
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(d.path)) ++files;
  EXPECT_EQ(files, 1u);
}

TEST(Results, OutputPathsAreCheckedWithoutWriting) {
  temp_dir d;
  std::filesystem::create_directories(d.path);
  const auto p = [&](const std::string& rel) { return (d.path / rel).string(); };
  std::ofstream(p("file")) << "x";
  std::filesystem::create_directories(p("dir"));
  EXPECT_NO_THROW(check_writable(p("new.json")));
  EXPECT_NO_THROW(check_writable(p("missing/sub/new.json")));  // directories made when writing
  EXPECT_NO_THROW(check_writable(p("file")));
  EXPECT_NO_THROW(check_writable("/dev/null"));
  EXPECT_NO_THROW(check_writable_directory(p("dir")));
  EXPECT_NO_THROW(check_writable_directory(p("missing/results")));
  const auto message = [](const auto& f) {
    try {
      f();
    } catch (const io_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([&] { check_writable(p("dir")); }),
            "cannot write " + p("dir") + ": it is a directory");
  EXPECT_EQ(message([&] { check_writable(p("dir") + "/"); }),
            "cannot write " + p("dir") + "/: it names a directory, not a file");
  EXPECT_EQ(message([&] { check_writable(p("file/out.json")); }),
            "cannot write " + p("file/out.json") + ": Not a directory");
  EXPECT_EQ(message([&] { check_writable(p("file/a/out.json")); }),
            "cannot write " + p("file/a/out.json") + ": Not a directory");
  EXPECT_EQ(
      message([&] { check_writable_directory(p("file")); }),
      "cannot write into the directory " + p("file") + ": " + p("file") + " is not a directory");
  std::size_t files = 0;  // nothing was made
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(d.path)) ++files;
  EXPECT_EQ(files, 2u);
}

TEST(Results, CsvEscapesAndLeavesNoValueEmpty) {
  const std::string csv = render_csv(sample_table());
  std::istringstream in(csv);
  std::string header, row0, row1;
  std::getline(in, header);
  std::getline(in, row0);
  std::getline(in, row1);
  EXPECT_EQ(header, "size_bytes,bandwidth_bytes_per_s,pinned,label,link_percent");
  EXPECT_EQ(row0, "1048576,12340000000,true,\"a, \"\"quoted\"\"\",");
  EXPECT_EQ(row1, "268435456,55400000000,false,b,87.900000000000006");
}

TEST(Results, CsvOfSeveralTablesGoesBesideThePath) {
  temp_dir d;
  std::vector<table> tables{sample_table()};
  table t2 = sample_table();
  t2.id = "d2h";
  tables.push_back(t2);
  const auto files = write_csv(tables, (d.path / "out.csv").string());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(std::filesystem::path(files[0]).filename(), "out.h2d.csv");
  EXPECT_EQ(std::filesystem::path(files[1]).filename(), "out.d2h.csv");
  EXPECT_EQ(slurp(files[1]), render_csv(t2));
}

TEST(Results, SeveralFilesAreWrittenAllOrNone) {
  temp_dir d;
  std::filesystem::create_directories(d.path / "out.d2h.csv");  // one target cannot be written
  std::vector<table> tables{sample_table()};
  for (const char* id : {"d2h", "d2d"}) {
    table t = sample_table();
    t.id = id;
    tables.push_back(t);
  }
  EXPECT_THROW((void)write_csv(tables, (d.path / "out.csv").string()), io_error);
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(d.path))
    left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"out.d2h.csv"});  // the directory, nothing new
}

TEST(Results, ASymlinkOutputIsReplacedAndItsTargetKept) {
  temp_dir d;
  std::filesystem::create_directories(d.path);
  write_file_atomically((d.path / "target").string(), "kept");
  std::filesystem::create_symlink(d.path / "target", d.path / "link");
  write_file_atomically((d.path / "link").string(), "new");
  EXPECT_FALSE(std::filesystem::is_symlink(d.path / "link"));
  EXPECT_EQ(slurp(d.path / "link"), "new");
  EXPECT_EQ(slurp(d.path / "target"), "kept");
}

TEST(Results, SameFileComparesInodesNotSpellings) {
  temp_dir d;
  std::filesystem::create_directories(d.path / "sub");
  const std::string a = (d.path / "a.json").string();
  write_file_atomically(a, "{}");
  std::filesystem::create_symlink(d.path / "a.json", d.path / "alias.json");
  EXPECT_TRUE(same_file(a, (d.path / "sub" / ".." / "a.json").string()));
  EXPECT_TRUE(same_file(a, (d.path / "alias.json").string()));
  EXPECT_TRUE(same_file((d.path / "new.csv").string(), (d.path / "sub/../new.csv").string()));
  EXPECT_FALSE(same_file(a, (d.path / "new.csv").string()));
  EXPECT_FALSE(same_file((d.path / "x.csv").string(), (d.path / "y.csv").string()));
}

TEST(Results, MessageLinesAreEscapedAndCut) {
  EXPECT_EQ(message_line("a \"b\" \\x1b \x1b[31m\n\x07"), "a \"b\" \\x1b \\x1b[31m\\n\\x07");
  const std::string cut = message_line(std::string(5000, 'y'), 100);
  EXPECT_EQ(cut, std::string(100, 'y') + "... (4900 more characters)");
  EXPECT_EQ(terminal_text("| \x1b]0;t\x07 |\nnext"), "| \\x1b]0;t\\x07 |\nnext");
  EXPECT_EQ(terminal_text("GB/s × 2 — ok"), "GB/s × 2 — ok");
}

TEST(Results, TextTableScalesAlignsAndShowsNa) {
  const std::string text = render_text(sample_table());
  EXPECT_NE(text.find("Host to device"), std::string::npos);
  EXPECT_NE(text.find("| GB/s"), std::string::npos);
  EXPECT_NE(text.find(" 12.3 |"), std::string::npos);  // 12.34e9 shown as GB/s with 1 decimal
  EXPECT_NE(text.find(" 55.4 |"), std::string::npos);
  EXPECT_NE(text.find("n/a"), std::string::npos);
  EXPECT_NE(text.find("Pinned memory is DMA'd directly."), std::string::npos);
  // Every table line has the same width.
  std::istringstream in(text);
  std::size_t width = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '|') continue;
    if (width == 0) width = line.size();
    EXPECT_EQ(line.size(), width) << line;
  }
  EXPECT_GT(width, 0u);
}
