// The unified lesson's notes, and its beliefs table ("belief / what we measured / why"): every
// figure they state is computed from the result (or named as a course's or a datasheet's).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "gpu_basics/core/units.hpp"
#include "gpu_basics/lessons/unified.hpp"
#include "unified_text.hpp"

namespace gpu_basics::lessons {

using presentation::table;
namespace ut = unified_text;

namespace {

double d(std::uint64_t v) {
  return static_cast<double>(v);
}

// ---- managed ---------------------------------------------------------------------------------

std::vector<note> managed_notes(const managed_result& m, const device_facts& facts) {
  const std::string id = "managed";
  std::vector<note> n;
  const auto* faults = find_touch(m, "to_gpu", "faults");
  const auto* prefetch = find_touch(m, "to_gpu", "prefetch");
  if (faults && prefetch) {
    std::string text = fmt::format(
        "- A kernel reading {} of managed memory whose pages are on the CPU stops at every page "
        "it misses: the GPU faults, the driver migrates the page (and its neighbours) and the "
        "warp resumes. That ran at {}; cudaMemPrefetchAsync first moves the whole range in bulk "
        "DMA, {} with the prefetch counted, {}.",
        ut::size(m.bytes), ut::rate(faults->bytes_per_s), ut::rate(prefetch->bytes_per_s),
        ut::faster_or_slower(prefetch->seconds, faults->seconds, "with faults"));
    if (facts.link_bytes_per_s)
      text +=
          fmt::format(" The PCIe link carries {} per direction at most: the prefetch reached {}.",
                      ut::rate(*facts.link_bytes_per_s),
                      ut::percent(prefetch->bytes_per_s, *facts.link_bytes_per_s));
    n.push_back({id, std::move(text)});
  }
  std::string advice;
  const std::pair<const char*, const char*> hints[] = {
      {"read_mostly", "ReadMostly (a read-only copy is made where it is read; the CPU's stays)"},
      {"preferred_location",
       "PreferredLocation = GPU (pages still fault over, but are not evicted back first)"},
      {"accessed_by",
       "AccessedBy = GPU (the GPU maps the CPU's pages and reads them over PCIe: no faults, no "
       "migration)"}};
  for (const auto& [placement, what] : hints)
    if (const auto* t = find_touch(m, "to_gpu", placement))
      advice += fmt::format("{}{}: {}", advice.empty() ? "" : "; ", what, ut::rate(t->bytes_per_s));
  if (!advice.empty() && faults)
    n.push_back({id, fmt::format("- cudaMemAdvise only hints, it moves nothing by itself. "
                                 "Against {} with faults: {}.",
                                 ut::rate(faults->bytes_per_s), advice)});
  const auto* back_faults = find_touch(m, "to_cpu", "faults");
  const auto* back_prefetch = find_touch(m, "to_cpu", "prefetch");
  if (back_faults && back_prefetch)
    n.push_back(
        {id, fmt::format("- The way back: the CPU reading pages a kernel wrote faults "
                         "them home one by one, {}; a prefetch to the host first, {} "
                         "({}).",
                         ut::rate(back_faults->bytes_per_s), ut::rate(back_prefetch->bytes_per_s),
                         ut::faster_or_slower(back_prefetch->seconds, back_faults->seconds,
                                              "faulting them home"))});
  const bool counted = std::any_of(m.touches.begin(), m.touches.end(),
                                   [](const managed_touch& t) { return t.faults.has_value(); });
  if (!counted) {
    n.push_back({id, "- Page faults: " + m.fault_counter + "."});
  } else if (faults && faults->faults && prefetch && prefetch->faults) {
    n.push_back({id, fmt::format("- Page faults ({}): {} with faults, {} after the prefetch.",
                                 m.fault_counter, *faults->faults, *prefetch->faults)});
  }
  return n;
}

std::vector<note> oversubscription_notes(const oversubscription_result& o) {
  const std::string id = "oversubscription";
  std::vector<note> n;
  if (o.mode == "ballast")
    n.push_back(
        {id,
         fmt::format("- A cudaMalloc \"ballast\" of {} held the device's memory but {}: "
                     "the ratios are of those {}, so the sweep moves a few GiB, not "
                     "hundreds (unified.oversubscription.whole_device: true sweeps "
                     "the whole device). Managed pages can be evicted to the host; "
                     "the ballast's cannot.",
                     ut::size(o.ballast_bytes), ut::size(o.free_bytes), ut::size(o.free_bytes))});
  else
    n.push_back({id, fmt::format("- No ballast: the ratios are of all {} of free device memory.",
                                 ut::size(o.free_bytes))});
  const oversubscription_point* fit = nullptr;
  const oversubscription_point* over = nullptr;
  for (const auto& p : o.points) {
    if (p.ratio <= 1.0 && (!fit || p.ratio > fit->ratio)) fit = &p;
    if (p.ratio > 1.0 && (!over || p.ratio < over->ratio)) over = &p;
  }
  if (fit && over && over->faults_bytes_per_s > 0)
    n.push_back(
        {id, fmt::format("- At {:.2f}x the working set stays on the GPU after the untimed pass: "
                         "{} a pass. At {:.2f}x it cannot: every pass evicts pages to the host "
                         "and faults them back, {} ({:.0f}x slower than at {:.2f}x). Past 1.0x a "
                         "pass is bound by migration over PCIe in both directions, not by HBM.",
                         fit->ratio, ut::rate(fit->faults_bytes_per_s), over->ratio,
                         ut::rate(over->faults_bytes_per_s),
                         fit->faults_bytes_per_s / over->faults_bytes_per_s, fit->ratio)});
  if (over && over->faults_bytes_per_s > 0)
    n.push_back(
        {id, fmt::format("- Prefetching each {} chunk just before its kernel turns "
                         "fault-driven migration into bulk DMA: at {:.2f}x, {} against {} "
                         "with faults ({:.1f}x). {}",
                         ut::size(o.chunk_bytes), over->ratio, ut::rate(over->prefetch_bytes_per_s),
                         ut::rate(over->faults_bytes_per_s),
                         over->prefetch_bytes_per_s / over->faults_bytes_per_s,
                         over->prefetch_bytes_per_s > over->faults_bytes_per_s
                             ? "It softens the collapse; it cannot undo it: the data still "
                               "crosses the link every pass."
                             : "Here it did not help: each prefetch evicted pages the next "
                               "chunks needed, and the data still cross the link every pass.")});
  return n;
}

// ---- zero-copy -------------------------------------------------------------------------------

std::vector<note> zero_copy_notes(const zero_copy_result& z) {
  const std::string id = "zero_copy";
  std::vector<note> n;
  const auto* one = find_access(z, "one_pass");
  const auto* many = find_access(z, "passes");
  const auto* sparse = find_access(z, "sparse");
  if (one && one->mapped_s > 0)
    n.push_back(
        {id, fmt::format("- One pass over {}: reading the mapped memory took {} ({}), one bulk "
                         "copy and a kernel on the copy {} ({}). Each mapped read is a PCIe "
                         "round trip; the kernel hides the latency only with enough reads in "
                         "flight, while the copy engine streams the whole buffer at the link's "
                         "rate.",
                         ut::size(z.bytes), ut::duration(one->mapped_s),
                         ut::rate(d(one->bytes_read) / one->mapped_s),
                         ut::duration(one->copy_then_compute_s),
                         ut::rate(d(z.bytes) / one->copy_then_compute_s))});
  if (many && many->mapped_s > 0)
    n.push_back({id, fmt::format("- {} passes: mapped {}, copy then compute {}. Every mapped "
                                 "pass crosses PCIe again; after the copy, the passes read HBM.",
                                 many->passes, ut::duration(many->mapped_s),
                                 ut::duration(many->copy_then_compute_s))});
  if (sparse && sparse->mapped_s > 0)
    n.push_back(
        {id,
         fmt::format("- Sparse, one {}-byte line in {}: the kernel reads {} of the {}. "
                     "Mapped: {}; copying everything first: {}. Zero-copy moves only the "
                     "lines read.",
                     z.line_bytes, z.sparse_stride, ut::size(sparse->bytes_read), ut::size(z.bytes),
                     ut::duration(sparse->mapped_s), ut::duration(sparse->copy_then_compute_s))});
  if (one && many && sparse) {
    // Each access under the side that won it, with the winner's lead over the other side.
    std::string mapped_won, copy_won;
    for (const auto* r : {one, many, sparse}) {
      const bool mapped = r->mapped_s < r->copy_then_compute_s;
      const std::string what =
          fmt::format("{} ({})", access_name(*r),
                      mapped ? ut::faster_or_slower(r->mapped_s, r->copy_then_compute_s, "the copy")
                             : ut::faster_or_slower(r->copy_then_compute_s, r->mapped_s, "mapped"));
      std::string& list = mapped ? mapped_won : copy_won;
      list += (list.empty() ? "" : ", ") + what;
    }
    n.push_back({id, fmt::format("- The crossover, mapped against copy-then-compute: mapped won "
                                 "for {}, the bulk copy for {}. Zero-copy pays off where each "
                                 "byte is read at most once and little of the buffer is read; a "
                                 "bulk copy as soon as data are read again.",
                                 mapped_won.empty() ? "none" : mapped_won,
                                 copy_won.empty() ? "none" : copy_won)});
  }
  return n;
}

std::vector<note> host_access_notes(const host_access_support& s) {
  const std::string id = "host_access";
  if (s.pageable_memory_access)
    return {{id,
             "- This device reads pageable host memory directly (HMM or ATS): a kernel may "
             "take a malloc'd pointer, and managed memory is one option among others."}};
  return {
      {id, fmt::format("- No HMM or ATS here (pageableMemoryAccess = no): a kernel cannot read "
                       "malloc'd memory. Host data reach the GPU through pinned memory (copied or "
                       "mapped, as above) or managed memory{}.",
                       s.concurrent_managed_access ? ", whose pages migrate on demand" : "")}};
}

// ---- ledger ----------------------------------------------------------------------------------

/// "406 MiB against 66 MiB (340 MiB more)": whole MiB as the ledger table prints them, and the
/// difference of those, so the sentence and the table agree to the MiB.
std::string against(std::int64_t eager_bytes, std::int64_t lazy_bytes) {
  const auto e = ut::whole_mib(eager_bytes), l = ut::whole_mib(lazy_bytes);
  return fmt::format("{} MiB against {} MiB ({} MiB {})", e, l, e >= l ? e - l : l - e,
                     e >= l ? "more" : "less");
}

/// EAGER against LAZY from the ledger's own step figures: each step where they differ, then the
/// whole process.
std::string module_loading_note(const ledger_probe& lazy, const ledger_probe& eager) {
  std::string steps;
  for (const auto& s : lazy.steps) {
    const auto l = step_delta(lazy, s.step);
    const auto e = step_delta(eager, s.step);
    if (!l || !e || ut::whole_mib(*l) == ut::whole_mib(*e)) continue;
    steps += fmt::format("{}{}, {}", steps.empty() ? "" : "; ", s.label, against(*e, *l));
  }
  const auto total_lazy = process_bytes(lazy), total_eager = process_bytes(eager);
  std::string text =
      "- CUDA_MODULE_LOADING: EAGER loads every kernel of a module as soon as the module "
      "loads; LAZY loads each kernel at its first launch (here the first kernel added " +
      ut::mib(step_delta(lazy, "first_kernel").value_or(0)) + "). ";
  if (steps.empty())
    return text + fmt::format("Both took the same at every step: {} in all.", ut::mib(total_lazy));
  return text +
         fmt::format("EAGER against LAZY where the steps differ: {}. In all, the process held {}.",
                     steps, against(total_eager, total_lazy));
}

std::vector<note> ledger_notes(const ledger_result& l) {
  const std::string id = "ledger";
  std::vector<note> n;
  const ledger_probe* lazy = find_probe(l, "LAZY");
  const ledger_probe* eager = find_probe(l, "EAGER");
  if (!lazy) {
    n.push_back({id, "- The ledger was not measured: " + l.method + "."});
    return n;
  }
  const auto ctx = step_delta(*lazy, "context").value_or(0);
  n.push_back(
      {id, fmt::format("- Measured in fresh child processes (gpu-basics ledger-probe), NVML read "
                       "before the first CUDA call: the CUDA context alone took {} of device "
                       "memory before anything was allocated (module loading lazy).",
                       ut::mib(ctx))});
  if (eager) n.push_back({id, module_loading_note(*lazy, *eager)});
  const auto handle = step_delta(*lazy, "cublaslt_handle").value_or(0);
  const auto gemm = step_delta(*lazy, "first_gemm").value_or(0);
  n.push_back(
      {id,
       fmt::format("- cuBLASLt, module loading lazy: the handle with its {} workspace added {}; "
                   "the first GEMM (operands and the library's kernels) {} more.",
                   ut::size(lazy->cublaslt_workspace_bytes), ut::mib(handle), ut::mib(gemm))});
  const auto total = process_bytes(*lazy);
  const auto reserved = lazy->allocator_reserved_bytes;
  std::int64_t requested = 0;
  for (const auto& s : lazy->steps) requested += static_cast<std::int64_t>(s.requested_bytes);
  const auto other = total - ctx - step_delta(*lazy, "first_kernel").value_or(0) - handle - gemm -
                     reserved - step_delta(*lazy, "first_allocation").value_or(0);
  n.push_back(
      {id,
       fmt::format("- Why nvidia-smi shows more than the allocator: at the end this process "
                   "held {} of device memory. The caching allocator accounts for {} reserved, "
                   "of which {} allocated (the freed blocks stay cached, and NVML still counts "
                   "them); the context {}, cuBLASLt {}, modules and other allocations the rest. "
                   "Unattributed after those: {}. The program asked for {} in all.",
                   ut::mib(total), ut::mib(reserved), ut::mib(lazy->allocator_allocated_bytes),
                   ut::mib(ctx), ut::mib(handle + gemm), ut::mib(other), ut::mib(requested))});
  return n;
}

// ---- beliefs ---------------------------------------------------------------------------------

struct belief_row {
  std::string belief, measured, why;
};

belief_row pin_row(const pin_belief& p) {
  const double k = p.repeats;
  const double pageable_n = k * p.pageable_copy_s;
  const double pinned_n = p.pin_allocate_s + p.pin_fill_s + k * p.pinned_copy_s;
  return {"\"pin_memory() then a non-blocking copy is always faster\"",
          fmt::format("one {} transfer: pageable {}, pin then copy {} ({}); {} transfers: "
                      "pageable {}, pinned once {} ({})",
                      ut::size(p.bytes), ut::duration(p.pageable_copy_s),
                      ut::duration(p.pin_then_copy_once_s),
                      ut::faster_or_slower(p.pin_then_copy_once_s, p.pageable_copy_s, "pageable"),
                      p.repeats, ut::duration(pageable_n), ut::duration(pinned_n),
                      ut::faster_or_slower(pinned_n, pageable_n, "pageable")),
          fmt::format("pinning is itself a copy into page-locked memory ({}) after cudaHostAlloc "
                      "({}); the driver's pageable copy already stages through pinned buffers. "
                      "It pays only when the pinned buffer is reused",
                      ut::duration(p.pin_fill_s), ut::duration(p.pin_allocate_s))};
}

belief_row stale_row(const stale_read_belief& s) {
  return {"\"the data of a non_blocking D2H copy can be read when the call returns\"",
          fmt::format("{} of {} bytes differed from the source when read at once ({}); {} after "
                      "the copy's event",
                      s.wrong_before_sync, s.bytes, ut::percent(d(s.wrong_before_sync), d(s.bytes)),
                      s.wrong_after_sync),
          fmt::format("the call only enqueues the copy, here behind {} of GPU work; the host "
                      "must wait on an event or the stream before reading",
                      ut::duration(s.delay_s))};
}

belief_row pool_row(const pool_belief& p) {
  std::string measured;
  for (const auto& r : p.rows)
    measured += fmt::format(
        "{}threshold {}: {} per pair with a sync, {} kept after it", measured.empty() ? "" : "; ",
        r.release_threshold == std::numeric_limits<std::uint64_t>::max()
            ? std::string("UINT64_MAX")
            : std::to_string(r.release_threshold),
        ut::duration(r.pair_with_sync_s), ut::size(r.reserved_after_sync_bytes));
  return {"\"cudaMallocAsync is always as cheap as a cache hit\"", measured,
          fmt::format("at each synchronisation the pool trims what it holds to its release "
                      "threshold; at 0 (the default) the {} go back to the driver and the next "
                      "allocation maps them again",
                      ut::size(p.bytes))};
}

belief_row nvml_row(const nvml_util_belief& u) {
  return {"\"nvidia-smi's memory utilisation is how full the memory is\"",
          fmt::format("idle, {} allocated: {} used, {:.0f}% utilisation; a D2D copy loop of {}: "
                      "{} used, {:.0f}%",
                      ut::size(u.idle_allocation_bytes), ut::size(u.idle_used_bytes),
                      u.idle_memory_util_percent, ut::size(u.busy_copy_bytes),
                      ut::size(u.busy_used_bytes), u.busy_memory_util_percent),
          "it is the share of the sample period during which the memory controller was busy "
          "reading or writing; memory used is a separate reading"};
}

/// Whether a figure is the course's, within 5% (an L2 of 50 MiB is the course's "50 MB").
bool is_course_figure(double measured, double course) {
  return std::abs(measured - course) <= 0.05 * course;
}

/// "on this NVIDIA H200, L2 and datasheet HBM rate differ from the course's": the measured GPU,
/// named as the saved run names it, its figures against the course's.
std::string course_comparison(const d2d_belief& b, const device_facts& facts) {
  std::vector<std::string> same, differ;
  (is_course_figure(static_cast<double>(b.l2_bytes), kCourseL2Bytes) ? same : differ)
      .emplace_back("L2");
  if (facts.datasheet)
    (is_course_figure(facts.datasheet->hbm_bytes_per_s, kCourseHbmBytesPerS) ? same : differ)
        .emplace_back("datasheet HBM rate");
  const auto join = [](const std::vector<std::string>& v) {
    return v.size() == 2 ? v[0] + " and " + v[1] : v[0];
  };
  const std::string gpu = facts.device.name.empty() ? "this GPU" : "this " + facts.device.name;
  std::string text = "on " + gpu + ", ";
  if (differ.empty())
    text += join(same) + (same.size() > 1 ? " match" : " matches") + " the course's";
  else if (same.empty())
    text += join(differ) + (differ.size() > 1 ? " differ" : " differs") + " from the course's";
  else
    text += join(same) + " matches the course's, " + join(differ) + " differs";
  if (!facts.datasheet) text += " (no datasheet known for its HBM)";
  return text;
}

belief_row d2d_row(const d2d_belief& b, const device_facts& facts) {
  const auto l2 = l2_plateau(b);
  const auto hbm = hbm_plateau(b);
  std::string measured = fmt::format("L2 {} (device)", ut::size(b.l2_bytes));
  if (l2) measured += fmt::format("; working sets within L2: {} copied", ut::rate(*l2));
  if (hbm)
    measured += fmt::format("; from 4x L2 on: {} copied ({} read + write)", ut::rate(*hbm),
                            ut::rate(d2d_read_write(*hbm)));
  // Where the notes print depends on the output (under the tables in text, beside them in HTML):
  // the cell names the table they belong to, not a direction.
  const std::string why = "sets that fit stay in L2 between passes, larger ones stream from HBM; " +
                          course_comparison(b, facts) +
                          " (the notes of the D2D sweep give the figures)";
  return {fmt::format("\"HBM gives {} and the L2 holds {:.0f} MB\" (course figures, H100's)",
                      ut::rate(kCourseHbmBytesPerS), kCourseL2Bytes / 1e6),
          measured, why};
}

std::vector<note> beliefs_notes(const beliefs_result& b, const device_facts& facts) {
  const std::string id = "beliefs";
  std::vector<note> n;
  if (b.pin && b.pin->pin_then_copy_once_s > b.pin->pageable_copy_s)
    n.push_back(
        {id, fmt::format(
                 "- Pin then copy, once: {} slower than copying the pageable "
                 "buffer directly ({} against {}).",
                 fmt::format("{:.1f}x", b.pin->pin_then_copy_once_s / b.pin->pageable_copy_s),
                 ut::duration(b.pin->pin_then_copy_once_s), ut::duration(b.pin->pageable_copy_s))});
  if (b.stale_read)
    n.push_back(
        {id, fmt::format("- Read before the sync, {} of the destination was still stale; "
                         "after the event {} bytes were wrong.",
                         ut::percent(d(b.stale_read->wrong_before_sync), d(b.stale_read->bytes)),
                         b.stale_read->wrong_after_sync)});
  if (!b.nvml_util)
    n.push_back({id, "- NVML's memory utilisation was not read: NVML is unavailable."});
  if (b.d2d) {
    const std::string d2d_id = "d2d_sweep";
    const auto l2 = static_cast<double>(b.d2d->l2_bytes);
    if (!is_course_figure(l2, kCourseL2Bytes))
      n.push_back({d2d_id, fmt::format("- Course material quotes an L2 of {:.0f} MB; this device "
                                       "reports {} ({:.1f} MB).",
                                       kCourseL2Bytes / 1e6, ut::size(b.d2d->l2_bytes), l2 / 1e6)});
    if (const auto hbm = hbm_plateau(*b.d2d)) {
      std::string text = fmt::format(
          "- Course material quotes HBM at {}; measured here, {} read "
          "+ write ({} copied)",
          ut::rate(kCourseHbmBytesPerS), ut::rate(d2d_read_write(*hbm)), ut::rate(*hbm));
      if (facts.datasheet)
        text += fmt::format(", {} of this GPU's datasheet {}",
                            ut::percent(d2d_read_write(*hbm), facts.datasheet->hbm_bytes_per_s),
                            ut::rate(facts.datasheet->hbm_bytes_per_s));
      n.push_back({d2d_id, text + "."});
    }
  }
  return n;
}

}  // namespace

table beliefs_table(const beliefs_result& b, const device_facts& facts) {
  table t;
  t.id = "beliefs";
  t.title = "Five beliefs, measured";
  t.columns = {{"belief", "belief"}, {"measured", "what we measured"}, {"why", "why"}};
  std::vector<belief_row> rows;
  if (b.pin) rows.push_back(pin_row(*b.pin));
  if (b.stale_read) rows.push_back(stale_row(*b.stale_read));
  if (b.pool) rows.push_back(pool_row(*b.pool));
  if (b.nvml_util) rows.push_back(nvml_row(*b.nvml_util));
  if (b.d2d) rows.push_back(d2d_row(*b.d2d, facts));
  for (auto& r : rows) t.add_row({std::move(r.belief), std::move(r.measured), std::move(r.why)});
  return t;
}

std::vector<note> explain_unified(const unified_result& r, const device_facts& facts) {
  std::vector<note> out;
  const auto add = [&out](std::vector<note> v) {
    out.insert(out.end(), std::make_move_iterator(v.begin()), std::make_move_iterator(v.end()));
  };
  if (r.managed) {
    add(managed_notes(*r.managed, facts));
    if (r.managed->oversubscription) add(oversubscription_notes(*r.managed->oversubscription));
  }
  if (r.zero_copy) {
    add(zero_copy_notes(*r.zero_copy));
    add(host_access_notes(r.zero_copy->support));
  }
  if (r.ledger) add(ledger_notes(*r.ledger));
  if (r.beliefs) add(beliefs_notes(*r.beliefs, facts));
  // Steps shrunk or skipped beside other processes: under the table of their part.
  for (const memory_step& m : r.memory_steps)
    out.push_back({m.step == "the idle allocation" ? "beliefs" : "managed", "- " + m.line});
  return out;
}

}  // namespace gpu_basics::lessons
