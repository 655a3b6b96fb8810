// `show` and `report` of the files advise and replay write (saved.hpp).
#include "saved.hpp"

#include <optional>
#include <ostream>

#include "exit_codes.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/input_file.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/lessons/record.hpp"
#include "gpu_basics/report/advice.hpp"
#include "gpu_basics/report/replay.hpp"
#include "gpu_basics/snapshot/advise.hpp"
#include "gpu_basics/snapshot/replay_json.hpp"
#include "run.hpp"

namespace gpu_basics::cli {

namespace {

/// The kind `head`, a file's first bytes, announces: advise and replay sort their keys, so
/// "command" comes within the first few (after "best_conf" in a replay).
saved_kind announced_kind(const std::string& head) {
  const auto at = head.find("\"command\"");
  if (at == std::string::npos) return saved_kind::results;
  std::size_t i = at + 9;
  while (i < head.size() && (head[i] == ' ' || head[i] == ':' || head[i] == '\n')) ++i;
  if (head.compare(i, 8, "\"advise\"") == 0) return saved_kind::advice;
  if (head.compare(i, 8, "\"replay\"") == 0) return saved_kind::replay;
  return saved_kind::results;
}

saved_kind kind_of(const nlohmann::json& j) {
  const auto it = j.is_object() ? j.find("command") : j.end();
  if (it == j.end() || !it->is_string()) return saved_kind::results;
  const auto& c = it->get_ref<const std::string&>();
  return c == "advise" ? saved_kind::advice
                       : (c == "replay" ? saved_kind::replay : saved_kind::results);
}

/// How messages name a kind: as an input whose size is capped, and as what `report` refuses to
/// mix. By saved_kind's order.
struct kind_text {
  const char* input;
  const char* description;
};
constexpr kind_text kKindText[] = {{"results file", "a results file"},
                                   {"saved advice", "an advice file (advise --json)"},
                                   {"saved replay", "a replay file (replay --json)"}};

const char* input_name(saved_kind kind) {
  return kKindText[static_cast<std::size_t>(kind)].input;
}

/// An advice or a replay read back.
struct snapshot_document {
  std::optional<advice> adv;
  std::optional<replay_report> rep;
};

snapshot_document document_of(const saved_file& f) {
  const std::string source = printable(f.path);
  if (f.kind == saved_kind::advice) return {advice_from_json(f.json, source), std::nullopt};
  return {std::nullopt, replay_from_json(f.json, source)};
}

}  // namespace

std::string describe(saved_kind kind) {
  return kKindText[static_cast<std::size_t>(kind)].description;
}

std::string saved_json_text(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

saved_file read_saved_file(const std::string& path) {
  const std::uint64_t results_cap = input_size_cap(kMaxResultsFileBytes);
  const std::uint64_t snapshot_cap = input_size_cap(kMaxSnapshotJsonBytes);
  const saved_kind announced =
      announced_kind(read_input_head(path, 4096, results_cap, input_name(saved_kind::results)));
  saved_file f{path, saved_kind::results, {}};
  std::uint64_t bytes = 0;
  {
    const std::string text = read_input_file(
        path, announced == saved_kind::results ? results_cap : snapshot_cap, input_name(announced));
    bytes = text.size();
    f.json = lessons::parse_results_json(text, path);
  }
  f.kind = kind_of(f.json);
  if (f.kind != saved_kind::results && bytes > snapshot_cap)  // "command" was not near the start
    throw format_error(printable(path) + ": larger than " + format_bytes(snapshot_cap) +
                       ", the limit for a " + input_name(f.kind) +
                       " (GPU_BASICS_MAX_INPUT_MIB raises it)");
  return f;
}

int show_saved_snapshot_file(const options& o, const saved_file& f, std::ostream& out) {
  const snapshot_document d = document_of(f);
  const auto tables = d.adv ? advice_tables(*d.adv) : std::vector{replay_table(*d.rep)};
  const std::string json_text =
      o.json_path ? saved_json_text(d.adv ? to_json(*d.adv) : to_json(*d.rep)) : "";
  throw_if_interrupted();  // an interrupted show writes nothing
  if (o.json_path && *o.json_path == "-") {
    out << json_text;
  } else {
    for (const auto& t : tables) out << terminal_text(presentation::render_text(t)) << "\n";
  }
  check_written(out);  // before the files: a full disk is reported once, and first
  if (o.json_path && *o.json_path != "-") write_file_atomically(*o.json_path, json_text);
  if (o.csv_path) (void)presentation::write_csv(tables, *o.csv_path);
  return exit_ok;
}

int report_saved_snapshot_file(const options& o, const saved_file& f, std::ostream& out) {
  const snapshot_document d = document_of(f);
  const std::string html =
      d.adv ? report::render_advice_html(*d.adv) : report::render_replay_html(*d.rep);
  throw_if_interrupted();  // an interrupted report writes nothing
  write_file_atomically(*o.html_path, html);
  out << "wrote " << message_line(*o.html_path) << " (" << (html.size() + 1023) / 1024 << " KiB, "
      << (d.adv ? "the advice on " + message_line(d.adv->file)
                : "the replay of " + message_line(d.rep->file))
      << ")\n";
  return exit_ok;
}

}  // namespace gpu_basics::cli
