// What the snapshot tests share (test_pickle.cpp, test_snapshot_model.cpp, test_replay.cpp,
// test_snapshot_cli.cpp): scratch directories, files, python3, and small snapshots made by hand.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/snapshot/pickle.hpp"

namespace gb = gpu_basics;
namespace pk = gpu_basics::pickle;
using pk::value;

namespace snapshot_test {

inline constexpr std::uint64_t MiB = 1 << 20;
inline const std::string kData = std::string(GPU_BASICS_SOURCE_DIR) + "/tests/data";

/// A fresh scratch directory per test.
inline std::filesystem::path scratch(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() /
                 ("gpu_basics_snapshot_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

inline bool have_python() {
  return std::system("python3 -c 'import pickle' >/dev/null 2>&1") == 0;
}

/// Runs `cmd` and returns its stdout; fails the test on a non-zero exit.
inline std::string run_command(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    ADD_FAILURE() << "cannot run " << cmd;
    return out;
  }
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  EXPECT_EQ(rc, 0) << cmd << "\n" << out;
  return out;
}

inline std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::filesystem::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary) << s;
}

/// A string literal's bytes, NULs included.
template <std::size_t N>
std::string bytes_of(const char (&s)[N]) {
  return {s, N - 1};
}

/// The message of the format_error that reading `bytes` throws ("" if none).
inline std::string read_error(const std::string& bytes, pk::read_limits limits = {}) {
  try {
    (void)pk::read(bytes, limits);
  } catch (const gb::format_error& e) {
    return e.what();
  }
  return "";
}

inline value trace_event(const std::string& action, std::int64_t addr, std::int64_t size) {
  value e = value::dict();
  e.set("action", value::str(action));
  e.set("addr", value::integer(addr));
  e.set("size", value::integer(size));
  e.set("stream", value::integer(0));
  e.set("time_us", value::integer(0));
  return e;
}
/// A snapshot of one device's trace, with no segments left, and `conf` as its allocator conf.
inline value snapshot_of_trace(pk::items events, const std::string& conf = "") {
  value root = value::dict();
  root.set("segments", value::list());
  root.set("device_traces", value::list({value::list(std::move(events))}));
  value settings = value::dict();
  settings.set("PYTORCH_CUDA_ALLOC_CONF", value::str(conf));
  root.set("allocator_settings", settings);
  return root;
}

/// The bytes python3 writes for `expr` (a snapshot-like dict built by `setup`), protocol 4.
inline std::string python_pickle(const std::string& name, const std::string& setup,
                                 const std::string& expr) {
  const auto path = scratch("py_" + name) / "s.pickle";
  run_command("python3 -c \"import pickle,sys\n" + setup + "\nopen(sys.argv[1],'wb').write(" +
              "pickle.dumps(" + expr + ",protocol=4))\" " + path.string());
  return read_bytes(path);
}

}  // namespace snapshot_test
