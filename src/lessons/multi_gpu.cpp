// The between-GPUs part of the transfer lesson, host-only: its notes, its GPU x GPU tables and the
// NCCL table, and the result rebuilt from a schema-1 file. No CUDA header here (tested on the CPU).
#include "gpu_basics/lessons/multi_gpu.hpp"
#include "gpu_basics/lessons/schema_v1.hpp"

#include <algorithm>
#include <cmath>
#include <regex>

#include <fmt/format.h>

#include "gpu_basics/core/units.hpp"

namespace gpu_basics::lessons {

using presentation::table;
using presentation::value;

namespace {

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

std::string to_gpu_key(std::size_t j) {
  return fmt::format("to_gpu_{}", j);
}

/// A GPU x GPU table: a row per source GPU, a column per destination ("to GPU j"), each cell in
/// `unit` after multiplying by `scale`; null cells (no value) print as n/a.
table matrix_table(std::string id, std::string title, const std::vector<std::vector<value>>& cells,
                   const std::string& unit, double scale, int precision) {
  table t;
  t.id = std::move(id);
  t.title = std::move(title);
  t.columns.push_back({"from_gpu", "from \\ to"});
  for (std::size_t j = 0; j < cells.size(); ++j)
    t.columns.push_back(
        {to_gpu_key(j),
         unit.empty() ? fmt::format("GPU {}", j) : fmt::format("GPU {} ({})", j, unit), scale,
         precision});
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (cells[i].size() != cells.size()) throw format_error("a GPU matrix must be square");
    std::vector<value> row{fmt::format("GPU {}", i)};
    row.insert(row.end(), cells[i].begin(), cells[i].end());
    t.add_row(std::move(row));
  }
  return t;
}

table figure_matrix(const peer_result& p, std::string id, std::string title, cell_of which,
                    const std::string& unit, double scale, int precision) {
  std::vector<std::vector<value>> cells(p.cells.size());
  for (std::size_t i = 0; i < p.cells.size(); ++i)
    for (const auto& c : p.cells[i]) {
      value v;  // null where nothing was measured
      if (const auto& s = c.*which) v = s->median;
      cells[i].push_back(std::move(v));
    }
  return matrix_table(std::move(id), std::move(title), cells, unit, scale, precision);
}

table access_table(const peer_result& p) {
  std::vector<std::vector<value>> access(p.can_access.size());
  for (std::size_t i = 0; i < p.can_access.size(); ++i)
    for (std::size_t j = 0; j < p.can_access[i].size(); ++j)
      access[i].push_back(std::string(i == j ? "self" : p.can_access[i][j] ? "yes" : "no"));
  return matrix_table(
      "p2p_access",
      "Peer access (cudaDeviceCanAccessPeer): can GPU i read and write GPU j's memory?", access, "",
      1.0, 0);
}

std::vector<table> peer_tables(const peer_result& p) {
  std::vector<table> out;
  out.push_back(access_table(p));
  out.push_back(figure_matrix(
      p, "p2p_bandwidth",
      fmt::format("Peer copy bandwidth, one direction, peer access on ({} per copy, median)",
                  format_bytes(p.bytes)),
      &peer_pair::uni_peer_on_bytes_per_s, "GB/s", 1e-9, 1));
  out.push_back(
      figure_matrix(p, "p2p_bandwidth_peer_off",
                    "Peer copy bandwidth, one direction, peer access off (staged through the host)",
                    &peer_pair::uni_peer_off_bytes_per_s, "GB/s", 1e-9, 1));
  out.push_back(figure_matrix(p, "p2p_bidirectional",
                              "Peer copy bandwidth, both directions at once, peer access on",
                              &peer_pair::bidir_peer_on_bytes_per_s, "GB/s", 1e-9, 1));
  out.push_back(figure_matrix(p, "p2p_bidirectional_peer_off",
                              "Peer copy bandwidth, both directions at once, peer access off",
                              &peer_pair::bidir_peer_off_bytes_per_s, "GB/s", 1e-9, 1));
  out.push_back(figure_matrix(p, "p2p_latency",
                              fmt::format("Peer copy latency ({} copies, back to back, median)",
                                          format_bytes(p.latency_bytes)),
                              &peer_pair::latency_s, "us", 1e6, 2));
  return out;
}

const collective_figure* figure_of(const collective_size& s, const std::string& op) {
  for (const auto& f : s.ops)
    if (f.op == op) return &f;
  return nullptr;
}

table nccl_table(const nccl_result& n) {
  table t;
  t.id = "nccl";
  if (n.unavailable) {
    t.title = "NCCL collectives";
    t.columns = {{"status", "status"}};
    t.add_row({*n.unavailable});
    return t;
  }
  t.title = fmt::format(
      "NCCL {} collectives on {} rank(s), float32 (median of {}; algbw = bytes / time, busbw as "
      "nccl-tests)",
      n.version, n.ranks, n.iterations);
  t.columns = {{"bytes", "size"}};
  for (const auto& k : n.ops) {
    t.columns.push_back({k + "_time_s", k + " (us)", 1e6, 1});
    t.columns.push_back({k + "_alg_bytes_per_s", "algbw GB/s", 1e-9, 2});
    t.columns.push_back({k + "_bus_bytes_per_s", "busbw GB/s", 1e-9, 2});
  }
  for (const auto& s : n.sizes) {
    std::vector<value> row{format_bytes(s.bytes)};
    for (const auto& k : n.ops) {
      value time, alg, bus;  // null where the collective is missing
      if (const auto* f = figure_of(s, k)) {
        time = f->time_s.median;
        alg = f->alg_bytes_per_s;
        bus = f->bus_bytes_per_s;
      }
      row.push_back(std::move(time));
      row.push_back(std::move(alg));
      row.push_back(std::move(bus));
    }
    t.add_row(std::move(row));
  }
  return t;
}

// ---- notes ------------------------------------------------------------------------------------

/// The fastest copy between two different GPUs, one direction, peer access on.
std::optional<double> fastest_pair(const peer_result& p) {
  std::optional<double> best;
  for (std::size_t i = 0; i < p.cells.size(); ++i)
    for (std::size_t j = 0; j < p.cells[i].size(); ++j)
      if (i != j && p.cells[i][j].uni_peer_on_bytes_per_s)
        best = std::max(best.value_or(0.0), p.cells[i][j].uni_peer_on_bytes_per_s->median);
  return best;
}

std::string diagonal_note(const summary& d, const peer_result& p, const device_facts& facts) {
  const std::string sheet =
      facts.datasheet ? fmt::format(", {:.0f}% of the {:.2f} TB/s datasheet",
                                    100.0 * 2 * d.median / facts.datasheet->hbm_bytes_per_s,
                                    facts.datasheet->hbm_bytes_per_s * 1e-12)
                      : std::string();
  std::string links = "NVLink where the GPUs are linked, else PCIe";
  if (facts.link_bytes_per_s)
    links += fmt::format(" (this GPU's link: {:.1f} GB/s per direction after encoding)",
                         *facts.link_bytes_per_s * 1e-9);
  if (const auto best = fastest_pair(p))
    links += fmt::format("; the fastest pair here: {:.0f} GB/s", *best * 1e-9);
  return fmt::format(
      "- The diagonal is a copy within one GPU: {:.0f} GB/s counted once ({:.0f} GB/s of HBM "
      "traffic, "
      "read + write{}). Between GPUs the link sets the pace: {}.",
      d.median * 1e-9, 2 * d.median * 1e-9, sheet, links);
}

std::vector<note> peer_notes(const peer_result& p, const device_facts& facts) {
  std::vector<note> n;
  const bool one = p.devices.size() == 1;
  n.push_back(
      {"p2p_access",
       one ? "- One GPU visible: every matrix below is one cell, a copy within that GPU. With two "
             "or more "
             "GPUs each cell is a copy between two of them, over NVLink where the GPUs are linked, "
             "else over PCIe."
           : "- 'yes': copies go straight between the GPUs (NVLink, or PCIe peer-to-peer); 'no': "
             "the "
             "driver stages them through host memory."});
  if (!p.cells.empty() && !p.cells[0].empty() && p.cells[0][0].uni_peer_on_bytes_per_s)
    n.push_back({"p2p_bandwidth", diagonal_note(*p.cells[0][0].uni_peer_on_bytes_per_s, p, facts)});
  if (p.verified_bytes)
    n.push_back(
        {"p2p_bandwidth",
         fmt::format(
             "- Every sample's destination was zeroed first and checked after: {} verified.",
             format_bytes(*p.verified_bytes))});
  n.push_back({"p2p_bidirectional",
               "- Both directions run together, each on its own stream and copy engine; the figure "
               "is the sum of "
               "the two concurrent rates. A link that is full duplex shows about twice the one-way "
               "figure."});
  n.push_back({"p2p_latency",
               "- The time per copy when 100 small copies are queued back to back: the copy "
               "engine's fixed cost "
               "per copy, which dominates every transfer below a few hundred KiB."});
  return n;
}

std::optional<std::uint64_t> elements_checked(const nccl_result& r) {
  std::uint64_t sum = 0;
  for (const auto& s : r.sizes)
    for (const auto& f : s.ops) {
      if (!f.verified_elements) return std::nullopt;
      sum += *f.verified_elements;
    }
  return sum;
}

std::vector<note> nccl_notes(const nccl_result& r, const device_facts& facts) {
  std::vector<note> n;
  if (r.unavailable) {
    n.push_back({"nccl",
                 "- Without NCCL there are no collectives to measure; the peer-to-peer matrices "
                 "above ran."});
    return n;
  }
  n.push_back({"nccl",
               "- algbw is the size over the time. busbw multiplies it by what each link must "
               "carry for that "
               "collective (nccl-tests: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n "
               "for n ranks), "
               "so it compares with the link's own bandwidth whatever the number of GPUs."});
  if (facts.device.l2_cache_bytes > 0)
    n.push_back(
        {"nccl", fmt::format("- Where a rank's input and output together fit in the {:.0f} MiB L2 "
                             "cache the data can stay in "
                             "cache between runs, and that size beats the larger ones; above it "
                             "the rate settles at HBM speed.",
                             static_cast<double>(facts.device.l2_cache_bytes) / 1048576.0)});
  if (r.ranks == 1)
    n.push_back({"nccl",
                 "- With one rank nothing crosses a link (busbw 0): NCCL copies the buffer within "
                 "the GPU, so the "
                 "small sizes show NCCL's fixed cost per call and the large ones the GPU's copy "
                 "bandwidth."});
  if (const auto checked = elements_checked(r))
    n.push_back({"nccl", fmt::format("- Every collective's output was zeroed before each run and "
                                     "checked element by element after the "
                                     "last ({} elements): inputs are small integers in float32, so "
                                     "sums are exact. NVLink SHARP is "
                                     "kept off (NCCL_NVLS_ENABLE=0).",
                                     *checked)});
  return n;
}

// ---- schema 1 ---------------------------------------------------------------------------------

/// "64 MiB", "1.5 GiB", "123 B" (format_bytes) back to bytes.
std::optional<std::uint64_t> parse_bytes(const std::string& s) {
  try {
    return schema_v1::bytes_from_text(s);
  } catch (const format_error&) {
    return std::nullopt;
  }
}

std::optional<std::uint64_t> bytes_in_title(const nlohmann::json& t, const std::regex& re) {
  const std::string title = t.value("title", std::string());
  std::smatch m;
  if (!std::regex_search(title, m, re)) return std::nullopt;
  return parse_bytes(m[1]);
}

/// The rows of a matrix table: rows[i]["to_gpu_j"], checked square over n GPUs.
const nlohmann::json& matrix_rows(const nlohmann::json& t, std::size_t n) {
  const auto& rows = t.at("rows");
  if (!rows.is_array() || rows.size() != n)
    throw format_error(
        fmt::format("table '{}' is not a {} x {} GPU matrix", t.value("id", std::string()), n, n));
  return rows;
}

/// Access and the five figure matrices from their tables (medians only).
peer_result peer_from_tables(const nlohmann::json& tables) {
  const auto& access = tables.at("p2p_access");
  const std::size_t n = access.at("rows").size();
  peer_result p;
  p.can_access.assign(n, std::vector<int>(n, 0));
  p.cells.assign(n, std::vector<peer_pair>(n));
  for (std::size_t i = 0; i < n; ++i) {
    p.devices.push_back(static_cast<int>(i));
    const auto& row = matrix_rows(access, n).at(i);
    for (std::size_t j = 0; j < n; ++j) {
      const std::string v = row.at(to_gpu_key(j)).get<std::string>();
      if (v != "self" && v != "yes" && v != "no")
        throw format_error("p2p_access: unknown cell '" + v + "'");
      p.can_access[i][j] = v == "no" ? 0 : 1;
    }
  }
  for (const auto& [id, member] : kRates) {
    if (!tables.contains(id)) continue;
    const auto& rows = matrix_rows(tables.at(id), n);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        const auto& v = rows.at(i).at(to_gpu_key(j));
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
void peer_from_extra(const nlohmann::json& e, peer_result& p) {
  const std::size_t n = p.cells.size();
  p.devices = e.at("devices").get<std::vector<int>>();
  if (p.devices.size() != n)
    throw format_error("extra.peer names a different number of GPUs than its tables");
  p.bytes = e.value("bytes", p.bytes);
  p.latency_bytes = e.value("latency_bytes", p.latency_bytes);
  if (e.contains("verified_bytes")) p.verified_bytes = e.at("verified_bytes").get<std::uint64_t>();
  if (!e.contains("cells")) return;
  const auto& cells = e.at("cells");
  if (!cells.is_array() || cells.size() != n * n)
    throw format_error("extra.peer.cells is not a GPU x GPU list");
  const auto opt = [](const nlohmann::json& c, const char* key) {
    return c.contains(key) ? c.at(key).get<std::optional<summary>>() : std::nullopt;
  };
  for (std::size_t k = 0; k < cells.size(); ++k) {
    const auto& c = cells.at(k);
    auto& cell = p.cells[k / n][k % n];
    cell.uni_peer_on_bytes_per_s = opt(c, "uni_peer_on_bytes_per_s");
    cell.uni_peer_off_bytes_per_s = opt(c, "uni_peer_off_bytes_per_s");
    cell.bidir_peer_on_bytes_per_s = opt(c, "bidir_peer_on_bytes_per_s");
    cell.bidir_peer_off_bytes_per_s = opt(c, "bidir_peer_off_bytes_per_s");
    cell.latency_s = opt(c, "latency_s");
  }
}

/// The "nccl" table: version, ranks and iterations from its title, a row per size.
nccl_result nccl_from_table(const nlohmann::json& t) {
  nccl_result r;
  const auto& rows = t.at("rows");
  const auto& columns = t.at("columns");
  if (std::find(columns.begin(), columns.end(), "status") != columns.end()) {
    r.unavailable = rows.at(0).at("status").get<std::string>();
    return r;
  }
  static const std::regex title_re(
      R"(NCCL (\S+) collectives on ([0-9]+) rank\(s\).*median of ([0-9]+))");
  const std::string title = t.at("title").get<std::string>();
  std::smatch m;
  if (!std::regex_search(title, m, title_re))
    throw format_error("nccl: unreadable title '" + title + "'");
  r.version = m[1];
  r.ranks = std::stoi(m[2]);
  r.iterations = std::stoi(m[3]);
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
void nccl_from_extra(const nlohmann::json& e, nccl_result& r) {
  if (r.unavailable || !e.contains("results")) return;
  const auto& results = e.at("results");
  std::size_t k = 0;
  for (auto& s : r.sizes)
    for (auto& f : s.ops) {
      const auto& x = results.at(k++);
      if (x.at("op").get<std::string>() != f.op)
        throw format_error("extra.nccl.results is not in the table's order");
      f.bytes = x.at("bytes").get<std::uint64_t>();
      f.ranks = x.at("ranks").get<int>();
      f.time_s = x.at("time_s").get<summary>();
      f.alg_bytes_per_s = x.at("alg_bytes_per_s").get<double>();
      f.bus_bytes_per_s = x.at("bus_bytes_per_s").get<double>();
      f.verified_elements = x.at("verified_elements").get<std::uint64_t>();
    }
  if (k != results.size()) throw format_error("extra.nccl.results does not match the nccl table");
}

}  // namespace

std::vector<note> explain_multi_gpu(const multi_gpu_result& r, const device_facts& facts) {
  auto n = peer_notes(r.peer, facts);
  if (r.nccl) {
    auto c = nccl_notes(*r.nccl, facts);
    n.insert(n.end(), c.begin(), c.end());
  }
  return n;
}

std::vector<table> present_multi_gpu(const multi_gpu_result& r) {
  auto out = peer_tables(r.peer);
  if (r.nccl) out.push_back(nccl_table(*r.nccl));
  return out;
}

std::optional<multi_gpu_result> multi_gpu_from_v1(const nlohmann::json& block) {
  const auto& tables = block.at("tables");
  if (!tables.contains("p2p_access")) return std::nullopt;
  const nlohmann::json extra =
      block.contains("extra") ? block.at("extra") : nlohmann::json::object();
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
