// The transfer lesson's host side: its tables, the notes that explain them, and the registry
// entry (reading schema-1 files: v1/transfer_v1.cpp). No CUDA here: everything is computed from a
// transfer_result.
#include "gpu_basics/lessons/transfer.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gpu_basics/core/hardware.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/transfer/plan.hpp"
#include "v1/readers.hpp"

namespace gpu_basics::lessons {

using presentation::table;
using presentation::value;

namespace {

constexpr double GB = 1e9;
constexpr double MiB = 1 << 20;

// PCIe packets: the payload most hosts allow per TLP (Max_Payload_Size),
// and what each TLP adds on the wire: header 12-16 bytes, sequence number 2, LCRC 4, framing.
constexpr double kTlpPayloadBytes = 256;
constexpr double kTlpOverheadBytes = 24;
// Above this interquartile range (a share of the median) a staged copy's run was disturbed.
constexpr double kNoisySpread = 0.25;

// ---- small helpers ------------------------------------------------------------------------

/// A percentage cell: nothing when the ceiling is unknown.
value percent_cell(double v, const std::optional<double>& ceiling) {
  if (!ceiling || *ceiling <= 0) return std::monostate{};
  return percent_of(v, *ceiling);
}

value median_or_null(const std::optional<copy_figure>& f, bool time) {
  if (!f) return std::monostate{};
  return time ? f->time_s.median : f->bandwidth_bytes_per_s.median;
}

double bw(const copy_figure& f) {
  return f.bandwidth_bytes_per_s.median;
}

/// a / b, or nullopt when b is not positive.
std::optional<double> ratio(double a, double b) {
  if (!(b > 0)) return std::nullopt;
  return a / b;
}

/// The link ceiling the notes use: the one the result was measured against, else the device's.
std::optional<double> link_of(const transfer_result& r, const device_facts& facts) {
  return r.link_bytes_per_s ? r.link_bytes_per_s : facts.link_bytes_per_s;
}

// ---- present ------------------------------------------------------------------------------

table bandwidth_table(const transfer_result& r) {
  table t;
  t.id = "bandwidth";
  t.title = "Host <-> device copies, one stream (cudaMemcpyAsync between CUDA events)";
  t.columns = {{"shape", "tensor"},
               {"bytes", "MiB", 1.0 / MiB, 1},
               {"direction", "dir"},
               {"memory", "host memory"},
               {"median_bytes_per_s", "GB/s", 1 / GB, 1},
               {"min_bytes_per_s", "min", 1 / GB, 1},
               {"max_bytes_per_s", "max", 1 / GB, 1},
               {"rel_spread", "spread %", 100.0, 2},
               {"link_percent", "% of link", 1.0, 1},
               {"median_time_s", "time (us)", 1e6, 1}};
  for (const auto& s : r.shapes)
    for (const auto& c : s.copies) {
      const auto& b = c.bandwidth_bytes_per_s;
      t.add_row({s.shape, static_cast<std::int64_t>(s.bytes), c.direction, c.memory, b.median,
                 b.min, b.max, b.rel_spread, percent_cell(b.median, r.link_bytes_per_s),
                 c.time_s.median});
    }
  return t;
}

table d2d_table(const transfer_result& r) {
  table t;
  t.id = "d2d";
  t.title = "Device -> device copies (cudaMemcpyAsync, HBM to HBM)";
  t.columns = {{"bytes", "MiB", 1.0 / MiB, 1},
               {"median_bytes_per_s", "GB/s (copied)", 1 / GB, 0},
               {"median_read_write_bytes_per_s", "GB/s (read + write)", 1 / GB, 0},
               {"rel_spread", "spread %", 100.0, 2},
               {"hbm_percent", "% of HBM datasheet", 1.0, 1}};
  for (const auto& c : r.d2d) {
    const double once = bw(c);
    t.add_row({static_cast<std::int64_t>(c.bytes), once, d2d_read_write(once),
               c.bandwidth_bytes_per_s.rel_spread,
               percent_cell(d2d_read_write(once), r.hbm_bytes_per_s)});
  }
  return t;
}

table sync_async_table(const transfer_result& r) {
  table t;
  t.id = "sync_async";
  t.title = fmt::format("Synchronous vs asynchronous H2D copies of {}: who waits?",
                        format_bytes(r.sync_async.front().bytes));
  t.columns = {{"memory", "host memory"},
               {"api", "call"},
               {"copy_s", "copy (ms)", 1e3, 2},
               {"cpu_blocked_s", "CPU blocked (ms)", 1e3, 3},
               {"cpu_free_s", "CPU free (ms)", 1e3, 2},
               {"blocked_percent", "blocked %", 1.0, 1}};
  for (const auto& sa : r.sync_async) {
    t.add_row({sa.memory, std::string("cudaMemcpy"), sa.sync_call_s.median, sa.sync_call_s.median,
               0.0, 100.0});
    t.add_row({sa.memory, std::string("cudaMemcpyAsync"), sa.async_copy_s.median,
               sa.async_call_s.median, sa.async_free_s.median,
               percent_of(sa.async_call_s.median, sa.async_copy_s.median)});
  }
  return t;
}

std::string engines_text(const std::optional<int>& engines) {
  return engines ? std::to_string(*engines) : std::string("n/a");
}

table streams_table(const transfer_result& r) {
  const auto& s = *r.streams;
  table t;
  t.id = "streams";
  t.title = fmt::format("Streams and copy engines ({} pinned, {} copy engines)",
                        format_bytes(s.bytes), engines_text(r.copy_engines));
  t.columns = {{"copy", "copy"},
               {"streams", "streams"},
               {"median_bytes_per_s", "GB/s (all directions)", 1 / GB, 1},
               {"rel_spread", "spread %", 100.0, 2},
               {"vs_one_stream", "x one stream", 1.0, 2}};
  const auto vs = [](double a, double b) { return b > 0 ? value(a / b) : value(std::monostate{}); };
  for (const auto& d : s.directions) {
    t.add_row(
        {d.one.direction, std::int64_t{1}, bw(d.one), d.one.bandwidth_bytes_per_s.rel_spread, 1.0});
    t.add_row({d.many.direction, static_cast<std::int64_t>(d.many.streams), bw(d.many),
               d.many.bandwidth_bytes_per_s.rel_spread, vs(bw(d.many), bw(d.one))});
  }
  if (s.bidirectional) {
    const double one_h2d = s.directions.empty() ? 0.0 : bw(s.directions.front().one);
    t.add_row({std::string("H2D + D2H"), std::int64_t{2}, bw(*s.bidirectional),
               s.bidirectional->bandwidth_bytes_per_s.rel_spread,
               vs(bw(*s.bidirectional), one_h2d)});
  }
  return t;
}

std::string ring_method(const staging_figures& s) {
  return fmt::format("ceiling: host memcpy into the {} staging ring, {} threads",
                     format_bytes(s.chunk_bytes * static_cast<std::uint64_t>(s.buffers)),
                     s.threads);
}

std::string dram_method(const staging_figures& s) {
  return fmt::format("host memcpy into a whole {} pinned buffer, {} threads", format_bytes(s.bytes),
                     s.threads);
}

table pageable_upload_table(const staging_figures& s) {
  table t;
  t.id = "pageable_upload";
  t.title = fmt::format(
      "Moving {} of pageable memory: cudaMemcpy vs a staged copy ({} threads, "
      "{} x {} pinned staging buffers)",
      format_bytes(s.bytes), s.threads, s.buffers, format_bytes(s.chunk_bytes));
  t.columns = {{"direction", "dir"},
               {"method", "method"},
               {"median_bytes_per_s", "GB/s", 1 / GB, 1},
               {"min_bytes_per_s", "min", 1 / GB, 1},
               {"max_bytes_per_s", "max", 1 / GB, 1},
               {"vs_cudamemcpy", "x cudaMemcpy", 1.0, 2}};
  const auto row = [&](const char* dir, std::string method, const copy_figure& m, double base) {
    const auto& b = m.bandwidth_bytes_per_s;
    t.add_row({std::string(dir), std::move(method), b.median, b.min, b.max,
               base > 0 ? value(b.median / base) : value(std::monostate{})});
  };
  const double base_up = bw(s.plain_up);
  row("H2D", "cudaMemcpy from pageable", s.plain_up, base_up);
  row("H2D", "staged upload (gpu_basics::staged_copier)", s.staged_up, base_up);
  row("host", ring_method(s), s.ring_memcpy, base_up);
  row("host", dram_method(s), s.dram_memcpy, base_up);
  if (s.pinned_up) row("H2D", "cudaMemcpyAsync from pinned (reference)", *s.pinned_up, base_up);
  const double base_down = bw(s.plain_down);
  row("D2H", "cudaMemcpy to pageable", s.plain_down, base_down);
  row("D2H", "staged download (gpu_basics::staged_copier)", s.staged_down, base_down);
  return t;
}

std::string yes_no(bool b) {
  return b ? "yes" : "no";
}

table staging_variants_table(const staging_figures& s) {
  table t;
  t.id = "staging_variants";
  t.title = fmt::format("What bounds the staged copy: {} with one choice changed at a time",
                        format_bytes(s.bytes));
  t.columns = {{"variant", "variant"},
               {"threads", "threads", 1.0, 0},
               {"chunk", "chunk"},
               {"buffers", "buffers", 1.0, 0},
               {"streaming_stores", "streaming stores"},
               {"huge_pages", "huge pages"},
               {"pieces_per_thread", "pieces per thread", 1.0, 0},
               {"upload_dma_enqueued", "upload DMA enqueued"},
               {"h2d_bytes_per_s", "H2D GB/s", 1 / GB, 1},
               {"d2h_bytes_per_s", "D2H GB/s", 1 / GB, 1},
               {"h2d_vs_configured", "H2D x configured", 1.0, 2},
               {"d2h_vs_configured", "D2H x configured", 1.0, 2}};
  const double up0 = bw(s.staged_up), down0 = bw(s.staged_down);
  const auto ratio = [](double x, double base) {
    return base > 0 ? value(x / base) : value(std::monostate{});
  };
  const auto row = [&](std::string name, int threads, std::uint64_t chunk, int buffers,
                       store_mode streaming, bool huge, int pieces, bool while_copying,
                       const copy_figure& up, const copy_figure& down) {
    t.add_row({std::move(name), static_cast<double>(threads), format_bytes(chunk),
               static_cast<double>(buffers), std::string(to_string(streaming)), yes_no(huge),
               static_cast<double>(pieces),
               std::string(while_copying ? "while copying" : "between chunks"), bw(up), bw(down),
               ratio(bw(up), up0), ratio(bw(down), down0)});
  };
  row("as configured", s.threads, s.chunk_bytes, s.buffers, s.streaming_stores, s.huge_pages,
      s.pieces_per_thread, s.enqueue_while_copying, s.staged_up, s.staged_down);
  for (const auto& v : s.variants)
    row(v.name, v.threads, v.chunk_bytes, v.buffers, v.streaming_stores, v.huge_pages,
        v.pieces_per_thread, v.enqueue_while_copying, v.up, v.down);
  return t;
}

table host_register_table(const host_register_figures& h, const staging_figures& s) {
  table t;
  t.id = "host_register";
  t.title = fmt::format("Pinning {} in place with cudaHostRegister: when does it pay?",
                        format_bytes(h.bytes));
  t.columns = {{"what", "what"}, {"seconds", "ms", 1e3, 2}};
  t.add_row({std::string("cudaHostRegister"), h.register_s.median});
  t.add_row({std::string("cudaHostUnregister"), h.unregister_s.median});
  t.add_row({std::string("one upload, pageable (cudaMemcpy)"), s.plain_up.time_s.median});
  t.add_row({std::string("one upload, registered"), h.registered_copy.time_s.median});
  t.add_row({std::string("one upload, staged"), s.staged_up.time_s.median});
  return t;
}

table sweep_table(const std::vector<sweep_point>& points) {
  table t;
  t.id = "sweep";
  t.title = "Copy size sweep: latency gives way to bandwidth";
  t.columns = {{"bytes", "size"},
               {"h2d_pinned_bytes_per_s", "H2D pinned GB/s", 1 / GB, 2},
               {"d2h_pinned_bytes_per_s", "D2H pinned GB/s", 1 / GB, 2},
               {"h2d_pageable_bytes_per_s", "H2D pageable GB/s", 1 / GB, 2},
               {"d2h_pageable_bytes_per_s", "D2H pageable GB/s", 1 / GB, 2},
               {"h2d_staged_bytes_per_s", "H2D staged GB/s", 1 / GB, 2},
               {"d2h_staged_bytes_per_s", "D2H staged GB/s", 1 / GB, 2},
               {"h2d_pinned_time_s", "H2D pinned us", 1e6, 1}};
  for (const auto& p : points)
    t.add_row({format_bytes(p.bytes), median_or_null(p.h2d_pinned, false),
               median_or_null(p.d2h_pinned, false), bw(p.h2d_pageable),
               median_or_null(p.d2h_pageable, false), median_or_null(p.h2d_staged, false),
               median_or_null(p.d2h_staged, false), median_or_null(p.h2d_pinned, true)});
  return t;
}

// ---- explain ------------------------------------------------------------------------------

/// The pinned copy of the "bandwidth" table closest to the link ceiling.
const copy_figure* best_pinned(const transfer_result& r) {
  const copy_figure* best = nullptr;
  for (const auto& s : r.shapes)
    for (const auto& c : s.copies)
      if (c.memory == "pinned" && (!best || bw(c) > bw(*best))) best = &c;
  return best;
}

std::string link_note(const transfer_result& r, const device_facts& facts, double link) {
  const auto& d = facts.device;
  std::string out = "- The link: ";
  if (d.pcie_generation_max && d.pcie_width_max)
    out += fmt::format("PCIe Gen{} x{}, ", *d.pcie_generation_max, *d.pcie_width_max);
  out += fmt::format("{:.1f} GB/s per direction after encoding.", link / GB);
  const copy_figure* best = best_pinned(r);
  if (!best) return out;
  return out +
         fmt::format(
             " Pinned copies reached up to {:.0f}% of it here ({} of {}): each {:.0f}-byte TLP "
             "payload carries ~{:.0f} bytes of packet header (so at most {:.0f}% of the link's "
             "rate is data) and the copy engine adds per-request overhead.",
             percent_of(bw(*best), link), best->direction, format_bytes(best->bytes),
             kTlpPayloadBytes, kTlpOverheadBytes,
             percent_of(kTlpPayloadBytes, kTlpPayloadBytes + kTlpOverheadBytes));
}

/// Pinned over pageable H2D at the last configured size.
std::optional<double> pinned_over_pageable_h2d(const transfer_result& r) {
  if (r.shapes.empty()) return std::nullopt;
  double pinned = 0, pageable = 0;
  for (const auto& c : r.shapes.back().copies)
    if (c.direction == "H2D") (c.memory == "pinned" ? pinned : pageable) = bw(c);
  if (!(pinned > 0)) return std::nullopt;
  return ratio(pinned, pageable);
}

void explain_bandwidth(const transfer_result& r, const device_facts& facts, std::vector<note>& n) {
  const std::string id = "bandwidth";
  if (const auto link = link_of(r, facts)) n.push_back({id, link_note(r, facts, *link)});
  n.push_back(
      {id,
       "- Pinned (page-locked) memory is read by the copy engine directly (DMA). Pageable "
       "memory may be swapped or moved by the OS, so the driver first copies it with the CPU "
       "into its own small pinned buffer, then DMAs that: two copies, one of them by a single "
       "CPU thread."});
  if (const auto x = pinned_over_pageable_h2d(r))
    n.push_back(
        {id, fmt::format("- At the largest size, pinned H2D is {:.1f}x faster than pageable H2D.",
                         *x)});
  n.push_back(
      {id,
       "- Small copies are latency-bound: a few microseconds of fixed cost per copy dominate "
       "until the copy is large enough (MiBs) for bandwidth to matter; see transfer.sweep."});
  n.push_back(
      {id,
       "- 'spread' is the interquartile range over the median of the samples; every sample's "
       "destination was zeroed before and checked against the random source after the copy."});
}

void explain_d2d(const transfer_result& r, const device_facts& facts, std::vector<note>& n) {
  const std::string id = "d2d";
  n.push_back(
      {id,
       "- A device copy reads every byte and writes it again, so HBM moves twice the copy's "
       "size: 'copied' is the copy's rate as a program sees it, 'read + write' is what the "
       "memory did, the figure the datasheet and `gpu-basics check` use."});
  if (!facts.datasheet || r.d2d.empty()) return;
  const double hbm = facts.datasheet->hbm_bytes_per_s;
  const auto faster = [](const copy_figure& a, const copy_figure& b) { return bw(a) < bw(b); };
  const auto best = std::max_element(r.d2d.begin(), r.d2d.end(), faster);
  n.push_back(
      {id, fmt::format(
               "- The datasheet's {:.2f} TB/s is the pins' peak; copies here reached {:.0f}% of it "
               "(read + write, {}). Sizes that fit in the {:.0f} MiB L2 can read faster than HBM.",
               hbm / 1e12, percent_of(d2d_read_write(bw(*best)), hbm), format_bytes(best->bytes),
               static_cast<double>(facts.device.l2_cache_bytes) / MiB)});
}

const sync_async_figure* sync_async_of(const transfer_result& r, const std::string& memory) {
  for (const auto& sa : r.sync_async)
    if (sa.memory == memory) return &sa;
  return nullptr;
}

void explain_sync_async(const transfer_result& r, std::vector<note>& n) {
  const std::string id = "sync_async";
  std::string pinned_here;
  if (const auto* p = sync_async_of(r, "pinned"))
    pinned_here = fmt::format(" ({:.1f} us here, for a {:.2f} ms copy)",
                              p->async_call_s.median * 1e6, p->async_copy_s.median * 1e3);
  n.push_back(
      {id, fmt::format("- cudaMemcpy returns when the copy is done: the CPU waits the whole time. "
                       "cudaMemcpyAsync from pinned memory only enqueues the copy and returns in "
                       "microseconds{}; the CPU is free while the copy engine works.",
                       pinned_here)});
  std::string pageable_here;
  if (const auto* p = sync_async_of(r, "pageable"); p && p->async_copy_s.median > 0)
    pageable_here = fmt::format(" ({:.0f}% of it here)",
                                percent_of(p->async_call_s.median, p->async_copy_s.median));
  n.push_back(
      {id,
       fmt::format(
           "- cudaMemcpyAsync from pageable memory is not asynchronous: the CPU itself must copy "
           "the data into the driver's staging buffer, so the call blocks for nearly the whole "
           "copy{}. Async overlap needs pinned memory.",
           pageable_here)});
}

void explain_streams(const transfer_result& r, const device_facts& facts, std::vector<note>& n) {
  const std::string id = "streams";
  const auto& s = *r.streams;
  for (const auto& d : s.directions)
    if (static_cast<int>(d.many.streams) < s.requested_streams)
      n.push_back(
          {id, fmt::format(
                   "- transfer.num_streams is {}, but a {} copy splits into at most {} chunks of "
                   ">= 64 KiB: {} streams were used.",
                   s.requested_streams, format_bytes(s.bytes), d.many.streams, d.many.streams)});
  n.push_back(
      {id,
       "- Splitting one copy over several streams does not make it faster: all chunks of one "
       "direction go through the same copy engine and the same PCIe direction, one after "
       "another."});
  const int engines = r.copy_engines.value_or(facts.device.copy_engines);
  std::optional<double> both;
  if (s.bidirectional && !s.directions.empty())
    both = ratio(bw(*s.bidirectional), bw(s.directions.front().one));
  constexpr const char* kMoved =
      "together they moved {:.2f}x the bytes per second of one H2D stream here";
  if (engines < 2) {  // one engine serves both directions in turn: the link's duplex is unused
    n.push_back({id, fmt::format("- PCIe is full duplex, but the GPU has {} copy engine{}: an H2D "
                                 "and a D2H copy on two streams take turns{}.",
                                 engines, engines == 1 ? "" : "s",
                                 both ? ", so " + fmt::format(kMoved, *both) : std::string())});
    return;
  }
  const std::string together =
      both ? fmt::format(kMoved, *both)
           : std::string("together they move nearly twice the bytes per second");
  n.push_back(
      {id,
       fmt::format(
           "- PCIe is full duplex and the GPU has {} copy engines: an H2D and a D2H copy on two "
           "streams run at the same time, so {} (the sum of the two rates, each timed on its own "
           "stream while the other ran).",
           engines, together)});
}

void explain_pageable_upload(const staging_figures& s, const std::optional<double>& link,
                             std::vector<note>& n) {
  const std::string id = "pageable_upload";
  // A pipeline of two stages runs no faster than the slower: the threads' memcpy into the ring,
  // or the DMA out of it (the upload from pinned memory where it was measured, else the link).
  // A stage whose ceiling was not measured is left out of the comparison.
  const double ring = bw(s.ring_memcpy);
  const double pinned = s.pinned_up ? bw(*s.pinned_up) : 0.0;
  const double dma = pinned > 0 ? pinned : link.value_or(0.0);
  std::vector<std::string> ceilings;
  if (ring > 0)
    ceilings.push_back(fmt::format(
        "the threads' ceiling is the host memcpy into such a ring ({:.1f} GB/s with {} threads)",
        ring / GB, s.threads));
  if (pinned > 0)
    ceilings.push_back(fmt::format(
        "the DMA's is the upload from pinned memory ({:.1f} GB/s){}", pinned / GB,
        link && pinned <= *link ? fmt::format(", under the PCIe link ({:.1f} GB/s)", *link / GB)
                                : std::string()));
  else if (dma > 0)
    ceilings.push_back(fmt::format("the DMA's is the PCIe link ({:.1f} GB/s)", dma / GB));
  const bool dma_bound = dma > 0 && (!(ring > 0) || dma < ring);
  const double bound = dma_bound ? dma : ring;
  std::string text = fmt::format(
      "- The staged upload is a pipeline of two stages: host threads read each byte from pageable "
      "memory and write it into pinned staging, then the DMA reads it again. The staging ring "
      "({}) is small enough to stay in the CPU's cache, so only the pageable reads must come "
      "from DRAM",
      format_bytes(s.chunk_bytes * static_cast<std::uint64_t>(s.buffers)));
  text += ceilings.empty() ? "." : fmt::format(": {}.", fmt::join(ceilings, "; "));
  if (bound > 0)
    text += fmt::format(
        " {} the {} at {:.1f} GB/s: the staged upload reached {:.0f}% of it.",
        ceilings.size() == 2 ? "A pipeline runs no faster than its slower stage, here"
                             : "Of the two stages only one was measured,",
        dma_bound ? "DMA" : "threads' memcpy", bound / GB, percent_of(bw(s.staged_up), bound));
  if (bw(s.dram_memcpy) > 0)
    text +=
        fmt::format(" A memcpy into a whole {} buffer also writes DRAM and runs at {:.1f} GB/s.",
                    format_bytes(s.bytes), bw(s.dram_memcpy) / GB);
  n.push_back({id, std::move(text)});
  n.push_back(
      {id,
       "- Pageable copies vary from run to run more than pinned ones (page-cache state, the OS "
       "scheduling the copying threads): compare their medians, not single runs."});
  // A run whose staged copies swung widely says so: its variants' ranking is not to be trusted.
  std::vector<std::string> wide;
  const auto swing = [&](const char* what, const copy_figure& f) {
    const summary& b = f.bandwidth_bytes_per_s;
    if (b.rel_spread > kNoisySpread && b.median > 0 && b.max > 0)
      wide.push_back(
          fmt::format("the {} from {:.1f} to {:.1f} GB/s (median {:.1f}, interquartile "
                      "range {:.0f}% of it)",
                      what, b.min / GB, b.max / GB, b.median / GB, 100.0 * b.rel_spread));
  };
  swing("upload", s.staged_up);
  swing("download", s.staged_down);
  if (!wide.empty())
    n.push_back({id, fmt::format("- The staged copies swung widely in this run: {}. Something else "
                                 "was using the host's cores or memory bandwidth; run the lesson "
                                 "again before trusting its staged figures{}.",
                                 fmt::join(wide, "; "),
                                 s.variants.empty() ? "" : " or the ranking of the variants")});
  n.push_back(
      {id,
       "- cudaMemcpy does the same with one CPU thread and a small driver buffer; the staged "
       "copy spreads the memcpy over threads and overlaps it with the DMA of the previous "
       "chunk."});
}

/// Whether `m` streams the stores of the upload (`upload`) or of the download.
bool streams(store_mode m, bool upload) {
  return upload ? streams_uploads(m) : streams_downloads(m);
}

/// A variant's or the configured copy's threads, chunk, buffers and huge pages: the choices that
/// a stores variant and an enqueue-order variant both keep as configured.
template <class T>
auto ring_choices(const T& x) {
  return std::tie(x.threads, x.chunk_bytes, x.buffers, x.huge_pages);
}

/// The variant that differs from the configured copy only in the stores of one direction (the
/// upload's when `upload`), if it was measured.
const staging_variant* stores_variant(const staging_figures& s, bool upload) {
  for (const auto& v : s.variants)
    if (streams(v.streaming_stores, upload) != streams(s.streaming_stores, upload) &&
        ring_choices(v) == ring_choices(s))
      return &v;
  return nullptr;
}

/// Whether `a` ran faster than `b` beyond the repetitions' spread: by 3% or more at the medians,
/// with a's interquartile range wholly above b's (where both have one).
bool clearly_faster(const copy_figure& a, const copy_figure& b) {
  const summary &x = a.bandwidth_bytes_per_s, &y = b.bandwidth_bytes_per_s;
  const bool spreads = x.p75 > 0 && y.p75 > 0;
  return x.median >= 1.03 * y.median && (!spreads || x.p25 > y.p75);
}

/// One direction's copy with plain and with streaming stores: the configured figure and its
/// stores variant's, or nullopt when the variant was not measured.
struct stores_pair {
  const copy_figure* plain = nullptr;
  const copy_figure* streaming = nullptr;
};
std::optional<stores_pair> stores_of(const staging_figures& s, bool upload) {
  const staging_variant* v = stores_variant(s, upload);
  if (!v) return std::nullopt;
  const copy_figure* configured = upload ? &s.staged_up : &s.staged_down;
  const copy_figure* changed = upload ? &v->up : &v->down;
  if (streams(s.streaming_stores, upload)) return stores_pair{changed, configured};
  return stores_pair{configured, changed};
}

/// Which stores ran faster beyond the spread: true for streaming, false for plain, nullopt when
/// the two were not told apart.
std::optional<bool> faster_stores(const stores_pair& p) {
  if (clearly_faster(*p.streaming, *p.plain)) return true;
  if (clearly_faster(*p.plain, *p.streaming)) return false;
  return std::nullopt;
}

/// What streaming stores did to each direction, and the mode that would be fastest.
void explain_stores(const staging_figures& s, std::vector<note>& n) {
  const auto up = stores_of(s, true), down = stores_of(s, false);
  if (!up && !down) return;
  std::vector<std::string> said;
  const auto clause = [&](const char* what, const std::optional<stores_pair>& p) {
    if (!p || !(bw(*p->plain) > 0)) return;
    const double plain = bw(*p->plain), streaming = bw(*p->streaming);
    // 3% apart at the medians (clearly_faster's first test) but not beyond the spread.
    const bool overlap =
        !faster_stores(*p) && (streaming >= 1.03 * plain || plain >= 1.03 * streaming);
    said.push_back(fmt::format(
        "the {} ran at {:.1f} GB/s with plain stores and {:.1f} GB/s with streaming stores "
        "({:+.0f}%{})",
        what, plain / GB, streaming / GB, 100.0 * (streaming / plain - 1.0),
        overlap ? ", within the repetitions' spread" : ""));
  };
  clause("upload", up);
  clause("download", down);
  if (said.empty()) return;
  std::string text =
      fmt::format("- Streaming stores, one direction at a time: {}", fmt::join(said, "; ")) +
      ". An ordinary store reads each destination line before writing it "
      "(read-for-ownership), so a memcpy moves three bytes of DRAM traffic per "
      "byte copied; streaming stores skip that read, but on upload they also "
      "keep the staging ring out of the cache that the DMA could have read it "
      "from.";
  if (up && down) {
    // A direction streams when that was faster beyond the repetitions' spread (and by 3% or
    // more); otherwise the configured choice stands.
    const std::optional<bool> fu = faster_stores(*up), fd = faster_stores(*down);
    const bool su = fu.value_or(streams_uploads(s.streaming_stores));
    const bool sd = fd.value_or(streams_downloads(s.streaming_stores));
    const store_mode best = su ? (sd ? store_mode::both : store_mode::uploads)
                               : (sd ? store_mode::downloads : store_mode::off);
    const bool up_told = fu.has_value(), down_told = fd.has_value();
    if (best != s.streaming_stores)
      text += fmt::format(
          " On this machine `transfer.staging.streaming_stores: {}` would be faster than the "
          "configured `{}`.",
          to_string(best), to_string(s.streaming_stores));
    else if (up_told && down_told)
      text += fmt::format(" The configured `streaming_stores: {}` is the faster choice here.",
                          to_string(best));
    else
      text += fmt::format(
          " The configured `streaming_stores: {}` stands: {} beyond the repetitions' spread.",
          to_string(best),
          !up_told && !down_told
              ? "in neither direction was one kind of store faster than the other"
              : fmt::format("the {} was not faster with one kind of store than the other",
                            up_told ? "download" : "upload"));
  }
  n.push_back({"staging_variants", std::move(text)});
}

void explain_staging_variants(const staging_figures& s, std::vector<note>& n) {
  const std::string id = "staging_variants";
  const double up0 = bw(s.staged_up), down0 = bw(s.staged_down);
  if (s.variants.empty() || !(up0 > 0) || !(down0 > 0)) return;
  // A variant that changes only when the upload's DMA is enqueued downloads as configured: its
  // download is the configured one measured again, and is not ranked.
  const auto upload_only = [&](const staging_variant& v) {
    return v.enqueue_while_copying != s.enqueue_while_copying &&
           ring_choices(v) == ring_choices(s) && v.streaming_stores == s.streaming_stores &&
           v.pieces_per_thread == s.pieces_per_thread;
  };
  // The fastest of the variants faster than the configured copy beyond the spread; when none
  // is, the fastest by median (for the "no change" wording).
  const auto best = [&](auto get, const copy_figure& configured, bool upload) {
    const auto ranked = [&](const staging_variant& v) { return upload || !upload_only(v); };
    const staging_variant* b = nullptr;
    for (const auto& v : s.variants)
      if (ranked(v) && clearly_faster(get(v), configured) && (!b || bw(get(v)) > bw(get(*b))))
        b = &v;
    if (b) return b;
    for (const auto& v : s.variants)
      if (ranked(v) && (!b || bw(get(v)) > bw(get(*b)))) b = &v;
    return b;
  };
  const staging_variant* up =
      best([](const staging_variant& v) -> const copy_figure& { return v.up; }, s.staged_up, true);
  const staging_variant* down = best(
      [](const staging_variant& v) -> const copy_figure& { return v.down; }, s.staged_down, false);
  const auto verdict = [](const char* what, const staging_variant& v, const copy_figure& fastest,
                          const copy_figure& configured) {
    const double gbps = bw(fastest), base = bw(configured);
    const double x = gbps / base;
    if (x < 1.03)
      return fmt::format(
          "no change sped the {} up by 3% or more (the best, \"{}\", ran at "
          "{:.2f}x the configured {:.1f} GB/s)",
          what, v.name, x, base / GB);
    if (!clearly_faster(fastest, configured))
      return fmt::format(
          "no change sped the {} up beyond the repetitions' spread (the best, \"{}\", ran at "
          "{:.2f}x the configured {:.1f} GB/s, but their interquartile ranges overlap)",
          what, v.name, x, base / GB);
    return fmt::format("the fastest {} is \"{}\": {:.1f} GB/s, {:.2f}x the configured {:.1f} GB/s",
                       what, v.name, gbps / GB, x, base / GB);
  };
  n.push_back({id, fmt::format("- Of {} variants, {}; {}.", s.variants.size(),
                               verdict("upload", *up, up->up, s.staged_up),
                               down ? verdict("download", *down, down->down, s.staged_down)
                                    : std::string("none changed the download"))});
  if (s.pinned_up && bw(*s.pinned_up) > 0) {
    const double pinned = bw(*s.pinned_up);
    const double best_up = std::max(up0, bw(up->up));
    n.push_back({id, fmt::format("- The best staged upload reaches {:.0f}% of the upload from "
                                 "pinned memory ({:.1f} GB/s): at 100%, pinning first would "
                                 "gain nothing for a one-off transfer.",
                                 percent_of(best_up, pinned), pinned / GB)});
  }
  explain_stores(s, n);
}

/// When pinning once (cost) has paid for itself against saving `per_upload` on each upload.
std::string break_even(double cost, double per_upload, const char* unit) {
  if (!(per_upload > 0)) return "never: a registered upload is not faster";
  return fmt::format("after {}{}", static_cast<int>(std::ceil(cost / per_upload)), unit);
}

void explain_host_register(const host_register_figures& h, const staging_figures& s,
                           std::vector<note>& n) {
  const double per_registered = h.registered_copy.time_s.median;
  const double cost = h.register_s.median + h.unregister_s.median;
  const double saving = s.plain_up.time_s.median - per_registered;
  const double vs_staged = s.staged_up.time_s.median - per_registered;
  n.push_back(
      {"host_register",
       fmt::format(
           "- Registering costs {:.0f} ms (the OS pins every page and the driver maps them) and "
           "saves {:.0f} ms per upload compared with cudaMemcpy from pageable memory: it has paid "
           "for itself {}. Against the staged copy it pays {}. For a buffer uploaded again and "
           "again, pin it once.",
           cost * 1e3, saving * 1e3, break_even(cost, saving, " upload(s) of the same buffer"),
           break_even(cost, vs_staged, ""))});
}

void explain_sweep(const std::vector<sweep_point>& points, std::vector<note>& n) {
  std::string here;
  if (!points.empty() && points.front().h2d_pinned)
    here = fmt::format(": {:.1f} us for {} here", points.front().h2d_pinned->time_s.median * 1e6,
                       format_bytes(points.front().bytes));
  n.push_back(
      {"sweep",
       fmt::format(
           "- Up to tens of KiB the time per copy barely changes: it is the fixed cost of a DMA "
           "request (a few microseconds{}), so bandwidth grows with size. From a few MiB on, the "
           "link is the limit and bandwidth flattens at its ceiling.",
           here)});
  // The smallest size from which the staged upload beats cudaMemcpy from pageable memory at every
  // larger size: below it, the staging threads' start-up costs more than they save.
  std::optional<std::uint64_t> from;
  for (auto it = points.rbegin(); it != points.rend() && it->h2d_staged; ++it) {
    if (bw(*it->h2d_staged) <= bw(it->h2d_pageable)) break;
    from = it->bytes;
  }
  if (from)
    n.push_back(
        {"sweep", fmt::format("- The staged upload beats cudaMemcpy from pageable memory "
                              "from {} on; below that its threads cost more than they save.",
                              format_bytes(*from))});
  else if (!points.empty() && points.back().h2d_staged)
    n.push_back(
        {"sweep",
         "- The staged upload never beats cudaMemcpy from pageable memory here, not even at "
         "the largest size."});
}

}  // namespace

// ---- the lesson's steps -----------------------------------------------------------------------

std::vector<table> present_transfer(const transfer_result& r) {
  std::vector<table> out;
  if (!r.shapes.empty()) out.push_back(bandwidth_table(r));
  if (!r.d2d.empty()) out.push_back(d2d_table(r));
  if (!r.sync_async.empty()) out.push_back(sync_async_table(r));
  if (r.streams) out.push_back(streams_table(r));
  if (r.pageable_upload) out.push_back(pageable_upload_table(*r.pageable_upload));
  if (r.pageable_upload && !r.pageable_upload->variants.empty())
    out.push_back(staging_variants_table(*r.pageable_upload));
  if (r.host_register && r.pageable_upload)
    out.push_back(host_register_table(*r.host_register, *r.pageable_upload));
  if (r.sweep) out.push_back(sweep_table(*r.sweep));
  if (r.double_buffer)
    for (auto& t : present_double_buffer(*r.double_buffer)) out.push_back(std::move(t));
  if (r.multi_gpu)
    for (auto& t : present_multi_gpu(*r.multi_gpu)) out.push_back(std::move(t));
  return out;
}

std::vector<note> explain_transfer(const transfer_result& r, const device_facts& facts) {
  std::vector<note> n;
  if (!r.shapes.empty()) explain_bandwidth(r, facts, n);
  if (!r.d2d.empty()) explain_d2d(r, facts, n);
  if (!r.sync_async.empty()) explain_sync_async(r, n);
  if (r.streams) explain_streams(r, facts, n);
  if (r.pageable_upload) {
    explain_pageable_upload(*r.pageable_upload, link_of(r, facts), n);
    explain_staging_variants(*r.pageable_upload, n);
  }
  if (r.host_register && r.pageable_upload)
    explain_host_register(*r.host_register, *r.pageable_upload, n);
  if (r.sweep) explain_sweep(*r.sweep, n);
  const auto append = [&n](std::vector<note> more) { n.insert(n.end(), more.begin(), more.end()); };
  if (r.double_buffer) append(explain_double_buffer(*r.double_buffer, facts));
  if (r.multi_gpu) append(explain_multi_gpu(*r.multi_gpu, facts));
  return n;
}

lesson transfer_lesson() {
  lesson l;
  l.name = "transfer";
  l.description =
      "Lesson: host<->device copies: sync vs async, pinned vs pageable, streams, PCIe bandwidth";
  l.traces = true;
  l.writes_files = true;
  l.render = [](const nlohmann::json& j, const device_facts& f) {
    return render_typed<transfer_result, explain_transfer, present_transfer>(j, f, "transfer");
  };
  l.upgrade_v1 = [](const nlohmann::json& block) {
    return nlohmann::json(transfer_from_v1(block));
  };
  return l;
}

}  // namespace gpu_basics::lessons
