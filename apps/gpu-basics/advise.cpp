// `gpu-basics advise SNAPSHOT`: the policy search, fit table and stranded split of a memory
// snapshot (gpu_basics/snapshot/advise.hpp), printed, written as JSON and drawn as HTML.
#include <algorithm>
#include <ostream>

#include <fmt/format.h>

#include "exit_codes.hpp"
#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/report/advice.hpp"
#include "gpu_basics/snapshot/advise.hpp"
#include "replay.hpp"
#include "run.hpp"
#include "saved.hpp"
#include "torch_check.hpp"

namespace gpu_basics::cli {

namespace {
constexpr std::size_t kMaxFitLimits = 16;
}  // namespace

int run_advise(const options& o, std::ostream& out, std::ostream& err) {
  return guarded(o.input_path, err, [&] {
    // Outputs that are an input or each other were refused by run(); unwritable ones are now.
    for (const auto* p : {&o.json_path, &o.html_path})
      if (*p && **p != "-") check_writable(**p);
    std::vector<std::size_t> limits;  // each once, in the order given
    std::vector<std::string> labels;  // as given
    for (const auto& f : o.fit_sizes)
      if (const std::size_t l = *parse_byte_size(f);  // checked by CLI11
          std::find(limits.begin(), limits.end(), l) == limits.end()) {
        limits.push_back(l);
        labels.push_back(echo_byte_size(f).value_or(""));
      }
    if (limits.size() > kMaxFitLimits)
      throw format_error(fmt::format(
          "--fit: {} different limits; at most {} (each is replayed under every policy)",
          limits.size(), kMaxFitLimits));
    const auto device_memory = device_memory_of(o);
    const auto policies = advise_policies(o.policies, !limits.empty(), device_memory);
    torch_snapshot s = read_torch_snapshot(o.input_path);
    const int device = s.busiest_device();
    // A snapshot taken at an out-of-memory error (gpu_basics.torch.watch() writes one) ends in
    // the request that failed: it is replayed too, as the advice printed at the error did.
    const auto failed = replay_failed_request(s, device);
    advice a =
        advise_snapshot(s, printable(o.input_path), device, policies, limits, 0, device_memory);
    a.failed_request = failed;
    a.fit_labels = std::move(labels);
    try {  // where in the user's code: a snapshot recorded with stacks has the frames
      (void)attach_frames(a, s, o.input_path, failed.has_value());
    } catch (const error& e) {  // the advice stands without them
      err << "gpu-basics advise: the Python frames were not read: " << e.what() << "\n";
    }
    if (const std::string conf = lines_of(a).conf; o.torch_python && !conf.empty())
      check_with_torch(*o.torch_python, conf);  // refused: nothing printed, nothing written
    const bool json_to_stdout = o.json_path && *o.json_path == "-";
    const nlohmann::json j = to_json(a);
    const auto json_text = [&] { return saved_json_text(j); };
    std::vector<std::pair<std::string, std::string>> files;
    if (o.json_path && !json_to_stdout) files.emplace_back(*o.json_path, json_text());
    if (o.html_path) files.emplace_back(*o.html_path, report::render_advice_html(a));
    throw_if_interrupted();  // nothing written once interrupted
    if (json_to_stdout) {
      out << json_text();
    } else {
      for (const auto& t : advice_tables(a)) out << presentation::render_text(t) << "\n";
    }
    check_written(out);  // lost tables: no files written either
    write_files_atomically(files);
    return exit_ok;
  });
}

}  // namespace gpu_basics::cli
