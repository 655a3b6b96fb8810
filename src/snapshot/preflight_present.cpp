// Pre-flight's presentation: the recordings, the predicted peaks and the largest batch as tables
// (pure), and the same as JSON (sizes in bytes, null where a largest batch is unbounded).
#include <fmt/format.h>

#include "gpu_basics/core/units.hpp"
#include "gpu_basics/snapshot/advise.hpp"
#include "gpu_basics/snapshot/policy_sweep.hpp"
#include "gpu_basics/snapshot/preflight.hpp"

namespace gpu_basics {

namespace {
presentation::value batch_value(const std::optional<std::size_t>& b) {
  if (!b) return std::string("any (nothing grows with the batch)");
  return static_cast<std::int64_t>(*b);
}
presentation::table table_of(std::string id, std::string title,
                             std::vector<presentation::column> columns) {
  presentation::table t;
  t.id = std::move(id);
  t.title = std::move(title);
  t.columns = std::move(columns);
  return t;
}
nlohmann::json batch_json(const std::optional<std::size_t>& b) {
  return b ? nlohmann::json(*b) : nlohmann::json(nullptr);
}
}  // namespace

std::vector<presentation::table> preflight_tables(const preflight_report& r) {
  using presentation::value;
  std::vector<presentation::table> out;
  presentation::table rec =
      table_of("preflight.recordings", "Pre-flight: the recordings, aligned event by event",
               {{"file", "file"},
                {"batch", "batch"},
                {"events", "allocs and frees"},
                {"unmatched_events", "not in every other recording"},
                {"not_affine_scratch", "scratch not affine"}});
  std::size_t scratch = 0;
  for (std::size_t i = 0; i < r.files.size(); ++i) {
    const std::size_t sc = i < r.scratch.size() ? r.scratch[i] : 0;
    scratch += sc;
    rec.add_row({printable(r.files[i]), static_cast<std::int64_t>(r.batches[i]),
                 static_cast<std::int64_t>(r.events[i]), static_cast<std::int64_t>(r.unmatched[i]),
                 static_cast<std::int64_t>(sc)});
  }
  rec.notes.push_back(
      "Each allocation's size is a + b * batch, fitted from the recordings that have it; a batch "
      "is synthesized from the recording closest to it, in its order, and replayed.");
  if (scratch > 0)
    rec.notes.push_back(fmt::format(
        "Scratch not affine: workspaces freed within their operation whose size is not a + b * "
        "batch (the kernel changes with the shape), each taken from the two recordings nearest "
        "the batch; the prediction is as good as that guess where one is live at the peak. The "
        "largest recording's first: {}.",
        r.scratch_first.empty() ? std::string("none") : r.scratch_first));
  out.push_back(std::move(rec));

  presentation::table p = table_of("preflight.predictions", "Predicted peaks",
                                   {{"batch", "batch"},
                                    {"which", "policy"},
                                    {"conf", "PYTORCH_CUDA_ALLOC_CONF"},
                                    {"peak_allocated_bytes", "peak allocated MiB", kPerMiB, 1},
                                    {"peak_reserved_bytes", "peak reserved MiB", kPerMiB, 1}});
  for (const auto& x : r.predictions)
    p.add_row({static_cast<std::int64_t>(x.batch), x.which, policy_label(x.policy),
               static_cast<std::int64_t>(x.peak_allocated),
               static_cast<std::int64_t>(x.peak_reserved)});
  p.notes.push_back(fmt::format("Recommended (advise, for the largest recording): {}",
                                torch_env_line(r.recommended)));
  out.push_back(std::move(p));

  if (r.fit) {
    presentation::table f = table_of(
        "preflight.largest_batch",
        fmt::format("The largest batch that fits {} reserved", format_bytes(r.fit->limit)),
        {{"which", "policy"}, {"conf", "PYTORCH_CUDA_ALLOC_CONF"}, {"batch", "largest batch"}});
    f.add_row({std::string("defaults"), policy_label(""), batch_value(r.fit->defaults)});
    f.add_row(
        {std::string("recommended"), policy_label(r.fit->policy), batch_value(r.fit->recommended)});
    f.notes.push_back(
        "Replayed under the limit with PyTorch's out-of-memory path (free the cache, retry); 0: "
        "no batch fits.");
    if (!r.fit->monotone)
      f.notes.push_back(
          "Not monotone: a smaller batch does not fit where a larger one does (the model switches "
          "recordings between them); this is the largest that fits.");
    out.push_back(std::move(f));
  }
  return out;
}

nlohmann::json to_json(const preflight_report& r) {
  nlohmann::json j;
  j["files"] = r.files;
  j["batches"] = r.batches;
  j["events"] = r.events;
  j["unmatched_events"] = r.unmatched;
  j["not_affine_scratch"] = r.scratch;
  j["recommended_policy"] = r.recommended;
  const auto predictions = [](const std::vector<preflight_prediction>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& x : v)
      a.push_back({{"batch", x.batch},
                   {"which", x.which},
                   {"policy", x.policy},
                   {"peak_allocated_bytes", x.peak_allocated},
                   {"peak_reserved_bytes", x.peak_reserved}});
    return a;
  };
  j["predictions"] = predictions(r.predictions);
  if (r.fit)
    j["largest_batch"] = {{"limit_bytes", r.fit->limit},
                          {"defaults", batch_json(r.fit->defaults)},
                          {"recommended", batch_json(r.fit->recommended)},
                          {"policy", r.fit->policy},
                          {"monotone", r.fit->monotone}};
  if (!r.curve.empty()) j["curve"] = predictions(r.curve);
  j["seconds"] = r.seconds;
  return j;
}

}  // namespace gpu_basics
