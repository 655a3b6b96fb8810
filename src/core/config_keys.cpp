// The table of configuration keys: each key once, with where it lives in `config`, what it
// accepts, its unit and its meaning. Reading (config.cpp), --set, validation, the results' JSON
// and the reference in docs/configuration.md all come from here.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "config_detail.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/units.hpp"

namespace gpu_basics {

using namespace detail;

// ---- config_key ------------------------------------------------------------------------------

config_key::config_key(std::shared_ptr<const key_impl> impl) : impl_(std::move(impl)) {}
const std::string& config_key::name() const {
  return impl_->name;
}
const std::string& config_key::accepts() const {
  return impl_->accepts;
}
const std::string& config_key::unit() const {
  return impl_->unit;
}
const std::string& config_key::doc() const {
  return impl_->doc;
}

namespace {

config_key make(key_impl k) {
  return config_key(std::make_shared<const key_impl>(std::move(k)));
}

/// "expected <accepts>, got <value>" at the key's origin.
[[noreturn]] void out_of_range(const where_fn& where, const std::string& key,
                               const std::string& accepts, const std::string& got) {
  fail_at(where(key), key, "expected " + accepts + ", got " + got);
}

/// A plain number (no unit); the range is checked by the key's check.
double read_double(const YAML::Node& node, const parse_context& ctx, std::string_view expectation) {
  double d = 0;
  const std::string s = node.IsScalar() ? node.Scalar() : std::string();
  const auto r = std::from_chars(s.data(), s.data() + s.size(), d);
  if (s.empty() || r.ec != std::errc{} || r.ptr != s.data() + s.size() || !std::isfinite(d))
    fail(ctx, "expected " + std::string(expectation) + ", got " + describe(node));
  return d;
}

/// true, false, or "auto" (nullopt).
std::optional<bool> read_bool_or_auto(const YAML::Node& node, const parse_context& ctx) {
  if (node.IsScalar() && node.Scalar() == "auto") return std::nullopt;
  bool b = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, b))
    fail(ctx, "expected true, false or auto, got " + describe(node));
  return b;
}

/// Fails when the list `n` has more than `limit` entries.
void check_list_length(const YAML::Node& n, const parse_context& ctx, std::size_t limit,
                       std::string_view what) {
  if (n.size() > limit)
    fail(ctx, "a list of " + std::to_string(n.size()) + " " + std::string(what) + "; at most " +
                  std::to_string(limit) + " are allowed");
}

/// Fails unless `n` is a non-empty list of at most `limit` entries.
void need_list(const YAML::Node& n, const parse_context& ctx, std::string_view expect,
               std::size_t limit, std::string_view what) {
  if (!n.IsSequence() || n.size() == 0)
    fail(ctx, "expected " + std::string(expect) + ", got " +
                  (n.IsSequence() ? std::string("an empty list") : describe(n)));
  check_list_length(n, ctx, limit, what);
}

/// A list of shapes (each a non-empty list of integers; `rank` > 0 requires that many). Records
/// where every shape and dimension was given; positivity and size are checked by validate().
std::vector<tensor_shape> read_shape_list(config& c, const YAML::Node& n, const parse_context& ctx,
                                          std::size_t rank, std::string_view expect) {
  need_list(n, ctx, expect, config_limits::shapes, "shapes");
  std::vector<tensor_shape> shapes;
  for (std::size_t i = 0; i < n.size(); ++i) {
    const YAML::Node s = n[i];
    const parse_context sctx = part_of(ctx, ctx.key + "[" + std::to_string(i) + "]", s);
    if (!s.IsSequence() || s.size() == 0)
      fail(sctx, "expected a shape (a non-empty list of positive integers), got " +
                     (s.IsSequence() ? std::string("an empty list") : describe(s)));
    if (rank && s.size() != rank)
      fail(sctx,
           "expected " + std::to_string(rank) + " dimensions, got " + std::to_string(s.size()));
    check_list_length(s, sctx, config_limits::dims, "dimensions");
    tensor_shape shape;
    for (std::size_t j = 0; j < s.size(); ++j) {
      const parse_context dctx = part_of(sctx, sctx.key + "[" + std::to_string(j) + "]", s[j]);
      const auto v = scalar_int(s[j]);
      if (!v) fail(dctx, "expected a positive integer dimension, got " + describe(s[j]));
      shape.dims.push_back(*v);
      c.origins[dctx.key] = dctx.where;
    }
    c.origins[sctx.key] = sctx.where;
    shapes.push_back(std::move(shape));
  }
  return shapes;
}

nlohmann::json shapes_json(const std::vector<tensor_shape>& shapes) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& s : shapes) a.push_back(s.dims);
  return a;
}

/// A byte count as a bound reads: "0", "8 B", "64 KiB", "4 GiB" (exact units only).
std::string bound_text(std::uint64_t v) {
  if (v == 0) return "0";
  constexpr std::pair<std::uint64_t, const char*> units[] = {
      {kTiB, "TiB"}, {kGiB, "GiB"}, {kMiB, "MiB"}, {kKiB, "KiB"}};
  for (const auto& [u, name] : units)
    if (v % u == 0) return std::to_string(v / u) + " " + name;
  return std::to_string(v) + " B";
}

