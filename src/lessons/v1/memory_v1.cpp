// Reading the memory lesson's schema-1 tables (titles, rows) and extras back into a memory_result.
#include <array>
#include <regex>

#include "../table_labels.hpp"
#include "common.hpp"
#include "readers.hpp"

namespace gpu_basics::lessons {

namespace {

using labels::kFromCache;
using labels::kNewSegment;
using labels::kPeakAllocated;
using labels::kPeakReserved;
using labels::kPeakSum;
using labels::kPeakWeights;
using v1::bytes_in;
using v1::bytes_of;
using v1::extra_entry;
using v1::node;
using v1::number_if_any;
using v1::number_in;
using v1::rows_of;
using v1::table_of;

constexpr std::array<const char*, 5> kCachingSteps = {"allocate_cold", "free", "allocate_again",
                                                      "empty_cache", "allocate_after_empty_cache"};

/// The sub-matches of `re` in a table's title ([0] the whole match).
/// @throws format_error when it does not match.
std::vector<std::string> title_match(const node& t, const std::regex& re) {
  const auto title = t.at("title").get<std::string>();
  std::smatch m;
  if (!std::regex_search(title, m, re))
    throw t.at("title").error("not the lesson's title: " + quote_for_message(title, 120));
  return {m.begin(), m.end()};
}

allocation_cost_result allocation_cost_from_v1(const node& t) {
  allocation_cost_result a;
  for (const auto& row : rows_of(t))
    a.rows.push_back({bytes_of(row.at("bytes")), row.at("cuda_malloc_s").get<double>(),
                      row.at("cuda_free_s").get<double>(),
                      row.at("malloc_async_pair_s").get<double>(),
                      row.at("cached_pair_s").get<double>()});
  return a;
}

caching_result caching_from_v1(const node& t, const std::optional<node>& ec) {
  static const std::regex re(R"(\((\d+) x ([^)]+)\)\s*$)");
  const auto m = title_match(t, re);
  caching_result c;
  c.blocks = number_in<int>(t.at("title"), m[1]);
  c.block_bytes = bytes_in(t.at("title"), m[2]);
  const node rows = rows_of(t);
  if (rows.size() > kCachingSteps.size())
    throw rows.error(std::to_string(rows.size()) + " steps, expected 5");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const node row = rows.at(i);
    c.steps.push_back({kCachingSteps[i], row.at("step").get<std::string>(),
                       row.at("allocated_bytes").get<std::int64_t>(),
                       row.at("reserved_bytes").get<std::int64_t>(),
                       row.at("device_allocations").get<std::int64_t>(),
                       row.at("step_s").get<double>()});
  }
  if (ec)
    c.empty_cache = empty_cache_outcome{ec->at("released_bytes").get<std::uint64_t>(),
                                        ec->at("released_segments").get<std::uint64_t>(),
                                        ec->at("kept_bytes").get<std::uint64_t>(),
                                        ec->at("kept_in_use_segments").get<std::uint64_t>(),
                                        ec->at("kept_pending_segments").get<std::uint64_t>()};
  return c;
}

peak_result peak_from_v1(const node& t, const std::optional<node>& stats) {
  peak_result p;
  for (const auto& row : rows_of(t)) {
    const auto q = row.at("quantity").get<std::string>();
    const node b = row.at("bytes");
    const auto peak = [&b] {
      return b.is_null() ? std::nullopt : std::optional(b.get<std::int64_t>());
    };
    if (q == kPeakWeights)
      p.weights_bytes = b.get<std::uint64_t>();
    else if (q == kPeakAllocated)
      p.peak_allocated_bytes = peak();
    else if (q == kPeakReserved)
      p.peak_reserved_bytes = peak();
    else if (q == kPeakSum)
      p.requested_bytes = b.get<std::uint64_t>();
    else
      throw row.at("quantity").error("not a quantity of the lesson: " + quote_for_message(q));
  }
  // The allocator's stats after the pass hold the same peaks.
  if (stats && !p.peak_allocated_bytes)
    p.peak_allocated_bytes = stats->at("allocated_bytes").at("peak").get<std::int64_t>();
  if (stats && !p.peak_reserved_bytes)
    p.peak_reserved_bytes = stats->at("reserved_bytes").at("peak").get<std::int64_t>();
  return p;
}

pinned_result pinned_from_v1(const node& t, const std::optional<node>& pool) {
  static const std::regex re(R"(for a (.+) tensor)");
  pinned_result p;
  p.bytes = bytes_in(t.at("title"), title_match(t, re)[1]);
  p.use_pinned_memory = false;
  for (const auto& row : rows_of(t)) {
    const auto what = row.at("memory").get<std::string>();
    if (what.starts_with("pageable")) {
      p.pageable_allocate_s = row.at("allocate_s").get<double>();
      p.pageable_h2d_bytes_per_s = number_if_any(row, "h2d_bytes_per_s");
    } else if (what.starts_with("pinned")) {
      p.use_pinned_memory = true;
      p.pinned_allocate_s = number_if_any(row, "allocate_s");
      p.pinned_reuse_s = number_if_any(row, "reuse_s");
      p.pinned_h2d_bytes_per_s = number_if_any(row, "h2d_bytes_per_s");
    } else {
      throw row.at("memory").error("not a kind of host memory: " + quote_for_message(what));
    }
  }
  if (pool)
    p.pool = pinned_pool_outcome{
        pool->at("backend_allocations").get<std::int64_t>(),
        pool->at("backend_frees").get<std::int64_t>(), pool->at("cache_hits").get<std::int64_t>(),
        pool->at("pin_seconds").get<double>(), pool->at("unpin_seconds").get<double>()};
  return p;
}

fragmentation_result fragmentation_from_v1(const node& t) {
  static const std::regex re(R"(a cached (.+) block, (.+) requests)");
  const auto m = title_match(t, re);
  fragmentation_result f;
  f.large_bytes = bytes_in(t.at("title"), m[1]);
  f.small_bytes = bytes_in(t.at("title"), m[2]);
  for (const auto& row : rows_of(t)) {
    fragmentation_row r;
    const node limit = row.at("max_split_size");
    if (!(limit.is_string() && limit.get<std::string>() == "unlimited"))
      r.max_split_size = bytes_of(limit);
    r.fragmentation = row.at("fragmentation").get<double>();
    r.largest_free_bytes = row.at("largest_free_bytes").get<std::uint64_t>();
    r.reserved_bytes = row.at("reserved_bytes").get<std::int64_t>();
    const auto from = row.at("second_64mib").get<std::string>();
    if (from != kNewSegment && from != kFromCache)
      throw row.at("second_64mib")
          .error("not where a block comes from: " + quote_for_message(from));
    r.new_segment = from == kNewSegment;
    f.rows.push_back(r);
  }
  return f;
}

}  // namespace

memory_result memory_from_v1(const nlohmann::json& json_block) {
  const node block(json_block);
  memory_result r;
  if (const auto t = table_of(block, "allocation_cost"))
    r.allocation_cost = allocation_cost_from_v1(*t);
  if (const auto t = table_of(block, "caching"))
    r.caching = caching_from_v1(*t, extra_entry(block, "empty_cache"));
  if (const auto t = table_of(block, "peak"))
    r.peak = peak_from_v1(*t, extra_entry(block, "peak_stats"));
  if (const auto t = table_of(block, "trace")) {
    r.trace = v1::trace_from_v1(*t, extra_entry(block, "trace"));
    r.trace->schedule_wait = r.trace->schedule_warmup = 0;  // the pass is traced whole
  }
  if (const auto t = table_of(block, "pinned_vs_pageable"))
    r.pinned = pinned_from_v1(*t, extra_entry(block, "pinned_pool"));
  if (const auto t = table_of(block, "fragmentation")) r.fragmentation = fragmentation_from_v1(*t);
  return r;
}

}  // namespace gpu_basics::lessons
