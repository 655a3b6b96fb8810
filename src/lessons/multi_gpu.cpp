// The between-GPUs part of the transfer lesson, host-only: its notes, its GPU x GPU tables and the
// NCCL table (reading schema-1 files: v1/multi_gpu_v1.cpp). No CUDA header here (tested on the
// CPU).
#include "gpu_basics/lessons/multi_gpu.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "gpu_basics/core/units.hpp"
#include "table_labels.hpp"
#include "v1/readers.hpp"

namespace gpu_basics::lessons {

using presentation::table;
using presentation::value;

namespace {

using cell_of = std::optional<summary> peer_pair::*;

using labels::to_gpu_key;

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

/// One GPU: every cell is a copy within it, the same with peer access on or off.
bool one_gpu(const peer_result& p) {
  return p.devices.size() == 1;
}

std::vector<table> peer_tables(const peer_result& p) {
  // The diagonal is a D2D copy: its rate is the copy's own (units.hpp, Note [D2D convention]).
  const std::string copied = fmt::format("GB/s {}", kD2dCopied);
  // With one GPU the peer-access-off matrices repeat the copy within it (it never goes through
  // the host): a note says so instead (peer_notes).
  const bool off_tables = !one_gpu(p);
  std::vector<table> out;
  out.push_back(access_table(p));
  out.push_back(figure_matrix(
      p, "p2p_bandwidth",
      fmt::format("Peer copy bandwidth, one direction, peer access on ({} per copy, median)",
                  format_bytes(p.bytes)),
      &peer_pair::uni_peer_on_bytes_per_s, copied, 1e-9, 1));
  if (off_tables)
    out.push_back(figure_matrix(
        p, "p2p_bandwidth_peer_off",
        "Peer copy bandwidth, one direction, peer access off (between GPUs, staged through the "
        "host)",
        &peer_pair::uni_peer_off_bytes_per_s, copied, 1e-9, 1));
  out.push_back(figure_matrix(p, "p2p_bidirectional",
                              "Peer copy bandwidth, both directions at once, peer access on",
                              &peer_pair::bidir_peer_on_bytes_per_s, copied, 1e-9, 1));
  if (off_tables)
    out.push_back(figure_matrix(p, "p2p_bidirectional_peer_off",
                                "Peer copy bandwidth, both directions at once, peer access off",
                                &peer_pair::bidir_peer_off_bytes_per_s, copied, 1e-9, 1));
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

/// How many runs each median took: the samples the stopping rule kept, where the cells say
/// ("16 to 20" when it stopped some sooner), else benchmark.iterations (results written before
/// the rule).
std::string nccl_runs(const nccl_result& n) {
  std::uint64_t lo = std::numeric_limits<std::uint64_t>::max(), hi = 0;
  for (const auto& s : n.sizes)
    for (const auto& c : s.ops)
      if (c.sampling) {
        lo = std::min(lo, c.sampling->samples);
        hi = std::max(hi, c.sampling->samples);
      }
  if (hi == 0) return fmt::format("{}", n.iterations);
  return lo == hi ? fmt::format("{}", hi) : fmt::format("{} to {}", lo, hi);
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
  // One rank crosses no link: its bus bandwidth is 0 at every size, so the column is left out
  // and a note says why (nccl_notes).
  const bool bus = n.ranks != 1;
  t.title = bus ? fmt::format(
                      "NCCL {} collectives on {} rank(s), float32 (median of {}; algbw = "
                      "bytes / time, busbw as nccl-tests)",
                      n.version, n.ranks, nccl_runs(n))
                : fmt::format(
                      "NCCL {} collectives on 1 rank, float32 (median of {}; algbw = "
                      "bytes / time)",
                      n.version, nccl_runs(n));
  t.columns = {{"bytes", "size"}};
  for (const auto& k : n.ops) {
    t.columns.push_back({k + "_time_s", k + " (us)", 1e6, 1});
    t.columns.push_back({k + "_alg_bytes_per_s", "algbw GB/s", 1e-9, 2});
    if (bus) t.columns.push_back({k + "_bus_bytes_per_s", "busbw GB/s", 1e-9, 2});
  }
  for (const auto& s : n.sizes) {
    std::vector<value> row{format_bytes(s.bytes)};
    for (const auto& k : n.ops) {
      value time, alg, busbw;  // null where the collective is missing
      if (const auto* f = figure_of(s, k)) {
        time = f->time_s.median;
        alg = f->alg_bytes_per_s;
        busbw = f->bus_bytes_per_s;
      }
      row.push_back(std::move(time));
      row.push_back(std::move(alg));
      if (bus) row.push_back(std::move(busbw));
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
      facts.datasheet
          ? fmt::format(", {:.0f}% of the {:.2f} TB/s datasheet",
                        100.0 * d2d_read_write(d.median) / facts.datasheet->hbm_bytes_per_s,
                        facts.datasheet->hbm_bytes_per_s * 1e-12)
          : std::string();
  std::string links = "NVLink where the GPUs are linked, else PCIe";
  if (facts.link_bytes_per_s)
    links += fmt::format(" (this GPU's link: {:.1f} GB/s per direction after encoding)",
                         *facts.link_bytes_per_s * 1e-9);
  if (const auto best = fastest_pair(p))
    links += fmt::format("; the fastest pair here: {:.0f} GB/s", *best * 1e-9);
  return fmt::format(
      "- The diagonal is a copy within one GPU: {:.0f} GB/s copied, {:.0f} GB/s read + write "
      "(the HBM traffic{}). Between GPUs the link sets the pace: {}.",
      d.median * 1e-9, d2d_read_write(d.median) * 1e-9, sheet, links);
}

std::vector<note> peer_notes(const peer_result& p, const device_facts& facts) {
  std::vector<note> n;
  const bool one = one_gpu(p);
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
  if (one)
    n.push_back({"p2p_bandwidth",
                 "- With one GPU there is no peer: a copy within the GPU never goes through the "
                 "host, so with peer access off it is this same copy, and no peer-access-off "
                 "matrix is shown."});
  n.push_back(
      {"p2p_bidirectional",
       one ? "- Both directions at once within one GPU: two copies run together, each on its own "
             "stream, and share the GPU's memory; the figure is the sum of the two concurrent "
             "rates, not the two directions of a link."
           : "- Both directions run together, each on its own stream and copy engine; the figure "
             "is the sum of the two concurrent rates. A link that is full duplex shows about "
             "twice the one-way figure."});
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
  if (r.ranks == 1)
    n.push_back({"nccl",
                 "- With one rank nothing crosses a link, so there is no bus bandwidth to measure "
                 "(busbw is 0 at every size and is left out): NCCL copies the buffer within the "
                 "GPU. algbw, the size over the time, shows NCCL's fixed cost per call at the "
                 "small sizes and the GPU's copy bandwidth at the large ones."});
  else
    n.push_back({"nccl",
                 "- algbw is the size over the time. busbw multiplies it by what each link must "
                 "carry for that collective (nccl-tests: all-reduce 2(n-1)/n, all-gather and "
                 "reduce-scatter (n-1)/n for n ranks), so it compares with the link's own "
                 "bandwidth whatever the number of GPUs."});
  if (facts.device.l2_cache_bytes > 0)
    n.push_back(
        {"nccl", fmt::format("- Where a rank's input and output together fit in the {:.0f} MiB L2 "
                             "cache the data can stay in "
                             "cache between runs, and that size beats the larger ones; above it "
                             "the rate settles at HBM speed.",
                             static_cast<double>(facts.device.l2_cache_bytes) / 1048576.0)});
  if (const auto checked = elements_checked(r))
    n.push_back({"nccl", fmt::format("- Every collective's output was zeroed before each run and "
                                     "checked element by element after the "
                                     "last ({} elements): inputs are small integers in float32, so "
                                     "sums are exact. NVLink SHARP is "
                                     "kept off (NCCL_NVLS_ENABLE=0).",
                                     *checked)});
  return n;
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

}  // namespace gpu_basics::lessons