/// The policy with `conf` applied, or the parser's message as this key's error.
/// `strip`: a knob's own name, left out of the message (the key already names it).
allocator_policy allocator_policy_or_fail(const std::string& conf, const allocator_policy& base,
                                          const parse_context& ctx, const std::string& strip = "") {
  try {
    return apply_policy_keys(conf, base);
  } catch (const logic_error& e) {
    std::string m = e.what();
    const auto drop = [&m](const std::string& prefix) {
      if (m.rfind(prefix, 0) == 0) m.erase(0, prefix.size());
    };
    drop("allocator conf: ");
    if (!strip.empty()) drop(strip + ": ");
    fail(ctx, m);
  }
}

/// memory.allocator.<name>: one of PyTorch's knobs, read through the conf-string parser so names,
/// ranges and errors are PyTorch's (max_split_size_mb: 0 = no limit; garbage_collection_threshold:
/// 0 = off). Only the effective conf goes into results (memory.allocator.conf).
config_key allocator_knob(const std::string& name, std::string accepts, std::string doc) {
  key_impl k;
  k.name = "memory.allocator." + name;
  k.accepts = std::move(accepts);
  k.doc = std::move(doc);
  k.read = [name](config& c, const YAML::Node& n, const parse_context& ctx) {
    if (!n.IsScalar()) fail(ctx, "expected a value, got " + describe(n));
    const std::string v = n.Scalar();
    allocator_policy& p = c.memory.allocator.policy;
    if (name == "max_split_size_mb" && v == "0") {
      p.max_split_size = SIZE_MAX;
    } else if (name == "garbage_collection_threshold" && (v == "0" || v == "0.0")) {
      p.garbage_collection_threshold = 0;
    } else {
      p = allocator_policy_or_fail(name + ":" + v, p, ctx, name);
    }
  };
  k.value = [name](const config& c) -> nlohmann::json {
    const allocator_policy& p = c.memory.allocator.policy;
    if (name == "expandable_segments") return c.memory.allocator.effective().expandable_segments;
    if (name == "max_split_size_mb")
      return p.max_split_size == SIZE_MAX ? 0 : static_cast<std::uint64_t>(p.max_split_size >> 20);
    if (name == "garbage_collection_threshold") return p.garbage_collection_threshold;
    allocator_policy only;
    only.roundup_power2_divisions = p.roundup_power2_divisions;
    const std::string conf = to_conf_string(only);
    return conf.empty() ? nlohmann::json(0) : nlohmann::json(conf.substr(conf.find(':') + 1));
  };
  k.in_results = name == "expandable_segments";  // as the lesson ran it (conf applied)
  return make(std::move(k));
}

/// A key whose reading, checking and value are written out (lists, names, relations).
config_key custom_key(std::string name, std::string accepts, std::string unit, std::string doc,
                      decltype(key_impl::read) read, decltype(key_impl::value) value,
                      decltype(key_impl::check) check = {}) {
  return make(key_impl{std::move(name), std::move(accepts), std::move(unit), std::move(doc),
                       std::move(read), std::move(check), std::move(value), true});
}

/// A non-empty list of at most config_limits::ratios numbers, each in [lo, hi].
std::vector<double> read_ratio_list(const YAML::Node& n, const parse_context& ctx,
                                    std::string_view expect, double lo, double hi) {
  need_list(n, ctx, expect, config_limits::ratios, "ratios");
  const std::string one = fmt::format("a ratio in {}..{}", lo, hi);
  std::vector<double> v;
  for (std::size_t i = 0; i < n.size(); ++i) {
    const parse_context ictx = part_of(ctx, ctx.key + "[" + std::to_string(i) + "]", n[i]);
    const double d = read_double(n[i], ictx, one);
    if (!(d >= lo && d <= hi)) fail(ictx, "expected " + one + ", got " + describe(n[i]));
    v.push_back(d);
  }
  return v;
}

std::string dtype_names() {
  std::string out;
  for (const dtype t : {dtype::float32, dtype::float16, dtype::bfloat16, dtype::float64,
                        dtype::int8, dtype::uint8, dtype::int32, dtype::int64})
    out += (out.empty() ? "" : ", ") + std::string(to_string(t));
  return out;
}

}  // namespace

// ---- builders --------------------------------------------------------------------------------

config_key int_key(std::string name, int& (*field)(config&), int lo, int hi, std::string unit,
                   std::string doc, std::string accepts) {
  if (accepts.empty()) accepts = fmt::format("an integer in {}..{}", lo, hi);
  key_impl k{std::move(name), accepts, std::move(unit), std::move(doc), {}, {}, {}, true};
  k.read = [field, accepts](config& c, const YAML::Node& n, const parse_context& ctx) {
    field(c) = read_int(n, ctx, accepts);
  };
  k.check = [field, lo, hi, accepts, key = k.name](const config& c, const where_fn& where) {
    const int v = field(const_cast<config&>(c));
    if (v < lo || v > hi) out_of_range(where, key, accepts, std::to_string(v));
  };
  k.value = [field](const config& c) -> nlohmann::json { return field(const_cast<config&>(c)); };
  return make(std::move(k));
}

