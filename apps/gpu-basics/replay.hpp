// `gpu-basics replay SNAPSHOT.pickle`: prints the policy sweep of a PyTorch memory snapshot
// (gpu_basics/snapshot/policy_sweep.hpp) and writes it as JSON; `gpu-basics advise` turns a
// snapshot into advice (gpu_basics/snapshot/advise.hpp). No GPU.
#pragma once

#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "gpu_basics/snapshot/policy_sweep.hpp"

namespace gpu_basics::cli {

/// Runs `body` and turns what it throws into one line on `err` and an exit code: a bad --policy
/// or input 2, an unwritable output 7, Ctrl-C 130 (SIGTERM 143), no host memory left 6 (naming
/// `input`), anything else 1.
int guarded(const std::string& input, std::ostream& err, const std::function<int()>& body);
/// The device's memory that --device-memory SIZE or --device RESULT.json (a saved `info` or
/// `all`: its device's total memory) gives, if either does.
/// @throws format_error for a file that is not such a result; io_error when it cannot be read.
[[nodiscard]] std::optional<std::size_t> device_memory_of(const options& o);
/// `replay`: reads, replays, prints, writes --json. Returns the exit code; never throws.
int run_replay(const options& o, std::ostream& out, std::ostream& err);
/// `advise`: reads, searches, prints, writes --json and --html. Returns the exit code; never
/// throws.
int run_advise(const options& o, std::ostream& out, std::ostream& err);
/// `preflight`: reads the recordings, models them, predicts, prints, writes --json. Returns the
/// exit code; never throws.
int run_preflight_command(const options& o, std::ostream& out, std::ostream& err);
/// --batches as given ("2,4,8"): positive whole numbers, strictly increasing.
/// @throws format_error naming the value.
[[nodiscard]] std::vector<std::size_t> parse_batches(const std::string& text);
/// One batch (--at): a whole number above 0.
/// @throws format_error naming `flag` and the value.
[[nodiscard]] std::size_t parse_batch(const std::string& text, const std::string& flag);

}  // namespace gpu_basics::cli
