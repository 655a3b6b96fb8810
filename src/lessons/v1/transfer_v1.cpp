// Reading the transfer lesson's schema-1 tables (titles, rows, notes) and extras back into a
// transfer_result, measurements from extra.measurements where schema 1 kept them.
#include <algorithm>
#include <map>
#include <regex>

#include "common.hpp"
#include "gpu_basics/core/units.hpp"
#include "readers.hpp"

namespace gpu_basics::lessons {

namespace {

using v1::bytes_in;
using v1::extra_of;
using v1::node;
using v1::notes_of;
using v1::nullable_number;
using v1::rows_of;
using v1::table_of;

/// extra.measurements of schema 1, each taken once, in the order the lesson measured them.
class measurement_pool {
 public:
  explicit measurement_pool(const node& extra) {
    if (const auto m = extra.find("measurements"); m && !m->is_null())
      all_ = m->get<std::vector<copy_figure>>();
    used_.assign(all_.size(), false);
  }
  /// The first measurement not yet taken with this direction and memory, size text (as
  /// format_bytes writes it), stream count (nullopt: any) and bidirectionality.
  std::optional<copy_figure> take(const std::string& dir, const std::string& mem,
                                  const std::string& size, std::optional<unsigned> streams,
                                  bool bidirectional = false) {
    for (std::size_t i = 0; i < all_.size(); ++i) {
      const auto& f = all_[i];
      if (used_[i] || f.direction != dir || f.memory != mem || f.bidirectional != bidirectional ||
          format_bytes(f.bytes) != size || (streams && f.streams != *streams))
        continue;
      used_[i] = true;
      return f;
    }
    return std::nullopt;
  }
  /// Samples per copy, from the first measurement kept.
  [[nodiscard]] std::optional<int> iterations() const {
    if (all_.empty() || all_.front().time_s.count == 0) return std::nullopt;
    return static_cast<int>(all_.front().time_s.count);
  }

