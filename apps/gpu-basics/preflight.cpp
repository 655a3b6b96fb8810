// `gpu-basics preflight REC1 REC2 [REC3] --batches 2,4,8`: PyTorch's peak memory at batches
// nobody has run, and the largest that fits a limit, predicted from snapshots recorded at small
// batches (gpu_basics/snapshot/preflight.hpp), printed, written as JSON and drawn as HTML. No GPU.
#include <charconv>
#include <ostream>

#include <fmt/format.h>

#include "exit_codes.hpp"
#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/report/preflight.hpp"
#include "gpu_basics/snapshot/preflight.hpp"
#include "replay.hpp"
#include "run.hpp"
#include "saved.hpp"

namespace gpu_basics::cli {

namespace {
/// Batches no job reaches: a number beyond it is a typo.
constexpr std::size_t kMaxBatchArgument = std::size_t{1} << 40;
}  // namespace

std::size_t parse_batch(const std::string& text, const std::string& flag) {
  std::size_t b = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, b);
  if (text.empty() || ec != std::errc() || p != end || b == 0 || b > kMaxBatchArgument)
    throw format_error(
        fmt::format("{}: expected a batch size, a whole number from 1 to 2^40, got {}", flag,
                    quote_for_message(text)));
  return b;
}

std::vector<std::size_t> parse_batches(const std::string& text) {
  std::vector<std::size_t> v;
  std::size_t from = 0;
  while (true) {
    const std::size_t comma = text.find(',', from);
    v.push_back(parse_batch(text.substr(from, comma - from), "--batches"));
    if (v.size() > 1 && v.back() <= v[v.size() - 2])
      throw format_error(fmt::format(
          "--batches {}: the batches must increase, one per recording in the order given",
          quote_for_message(text)));
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  return v;
}

int run_preflight_command(const options& o, std::ostream& out, std::ostream& err) {
  const std::string first = o.input_paths.empty() ? std::string() : o.input_paths.front();
  return guarded(first, err, [&] {
    for (const auto* p : {&o.json_path, &o.html_path})
      if (*p && **p != "-") check_writable(**p);
    // Checked by validate_preflight already; parsed again here for the values.
    const std::vector<std::size_t> batches = parse_batches(o.batches);
    std::vector<std::size_t> at;
    for (const auto& a : o.at_batches) at.push_back(parse_batch(a, "--at"));
    if (at.empty()) at = batches;  // the recorded batches: the model replays them as recorded
    std::optional<std::size_t> limit;
    if (!o.fit_sizes.empty()) limit = *parse_byte_size(o.fit_sizes.front());  // checked by CLI11
    if (limit && *limit >= kMaxReplayBytes)  // a replay holds less: the answer would be its cap's
      throw format_error(fmt::format("--fit {}: a limit below {} (what a replay holds), got {} B",
                                     quote_for_message(o.fit_sizes.front()),
                                     format_bytes(kMaxReplayBytes), *limit));
    std::vector<batch_recording> recs;
    for (std::size_t i = 0; i < o.input_paths.size(); ++i) {
      throw_if_interrupted();
      recs.push_back(read_batch_recording(o.input_paths[i], batches[i]));
    }
    const batch_model model(std::move(recs));
    // The page's points (the report's curve) are in the JSON as well: one set of predictions.
    const preflight_report r = run_preflight(model, at, limit, 0, o.html_path.has_value());
    const nlohmann::json j = to_json(r);
    const bool json_to_stdout = o.json_path && *o.json_path == "-";
    std::vector<std::pair<std::string, std::string>> files;
    if (o.json_path && !json_to_stdout) files.emplace_back(*o.json_path, saved_json_text(j));
    if (o.html_path) files.emplace_back(*o.html_path, report::render_preflight_html(r));
    throw_if_interrupted();  // nothing written once interrupted
    if (json_to_stdout) {
      out << saved_json_text(j);
    } else {
      for (const auto& t : preflight_tables(r)) out << presentation::render_text(t) << "\n";
    }
    check_written(out);  // lost tables: no files written either
    write_files_atomically(files);
    return exit_ok;
  });
}

}  // namespace gpu_basics::cli
