// What a run says on stderr while it runs, besides errors: progress and the files it wrote. A
// terminal gets a live line that rewrites itself; a captured stderr (Slurm, CI, a file) gets whole
// lines at a readable rate. Host-only: the clock and the writer are injected, so the rate is
// tested without sleeping.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpu_basics/core/host_cpu.hpp"

namespace gpu_basics::cli {

/// Progress for a stderr that is not a terminal: whole lines, each opening with the seconds since
/// the run started.
///   [progress] 0 s: lesson 2 of 5, memory
///   [progress] 3 s: memory 4/9, allocation cost 1 GiB
/// A lesson's start is always a line; a step's start is one only when the last line is at least
/// `min_interval` old, so a sweep of many short steps does not flood the log.
class progress_lines {
 public:
  using clock = std::chrono::steady_clock;
  using now_fn = std::function<clock::time_point()>;
  using write_fn = std::function<void(const std::string& line)>;

  /// @param write receives each line, without its newline.
  /// @param now the clock (steady_clock::now in the CLI, a fake one in tests).
  explicit progress_lines(write_fn write, now_fn now = clock::now,
                          clock::duration min_interval = std::chrono::seconds(1));

  /// Lesson `index` (1-based) of `count` starts.
  void lesson(const std::string& name, int index, int count);
  /// The current lesson reports a step: `done` of `total`. done >= total (the end) says nothing.
  void step(const std::string& item, int done, int total);

 private:
  void emit(const std::string& text);

  write_fn write_;
  now_fn now_;
  clock::duration min_interval_;
  clock::time_point start_;
  std::optional<clock::time_point> last_line_;
  std::string lesson_;
};

/// Writes `line` and a newline to stderr, stdout flushed first (Note [stdout before stderr]).
void write_stderr_line(const std::string& line);

/// The one line a run logs for the CSV files it wrote: "wrote PATH" for one file, else
/// "wrote 26 CSV files: all.*.csv in results" (the names' common start and end around a '*').
[[nodiscard]] std::string csv_written_line(const std::vector<std::string>& files);

/// One lesson's wall time and what the stopping rule (core/sampling.hpp) did in it: the figures
/// whose results carry a "sampling" record, their samples, and why each stopped.
struct lesson_time {
  std::string lesson;
  double seconds = 0;
  std::uint64_t figures = 0;
  std::uint64_t samples = 0;
  std::uint64_t precise = 0;
  std::uint64_t at_limit = 0;             // benchmark.iterations
  std::uint64_t timed_out = 0;            // benchmark.timeout_s
  std::optional<host_cpu_load> host_cpu;  // how busy the host was meanwhile, where known
};

/// The lesson's time with the "sampling" records found anywhere in its result counted.
[[nodiscard]] lesson_time time_of(std::string lesson, double seconds, const nlohmann::json& result);

/// The lines a run logs at its end: the whole time, then one per lesson with its samples.
///   took 58.2 s: 4 lessons
///   memory: 12.1 s
///   transfer: 20.3 s; 38 sampled figures, 412 samples: 30 precise, 6 at benchmark.iterations,
///   2 at benchmark.timeout_s; host CPUs: 0.2% stolen, 3.1% other processes (of 16)
[[nodiscard]] std::vector<std::string> run_time_lines(const std::vector<lesson_time>& lessons,
                                                      double total_s);

}  // namespace gpu_basics::cli
