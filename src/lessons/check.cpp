// The check's verdicts (pure), notes and table. How each verdict is decided is in
// docs/verdicts.md, "Node acceptance"; the order here is the order of the table.
#include <algorithm>

#include <fmt/format.h>

#include "gpu_basics/core/units.hpp"
#include "gpu_basics/lessons/check.hpp"
#include "gpu_basics/profiler/gemm.hpp"

namespace gpu_basics::lessons {

using presentation::table;

check_thresholds thresholds_of(const config& cfg) {
  check_thresholds t;
  t.h2d_fraction = cfg.check.h2d_fraction;
  t.d2h_fraction = cfg.check.d2h_fraction;
  t.bidirectional_fraction = cfg.check.bidirectional_fraction;
  t.d2d_fraction = cfg.check.d2d_fraction;
  t.gemm_fraction = cfg.check.gemm_fraction;
  t.warn_margin = cfg.check.warn_margin;
  return t;
}

check_result check_result_of(const device_facts& facts) {
  const device_info& d = facts.device;
  check_result r;
  r.gpu = d.name;
  r.driver_version = d.driver_version;
  r.nvml_status = facts.nvml_status;
  r.link_generation = d.pcie_generation_current;
  r.link_width = d.pcie_width_current;
  r.link_generation_max = d.pcie_generation_max;
  r.link_width_max = d.pcie_width_max;
  r.link_bytes_per_s = facts.link_bytes_per_s;
  if (facts.datasheet) {
    r.hbm_bytes_per_s = facts.datasheet->hbm_bytes_per_s;
    r.bf16_peak_flops_per_s = datasheet_peak_flops(*facts.datasheet, gemm_precision::bf16);
  }
  return r;
}

std::string throttle_reason_names(std::uint64_t mask) {
  // nvmlClocksEventReason* bits (NVML API reference).
  static constexpr std::pair<std::uint64_t, const char*> kNames[] = {
      {0x1, "GPU idle"},    {0x2, "application clocks"}, {0x4, "SW power cap"},
      {0x8, "HW slowdown"}, {0x10, "sync boost"},        {0x20, "SW thermal"},
      {0x40, "HW thermal"}, {0x80, "HW power brake"},    {0x100, "display clock"}};
  std::string out;
  for (const auto& [bit, name] : kNames)
    if (mask & bit) out += (out.empty() ? "" : ", ") + std::string(name);
  if (const std::uint64_t known = 0x1ff; mask & ~known)
    out += (out.empty() ? "" : ", ") + fmt::format("0x{:x}", mask & ~known);
  return out.empty() ? "none" : out;
}

namespace {

constexpr const char* kPass = "PASS";
constexpr const char* kWarn = "WARN";
constexpr const char* kFail = "FAIL";
constexpr const char* kSkip = "SKIP";

std::string link_text(unsigned g, unsigned w) {
  return fmt::format("Gen{} x{}", g, w);
}

check_item link_item(const check_result& r) {
  check_item it{"pcie_link", "PCIe link",  kSkip,       "n/a", "the maximum generation and width",
                "",          std::nullopt, std::nullopt};
  if (!r.link_generation || !r.link_width || !r.link_generation_max || !r.link_width_max) {
    it.value = "not measured";
    it.hint = "NVML gave no link reading (" + r.nvml_status + ")";
    return it;
  }
  const unsigned g = *r.link_generation, w = *r.link_width;
  const unsigned gm = *r.link_generation_max, wm = *r.link_width_max;
  it.value = link_text(g, w);
  it.threshold = link_text(gm, wm) + " (max)";
  it.measured = g * 100.0 + w;
  it.limit = gm * 100.0 + wm;
  if (g >= gm && w >= wm) {
    it.status = kPass;
    return it;
  }
  // The generation drops while a GPU idles to save power; if the copies still reached the full
  // link's rate, the link trained right and only the reading is low.
  const bool copies_fine =
      r.h2d && r.link_bytes_per_s && *r.link_bytes_per_s > 0 &&
      r.h2d->bandwidth_bytes_per_s.median / *r.link_bytes_per_s >= r.thresholds.h2d_fraction;
  if (w >= wm && copies_fine) {
    it.status = kWarn;
    it.hint = fmt::format(
        "link read at Gen{} but pinned copies reach the Gen{} x{} rate: likely "
        "idle power saving; re-run under load to confirm",
        g, gm, wm);
    return it;
  }
  it.status = kFail;
  it.hint = fmt::format(
      "link trained at {} (max {}): reseat the card or check the BIOS slot "
      "settings",
      link_text(g, w), link_text(gm, wm));
  return it;
}

/// A copy or GEMM judged as a fraction of its ceiling.
check_item fraction_item(std::string id, std::string name, const std::optional<double>& measured,
                         const std::optional<double>& ceiling, double fraction, double margin,
                         const std::string& unit, double scale, const std::string& ceiling_name,
                         const std::string& hint) {
  check_item it{std::move(id), std::move(name), kSkip, "not measured", "", "",
                std::nullopt,  std::nullopt};
  it.threshold = fmt::format(">= {:.0f}% of {}", fraction * 100, ceiling_name);
  if (!measured) {
    it.hint = "no measurement in this run";
    return it;
  }
  if (!ceiling || *ceiling <= 0) {
    it.value = fmt::format("{:.1f} {}", *measured * scale, unit);
    it.hint = "ceiling unknown for this GPU: not judged";
    return it;
  }
  const double f = *measured / *ceiling;
  it.measured = f;
  it.limit = fraction;
  it.value = fmt::format("{:.1f} {} ({:.1f}% of {:.1f})", *measured * scale, unit, f * 100,
                         *ceiling * scale);
  if (f < fraction) {
    it.status = kFail;
    it.hint = fmt::format("{:.1f}% < {:.0f}%: {}", f * 100, fraction * 100, hint);
  } else if (f < fraction + margin) {
    it.status = kWarn;
    it.hint = fmt::format("{:.1f}% is within {:.0f} points of the threshold: {}", f * 100,
                          margin * 100, hint);
  } else {
    it.status = kPass;
  }
  return it;
}

std::optional<double> median_of(const std::optional<copy_figure>& c) {
  if (!c || c->bandwidth_bytes_per_s.median <= 0) return std::nullopt;
  return c->bandwidth_bytes_per_s.median;
}

check_item verification_item(const check_result& r) {
  check_item it{"verification", "data verified", kPass, "", "every copy and GEMM check matches", "",
                std::nullopt,   std::nullopt};
  std::uint64_t bytes = 0;
  int unverified = 0, copies = 0;
  for (const auto* c : {&r.h2d, &r.d2h, &r.bidirectional, &r.d2d})
    if (*c) {
      ++copies;
      bytes += (*c)->verified_bytes;
      if ((*c)->verified_bytes == 0) ++unverified;
    }
  it.measured = static_cast<double>(r.verification_failures.size());
  it.limit = 0;
  if (!r.verification_failures.empty()) {
    it.status = kFail;
    it.value = fmt::format("{} failed: {}", r.verification_failures.size(),
                           r.verification_failures.front());
    it.hint =
        "data read back did not match: suspect device memory or the link; run DCGM "
        "diagnostics (dcgmi diag -r 3) and read the ECC counters";
    return it;
  }
  if (copies == 0 && !r.gemm) {
    it.status = kSkip;
    it.value = "nothing measured";
    it.hint = "no copy or GEMM in this run";
    return it;
  }
  if (unverified > 0) {
    it.status = kWarn;
    it.value = fmt::format("{} of {} copies carry no verified bytes", unverified, copies);
    it.hint = "the run kept no verification count for them (an old results file?)";
    return it;
  }
  it.value = fmt::format(
      "{:.2f} GiB of copies verified{}", static_cast<double>(bytes) / (1ull << 30),
      r.gemm ? fmt::format(", GEMM check error {:.2g}", r.gemm->check_error) : std::string());
  return it;
}

bool measured(const std::string& status) {
  return status == "ok";
}

/// A health check not judged (yet), its hint the reason: every SKIP row says why, and the
/// footer sums up those reasons (skip_summary).
check_item skip_item(std::string id, std::string name, const std::string& status,
                     std::string threshold) {
  check_item it{std::move(id), std::move(name), kSkip, status, std::move(threshold), "",
                std::nullopt,  std::nullopt};
  if (status == "not measured")
    it.hint = "this run did not read it";
  else if (status == "not supported")
    it.hint = "the GPU or driver cannot say";
  else if (status == "ok")
    it.hint = "NVML answered without a value";
  else
    it.hint = "NVML gave no reading (" + status + ")";
  return it;
}

check_item ecc_item(const check_health& h) {
  check_item it = skip_item("ecc", "uncorrectable ECC errors", h.ecc_status, "0");
  if (!measured(h.ecc_status) || !h.ecc_uncorrected_volatile) return it;
  const std::uint64_t vol = *h.ecc_uncorrected_volatile;
  const std::uint64_t agg = h.ecc_uncorrected_aggregate.value_or(0);
  it.measured = static_cast<double>(vol);
  it.limit = 0;
  it.value = fmt::format("{} since the driver loaded, {} over the GPU's life", vol, agg);
  if (vol > 0) {
    it.status = kFail;
    it.hint = fmt::format(
        "{} uncorrectable ECC error(s) since the driver loaded: drain the node, "
        "reset the GPU and run dcgmi diag -r 3",
        vol);
  } else if (agg > 0) {
    it.status = kWarn;
    it.hint =
        "uncorrectable errors in the GPU's history (none since the driver loaded): watch "
        "the remapped rows";
  } else {
    it.status = kPass;
  }
  return it;
}

check_item retired_item(const check_health& h) {
  check_item it = skip_item("retired_pages", "retired pages", h.retired_status, "0, none pending");
  if (!measured(h.retired_status) || !h.retired_pages) return it;
  it.measured = *h.retired_pages;
  it.limit = 0;
  const bool pending = h.retired_pending.value_or(false);
  it.value = fmt::format("{}{}", *h.retired_pages, pending ? ", a retirement pending" : "");
  if (*h.retired_pages > 0 || pending) {
    it.status = kFail;
    it.hint = pending ? "a page retirement waits for a GPU reset: reset the GPU, then re-check"
                      : "device memory pages were retired: drain the node and run dcgmi diag";
  } else {
    it.status = kPass;
  }
  return it;
}

check_item remap_item(const check_health& h) {
  check_item it = skip_item("remapped_rows", "row remapping", h.remap_status,
                            "no failure, none "
                            "pending");
  if (!measured(h.remap_status) || !h.remap_failure) return it;
  it.measured = h.remap_failure.value() ? 1 : 0;
  it.limit = 0;
  it.value = fmt::format("{} correctable, {} uncorrectable rows remapped{}{}",
                         h.remapped_correctable.value_or(0), h.remapped_uncorrectable.value_or(0),
                         h.remap_pending.value_or(false) ? ", a remap pending" : "",
                         *h.remap_failure ? ", a remap FAILED" : "");
  if (*h.remap_failure) {
    it.status = kFail;
    it.hint = "a row remap failed (no spare row left): the GPU needs service";
  } else if (h.remap_pending.value_or(false)) {
    it.status = kWarn;
    it.hint = "a row remap waits for a GPU reset: reset the GPU (nvidia-smi -r) to apply it";
  } else {
    it.status = kPass;
  }
  return it;
}

check_item throttle_item(const check_health& h) {
  check_item it = skip_item("idle_throttle", "throttling while idle", h.throttle_status,
                            "no HW slowdown, thermal or power-cap reason");
  if (!measured(h.throttle_status) || !h.idle_clock_event_reasons) return it;
  const std::uint64_t m = *h.idle_clock_event_reasons;
  it.measured = static_cast<double>(m);
  it.limit = 0;
  it.value = throttle_reason_names(m);
  if (m & kThrottleFailMask) {
    it.status = kFail;
    it.hint = "hardware slows the idle GPU (" + throttle_reason_names(m & kThrottleFailMask) +
              "): check cooling, power delivery and the PSU/PDU";
  } else if (m & kThrottleWarnMask) {
    it.status = kWarn;
    it.hint = "software caps clocks while idle (" + throttle_reason_names(m & kThrottleWarnMask) +
              "): check the power limit (nvidia-smi -q -d POWER) and temperatures";
  } else {
    it.status = kPass;
  }
  return it;
}

check_item nvml_item(const check_result& r) {
  check_item it{"nvml", "NVML reachable", kPass,       r.nvml_status, "ok",
                "",     std::nullopt,     std::nullopt};
  if (r.nvml_status != "ok") {
    it.status = kFail;
    it.hint =
        "the driver's libnvidia-ml.so.1 must load (in a container: the NVIDIA container "
        "runtime); without it link and health cannot be checked";
  }
  return it;
}

}  // namespace

std::vector<check_item> evaluate_check(const check_result& r) {
  const check_thresholds& t = r.thresholds;
  std::vector<check_item> items;
  items.push_back(link_item(r));
  const std::string link = "the link";
  const std::string copy_hint =
      "check the link above, run on the GPU's NUMA node, and look for IOMMU/ACS settings or other "
      "traffic on the bus";
  items.push_back(fraction_item("h2d", "pinned H2D", median_of(r.h2d), r.link_bytes_per_s,
                                t.h2d_fraction, t.warn_margin, "GB/s", 1e-9, link, copy_hint));
  items.push_back(fraction_item("d2h", "pinned D2H", median_of(r.d2h), r.link_bytes_per_s,
                                t.d2h_fraction, t.warn_margin, "GB/s", 1e-9, link, copy_hint));
  items.push_back(fraction_item(
      "bidirectional", "H2D + D2H at once", median_of(r.bidirectional),
      r.link_bytes_per_s ? std::optional<double>(2 * *r.link_bytes_per_s) : std::nullopt,
      t.bidirectional_fraction, t.warn_margin, "GB/s", 1e-9, "twice the link",
      "one direction stalls the other: check the root port's and the IOMMU's BIOS settings"));
  const auto d2d = median_of(r.d2d);  // units.hpp, Note [D2D convention]
  items.push_back(fraction_item(
      "d2d", fmt::format("D2D ({})", kD2dReadWrite),
      d2d ? std::optional<double>(d2d_read_write(*d2d)) : std::nullopt, r.hbm_bytes_per_s,
      t.d2d_fraction, t.warn_margin, "GB/s", 1e-9, "the HBM datasheet",
      "device memory is slow: check the memory clock, throttle reasons and other processes on "
      "the GPU (nvidia-smi -q -d CLOCK,PERFORMANCE)"));
  items.push_back(fraction_item(
      "gemm", "bf16 GEMM",
      r.gemm ? std::optional<double>(r.gemm->flops_per_s.median) : std::nullopt,
      r.bf16_peak_flops_per_s, t.gemm_fraction, t.warn_margin, "TFLOP/s", 1e-12,
      "the bf16 dense peak",
      "tensor cores run slow: check SM clocks, the power limit, throttle reasons and other "
      "processes on the GPU"));
  items.push_back(verification_item(r));
  items.push_back(ecc_item(r.health));
  items.push_back(retired_item(r.health));
  items.push_back(remap_item(r.health));
  items.push_back(throttle_item(r.health));
  items.push_back(nvml_item(r));
  return items;
}

std::string overall_status(const std::vector<check_item>& items) {
  const auto any = [&](const char* s) {
    return std::any_of(items.begin(), items.end(),
                       [&](const check_item& i) { return i.status == s; });
  };
  if (any(kFail)) return kFail;
  if (any(kWarn)) return kWarn;
  return kPass;
}

std::string skip_summary(const std::vector<check_item>& items) {
  std::vector<std::pair<std::string, std::vector<std::string>>> reasons;  // in the rows' order
  for (const auto& i : items) {
    if (i.status != kSkip) continue;
    const std::string why = i.hint.empty() ? "no reason given" : i.hint;
    auto at =
        std::find_if(reasons.begin(), reasons.end(), [&](const auto& r) { return r.first == why; });
    if (at == reasons.end()) at = reasons.insert(reasons.end(), {why, {}});
    at->second.push_back(i.name);
  }
  if (reasons.empty()) return "";
  std::string out = "SKIP is not a failure; here: ";
  for (std::size_t k = 0; k < reasons.size(); ++k) {
    std::string names;
    for (const auto& n : reasons[k].second) names += (names.empty() ? "" : ", ") + n;
    out += fmt::format("{}{} ({})", k ? "; " : "", names, reasons[k].first);
  }
  return out + ".";
}

std::vector<note> explain_check(const check_result& r, const device_facts& /*facts*/) {
  std::vector<note> n;
  const auto count = [&](const char* s) {
    return std::count_if(r.items.begin(), r.items.end(),
                         [&](const check_item& i) { return i.status == s; });
  };
  std::string verdict =
      fmt::format("Verdict: {} ({} pass, {} warn, {} fail, {} skipped)", overall_status(r.items),
                  count(kPass), count(kWarn), count(kFail), count(kSkip));
  if (r.elapsed_s) verdict += fmt::format(" in {:.1f} s", *r.elapsed_s);
  verdict += fmt::format(" on {}{}.", r.gpu,
                         r.driver_version ? ", driver " + *r.driver_version : std::string());
  n.push_back({"check", verdict});
  n.push_back(
      {"check",
       fmt::format("Thresholds (check.* keys): H2D and D2H {:.0f}%, both at once {:.0f}% "
                   "of twice the link, D2D ({}) {:.0f}% of the HBM datasheet, bf16 GEMM "
                   "{:.0f}% of the peak; WARN within {:.0f} points above.",
                   r.thresholds.h2d_fraction * 100, r.thresholds.bidirectional_fraction * 100,
                   kD2dReadWrite, r.thresholds.d2d_fraction * 100, r.thresholds.gemm_fraction * 100,
                   r.thresholds.warn_margin * 100)});
  if (const std::string skips = skip_summary(r.items); !skips.empty())
    n.push_back({"check", skips});
  return n;
}

std::vector<table> present_check(const check_result& r) {
  table t;
  t.id = "check";
  t.title = "Node acceptance: " + (r.gpu.empty() ? std::string("GPU") : r.gpu);
  t.columns = {{"check", "check"},
               {"status", "status"},
               {"value", "measured"},
               {"threshold", "threshold"},
               {"hint", "hint"}};
  for (const auto& i : r.items) t.add_row({i.name, i.status, i.value, i.threshold, i.hint});
  if (t.rows.empty()) t.add_row({"(not judged)", "SKIP", "", "", ""});
  return {t};
}

lesson check_lesson() {
  lesson l;
  l.name = "check";
  l.description =
      "Node acceptance in well under a minute: PCIe link, pinned and D2D copies, a bf16 GEMM, "
      "verification, ECC and throttling, each PASS/WARN/FAIL against check.* thresholds";
  l.traces = false;
  l.judges = true;
  l.in_all = false;
  l.render = [](const nlohmann::json& j, const device_facts& f) {
    return render_typed<check_result, explain_check, present_check>(j, f, "check");
  };
  l.upgrade_v1 = [](const nlohmann::json&) -> nlohmann::json {
    throw format_error("check results did not exist in schema 1");
  };
  return l;
}

}  // namespace gpu_basics::lessons