config_key size_key(std::string name, std::uint64_t& (*field)(config&), std::uint64_t lo,
                    std::uint64_t hi, std::string example, std::string doc) {
  const std::string accepts =
      fmt::format("a size in {}..{} (e.g. {})", bound_text(lo), bound_text(hi), example);
  key_impl k{std::move(name), accepts, "bytes", std::move(doc), {}, {}, {}, true};
  k.read = [field, accepts](config& c, const YAML::Node& n, const parse_context& ctx) {
    field(c) = read_size(n, ctx, accepts);
  };
  k.check = [field, lo, hi, accepts, key = k.name](const config& c, const where_fn& where) {
    const std::uint64_t v = field(const_cast<config&>(c));
    if (v < lo || v > hi) out_of_range(where, key, accepts, std::to_string(v));
  };
  k.value = [field](const config& c) -> nlohmann::json { return field(const_cast<config&>(c)); };
  return make(std::move(k));
}

config_key fraction_key(std::string name, double& (*field)(config&), bool zero_ok, double hi,
                        std::string accepts, std::string doc) {
  key_impl k{std::move(name), accepts, "", std::move(doc), {}, {}, {}, true};
  k.read = [field, accepts](config& c, const YAML::Node& n, const parse_context& ctx) {
    field(c) = read_double(n, ctx, accepts);
  };
  k.check = [field, zero_ok, hi, accepts, key = k.name](const config& c, const where_fn& where) {
    const double v = field(const_cast<config&>(c));
    if (!(zero_ok ? v >= 0 : v > 0) || !(v <= hi))
      out_of_range(where, key, accepts, std::to_string(v));
  };
  k.value = [field](const config& c) -> nlohmann::json { return field(const_cast<config&>(c)); };
  return make(std::move(k));
}

config_key bool_key(std::string name, bool& (*field)(config&), std::string doc) {
  key_impl k{std::move(name), "true or false", "", std::move(doc), {}, {}, {}, true};
  k.read = [field](config& c, const YAML::Node& n, const parse_context& ctx) {
    field(c) = read_bool(n, ctx);
  };
  k.value = [field](const config& c) -> nlohmann::json { return field(const_cast<config&>(c)); };
  return make(std::move(k));
}

// ---- the keys --------------------------------------------------------------------------------