 private:
  std::vector<copy_figure> all_;
  std::vector<bool> used_;
};

double number_or_zero(const node& row, const char* key) {
  return nullable_number(row, key).value_or(0.0);
}

std::string text(const node& row, const char* key) {
  return row.at(key).get<std::string>();
}

/// The part of a table's title that `re` captures.
std::smatch title_match(const node& t, const std::regex& re, const std::string& title) {
  std::smatch m;
  if (!std::regex_match(title, m, re))
    throw t.at("title").error("not the lesson's title: " + quote_for_message(title, 120));
  return m;
}

/// A figure from one table row: the columns the table had (bytes/s and time in base units).
copy_figure figure_from_row(const std::string& dir, const std::string& mem, std::uint64_t bytes,
                            const node& row, unsigned streams = 1) {
  copy_figure f;
  f.direction = dir;
  f.memory = mem;
  f.bytes = f.bytes_moved = bytes;
  f.streams = streams;
  auto& b = f.bandwidth_bytes_per_s;
  b.median = number_or_zero(row, "median_bytes_per_s");
  if (row.contains("min_bytes_per_s")) b.min = number_or_zero(row, "min_bytes_per_s");
  if (row.contains("max_bytes_per_s")) b.max = number_or_zero(row, "max_bytes_per_s");
  if (row.contains("rel_spread")) b.rel_spread = number_or_zero(row, "rel_spread");
  if (row.contains("median_time_s")) f.time_s.median = number_or_zero(row, "median_time_s");
  return f;
}

/// ceiling = value / (percent / 100), from the first row that has both.
std::optional<double> ceiling_from(const node& rows, const char* value_key, double factor,
                                   const char* percent_key) {
  for (const auto& row : rows) {
    const auto v = nullable_number(row, value_key);
    const auto p = nullable_number(row, percent_key);
    if (v && p && *p > 0) return factor * *v * 100.0 / *p;
  }
  return std::nullopt;
}

void bandwidth_from_v1(const node& t, measurement_pool& pool, transfer_result& r) {
  const node rows = rows_of(t);
  r.use_pinned_memory = false;
  for (const auto& row : rows) {
    const std::string shape = text(row, "shape");
    const auto bytes = row.at("bytes").get<std::uint64_t>();
    if (r.shapes.empty() || r.shapes.back().shape != shape || r.shapes.back().bytes != bytes)
      r.shapes.push_back({shape, bytes, {}});
    const std::string dir = text(row, "direction"), mem = text(row, "memory");
    if (mem == "pinned") r.use_pinned_memory = true;
    auto f = pool.take(dir, mem, format_bytes(bytes), 1u);
    r.shapes.back().copies.push_back(f ? *f : figure_from_row(dir, mem, bytes, row));
  }
  r.link_bytes_per_s = ceiling_from(rows, "median_bytes_per_s", 1.0, "link_percent");
}

void d2d_from_v1(const node& t, measurement_pool& pool, transfer_result& r) {
  const node rows = rows_of(t);
  for (const auto& row : rows) {
    const auto bytes = row.at("bytes").get<std::uint64_t>();
    auto f = pool.take("D2D", "pinned", format_bytes(bytes), 1u);
    r.d2d.push_back(f ? *f : figure_from_row("D2D", "pinned", bytes, row));
  }
  r.hbm_bytes_per_s = ceiling_from(rows, "median_bytes_per_s", 2.0, "hbm_percent");
}

void sync_async_from_v1(const node& t, const node& extra, transfer_result& r) {
  if (const auto sa = extra.find("sync_async"); sa && !sa->is_null()) {
    r.sync_async = sa->get<std::vector<sync_async_figure>>();
    return;
  }
  static const std::regex re(R"(^Synchronous vs asynchronous H2D copies of (.+): who waits\?$)");
  const std::string title = t.at("title").get<std::string>();
  const std::uint64_t bytes = bytes_in(t.at("title"), title_match(t, re, title)[1].str());
  for (const auto& row : rows_of(t)) {
    const std::string mem = text(row, "memory");
    if (r.sync_async.empty() || r.sync_async.back().memory != mem)
      r.sync_async.push_back({mem, bytes, {}, {}, {}, {}, {}});
    auto& sa = r.sync_async.back();
    if (text(row, "api") == "cudaMemcpy") {
      sa.sync_call_s.median = number_or_zero(row, "copy_s");
    } else {
      sa.async_copy_s.median = number_or_zero(row, "copy_s");
      sa.async_call_s.median = number_or_zero(row, "cpu_blocked_s");
      sa.async_free_s.median = number_or_zero(row, "cpu_free_s");
    }
  }
}

/// The streams asked for: the note schema 1 wrote when fewer were used, else the most used.
int requested_streams_from_v1(const node& t, const streams_figures& s) {
  static const std::regex re(R"(^- transfer\.num_streams is (\d+), but .*)");
  for (const auto& line : notes_of(t)) {
    std::smatch m;
    if (std::regex_match(line, m, re)) return v1::number_in<int>(t, m[1].str());
  }
  int most = 0;
  for (const auto& d : s.directions) most = std::max(most, static_cast<int>(d.many.streams));
  return most;
}

void streams_from_v1(const node& t, measurement_pool& pool, transfer_result& r) {
  static const std::regex re(
      R"(^Streams and copy engines \((.+) pinned, (\d+|n/a) copy engines\)$)");
  const std::string title = t.at("title").get<std::string>();
  const auto m = title_match(t, re, title);
  const std::string size = m[1].str();
  if (m[2] != "n/a") r.copy_engines = v1::number_in<int>(t.at("title"), m[2].str());
  streams_figures s;
  s.bytes = (!r.shapes.empty() && format_bytes(r.shapes.back().bytes) == size)
                ? r.shapes.back().bytes
                : bytes_in(t.at("title"), size);
  bool have_one = false;
  for (const auto& row : rows_of(t)) {
    const std::string dir = text(row, "copy");
    const auto streams = row.at("streams").get<unsigned>();
    if (dir == "H2D + D2H") {
      auto f = pool.take("H2D", "pinned", size, std::nullopt, true);
      if (!f) {
        f = figure_from_row("H2D", "pinned", s.bytes, row, streams);
        f->bidirectional = true;
        f->bytes_moved = 2 * s.bytes;
      }
      s.bidirectional = std::move(f);
      continue;
    }
    auto f = pool.take(dir, "pinned", size, streams);
    copy_figure fig = f ? *f : figure_from_row(dir, "pinned", s.bytes, row, streams);
    if (!have_one)
      s.directions.push_back({std::move(fig), {}});
    else
      s.directions.back().many = std::move(fig);
    have_one = !have_one;
  }
  s.requested_streams = requested_streams_from_v1(t, s);
  r.streams = std::move(s);
}

/// Rows of the "pageable_upload" table by what their method text starts with.
copy_figure staging_row(const node& rows, const std::string& dir, const std::string& method_prefix,
                        const std::string& mem, unsigned streams, std::uint64_t bytes,
                        measurement_pool& pool, bool* found = nullptr) {
  for (const auto& row : rows) {
    if (text(row, "direction") != dir || text(row, "method").rfind(method_prefix, 0) != 0) continue;
    if (found) *found = true;
    auto f = pool.take(dir == "host" ? "H2D" : dir, mem, format_bytes(bytes), streams);
    return f ? *f : figure_from_row(dir == "host" ? "H2D" : dir, mem, bytes, row, streams);
  }
  if (found) *found = false;
  return {};
}

/// Exact bytes for `size` from the extras that kept them (sync_async, host_register), else the
/// text.
std::uint64_t large_bytes(const node& title, const std::string& size, const node& extra) {
  std::vector<std::uint64_t> known;
  if (const auto h = extra.find("host_register"); h && h->contains("bytes"))
    known.push_back(h->at("bytes").get<std::uint64_t>());
  if (const auto sa = extra.find("sync_async"); sa && sa->is_array())
    for (const auto& e : *sa) known.push_back(e.at("bytes").get<std::uint64_t>());
  for (const auto b : known)
    if (format_bytes(b) == size) return b;
  return bytes_in(title, size);
}

void pageable_upload_from_v1(const node& t, const node& extra, measurement_pool& pool,
                             transfer_result& r) {
  static const std::regex re(
      R"(^Moving (.+) of pageable memory: cudaMemcpy vs a staged copy \((\d+) threads, (\d+) x (.+) pinned staging buffers\)$)");
  const std::string title = t.at("title").get<std::string>();
  const auto m = title_match(t, re, title);
  staging_figures s;
  s.bytes = large_bytes(t.at("title"), m[1].str(), extra);
  s.threads = v1::number_in<int>(t.at("title"), m[2].str());
  s.buffers = v1::number_in<int>(t.at("title"), m[3].str());
  s.chunk_bytes = bytes_in(t.at("title"), m[4].str());
  const node rows = rows_of(t);
  // The order the lesson measured them in, so that each takes its own measurement.
  s.plain_up = staging_row(rows, "H2D", "cudaMemcpy from pageable", "pageable", 1, s.bytes, pool);
  s.staged_up = staging_row(rows, "H2D", "staged upload", "pageable", 1, s.bytes, pool);
  s.ring_memcpy = staging_row(rows, "host", "ceiling:", "pageable", 0, s.bytes, pool);
  s.dram_memcpy =
      staging_row(rows, "host", "host memcpy into a whole", "pageable", 0, s.bytes, pool);
  bool pinned = false;
  auto pinned_up =
      staging_row(rows, "H2D", "cudaMemcpyAsync from pinned", "pinned", 1, s.bytes, pool, &pinned);
  if (pinned) s.pinned_up = std::move(pinned_up);
  s.plain_down = staging_row(rows, "D2H", "cudaMemcpy to pageable", "pageable", 1, s.bytes, pool);
  s.staged_down = staging_row(rows, "D2H", "staged download", "pageable", 1, s.bytes, pool);
  r.pageable_upload = std::move(s);
}

void host_register_from_v1(const node& t, const node& extra, transfer_result& r) {
  std::map<std::string, double> ms;
  for (const auto& row : rows_of(t)) ms[text(row, "what")] = number_or_zero(row, "seconds");
  host_register_figures h;
  if (const auto hr = extra.find("host_register"); hr && !hr->is_null()) {
    h = hr->get<host_register_figures>();
  } else {
    static const std::regex re(
        R"(^Pinning (.+) in place with cudaHostRegister: when does it pay\?$)");
    const std::string title = t.at("title").get<std::string>();
    h.bytes = large_bytes(t.at("title"), title_match(t, re, title)[1].str(), extra);
    h.register_s.median = ms["cudaHostRegister"];
    h.unregister_s.median = ms["cudaHostUnregister"];
    h.registered_copy.direction = "H2D";
    h.registered_copy.memory = "pinned";
    h.registered_copy.bytes = h.registered_copy.bytes_moved = h.bytes;
    h.registered_copy.time_s.median = ms["one upload, registered"];
  }
  // The table kept the upload times that the pageable table (rates only) did not.
  if (r.pageable_upload) {
    auto& s = *r.pageable_upload;
    if (s.plain_up.time_s.count == 0)
      s.plain_up.time_s.median = ms["one upload, pageable (cudaMemcpy)"];
    if (s.staged_up.time_s.count == 0) s.staged_up.time_s.median = ms["one upload, staged"];
  }
  r.host_register = std::move(h);
}

/// A figure of which a table kept only the median rate (and maybe the median time).
copy_figure figure_with(const std::string& dir, const std::string& mem, std::uint64_t bytes,
                        std::optional<double> rate, std::optional<double> time_s = std::nullopt) {
  copy_figure f;
  f.direction = dir;
  f.memory = mem;
  f.bytes = f.bytes_moved = bytes;
  f.bandwidth_bytes_per_s.median = rate.value_or(0.0);
  f.time_s.median = time_s.value_or(0.0);
  return f;
}

sweep_point sweep_point_from_v1(const node& row, measurement_pool& pool) {
  const std::string size = text(row, "bytes");
  sweep_point p;
  p.bytes = bytes_in(row.at("bytes"), size);
  if (nullable_number(row, "h2d_pinned_bytes_per_s")) {
    p.h2d_pinned = pool.take("H2D", "pinned", size, 1u);
    if (!p.h2d_pinned)
      p.h2d_pinned =
          figure_with("H2D", "pinned", p.bytes, nullable_number(row, "h2d_pinned_bytes_per_s"),
                      nullable_number(row, "h2d_pinned_time_s"));
    p.d2h_pinned = pool.take("D2H", "pinned", size, 1u);
    if (!p.d2h_pinned)
      p.d2h_pinned =
          figure_with("D2H", "pinned", p.bytes, nullable_number(row, "d2h_pinned_bytes_per_s"));
  }
  const auto pageable = pool.take("H2D", "pageable", size, 1u);
  p.h2d_pageable = pageable ? *pageable
                            : figure_with("H2D", "pageable", p.bytes,
                                          nullable_number(row, "h2d_pageable_bytes_per_s"));
  p.bytes = p.h2d_pageable.bytes;  // exact where a measurement kept it
  return p;
}

void sweep_from_v1(const node& t, measurement_pool& pool, transfer_result& r) {
  std::vector<sweep_point> points;
  for (const auto& row : rows_of(t)) points.push_back(sweep_point_from_v1(row, pool));
  r.sweep = std::move(points);
}

}  // namespace

transfer_result transfer_from_v1(const nlohmann::json& block) {
  return transfer_from_v1(node(block));
}

transfer_result transfer_from_v1(const node& block) {
  const node extra = extra_of(block);
  if (!extra.is_object()) throw extra.error("expected an object, got " + json_kind(extra.raw()));
  measurement_pool pool(extra);
  transfer_result r;
  r.iterations = pool.iterations();
  // In the order the lesson measured: each table takes the first unused matching measurement.
  if (const auto t = table_of(block, "bandwidth")) bandwidth_from_v1(*t, pool, r);
  if (const auto t = table_of(block, "d2d")) d2d_from_v1(*t, pool, r);
  if (const auto t = table_of(block, "sync_async")) sync_async_from_v1(*t, extra, r);
  if (const auto t = table_of(block, "streams")) streams_from_v1(*t, pool, r);
  if (const auto t = table_of(block, "pageable_upload"))
    pageable_upload_from_v1(*t, extra, pool, r);
  if (const auto t = table_of(block, "host_register")) host_register_from_v1(*t, extra, r);
  if (const auto t = table_of(block, "sweep")) sweep_from_v1(*t, pool, r);
  r.double_buffer = double_buffer_from_v1(block);
  r.multi_gpu = multi_gpu_from_v1(block);
  return r;
}

}  // namespace gpu_basics::lessons
