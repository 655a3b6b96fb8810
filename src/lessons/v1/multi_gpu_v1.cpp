// Reading the multi-GPU part of the transfer lesson's schema-1 block (the GPU x GPU tables, the
// NCCL table, extra.peer and extra.nccl) back into a multi_gpu_result.
#include <algorithm>
#include <regex>

#include <fmt/format.h>

#include "../table_labels.hpp"
#include "common.hpp"
#include "readers.hpp"

namespace gpu_basics::lessons {

namespace {

using labels::to_gpu_key;
using v1::extra_of;
using v1::node;
using v1::title_of;

using cell_of = std::optional<summary> peer_pair::*;

struct matrix_kind {
  const char* id;
  cell_of member;
};
constexpr matrix_kind kRates[] = {
    {"p2p_bandwidth", &peer_pair::uni_peer_on_bytes_per_s},
    {"p2p_bandwidth_peer_off", &peer_pair::uni_peer_off_bytes_per_s},
    {"p2p_bidirectional", &peer_pair::bidir_peer_on_bytes_per_s},
    {"p2p_bidirectional_peer_off", &peer_pair::bidir_peer_off_bytes_per_s},
    {"p2p_latency", &peer_pair::latency_s},
};

/// "64 MiB", "1.5 GiB", "123 B" (format_bytes) back to bytes.
std::optional<std::uint64_t> parse_bytes(const std::string& s) {
  try {
    return schema_v1::bytes_from_text(s);
  } catch (const format_error&) {
    return std::nullopt;
  }
}

std::optional<std::uint64_t> bytes_in_title(const node& t, const std::regex& re) {
  const std::string title = title_of(t);
  std::smatch m;
  if (!std::regex_search(title, m, re)) return std::nullopt;
  return parse_bytes(m[1]);
}

/// The rows of a matrix table: rows[i]["to_gpu_j"], checked square over n GPUs.
node matrix_rows(const node& t, std::size_t n) {
  node rows = t.at("rows");
  if (!rows.is_array() || rows.size() != n)
    throw rows.error(fmt::format("not the rows of a {} x {} GPU matrix", n, n));
  return rows;
}

/// Access and the five figure matrices from their tables (medians only).
peer_result peer_from_tables(const node& tables) {
  const node access = tables.at("p2p_access");
  const std::size_t n = v1::rows_of(access).size();
  peer_result p;
  p.can_access.assign(n, std::vector<int>(n, 0));
  p.cells.assign(n, std::vector<peer_pair>(n));
  for (std::size_t i = 0; i < n; ++i) {
    p.devices.push_back(static_cast<int>(i));
    const node row = matrix_rows(access, n).at(i);
    for (std::size_t j = 0; j < n; ++j) {
      const std::string v = row.at(to_gpu_key(j)).get<std::string>();
      if (v != "self" && v != "yes" && v != "no")
        throw row.at(to_gpu_key(j)).error("expected self, yes or no, got " + quote_for_message(v));
      p.can_access[i][j] = v == "no" ? 0 : 1;
    }
  }
  for (const auto& [id, member] : kRates) {
    if (!tables.contains(id)) continue;
    const node rows = matrix_rows(tables.at(id), n);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        const node v = rows.at(i).at(to_gpu_key(j));
        if (v.is_null()) continue;
        summary s;
        s.median = v.get<double>();
        p.cells[i][j].*member = s;
      }
  }
  if (tables.contains("p2p_bandwidth"))
    p.bytes =
        bytes_in_title(tables.at("p2p_bandwidth"), std::regex(R"(peer access on \((.+) per copy)"))
            .value_or(0);
  if (tables.contains("p2p_latency"))
    p.latency_bytes =
        bytes_in_title(tables.at("p2p_latency"), std::regex(R"(latency \((.+) copies)"))
            .value_or(0);
  return p;
}

/// extra.peer of schema 1: the full summaries, devices, sizes and verified bytes.
void peer_from_extra(const node& e, peer_result& p) {
  const std::size_t n = p.cells.size();
  p.devices = e.at("devices").get<std::vector<int>>();
  if (p.devices.size() != n)
    throw e.at("devices").error(
        fmt::format("{} GPU(s), but the p2p_access table has {}", p.devices.size(), n));
  p.bytes = e.value("bytes", p.bytes);
  p.latency_bytes = e.value("latency_bytes", p.latency_bytes);
  if (e.contains("verified_bytes")) p.verified_bytes = e.at("verified_bytes").get<std::uint64_t>();
  if (!e.contains("cells")) return;
  const node cells = e.at("cells");
  if (!cells.is_array() || cells.size() != n * n)
    throw cells.error(fmt::format("expected a list of {} x {} cells", n, n));
  const auto opt = [](const node& c, const char* key) {
    return c.contains(key) ? c.at(key).get<std::optional<summary>>() : std::nullopt;
  };
  for (std::size_t k = 0; k < cells.size(); ++k) {
    const node c = cells.at(k);
    auto& cell = p.cells[k / n][k % n];
    cell.uni_peer_on_bytes_per_s = opt(c, "uni_peer_on_bytes_per_s");
    cell.uni_peer_off_bytes_per_s = opt(c, "uni_peer_off_bytes_per_s");
    cell.bidir_peer_on_bytes_per_s = opt(c, "bidir_peer_on_bytes_per_s");
    cell.bidir_peer_off_bytes_per_s = opt(c, "bidir_peer_off_bytes_per_s");
    cell.latency_s = opt(c, "latency_s");
  }
}

/// The "nccl" table: version, ranks and iterations from its title, a row per size.
nccl_result nccl_from_table(const node& t) {
  nccl_result r;
  const node rows = v1::rows_of(t);
  const node columns = t.at("columns");
  if (!columns.is_array()) throw columns.error("expected a list, got " + json_kind(columns.raw()));
  const auto& cols = columns.raw();
  if (std::find(cols.begin(), cols.end(), "status") != cols.end()) {
    r.unavailable = rows.at(0).at("status").get<std::string>();
    return r;
  }
  static const std::regex title_re(
      R"(NCCL (\S+) collectives on ([0-9]+) rank\(s\).*median of ([0-9]+))");
  const std::string title = t.at("title").get<std::string>();
  std::smatch m;
  if (!std::regex_search(title, m, title_re))
    throw t.at("title").error("not the lesson's title: " + quote_for_message(title, 120));
  r.version = m[1];
  r.ranks = v1::number_in<int>(t.at("title"), m[2]);
  r.iterations = v1::number_in<int>(t.at("title"), m[3]);
  for (const auto& c : columns) {
    const std::string key = c.get<std::string>();
    const std::string suffix = "_time_s";
    if (key.size() > suffix.size() &&
        key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0)
      r.ops.push_back(key.substr(0, key.size() - suffix.size()));
  }
  for (const auto& row : rows) {
    collective_size s;
    const std::string size = row.at("bytes").get<std::string>();
    s.bytes = parse_bytes(size).value_or(0);
    for (const auto& op : r.ops) {
      collective_figure f;
      f.op = op;
      f.bytes = s.bytes;
      f.ranks = r.ranks;
      f.time_s.median = row.at(op + "_time_s").get<double>();
      f.alg_bytes_per_s = row.at(op + "_alg_bytes_per_s").get<double>();
      f.bus_bytes_per_s = row.at(op + "_bus_bytes_per_s").get<double>();
      s.ops.push_back(std::move(f));
    }
    r.sizes.push_back(std::move(s));
  }
  return r;
}

/// extra.nccl.results of schema 1: one entry per op and size, in table order.
void nccl_from_extra(const node& e, nccl_result& r) {
  if (r.unavailable || !e.contains("results")) return;
  const node results = e.at("results");
  std::size_t k = 0;
  for (auto& s : r.sizes)
    for (auto& f : s.ops) {
      const node x = results.at(k++);
      if (x.at("op").get<std::string>() != f.op)
        throw x.at("op").error("not in the nccl table's order (expected " + f.op + ")");
      f.bytes = x.at("bytes").get<std::uint64_t>();
      f.ranks = x.at("ranks").get<int>();
      f.time_s = x.at("time_s").get<summary>();
      f.alg_bytes_per_s = x.at("alg_bytes_per_s").get<double>();
      f.bus_bytes_per_s = x.at("bus_bytes_per_s").get<double>();
      f.verified_elements = x.at("verified_elements").get<std::uint64_t>();
    }
  if (k != results.size())
    throw results.error(fmt::format("{} entries, but the nccl table has {}", results.size(), k));
}

}  // namespace

std::optional<multi_gpu_result> multi_gpu_from_v1(const nlohmann::json& block) {
  return multi_gpu_from_v1(node(block));
}

std::optional<multi_gpu_result> multi_gpu_from_v1(const node& block) {
  const node tables = block.at("tables");
  if (!tables.contains("p2p_access")) return std::nullopt;
  const node extra = extra_of(block);
  multi_gpu_result r;
  r.peer = peer_from_tables(tables);
  if (extra.contains("peer")) peer_from_extra(extra.at("peer"), r.peer);
  if (tables.contains("nccl")) {
    r.nccl = nccl_from_table(tables.at("nccl"));
    if (extra.contains("nccl")) nccl_from_extra(extra.at("nccl"), *r.nccl);
  }
  return r;
}

}  // namespace gpu_basics::lessons