namespace {

/// Fails unless the value of `hi_key` is at least that of `lo_key`.
void check_order(const where_fn& where, const std::string& lo_key, std::uint64_t lo,
                 const std::string& hi_key, std::uint64_t hi) {
  if (hi < lo)
    fail_at(
        where(hi_key), hi_key,
        "must be at least " + lo_key + " (" + std::to_string(lo) + "), got " + std::to_string(hi));
}

/// `key` with `extra` checked after its own check (a relation to a key declared before it).
config_key also_check(const config_key& key, decltype(key_impl::check) extra) {
  key_impl k = key.impl();
  k.check = [own = k.check, extra = std::move(extra)](const config& c, const where_fn& where) {
    if (own) own(c, where);
    extra(c, where);
  };
  return make(std::move(k));
}

// Where each key lives: a function per member, so the table stays data.
#define GB_FIELD(type, path) +[](config& c) -> type& { return c.path; }

/// `gpu-basics unified`'s keys.
void add_unified_keys(config_schema& s) {
  s.add(int_key("unified.repetitions", GB_FIELD(int, unified.repetitions), 1, 1000, "",
                "timed repetitions of each zero-copy and belief figure (median kept)"));
  s.add(bool_key("unified.managed.enabled", GB_FIELD(bool, unified.managed.enabled),
                 "managed memory: first touch with faults, prefetch and advice, both ways"));
  s.add(size_key("unified.managed.bytes", GB_FIELD(std::uint64_t, unified.managed.bytes), kMiB,
                 64 * kGiB, "\"512 MiB\"", "each first-touch managed buffer"));
  s.add(bool_key("unified.oversubscription.enabled",
                 GB_FIELD(bool, unified.oversubscription.enabled),
                 "managed working sets swept across ratios of free device memory"));
  s.add(bool_key("unified.oversubscription.whole_device",
                 GB_FIELD(bool, unified.oversubscription.whole_device),
                 "`false`: a cudaMalloc ballast leaves `free_bytes` free; `true`: ratios of all "
                 "free device memory (host memory must hold the largest set: checked first)"));
  s.add(size_key("unified.oversubscription.free_bytes",
                 GB_FIELD(std::uint64_t, unified.oversubscription.free_bytes), 256 * kMiB, kTiB,
                 "\"2 GiB\"", "device memory the ballast leaves free"));
  s.add(custom_key(
      "unified.oversubscription.ratios", "a list of ratios in 0.05..4, e.g. [0.5, 1.1]", "",
      "working sets as multiples of the free device memory",
      [](config& c, const YAML::Node& n, const parse_context& ctx) {
        c.unified.oversubscription.ratios =
            read_ratio_list(n, ctx, "a list of ratios in 0.05..4, e.g. [0.5, 1.1]", 0.05, 4);
      },
      [](const config& c) -> nlohmann::json { return c.unified.oversubscription.ratios; }));
  s.add(size_key("unified.oversubscription.chunk_bytes",
                 GB_FIELD(std::uint64_t, unified.oversubscription.chunk_bytes), 2 * kMiB, 4 * kGiB,
                 "\"64 MiB\"", "bytes per kernel and per prefetch of a pass"));
  s.add(int_key("unified.oversubscription.passes", GB_FIELD(int, unified.oversubscription.passes),
                1, 16, "", "timed passes per working set, after one untimed pass"));
  s.add(bool_key("unified.zero_copy.enabled", GB_FIELD(bool, unified.zero_copy.enabled),
                 "kernels reading mapped pinned memory against copy-then-compute"));
  s.add(size_key("unified.zero_copy.bytes", GB_FIELD(std::uint64_t, unified.zero_copy.bytes), kMiB,
                 16 * kGiB, "\"256 MiB\"", "the mapped buffer"));
  s.add(int_key("unified.zero_copy.passes", GB_FIELD(int, unified.zero_copy.passes), 2, 64, "",
                "kernels over the buffer in the several-passes row"));
  s.add(bool_key("unified.ledger.enabled", GB_FIELD(bool, unified.ledger.enabled),
                 "the memory ledger, in fresh child processes (lazy and eager module loading)"));
  s.add(bool_key("unified.beliefs.enabled", GB_FIELD(bool, unified.beliefs.enabled),
                 "five common beliefs, measured"));
  s.add(size_key("unified.beliefs.copy_bytes", GB_FIELD(std::uint64_t, unified.beliefs.copy_bytes),
                 kMiB, 16 * kGiB, "\"256 MiB\"", "the pin-then-copy and stale-read buffers"));
  s.add(int_key("unified.beliefs.repeats", GB_FIELD(int, unified.beliefs.repeats), 2, 1000, "",
                "transfers of the repeated pin-then-copy case"));
  s.add(size_key("unified.beliefs.idle_allocation_bytes",
                 GB_FIELD(std::uint64_t, unified.beliefs.idle_allocation_bytes), kMiB, kTiB,
                 "\"100 GiB\"",
                 "the idle allocation beside NVML's memory utilisation (at most 80% of the "
                 "free device memory)"));
  s.add(size_key("unified.beliefs.d2d_max_bytes",
                 GB_FIELD(std::uint64_t, unified.beliefs.d2d_max_bytes), 2 * kMiB, 64 * kGiB,
                 "\"4 GiB\"", "largest working set of the D2D sweep (from 1 MiB, powers of two)"));
}

config_schema make_builtin() {
  config_schema s;
  s.add(custom_key(
      "logging.level", "one of trace, debug, info, warn, error", "", "log level (case-insensitive)",
      [](config& c, const YAML::Node& n, const parse_context& ctx) {
        const std::string v = read_string(n, ctx, "one of trace, debug, info, warn, error");
        const auto l = parse_log_level(v);
        if (!l) fail(ctx, "expected one of trace, debug, info, warn, error, got " + describe(n));
        c.logging.level = *l;
      },
      [](const config& c) -> nlohmann::json { return to_string(c.logging.level); }));
  s.add(int_key("device", GB_FIELD(int, device), 0, 1023, "", "CUDA device index",
                "a device index (an integer >= 0)"));
  s.add(fraction_key("shared_gpu.free_share", GB_FIELD(double, shared_gpu.free_share), false, 1,
                     "a fraction in (0, 1], e.g. 0.25",
                     "with other processes on the GPU, the share of its free memory a large step "
                     "may take (one that can shrink does; one that cannot is skipped)"));
  s.add(bool_key("shared_gpu.force", GB_FIELD(bool, shared_gpu.force),
                 "run large steps as configured even while other processes use the GPU"));
  s.add(custom_key(
      "output.directory", "a directory path", "",
      "where lessons write their own files (traces, samples)",
      [](config& c, const YAML::Node& n, const parse_context& ctx) {
        c.output.directory = read_string(n, ctx, "a directory path");
      },
      [](const config& c) -> nlohmann::json { return c.output.directory; },
      [](const config& c, const where_fn& where) {
        if (c.output.directory.empty())
          out_of_range(where, "output.directory", "a directory path", "\"\"");
      }));
  s.add(int_key("benchmark.warmup_iterations", GB_FIELD(int, benchmark.warmup_iterations), 0,
                100000, "", "untimed runs before measuring"));
  s.add(int_key("benchmark.iterations", GB_FIELD(int, benchmark.iterations), 1, 100000, "",
                "timed runs per measurement at most (fewer once the figure is precise)"));
  s.add(int_key("benchmark.min_samples", GB_FIELD(int, benchmark.min_samples), 1, 100000, "",
                "timed runs per measurement at least (benchmark.iterations where that is fewer)"));
  s.add(fraction_key("benchmark.max_noise", GB_FIELD(double, benchmark.max_noise), false, 1,
                     "a fraction in (0, 1], e.g. 0.01",
                     "stop sampling a figure once its median's 95% confidence interval is within "
                     "this share of it"));
  s.add(
      fraction_key("benchmark.timeout_s", GB_FIELD(double, benchmark.timeout_s), false, 3600,
                   "seconds in (0, 3600]",
                   "stop sampling a figure after this long, precise or not (the result says so)"));
  s.add(bool_key("memory.use_pinned_memory", GB_FIELD(bool, memory.use_pinned_memory),
                 "compare pinned with pageable host memory; `false`: pageable only"));
  s.add(allocator_knob("expandable_segments", "True or False",
                       "PyTorch's `expandable_segments` for the lesson's allocator (the "
                       "expandable-segments part runs both ways anyway)"));
  s.add(allocator_knob("max_split_size_mb", "an integer > 20 (MiB), or 0",
                       "PyTorch's `max_split_size_mb`; `0`: no limit"));
  s.add(allocator_knob("roundup_power2_divisions",
                       "0, a power of two, or a list by interval start in MiB",
                       "PyTorch's `roundup_power2_divisions`: `0` (off), a power of two, or a "
                       "list, `\"[256:1,512:2,>:4]\"`"));
  s.add(allocator_knob("garbage_collection_threshold", "a fraction in (0, 1), or 0",
                       "PyTorch's `garbage_collection_threshold` (acts under a memory limit); "
                       "`0`: off"));
  s.add(custom_key(
      "memory.allocator.conf",
      "a conf string such as \"expandable_segments:True,max_split_size_mb:128\"", "",
      "a whole PYTORCH_CUDA_ALLOC_CONF string applied over the four keys above, with "
      "gpu-basics' own keys too (`page_release`, `thread_cache_blocks`), e.g. `--set "
      "'memory.allocator.conf=expandable_segments:True,max_split_size_mb:128'`; in results: "
      "the effective conf",
      [](config& c, const YAML::Node& n, const parse_context& ctx) {
        const std::string v = read_string(
            n, ctx, "a conf string such as \"expandable_segments:True,max_split_size_mb:128\"");
        (void)allocator_policy_or_fail(v, {}, ctx);  // checked here, applied by effective()
        c.memory.allocator.conf = v;
      },
      [](const config& c) -> nlohmann::json { return c.memory.allocator.effective_conf(); }));
  s.add(int_key("transfer.num_streams", GB_FIELD(int, transfer.num_streams), 1, 64, "",
                "streams for the multi-stream copy"));
  s.add(custom_key(
      "transfer.dtype", "one of " + dtype_names(), "", "element type of the copied tensors",
      [](config& c, const YAML::Node& n, const parse_context& ctx) {
        const std::string expect = "one of " + dtype_names();
        const auto t = parse_dtype(read_string(n, ctx, expect));
        if (!t) fail(ctx, "expected " + expect + ", got " + describe(n));
        c.transfer.element_type = *t;
      },
      [](const config& c) -> nlohmann::json { return to_string(c.transfer.element_type); }));
  s.add(size_key("transfer.large_copy_bytes", GB_FIELD(std::uint64_t, transfer.large_copy_bytes),
                 kMiB, 64 * kGiB, "1073741824 or \"1 GiB\"",
                 "size for sync-vs-async, staged upload and cudaHostRegister"));
  s.add(custom_key(
      "transfer.sweep.enabled", "true, false or auto", "",
      "the power-of-two size sweep (pinned, pageable and staged, both directions); `auto`: on "
      "when `--html` writes a report",
      [](config& c, const YAML::Node& n, const parse_context& ctx) {
        c.transfer.sweep.enabled = read_bool_or_auto(n, ctx);
      },
      [](const config& c) -> nlohmann::json {
        return c.transfer.sweep.enabled ? nlohmann::json(*c.transfer.sweep.enabled)
                                        : nlohmann::json("auto");
      }));
  s.add(size_key("transfer.sweep.min_bytes", GB_FIELD(std::uint64_t, transfer.sweep.min_bytes), 1,
                 64 * kGiB, "4096 or \"4 KiB\"", "smallest size of the sweep"));
  s.add(also_check(
      size_key("transfer.sweep.max_bytes", GB_FIELD(std::uint64_t, transfer.sweep.max_bytes), 1,
               64 * kGiB, "4096 or \"4 KiB\"", "largest size of the sweep (at least `min_bytes`)"),
      [](const config& c, const where_fn& where) {
        check_order(where, "transfer.sweep.min_bytes", c.transfer.sweep.min_bytes,
                    "transfer.sweep.max_bytes", c.transfer.sweep.max_bytes);
      }));
  s.add(bool_key("transfer.multi_gpu.enabled", GB_FIELD(bool, transfer.multi_gpu.enabled),
                 "run the peer-to-peer matrices and NCCL collectives"));
  s.add(size_key("transfer.multi_gpu.peer_bytes",
                 GB_FIELD(std::uint64_t, transfer.multi_gpu.peer_bytes), kMiB, 4 * kGiB,
                 "\"256 MiB\"", "bytes per peer-to-peer copy"));
  s.add(size_key("transfer.multi_gpu.nccl_min_bytes",
                 GB_FIELD(std::uint64_t, transfer.multi_gpu.nccl_min_bytes), 8, 8 * kGiB,
                 "8 or \"1 GiB\"", "smallest collective size (powers of two)"));
  s.add(also_check(
      size_key("transfer.multi_gpu.nccl_max_bytes",
               GB_FIELD(std::uint64_t, transfer.multi_gpu.nccl_max_bytes), 8, 8 * kGiB,
               "8 or \"1 GiB\"", "largest collective size (at least `nccl_min_bytes`)"),
      [](const config& c, const where_fn& where) {
        check_order(where, "transfer.multi_gpu.nccl_min_bytes", c.transfer.multi_gpu.nccl_min_bytes,
                    "transfer.multi_gpu.nccl_max_bytes", c.transfer.multi_gpu.nccl_max_bytes);
      }));
  s.add(bool_key("transfer.double_buffer.enabled", GB_FIELD(bool, transfer.double_buffer.enabled),
                 "run the double-buffering comparison"));
  s.add(custom_key(
      "transfer.double_buffer.compute_to_copy",
      "a list of compute/copy time ratios in 0.01..100, e.g. [0.5, 1, 2]", "",
      "compute time per batch as a multiple of its copy time",
      [](config& c, const YAML::Node& n, const parse_context& ctx) {
        c.transfer.double_buffer.compute_to_copy = read_ratio_list(
            n, ctx, "a list of compute/copy time ratios in 0.01..100, e.g. [0.5, 1, 2]", 0.01, 100);
      },
      [](const config& c) -> nlohmann::json { return c.transfer.double_buffer.compute_to_copy; }));
  s.add(size_key("transfer.double_buffer.batch_bytes",
                 GB_FIELD(std::uint64_t, transfer.double_buffer.batch_bytes), kMiB, 4 * kGiB,
                 "\"64 MiB\"", "bytes per batch"));
  s.add(int_key("transfer.double_buffer.batches", GB_FIELD(int, transfer.double_buffer.batches), 1,
                1024, "", "batches per run"));
  s.add(int_key("transfer.double_buffer.depth", GB_FIELD(int, transfer.double_buffer.depth), 1, 8,
                "", "pipeline depth of the traced run; double and triple are always shown"));
  s.add(size_key("transfer.staging.chunk_bytes",
                 GB_FIELD(std::uint64_t, transfer.staging.chunk_bytes), 64 * kKiB, kGiB,
                 "\"8 MiB\"", "bytes per pinned staging buffer"));
  s.add(int_key("transfer.staging.buffers", GB_FIELD(int, transfer.staging.buffers), 2, 16, "",
                "staging buffers in the ring"));
  s.add(int_key("transfer.staging.threads", GB_FIELD(int, transfer.staging.threads), 0, 256, "",
                "host threads filling them (0 = one per core, at most 16)",
                "an integer in 0..256 (0 = one per core, at most 16)"));
  static constexpr const char* kStoreModes = "off, uploads, downloads or both (true: both)";
  s.add(custom_key(
      "transfer.staging.streaming_stores", kStoreModes, "",
      "which host copies write with non-temporal stores (no read-for-ownership): into the ring "
      "on upload, into the destination on download",
      [](config& c, const YAML::Node& n, const parse_context& ctx) {
        const std::string expect = kStoreModes;
        auto m = parse_store_mode(read_string(n, ctx, expect));
        bool b = false;  // the key's old values: any YAML boolean (yes, on, ...)
        if (!m && YAML::convert<bool>::decode(n, b)) m = b ? store_mode::both : store_mode::off;
        if (!m) fail(ctx, "expected " + expect + ", got " + describe(n));
        c.transfer.staging.streaming_stores = *m;
      },
      [](const config& c) -> nlohmann::json {
        return to_string(c.transfer.staging.streaming_stores);
      }));
  s.add(bool_key("transfer.staging.huge_pages", GB_FIELD(bool, transfer.staging.huge_pages),
                 "the ring in transparent huge pages, pinned with cudaHostRegister"));
  s.add(int_key("transfer.staging.pieces_per_thread",
                GB_FIELD(int, transfer.staging.pieces_per_thread), 1, 64, "",
                "ranges each thread's share of a chunk is cut into, handed out one at a time (1: "
                "one fixed range per thread, which a thread slowed by the OS holds up)"));
  s.add(bool_key("transfer.staging.enqueue_while_copying",
                 GB_FIELD(bool, transfer.staging.enqueue_while_copying),
                 "on upload, the calling thread enqueues a chunk's DMA while the threads copy the "
                 "next chunk (false: between chunks, the threads idle meanwhile)"));
  s.add(bool_key("transfer.staging.variants", GB_FIELD(bool, transfer.staging.variants),
                 "also time the staged copy with each choice changed (threads, chunk, ring, "
                 "streaming stores, huge pages, pieces per thread, DMA enqueue), interleaved with "
                 "it: what bounds it"));
  s.add(custom_key(
      "transfer.tensor_shapes",
      "a list of shapes, each a list of positive integers, e.g. [[1024, 1024]]", "",
      "shapes to copy; bytes = product × dtype size",
      [](config& c, const YAML::Node& n, const parse_context& ctx) {
        c.transfer.tensor_shapes = read_shape_list(
            c, n, ctx, 0,
            "a list of shapes, each a list of positive integers, e.g. [[1024, 1024]]");
      },
      [](const config& c) { return shapes_json(c.transfer.tensor_shapes); },
      [](const config& c, const where_fn& where) {
        for (std::size_t i = 0; i < c.transfer.tensor_shapes.size(); ++i) {
          const tensor_shape& sh = c.transfer.tensor_shapes[i];
          const std::string skey = "transfer.tensor_shapes[" + std::to_string(i) + "]";
          for (std::size_t j = 0; j < sh.dims.size(); ++j) {
            if (sh.dims[j] > 0) continue;
            const std::string dkey = skey + "[" + std::to_string(j) + "]";
            source_location loc = where(dkey);
            if (loc.line == 0 && loc.source == "<default>") loc = where(skey);
            fail_at(loc, dkey,
                    "expected a positive integer dimension, got " + std::to_string(sh.dims[j]));
          }
          if (!shape_bytes(sh, c.transfer.element_type))
            fail_at(where(skey), skey,
                    "shape " + to_string(sh) + " of " +
                        std::string(to_string(c.transfer.element_type)) +
                        " is larger than 2^64 bytes");
        }
      }));
  s.add(int_key("profiler.sample_interval_ms", GB_FIELD(int, profiler.sample_interval_ms), 1, 1000,
                "ms", "NVML sampling period during the profile lesson",
                "an integer in 1..1000 (milliseconds)"));
  s.add(int_key("profiler.power_interval_ms", GB_FIELD(int, profiler.power_interval_ms), 1, 60000,
                "ms",
                "how often the sampler reads power (a call of 4 us to hundreds, by driver; NVML "
                "averages it over the last second on Ampere and newer, GA100 aside); used within "
                "200 ms..10 s",
                "an integer in 1..60000 (milliseconds)"));
  s.add(custom_key(
      "profiler.matmul.shapes", "a list of [m, n, k] shapes, e.g. [[8192, 8192, 8192]]", "",
      "GEMM shapes `[m, n, k]` (each 1..65536)",
      [](config& c, const YAML::Node& n, const parse_context& ctx) {
        c.profiler.matmul.shapes =
            read_shape_list(c, n, ctx, 3, "a list of [m, n, k] shapes, e.g. [[8192, 8192, 8192]]");
      },
      [](const config& c) { return shapes_json(c.profiler.matmul.shapes); },
      [](const config& c, const where_fn& where) {
        for (std::size_t i = 0; i < c.profiler.matmul.shapes.size(); ++i)
          for (std::size_t j = 0; j < c.profiler.matmul.shapes[i].dims.size(); ++j) {
            const auto d = c.profiler.matmul.shapes[i].dims[j];
            const std::string dkey =
                "profiler.matmul.shapes[" + std::to_string(i) + "][" + std::to_string(j) + "]";
            if (d < 1 || d > 65536)
              fail_at(where(dkey), dkey,
                      "expected a dimension in 1..65536, got " + std::to_string(d));
          }
      }));
  s.add(custom_key(
      "profiler.matmul.precisions", "a list of fp16, bf16, tf32, fp32", "", "precisions to measure",
      [](config& c, const YAML::Node& n, const parse_context& ctx) {
        need_list(n, ctx, "a list of fp16, bf16, tf32, fp32", config_limits::precisions,
                  "precisions");
        std::vector<std::string> v;
        for (std::size_t i = 0; i < n.size(); ++i) {
          const parse_context ictx = part_of(ctx, ctx.key + "[" + std::to_string(i) + "]", n[i]);
          const std::string p = n[i].IsScalar() ? lower(n[i].Scalar()) : std::string();
          if (p != "fp16" && p != "bf16" && p != "tf32" && p != "fp32")
            fail(ictx, "expected one of fp16, bf16, tf32, fp32, got " + describe(n[i]));
          v.push_back(p);
        }
        c.profiler.matmul.precisions = std::move(v);
      },
      [](const config& c) -> nlohmann::json { return c.profiler.matmul.precisions; }));
  s.add(int_key("profiler.matmul.check_size", GB_FIELD(int, profiler.matmul.check_size), 16, 2048,
                "", "n of the n³ GEMM checked against the CPU"));
  s.add(size_key("profiler.matmul.workspace_bytes",
                 GB_FIELD(std::uint64_t, profiler.matmul.workspace_bytes), 0, 4 * kGiB,
                 "\"64 MiB\"", "cuBLASLt workspace"));
  add_unified_keys(s);
  constexpr std::string_view fraction = "a fraction in (0, 1], e.g. 0.8";
  s.add(fraction_key("check.h2d_fraction", GB_FIELD(double, check.h2d_fraction), false, 1,
                     std::string(fraction),
                     "pinned H2D of `check.copy_bytes` against the link's theoretical rate per "
                     "direction"));
  s.add(fraction_key("check.d2h_fraction", GB_FIELD(double, check.d2h_fraction), false, 1,
                     std::string(fraction), "the same for D2H"));
  s.add(fraction_key("check.bidirectional_fraction", GB_FIELD(double, check.bidirectional_fraction),
                     false, 1, std::string(fraction), "H2D + D2H at once against twice that rate"));
  s.add(fraction_key("check.d2d_fraction", GB_FIELD(double, check.d2d_fraction), false, 1,
                     std::string(fraction), "D2D read + write against the HBM datasheet"));
  s.add(fraction_key("check.gemm_fraction", GB_FIELD(double, check.gemm_fraction), false, 1,
                     std::string(fraction), "bf16 GEMM against the datasheet dense peak"));
  s.add(fraction_key("check.warn_margin", GB_FIELD(double, check.warn_margin), true, 0.5,
                     "a fraction in [0, 0.5], e.g. 0.03",
                     "WARN when a fraction is less than this many points above its threshold"));
  s.add(size_key("check.copy_bytes", GB_FIELD(std::uint64_t, check.copy_bytes), kMiB, 4 * kGiB,
                 "\"256 MiB\"", "size of the check's copies"));
  s.add(int_key("check.gemm_size", GB_FIELD(int, check.gemm_size), 256, 16384, "",
                "n of the check's n³ bf16 GEMM"));
  return s;
}

#undef GB_FIELD

/// A JSON value as the YAML file writes it: "1 GiB" for sizes, [a, b] for lists.
std::string yaml_text(const nlohmann::json& v, const std::string& unit) {
  if (v.is_string()) return v.get<std::string>().empty() ? "\"\"" : v.get<std::string>();
  if (v.is_number_unsigned() && unit == "bytes") {
    const auto b = v.get<std::uint64_t>();
    const std::string t = bound_text(b);  // "1 GiB"; "8 B" and "0" as plain numbers
    return b == 0 || t.ends_with(" B") ? std::to_string(b) : t;
  }
  if (v.is_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + yaml_text(v[i], unit);
    return out + "]";
  }
  if (v.is_number_float()) return fmt::format("{}", v.get<double>());
  return v.dump();
}

}  // namespace

