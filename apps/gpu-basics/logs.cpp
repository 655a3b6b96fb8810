#include "logs.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/logging.hpp"

namespace gpu_basics::cli {

progress_lines::progress_lines(write_fn write, now_fn now, clock::duration min_interval)
    : write_(std::move(write)), now_(std::move(now)), min_interval_(min_interval), start_(now_()) {}

void progress_lines::emit(const std::string& text) {
  const auto t = now_();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(t - start_).count();
  write_(fmt::format("[progress] {} s: {}", seconds, text));
  last_line_ = t;
}

void progress_lines::lesson(const std::string& name, int index, int count) {
  lesson_ = name;
  emit(count > 1 ? fmt::format("lesson {} of {}, {}", index, count, name) : name);
}

void progress_lines::step(const std::string& item, int done, int total) {
  if (done >= total) return;  // the lesson's tables follow on stdout
  if (last_line_ && now_() - *last_line_ < min_interval_) return;
  emit(fmt::format("{} {}/{}, {}", lesson_, done, total, item));
}

void write_stderr_line(const std::string& line) {
  flush_stdout();
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

std::string csv_written_line(const std::vector<std::string>& files) {
  if (files.empty()) return "wrote no CSV file";
  if (files.size() == 1) return "wrote " + printable(files.front());
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  for (const auto& f : files) names.push_back(fs::path(f).filename().string());
  // The longest start and end that every name shares, cut at a '.' so that '*' stands for
  // whole parts of the names (the table ids).
  const std::string& first = names.front();
  std::size_t start = first.size(), end = first.size();
  for (const auto& n : names) {
    start = std::min<std::size_t>(
        start, std::mismatch(first.begin(), first.end(), n.begin(), n.end()).first - first.begin());
    end = std::min<std::size_t>(
        end,
        std::mismatch(first.rbegin(), first.rend(), n.rbegin(), n.rend()).first - first.rbegin());
  }
  const std::size_t dot = first.substr(0, start).find_last_of('.');
  const std::string head = dot == std::string::npos ? "" : first.substr(0, dot + 1);
  std::string tail = first.substr(first.size() - std::min(end, first.size() - head.size()));
  tail = tail.find('.') == std::string::npos ? "" : tail.substr(tail.find('.'));
  std::string dir = fs::path(files.front()).parent_path().string();
  if (dir.empty()) dir = ".";
  return fmt::format("wrote {} CSV files: {}*{} in {}", files.size(), printable(head),
                     printable(tail), printable(dir));
}

namespace {

void count_sampling(const nlohmann::json& j, lesson_time& t) {
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      if (key == "sampling" && value.is_object() && value.contains("samples")) {
        ++t.figures;
        if (value["samples"].is_number_integer() && value["samples"] >= 0)
          t.samples += value["samples"].get<std::uint64_t>();
        const std::string why = value.value("stopped", "");
        if (why == "precise")
          ++t.precise;
        else if (why == "timeout")
          ++t.timed_out;
        else
          ++t.at_limit;
      } else {
        count_sampling(value, t);
      }
    }
  } else if (j.is_array()) {
    for (const auto& v : j) count_sampling(v, t);
  }
}

}  // namespace

lesson_time time_of(std::string lesson, double seconds, const nlohmann::json& result) {
  lesson_time t;
  t.lesson = std::move(lesson);
  t.seconds = seconds;
  count_sampling(result, t);
  return t;
}

std::vector<std::string> run_time_lines(const std::vector<lesson_time>& lessons, double total_s) {
  std::vector<std::string> out;
  out.push_back(fmt::format("took {:.1f} s: {} lesson{}", total_s, lessons.size(),
                            lessons.size() == 1 ? "" : "s"));
  for (const auto& l : lessons) {
    std::string line = fmt::format("{}: {:.1f} s", l.lesson, l.seconds);
    if (l.figures) {
      line += fmt::format("; {} sampled figure{}, {} samples: {} precise", l.figures,
                          l.figures == 1 ? "" : "s", l.samples, l.precise);
      if (l.at_limit) line += fmt::format(", {} at benchmark.iterations", l.at_limit);
      if (l.timed_out) line += fmt::format(", {} at benchmark.timeout_s", l.timed_out);
    }
    if (l.host_cpu)
      line += fmt::format("; host CPUs: {:.1f}% stolen, {:.1f}% other processes (of {})",
                          100 * l.host_cpu->steal, 100 * l.host_cpu->others, l.host_cpu->cpus);
    out.push_back(std::move(line));
  }
  return out;
}

}  // namespace gpu_basics::cli
