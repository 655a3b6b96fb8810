// The unified lesson's host side: lookups the notes and the report share, its tables, and the
// registry entry (the notes: unified_notes.cpp). No CUDA header: tested on the CPU.
#include "gpu_basics/lessons/unified.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "gpu_basics/core/units.hpp"
#include "unified_text.hpp"

namespace gpu_basics::lessons {

using presentation::table;
using presentation::value;
namespace ut = unified_text;

// ---- lookups ---------------------------------------------------------------------------------

const managed_touch* find_touch(const managed_result& m, std::string_view direction,
                                std::string_view placement) {
  for (const auto& t : m.touches)
    if (t.direction == direction && t.placement == placement) return &t;
  return nullptr;
}

std::string access_name(const zero_copy_row& r) {
  if (r.access == "one_pass") return "one pass";
  if (r.access == "passes") return fmt::format("{} passes", r.passes);
  return r.access;
}

const zero_copy_row* find_access(const zero_copy_result& z, std::string_view access) {
  for (const auto& r : z.rows)
    if (r.access == access) return &r;
  return nullptr;
}

const ledger_probe* find_probe(const ledger_result& l, std::string_view loading) {
  for (const auto& p : l.probes)
    if (p.module_loading == loading) return &p;
  return nullptr;
}

std::optional<std::int64_t> step_delta(const ledger_probe& p, std::string_view step) {
  for (std::size_t i = 1; i < p.steps.size(); ++i)
    if (p.steps[i].step == step)
      return static_cast<std::int64_t>(p.steps[i].used_bytes) -
             static_cast<std::int64_t>(p.steps[i - 1].used_bytes);
  return std::nullopt;
}

std::int64_t process_bytes(const ledger_probe& p) {
  if (p.steps.size() < 2) return 0;
  return static_cast<std::int64_t>(p.steps.back().used_bytes) -
         static_cast<std::int64_t>(p.steps.front().used_bytes);
}

namespace {

std::optional<double> median_rate(const d2d_belief& d, bool in_l2) {
  std::vector<double> v;
  const double l2 = static_cast<double>(d.l2_bytes);
  for (const auto& p : d.points) {
    const double ws = static_cast<double>(p.working_set_bytes);
    if (in_l2 ? ws <= l2 / 2 : ws >= 4 * l2) v.push_back(p.bytes_per_s);
  }
  if (v.empty() || d.l2_bytes == 0) return std::nullopt;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

std::optional<double> l2_plateau(const d2d_belief& d) {
  return median_rate(d, true);
}

std::optional<double> hbm_plateau(const d2d_belief& d) {
  return median_rate(d, false);
}

// ---- tables ----------------------------------------------------------------------------------

namespace {

value count_or_none(const std::optional<std::uint64_t>& v) {
  return v ? value(static_cast<std::int64_t>(*v)) : value();
}

table managed_table(const managed_result& m) {
  table t;
  t.id = "managed";
  t.title = fmt::format("Managed memory: first touch of {} (prefetch included)", ut::size(m.bytes));
  t.columns = {{"direction", "first touched on"},
               {"placement", "before the touch"},
               {"seconds", "time (ms)", 1e3, 2},
               {"bytes_per_s", "GB/s", 1e-9, 1},
               {"faults", "page faults", 1.0, 0}};
  for (const auto& r : m.touches)
    t.add_row({r.direction == "to_gpu" ? std::string("GPU (pages on the CPU)")
                                       : std::string("CPU (pages on the GPU)"),
               r.placement, r.seconds, r.bytes_per_s, count_or_none(r.faults)});
  return t;
}

table oversubscription_table(const oversubscription_result& o) {
  table t;
  t.id = "oversubscription";
  t.title = fmt::format("Oversubscription: passes over managed working sets, {} free ({})",
                        ut::size(o.free_bytes),
                        o.mode == "ballast" ? "the rest held by a ballast" : "the whole device");
  t.columns = {{"ratio", "x free memory", 1.0, 2},
               {"bytes", "working set"},
               {"faults_bytes_per_s", "faults (GB/s)", 1e-9, 1},
               {"prefetch_bytes_per_s", "prefetch per chunk (GB/s)", 1e-9, 1},
               {"prefetch_speedup", "prefetch / faults", 1.0, 1}};
  for (const auto& p : o.points)
    t.add_row({p.ratio, ut::size(p.bytes), p.faults_bytes_per_s, p.prefetch_bytes_per_s,
               p.faults_bytes_per_s > 0 ? value(p.prefetch_bytes_per_s / p.faults_bytes_per_s)
                                        : value()});
  return t;
}

table zero_copy_table(const zero_copy_result& z) {
  table t;
  t.id = "zero_copy";
  t.title = fmt::format("Zero-copy: kernels reading {} of mapped pinned memory", ut::size(z.bytes));
  t.columns = {{"access", "access"},
               {"passes", "passes", 1.0, 0},
               {"bytes_read", "read per pass"},
               {"mapped_s", "mapped (ms)", 1e3, 2},
               {"copy_then_compute_s", "copy, then compute (ms)", 1e3, 2},
               {"mapped_speedup", "mapped vs copy", 1.0, 2}};
  for (const auto& r : z.rows)
    t.add_row({access_name(r), r.passes, ut::size(r.bytes_read), r.mapped_s, r.copy_then_compute_s,
               r.mapped_s > 0 ? value(r.copy_then_compute_s / r.mapped_s) : value()});
  return t;
}

table host_access_table(const host_access_support& s) {
  table t;
  t.id = "host_access";
  t.title = "What the device can do with host memory (device attributes)";
  t.columns = {{"attribute", "attribute"}, {"supported", "supported"}, {"allows", "would allow"}};
  const std::tuple<const char*, bool, const char*> rows[] = {
      {"pageableMemoryAccess", s.pageable_memory_access,
       "kernels read malloc'd memory (HMM or ATS): no pinning, no managed allocation"},
      {"pageableMemoryAccessUsesHostPageTables", s.pageable_memory_access_uses_host_page_tables,
       "the GPU walks the CPU's page tables (ATS, e.g. Grace Hopper): no page migration needed"},
      {"concurrentManagedAccess", s.concurrent_managed_access,
       "CPU and GPU touch managed memory at once; pages migrate on fault, prefetch and advice "
       "work"},
      {"canUseHostPointerForRegisteredMem", s.can_use_host_pointer_for_registered_mem,
       "a cudaHostRegister'd pointer is valid in kernels as it is"},
      {"directManagedMemAccessFromHost", s.direct_managed_mem_access_from_host,
       "the CPU reads GPU-resident managed pages without migrating them"}};
  for (const auto& [name, on, allows] : rows) t.add_row({name, on, allows});
  return t;
}

table ledger_table(const ledger_result& l) {
  table t;
  t.id = "ledger";
  t.title = "The memory ledger: NVML's device memory used, step by step, in a fresh process";
  t.columns = {{"step", "step"}};
  for (const auto& p : l.probes) {
    t.columns.push_back(
        {"used_" + p.module_loading, "used, " + p.module_loading + " (MiB)", kPerMiB, 0});
    t.columns.push_back(
        {"delta_" + p.module_loading, "step, " + p.module_loading + " (MiB)", kPerMiB, 0});
  }
  t.columns.push_back({"requested_bytes", "asked for (MiB)", kPerMiB, 0});
  if (l.probes.empty()) {  // not measured: the row says why
    t.add_row({l.method, value()});
    return t;
  }
  for (const auto& s : l.probes.front().steps) {
    std::vector<value> row{s.label};
    for (const auto& p : l.probes) {
      const auto it = std::find_if(p.steps.begin(), p.steps.end(),
                                   [&](const ledger_step& x) { return x.step == s.step; });
      if (it == p.steps.end()) {
        row.insert(row.end(), {value(), value()});
        continue;
      }
      const auto d = step_delta(p, s.step);
      row.push_back(static_cast<std::int64_t>(it->used_bytes));
      row.push_back(d ? value(*d) : value());
    }
    row.push_back(static_cast<std::int64_t>(s.requested_bytes));
    t.add_row(std::move(row));
  }
  return t;
}

table d2d_table(const d2d_belief& d) {
  table t;
  t.id = "d2d_sweep";
  t.title = fmt::format("D2D copy rate against the working set (source + destination; L2 {})",
                        ut::size(d.l2_bytes));
  t.columns = {{"working_set_bytes", "working set"},
               {"bytes_per_s", "GB/s (copied)", 1e-9, 0},
               {"read_write_bytes_per_s", "GB/s (read + write)", 1e-9, 0},
               {"fits_l2", "fits in L2"}};
  for (const auto& p : d.points)
    t.add_row({ut::size(p.working_set_bytes), p.bytes_per_s, d2d_read_write(p.bytes_per_s),
               p.working_set_bytes <= d.l2_bytes});
  return t;
}

}  // namespace

std::vector<table> present_unified(const unified_result& r, const device_facts& facts) {
  std::vector<table> out;
  if (r.managed) {
    out.push_back(managed_table(*r.managed));
    if (r.managed->oversubscription)
      out.push_back(oversubscription_table(*r.managed->oversubscription));
  }
  if (r.zero_copy) {
    out.push_back(zero_copy_table(*r.zero_copy));
    out.push_back(host_access_table(r.zero_copy->support));
  }
  if (r.ledger) out.push_back(ledger_table(*r.ledger));
  if (r.beliefs) {
    out.push_back(beliefs_table(*r.beliefs, facts));
    if (r.beliefs->d2d) out.push_back(d2d_table(*r.beliefs->d2d));
  }
  return out;
}

lesson unified_lesson() {
  lesson l;
  l.name = "unified";
  l.description =
      "Lesson: managed memory, zero-copy, the memory ledger, and five common beliefs measured";
  // Like render_typed, but the tables too are given the facts: the beliefs table names the GPU.
  l.render = [](const nlohmann::json& j, const device_facts& f) {
    const auto r = result_from_json<unified_result>(j, "unified");
    presentation::report out;
    out.lesson = "unified";
    out.tables = present_unified(r, f);
    attach_notes(out.tables, explain_unified(r, f));
    return out;
  };
  // Schema-1 files predate the lesson: nothing of it to read back.
  l.upgrade_v1 = [](const nlohmann::json&) { return nlohmann::json(unified_result{}); };
  return l;
}

}  // namespace gpu_basics::lessons