// ---- the schema ------------------------------------------------------------------------------

const config_schema& config_schema::builtin() {
  static const config_schema s = make_builtin();
  return s;
}

void config_schema::add(config_key key) {
  const std::string& name = key.name();
  if (find(name) || is_section(name))
    throw logic_error("config key " + name + " is declared twice, or is a section of other keys");
  for (auto p = name.find('.'); p != std::string::npos; p = name.find('.', p + 1))
    if (find(name.substr(0, p)))
      throw logic_error("config key " + name + " lies under the key " + name.substr(0, p));
  keys_.push_back(std::move(key));
}

const config_key* config_schema::find(std::string_view name) const {
  for (const auto& k : keys_)
    if (k.name() == name) return &k;
  return nullptr;
}

bool config_schema::is_section(std::string_view prefix) const {
  for (const auto& k : keys_) {
    const std::string& n = k.name();
    if (n.size() > prefix.size() && n.compare(0, prefix.size(), prefix) == 0 &&
        n[prefix.size()] == '.')
      return true;
  }
  return false;
}

void config_schema::validate(const config& cfg) const {
  const where_fn where = [&cfg](const std::string& key) -> source_location {
    const auto it = cfg.origins.find(key);
    if (it != cfg.origins.end()) return it->second;
    return {"<default>", 0, 0};
  };
  // In the table's order; a relation between keys is checked with the later key.
  for (const auto& k : keys_)
    if (k.impl().check) k.impl().check(cfg, where);
}

nlohmann::json config_schema::to_json(const config& cfg) const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& k : keys_) {
    if (!k.impl().in_results) continue;
    nlohmann::json* at = &j;
    const std::string& name = k.name();
    std::size_t from = 0;
    for (auto dot = name.find('.'); dot != std::string::npos; dot = name.find('.', from)) {
      at = &(*at)[name.substr(from, dot - from)];
      from = dot + 1;
    }
    (*at)[name.substr(from)] = k.impl().value(cfg);
  }
  return j;
}

std::vector<config_key_doc> config_schema::docs() const {
  const config defaults;
  std::vector<config_key_doc> out;
  for (const auto& k : keys_)
    out.push_back(
        {k.name(), yaml_text(k.impl().value(defaults), k.unit()), k.accepts(), k.unit(), k.doc()});
  return out;
}

std::string config_schema::reference_markdown() const {
  const auto cell = [](std::string s) {
    for (std::size_t p = s.find('|'); p != std::string::npos; p = s.find('|', p + 2))
      s.replace(p, 1, "\\|");
    return s;
  };
  std::string out = "| key | default | accepts | meaning |\n|---|---|---|---|\n";
  for (const auto& d : docs())
    out += fmt::format("| `{}` | `{}` | {} | {} |\n", d.key, cell(d.default_value), cell(d.accepts),
                       cell(d.doc));
  return out;
}

void validate(const config& cfg) {
  config_schema::builtin().validate(cfg);
}

void to_json(nlohmann::json& j, const config& cfg) {
  j = config_schema::builtin().to_json(cfg);
}

}  // namespace gpu_basics
