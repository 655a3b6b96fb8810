#include "gpu_basics/core/config.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "gpu_basics/core/errors.hpp"

namespace gpu_basics {

// ---- enums -------------------------------------------------------------------------------------

std::size_t dtype_size(dtype t) noexcept {
  switch (t) {
    case dtype::float64:
    case dtype::int64:
      return 8;
    case dtype::float32:
    case dtype::int32:
      return 4;
    case dtype::float16:
    case dtype::bfloat16:
      return 2;
    case dtype::int8:
    case dtype::uint8:
      return 1;
  }
  return 1;
}

namespace {
constexpr std::pair<dtype, std::string_view> kDtypeNames[] = {
    {dtype::float32, "float32"}, {dtype::float16, "float16"}, {dtype::bfloat16, "bfloat16"},
    {dtype::float64, "float64"}, {dtype::int8, "int8"},       {dtype::uint8, "uint8"},
    {dtype::int32, "int32"},     {dtype::int64, "int64"}};
constexpr std::pair<log_level, std::string_view> kLevelNames[] = {{log_level::trace, "trace"},
                                                                  {log_level::debug, "debug"},
                                                                  {log_level::info, "info"},
                                                                  {log_level::warn, "warn"},
                                                                  {log_level::error, "error"}};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}
}  // namespace

std::string_view to_string(dtype t) noexcept {
  for (const auto& [v, n] : kDtypeNames)
    if (v == t) return n;
  return "?";
}

std::string_view to_string(log_level l) noexcept {
  for (const auto& [v, n] : kLevelNames)
    if (v == l) return n;
  return "?";
}

std::optional<dtype> parse_dtype(std::string_view name) {
  const std::string n = lower(name);
  for (const auto& [v, s] : kDtypeNames)
    if (s == n) return v;
  if (n == "fp32" || n == "float") return dtype::float32;
  if (n == "fp16" || n == "half") return dtype::float16;
  if (n == "bf16") return dtype::bfloat16;
  if (n == "fp64" || n == "double") return dtype::float64;
  return std::nullopt;
}

std::optional<log_level> parse_log_level(std::string_view name) {
  const std::string n = lower(name);
  for (const auto& [v, s] : kLevelNames)
    if (s == n) return v;
  if (n == "warning") return log_level::warn;
  return std::nullopt;
}

std::optional<std::uint64_t> shape_bytes(const tensor_shape& s, dtype t) noexcept {
  if (s.dims.empty()) return std::nullopt;
  std::uint64_t bytes = dtype_size(t);
  for (std::int64_t d : s.dims) {
    if (d <= 0) return std::nullopt;
    if (__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(d), &bytes)) return std::nullopt;
  }
  return bytes;
}

std::optional<std::uint64_t> parse_byte_size(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0) return std::nullopt;
  double number = 0;
  const auto r = std::from_chars(text.data(), text.data() + i, number);
  if (r.ec != std::errc{} || r.ptr != text.data() + i) return std::nullopt;
  std::size_t j = i;
  while (j < text.size() && text[j] == ' ') ++j;
  const std::string unit = lower(text.substr(j));
  static const std::pair<std::string_view, double> units[] = {{"", 1},
                                                              {"b", 1},
                                                              {"kib", 1024.0},
                                                              {"mib", 1048576.0},
                                                              {"gib", 1073741824.0},
                                                              {"tib", 1099511627776.0},
                                                              {"kb", 1e3},
                                                              {"mb", 1e6},
                                                              {"gb", 1e9},
                                                              {"tb", 1e12}};
  for (const auto& [name, scale] : units) {
    if (unit != name) continue;
    const double bytes = number * scale;
    if (!(bytes >= 0) || bytes > 1.8e19 || bytes != std::floor(bytes)) return std::nullopt;
    return static_cast<std::uint64_t>(bytes);
  }
  return std::nullopt;
}

std::string to_string(const tensor_shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.dims.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s.dims[i]);
  }
  return out + "]";
}

// ---- parsing helpers -------------------------------------------------------------------------

namespace {

struct parse_context {
  std::string source;
  std::string key;
  source_location where;
  int key_pos = -1;   // where the key was written (text offset); -1: --set
  std::string alias;  // " (through an alias of line N)" when the value came through one
};

source_location location_of(const std::string& source, const YAML::Node& node) {
  const YAML::Mark m = node.Mark();
  if (m.line < 0) return {source, 0, 0};
  return {source, m.line + 1, m.column + 1};
}

/// The context of `node`, a part of ctx's value named `key`. A node written before its key came
/// through an alias: its mark is the anchor's, so the error points at the key and names the
/// anchor's line instead.
parse_context part_of(const parse_context& ctx, std::string key, const YAML::Node& node) {
  parse_context part{ctx.source, std::move(key), location_of(ctx.source, node), ctx.key_pos,
                     ctx.alias};
  if (ctx.key_pos >= 0 && node.Mark().pos >= 0 && node.Mark().pos < ctx.key_pos) {
    part.alias = " (through an alias of line " + std::to_string(part.where.line) + ")";
    part.where = ctx.where;
  }
  return part;
}

[[noreturn]] void fail(const parse_context& ctx, const std::string& message) {
  throw config_error(ctx.where.source, ctx.where.line, ctx.where.column, ctx.key,
                     message + ctx.alias);
}

[[noreturn]] void fail_at(const source_location& where, const std::string& key,
                          const std::string& message) {
  throw config_error(where.source, where.line, where.column, key, message);
}

/// How a node reads in an error message: `"four"`, `100`, `a list`, `a mapping`, `nothing`.
std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "nothing";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      break;
  }
  const std::string& s = node.Scalar();
  double d = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), d);
  if (!s.empty() && s.size() <= 32 && r.ec == std::errc{} && r.ptr == s.data() + s.size()) return s;
  return quote_for_message(s);
}

std::optional<std::int64_t> scalar_int(const YAML::Node& node) {
  if (!node.IsScalar()) return std::nullopt;
  const std::string& s = node.Scalar();
  std::int64_t v = 0;
  const char* begin = s.data();
  if (s.size() > 1 && s[0] == '+' && std::isdigit(static_cast<unsigned char>(s[1]))) ++begin;
  const auto r = std::from_chars(begin, s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc{} || r.ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

int read_int(const YAML::Node& node, const parse_context& ctx, std::string_view expectation) {
  const auto v = scalar_int(node);
  if (!v || *v < std::numeric_limits<int>::min() || *v > std::numeric_limits<int>::max())
    fail(ctx, "expected " + std::string(expectation) + ", got " + describe(node));
  return static_cast<int>(*v);
}

std::uint64_t read_size(const YAML::Node& node, const parse_context& ctx,
                        std::string_view expectation) {
  const auto v = node.IsScalar() ? parse_byte_size(node.Scalar()) : std::nullopt;
  if (!v) fail(ctx, "expected " + std::string(expectation) + ", got " + describe(node));
  return *v;
}

bool read_bool(const YAML::Node& node, const parse_context& ctx) {
  bool b = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, b))
    fail(ctx, "expected true or false, got " + describe(node));
  return b;
}

/// true, false, or "auto" (nullopt).
std::optional<bool> read_bool_or_auto(const YAML::Node& node, const parse_context& ctx) {
  if (node.IsScalar() && node.Scalar() == "auto") return std::nullopt;
  bool b = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, b))
    fail(ctx, "expected true, false or auto, got " + describe(node));
  return b;
}

std::string read_string(const YAML::Node& node, const parse_context& ctx,
                        std::string_view expectation) {
  if (!node.IsScalar())
    fail(ctx, "expected " + std::string(expectation) + ", got " + describe(node));
  return node.Scalar();
}

std::string join_names(std::string_view prefix, const auto& table) {
  std::string out;
  for (const auto& entry : table) {
    if (!out.empty()) out += ", ";
    out += std::string(prefix) + std::string(entry.second);
  }
  return out;
}

/// Fails when the list `n` has more than `limit` entries.
void check_list_length(const YAML::Node& n, const parse_context& ctx, std::size_t limit,
                       std::string_view what) {
  if (n.size() > limit)
    fail(ctx, "a list of " + std::to_string(n.size()) + " " + std::string(what) + "; at most " +
                  std::to_string(limit) + " are allowed");
}

/// A list of shapes (each a non-empty list of integers; `rank` > 0 requires that many). Records
/// where every shape and dimension was given; positivity and size are checked in validate().
std::vector<tensor_shape> read_shape_list(config& c, const YAML::Node& n, const parse_context& ctx,
                                          std::size_t rank, std::string_view expect) {
  if (!n.IsSequence() || n.size() == 0)
    fail(ctx, "expected " + std::string(expect) + ", got " +
                  (n.IsSequence() ? std::string("an empty list") : describe(n)));
  check_list_length(n, ctx, config_limits::shapes, "shapes");
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

// ---- the schema ----------------------------------------------------------------------------

using apply_fn = std::function<void(config&, const YAML::Node&, const parse_context&)>;

struct key_spec {
  std::string key;
  apply_fn apply;
};

constexpr std::string_view kStreamsExpect = "an integer in 1..64";
constexpr std::string_view kDeviceExpect = "a device index (an integer >= 0)";
constexpr std::string_view kWarmupExpect = "an integer in 0..100000";
constexpr std::string_view kItersExpect = "an integer in 1..100000";
constexpr std::string_view kLargeExpect = "a size in 1 MiB..64 GiB (e.g. 1073741824 or \"1 GiB\")";
constexpr std::string_view kSweepExpect = "a size in 1 B..64 GiB (e.g. 4096 or \"4 KiB\")";
constexpr std::string_view kChunkExpect = "a size in 64 KiB..1 GiB (e.g. \"8 MiB\")";
constexpr std::string_view kBuffersExpect = "an integer in 2..16";
constexpr std::string_view kRatioExpect =
    "a list of compute/copy time ratios in 0.01..100, e.g. [0.5, 1, 2]";
constexpr std::string_view kBatchExpect = "a size in 1 MiB..4 GiB (e.g. \"64 MiB\")";
constexpr std::string_view kBatchesExpect = "an integer in 1..1024";
constexpr std::string_view kDepthExpect = "an integer in 1..8";
constexpr std::string_view kIntervalExpect = "an integer in 1..1000 (milliseconds)";
constexpr std::string_view kCheckExpect = "an integer in 16..2048";
constexpr std::string_view kWorkspaceExpect = "a size in 0..4 GiB (e.g. \"64 MiB\")";
constexpr std::string_view kPeerExpect = "a size in 1 MiB..4 GiB (e.g. \"256 MiB\")";
constexpr std::string_view kNcclExpect = "a size in 8 B..8 GiB (e.g. 8 or \"1 GiB\")";
constexpr std::string_view kThreadsExpect = "an integer in 0..256 (0 = one per core, at most 16)";
constexpr std::string_view kFractionExpect = "a fraction in (0, 1], e.g. 0.8";
constexpr std::string_view kMarginExpect = "a fraction in [0, 0.5], e.g. 0.03";
constexpr std::string_view kCheckBytesExpect = "a size in 1 MiB..4 GiB (e.g. \"256 MiB\")";
constexpr std::string_view kGemmSizeExpect = "an integer in 256..16384";

/// A plain number (no unit); the range is checked in validate().
double read_double(const YAML::Node& node, const parse_context& ctx, std::string_view expectation) {
  double d = 0;
  const std::string s = node.IsScalar() ? node.Scalar() : std::string();
  const auto r = std::from_chars(s.data(), s.data() + s.size(), d);
  if (s.empty() || r.ec != std::errc{} || r.ptr != s.data() + s.size() || !std::isfinite(d))
    fail(ctx, "expected " + std::string(expectation) + ", got " + describe(node));
  return d;
}

/// The spec of a check.* number key (a fraction or margin).
key_spec check_number_spec(const std::string& name, double config::check_section::*member,
                           std::string_view expect) {
  return {"check." + name,
          [member, expect](config& c, const YAML::Node& n, const parse_context& ctx) {
            c.check.*member = read_double(n, ctx, expect);
          }};
}

/// The policy with `conf` applied, or the parser's message as this key's error.
/// `strip`: a knob's own name, left out of the message (the key already names it).
allocator_policy allocator_policy_or_fail(const std::string& conf, const allocator_policy& base,
                                          const parse_context& ctx, const std::string& strip = "") {
  try {
    return parse_allocator_policy(conf, base);
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

/// memory.allocator.<name>: one of PyTorch's knobs (max_split_size_mb: 0 = no limit;
/// garbage_collection_threshold: 0 = off).
key_spec allocator_key_spec(const std::string& name) {
  return {"memory.allocator." + name,
          [name](config& c, const YAML::Node& n, const parse_context& ctx) {
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
          }};
}

const std::vector<key_spec>& schema() {
  static const std::vector<key_spec> specs = {
      {"logging.level",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         const std::string s = read_string(n, ctx, "one of trace, debug, info, warn, error");
         const auto l = parse_log_level(s);
         if (!l) fail(ctx, "expected one of trace, debug, info, warn, error, got " + describe(n));
         c.logging.level = *l;
       }},
      {"device", [](config& c, const YAML::Node& n,
                    const parse_context& ctx) { c.device = read_int(n, ctx, kDeviceExpect); }},
      {"output.directory",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.output.directory = read_string(n, ctx, "a directory path");
       }},
      {"benchmark.warmup_iterations",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.benchmark.warmup_iterations = read_int(n, ctx, kWarmupExpect);
       }},
      {"benchmark.iterations",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.benchmark.iterations = read_int(n, ctx, kItersExpect);
       }},
      {"memory.use_pinned_memory",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.memory.use_pinned_memory = read_bool(n, ctx);
       }},
      // PyTorch's knobs, each read through the conf-string parser so names, ranges and errors
      // are PyTorch's; memory.allocator.conf applies over them, wherever it is written.
      allocator_key_spec("expandable_segments"),
      allocator_key_spec("max_split_size_mb"),
      allocator_key_spec("roundup_power2_divisions"),
      allocator_key_spec("garbage_collection_threshold"),
      {"memory.allocator.conf",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         const std::string s = read_string(n, ctx,
                                           "a conf string such as "
                                           "\"expandable_segments:True,max_split_size_mb:128\"");
         (void)allocator_policy_or_fail(s, {}, ctx);  // checked here, applied by effective()
         c.memory.allocator.conf = s;
       }},
      {"transfer.num_streams",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.transfer.num_streams = read_int(n, ctx, kStreamsExpect);
       }},
      {"transfer.dtype",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         const std::string expect = "one of " + join_names("", kDtypeNames);
         const auto t = parse_dtype(read_string(n, ctx, expect));
         if (!t) fail(ctx, "expected " + expect + ", got " + describe(n));
         c.transfer.element_type = *t;
       }},
      {"transfer.large_copy_bytes",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.transfer.large_copy_bytes = read_size(n, ctx, kLargeExpect);
       }},
      {"transfer.sweep.enabled",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.transfer.sweep.enabled = read_bool_or_auto(n, ctx);
       }},
      {"transfer.sweep.min_bytes",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.transfer.sweep.min_bytes = read_size(n, ctx, kSweepExpect);
       }},
      {"transfer.sweep.max_bytes",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.transfer.sweep.max_bytes = read_size(n, ctx, kSweepExpect);
       }},
      {"transfer.multi_gpu.enabled",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.transfer.multi_gpu.enabled = read_bool(n, ctx);
       }},
      {"transfer.multi_gpu.peer_bytes",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.transfer.multi_gpu.peer_bytes = read_size(n, ctx, kPeerExpect);
       }},
      {"transfer.multi_gpu.nccl_min_bytes",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.transfer.multi_gpu.nccl_min_bytes = read_size(n, ctx, kNcclExpect);
       }},
      {"transfer.multi_gpu.nccl_max_bytes",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.transfer.multi_gpu.nccl_max_bytes = read_size(n, ctx, kNcclExpect);
       }},
      {"transfer.double_buffer.enabled",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.transfer.double_buffer.enabled = read_bool(n, ctx);
       }},
      {"transfer.double_buffer.compute_to_copy",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         if (!n.IsSequence() || n.size() == 0)
           fail(ctx, "expected " + std::string(kRatioExpect) + ", got " +
                         (n.IsSequence() ? std::string("an empty list") : describe(n)));
         check_list_length(n, ctx, config_limits::ratios, "ratios");
         std::vector<double> v;
         for (std::size_t i = 0; i < n.size(); ++i) {
           const parse_context ictx = part_of(ctx, ctx.key + "[" + std::to_string(i) + "]", n[i]);
           double d = 0;
           const std::string s = n[i].IsScalar() ? n[i].Scalar() : std::string();
           const auto r = std::from_chars(s.data(), s.data() + s.size(), d);
           if (s.empty() || r.ec != std::errc{} || r.ptr != s.data() + s.size())
             fail(ictx, "expected a ratio in 0.01..100, got " + describe(n[i]));
           if (!(d >= 0.01 && d <= 100))
             fail(ictx, "expected a ratio in 0.01..100, got " + describe(n[i]));
           v.push_back(d);
         }
         c.transfer.double_buffer.compute_to_copy = std::move(v);
       }},
      {"transfer.double_buffer.batch_bytes",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.transfer.double_buffer.batch_bytes = read_size(n, ctx, kBatchExpect);
       }},
      {"transfer.double_buffer.batches",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.transfer.double_buffer.batches = read_int(n, ctx, kBatchesExpect);
       }},
      {"transfer.double_buffer.depth",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.transfer.double_buffer.depth = read_int(n, ctx, kDepthExpect);
       }},
      {"transfer.staging.chunk_bytes",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.transfer.staging.chunk_bytes = read_size(n, ctx, kChunkExpect);
       }},
      {"transfer.staging.buffers",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.transfer.staging.buffers = read_int(n, ctx, kBuffersExpect);
       }},
      {"transfer.staging.threads",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.transfer.staging.threads = read_int(n, ctx, kThreadsExpect);
       }},
      {"transfer.tensor_shapes",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.transfer.tensor_shapes = read_shape_list(
             c, n, ctx, 0,
             "a list of shapes, each a list of positive integers, e.g. [[1024, 1024]]");
       }},
      {"profiler.sample_interval_ms",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.profiler.sample_interval_ms = read_int(n, ctx, kIntervalExpect);
       }},
      {"profiler.matmul.shapes",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.profiler.matmul.shapes =
             read_shape_list(c, n, ctx, 3, "a list of [m, n, k] shapes, e.g. [[8192, 8192, 8192]]");
       }},
      {"profiler.matmul.precisions",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         constexpr std::string_view expect = "a list of fp16, bf16, tf32, fp32";
         if (!n.IsSequence() || n.size() == 0)
           fail(ctx, "expected " + std::string(expect) + ", got " +
                         (n.IsSequence() ? std::string("an empty list") : describe(n)));
         check_list_length(n, ctx, config_limits::precisions, "precisions");
         std::vector<std::string> v;
         for (std::size_t i = 0; i < n.size(); ++i) {
           const parse_context ictx = part_of(ctx, ctx.key + "[" + std::to_string(i) + "]", n[i]);
           const std::string p = n[i].IsScalar() ? lower(n[i].Scalar()) : std::string();
           if (p != "fp16" && p != "bf16" && p != "tf32" && p != "fp32")
             fail(ictx, "expected one of fp16, bf16, tf32, fp32, got " + describe(n[i]));
           v.push_back(p);
         }
         c.profiler.matmul.precisions = std::move(v);
       }},
      {"profiler.matmul.check_size",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.profiler.matmul.check_size = read_int(n, ctx, kCheckExpect);
       }},
      {"profiler.matmul.workspace_bytes",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.profiler.matmul.workspace_bytes = read_size(n, ctx, kWorkspaceExpect);
       }},
      check_number_spec("h2d_fraction", &config::check_section::h2d_fraction, kFractionExpect),
      check_number_spec("d2h_fraction", &config::check_section::d2h_fraction, kFractionExpect),
      check_number_spec("bidirectional_fraction", &config::check_section::bidirectional_fraction,
                        kFractionExpect),
      check_number_spec("d2d_fraction", &config::check_section::d2d_fraction, kFractionExpect),
      check_number_spec("gemm_fraction", &config::check_section::gemm_fraction, kFractionExpect),
      check_number_spec("warn_margin", &config::check_section::warn_margin, kMarginExpect),
      {"check.copy_bytes",
       [](config& c, const YAML::Node& n, const parse_context& ctx) {
         c.check.copy_bytes = read_size(n, ctx, kCheckBytesExpect);
       }},
      {"check.gemm_size",
       [](config& c, const YAML::Node& n,
          const parse_context& ctx) { c.check.gemm_size = read_int(n, ctx, kGemmSizeExpect); }},
  };
  return specs;
}

const key_spec* find_spec(std::string_view key) {
  for (const auto& s : schema())
    if (s.key == key) return &s;
  return nullptr;
}

bool is_section(std::string_view prefix) {
  for (const auto& s : schema())
    if (s.key.size() > prefix.size() && s.key.compare(0, prefix.size(), prefix) == 0 &&
        s.key[prefix.size()] == '.')
      return true;
  return false;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string unknown_key_message(const std::string& key) {
  std::string msg = "unknown key";
  if (const auto near = nearest_config_key(key)) return msg + "; did you mean '" + *near + "'?";
  return msg + "; known keys: " + [] {
    std::string all;
    for (const auto& k : known_config_keys()) all += (all.empty() ? "" : ", ") + k;
    return all;
  }();
}

/// Fails unless `name` is a plain key a file may hold: short, and not dotted (a dotted key
/// would be a second way to set a nested key, and could set it twice).
void check_key_name(const std::string& name, const std::string& prefix,
                    const source_location& where) {
  if (name.size() > config_limits::key_chars)
    fail_at(where, prefix,
            "a key of " + std::to_string(name.size()) + " characters, " +
                quote_for_message(name, 24) + "; a key name is at most " +
                std::to_string(config_limits::key_chars));
  if (const auto dot = name.find('.'); dot != std::string::npos)
    fail_at(where, prefix.empty() ? name : prefix + "." + name,
            "a dotted key; in a file, nest it: '" + name.substr(0, dot) + ":' with '" +
                name.substr(dot + 1) + ": ...' indented under it (dotted keys are for --set)");
}

void walk_map(config& cfg, const YAML::Node& map, const std::string& prefix,
              const std::string& source) {
  std::map<std::string, int> seen;  // key -> line first given
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key_node = it->first;
    const YAML::Node value = it->second;
    const source_location key_loc = location_of(source, key_node);
    if (!key_node.IsScalar()) fail_at(key_loc, prefix, "expected a plain key name");
    const std::string& name = key_node.Scalar();
    check_key_name(name, prefix, key_loc);
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    if (const auto [pos, inserted] = seen.emplace(name, key_loc.line); !inserted)
      fail_at(key_loc, full,
              "duplicate key (first given at line " + std::to_string(pos->second) + ")");
    if (value.IsScalar() && value.Scalar().size() > config_limits::value_chars)
      fail_at(location_of(source, value), full,
              "a value of " + std::to_string(value.Scalar().size()) + " characters, " +
                  quote_for_message(value.Scalar(), 24) + "; a value is at most " +
                  std::to_string(config_limits::value_chars));

    if (const key_spec* spec = find_spec(full)) {
      const parse_context key_ctx{source, full, key_loc, key_node.Mark().pos, ""};
      const parse_context value_ctx = value.IsNull() ? key_ctx : part_of(key_ctx, full, value);
      spec->apply(cfg, value, value_ctx);
      cfg.origins[full] = value_ctx.where;
    } else if (is_section(full)) {
      if (value.IsNull()) continue;  // an empty section keeps its defaults
      if (!value.IsMap())
        fail_at(location_of(source, value), full,
                "expected a mapping of " + full + ".* keys, got " + describe(value));
      walk_map(cfg, value, full, source);
    } else {
      fail_at(key_loc, full, unknown_key_message(full));
    }
  }
}

std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  return std::string(s.substr(first, s.find_last_not_of(" \t") - first + 1));
}

/// yaml-cpp's terse parser messages in a user's words; others are kept as they are.
std::string yaml_message(const std::string& msg) {
  static const std::pair<std::string_view, std::string_view> words[] = {
      {YAML::ErrorMsg::MAP_VALUE,
       "a ':' where no value can start: a key longer than 1024 characters, or a second "
       "'key: value' on one line?"},
      {YAML::ErrorMsg::MAP_KEY, "a '?' where no key can start"},
      {YAML::ErrorMsg::END_OF_MAP, "a mapping that is not closed or not indented evenly"},
      {YAML::ErrorMsg::END_OF_MAP_FLOW, "a '{' without its '}'"},
      {YAML::ErrorMsg::END_OF_SEQ, "a list that is not indented evenly"},
      {YAML::ErrorMsg::END_OF_SEQ_FLOW, "a '[' without its ']'"},
      {YAML::ErrorMsg::FLOW_END, "a ']' or '}' without its opening bracket"},
      {YAML::ErrorMsg::BLOCK_ENTRY, "a '- ' list item where a key or value was expected"},
      {YAML::ErrorMsg::TAB_IN_INDENTATION, "a tab in the indentation (indent with spaces)"},
      {YAML::ErrorMsg::EOF_IN_SCALAR, "a quoted value that is never closed"},
      {YAML::ErrorMsg::UNKNOWN_ANCHOR, "an alias (*name) whose anchor (&name) is not defined"},
      {YAML::ErrorMsg::UNKNOWN_TOKEN, "a character YAML does not allow here"},
  };
  for (const auto& [terse, plain] : words)
    if (msg == terse) return std::string(plain);
  return msg;
}

/// Counts the documents a parser finds; keeps where the second one starts.
struct document_counter : YAML::EventHandler {
  int documents = 0;
  YAML::Mark second_start;
  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents == 2) second_start = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

/// Control characters other than tab, newline and carriage return: never YAML text.
bool is_control(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u < 0x20 && c != '\t' && c != '\n' && c != '\r') || u == 0x7f;
}

/// Parses `text` as exactly one YAML document (none: a null node). `key` names the --set key.
YAML::Node load_document(std::string_view text, const std::string& source, const std::string& key) {
  if (text.size() > config_limits::file_bytes)
    throw config_error(source, 0, 0, key,
                       "the text is " + std::to_string(text.size()) + " bytes; at most " +
                           std::to_string(config_limits::file_bytes / 1024) + " KiB (" +
                           std::to_string(config_limits::file_bytes) + " bytes) is read");
  const bool from_file = key.empty();
  const std::string what =
      from_file ? "invalid YAML: " : "invalid YAML value " + quote_for_message(text) + ": ";
  const auto at = [&](const YAML::Mark& m, const std::string& message) {
    return from_file && m.line >= 0 ? config_error(source, m.line + 1, m.column + 1, key, message)
                                    : config_error(source, 0, 0, key, message);
  };
  if (const auto bad = std::find_if(text.begin(), text.end(), is_control); bad != text.end()) {
    const auto offset = static_cast<std::size_t>(bad - text.begin());
    const auto line_start = text.rfind('\n', offset == 0 ? 0 : offset - 1);
    const int line = static_cast<int>(std::count(text.begin(), bad, '\n')) + 1;
    const int column = static_cast<int>(
        line_start == std::string_view::npos || offset == 0 ? offset + 1 : offset - line_start);
    throw config_error(source, from_file ? line : 0, from_file ? column : 0, key,
                       "a control character (" + printable(std::string(1, *bad)) +
                           ") in the text; a configuration is YAML text (escape it in a quoted "
                           "string)");
  }
  YAML::Node document;
  try {
    // At most two documents are parsed: yaml-cpp can find endless empty documents in some
    // malformed input, and YAML::LoadAll would collect them until memory runs out.
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    document_counter counter;
    if (parser.HandleNextDocument(counter) && parser.HandleNextDocument(counter))
      throw at(counter.second_start,
               "a second YAML document (after '---' or '...'); a configuration is one document");
    document = YAML::Load(std::string(text));
  } catch (const YAML::DeepRecursion& e) {
    throw at(e.mark, what + "nested more than " + std::to_string(config_limits::yaml_depth) +
                         " levels deep");
  } catch (const YAML::ParserException& e) {
    throw at(e.mark, what + yaml_message(e.msg));
  } catch (const YAML::Exception& e) {
    throw at(e.mark, what + yaml_message(e.msg));
  }
  return document;
}

}  // namespace

// ---- public API ----------------------------------------------------------------------------

std::vector<std::string> known_config_keys() {
  std::vector<std::string> keys;
  for (const auto& s : schema()) keys.push_back(s.key);
  return keys;
}

std::optional<std::string> nearest_config_key(std::string_view key) {
  // No known key is near a long name; and the search costs length x length.
  if (key.size() > 2 * config_limits::key_chars) return std::nullopt;
  const auto leaf = [](std::string_view k) {
    const auto p = k.rfind('.');
    return p == std::string_view::npos ? k : k.substr(p + 1);
  };
  // Candidates: every key and every section name ("transfer").
  std::vector<std::string> candidates;
  for (const auto& s : schema()) {
    candidates.push_back(s.key);
    for (auto p = s.key.find('.'); p != std::string::npos; p = s.key.find('.', p + 1))
      candidates.push_back(s.key.substr(0, p));
  }
  std::optional<std::string> best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto& c : candidates) {
    // Whole names, and leaf names: a right name in the wrong section still finds its key.
    const std::size_t d = std::min(edit_distance(key, c), edit_distance(leaf(key), leaf(c)));
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  const std::size_t limit = std::max<std::size_t>(2, leaf(key).size() / 3);
  if (best_d <= limit && best && *best != key) return best;
  return std::nullopt;
}

std::optional<std::string> nearest_word(std::string_view word,
                                        const std::vector<std::string>& names) {
  if (word.size() > 2 * config_limits::key_chars) return std::nullopt;
  const std::string w = lower(word);
  std::optional<std::string> best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto& n : names) {
    const std::size_t d = edit_distance(w, lower(n));
    if (d < best_d) {
      best_d = d;
      best = n;
    }
  }
  if (best && best_d <= std::max<std::size_t>(2, word.size() / 3) && *best != word) return best;
  return std::nullopt;
}

std::string read_config_file(const std::string& path) {
  const auto refuse = [&](const std::string& why) { return config_error(path, 0, 0, "", why); };
  // O_NONBLOCK: opening a FIFO with no writer must not wait; fstat then refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    throw refuse("cannot read the configuration file (" + std::string(std::strerror(errno)) + ")");
  const struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_fd{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw refuse("cannot read the configuration file (" + std::string(std::strerror(errno)) + ")");
  if (S_ISDIR(st.st_mode)) throw refuse("is a directory, not a configuration file");
  if (!S_ISREG(st.st_mode))
    throw refuse("is not a regular file (a device, FIFO or socket); give a YAML file");
  const auto too_big = [&](std::uint64_t bytes) {
    return refuse("the configuration file is " + std::to_string(bytes) + " bytes; at most " +
                  std::to_string(config_limits::file_bytes / 1024) + " KiB (" +
                  std::to_string(config_limits::file_bytes) + " bytes) is read");
  };
  if (static_cast<std::uint64_t>(st.st_size) > config_limits::file_bytes) throw too_big(st.st_size);
  std::string text(config_limits::file_bytes + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      throw refuse("error while reading the configuration file (" +
                   std::string(std::strerror(errno)) + ")");
    }
    got += static_cast<std::size_t>(n);
  }
  if (got > config_limits::file_bytes) throw too_big(got);  // it grew while read
  text.resize(got);
  return text;
}

config parse_config(std::string_view text, std::string_view source_name, const config& base) {
  const std::string source(source_name);
  const YAML::Node root = load_document(text, source, "");
  config cfg = base;
  if (root.IsNull()) return cfg;  // an empty file: every default
  if (!root.IsMap())
    throw config_error(source, location_of(source, root).line, location_of(source, root).column, "",
                       "expected a mapping of keys at the top level, got " + describe(root));
  try {
    walk_map(cfg, root, "", source);
  } catch (const YAML::Exception& e) {
    throw config_error(source, e.mark.line + 1, e.mark.column + 1, "",
                       std::string("invalid YAML: ") + e.what());
  }
  return cfg;
}

void apply_override(config& cfg, std::string_view assignment) {
  const std::string source = "--set";
  const auto eq = assignment.find('=');
  const std::string key(eq == std::string_view::npos ? "" : trim(assignment.substr(0, eq)));
  if (key.empty())
    throw config_error(source, 0, 0, "",
                       "expected key=value, got " + quote_for_message(assignment));
  const std::string value(assignment.substr(eq + 1));
  if (key.size() > 2 * config_limits::key_chars)
    throw config_error(source, 0, 0, "",
                       "a key of " + std::to_string(key.size()) + " characters, " +
                           quote_for_message(key, 24) + "; no key is that long");
  if (key.find_first_of(" \t\r\n") != std::string::npos)
    throw config_error(
        source, 0, 0, "",
        "a key with a space in it: " + quote_for_message(key) + "; expected key=value");
  const key_spec* spec = find_spec(key);
  if (!spec) {
    if (is_section(key))
      throw config_error(
          source, 0, 0, key, "is a section; set one of its keys, e.g. " + [&] {
            for (const auto& s : schema())
              if (s.key.rfind(key + ".", 0) == 0) return s.key;
            return std::string();
          }() + "=...");
    throw config_error(source, 0, 0, key, unknown_key_message(key));
  }
  const YAML::Node node = load_document(value, source, key);
  const source_location where{source, 0, 0};
  spec->apply(cfg, node, parse_context{source, key, where, -1, ""});
  // List items keep their origin keys; point them at --set too.
  for (auto& [k, loc] : cfg.origins)
    if (k.rfind(key + "[", 0) == 0) loc = where;
  cfg.origins[key] = where;
}

void validate(const config& cfg) {
  const auto where = [&](const std::string& key) -> source_location {
    const auto it = cfg.origins.find(key);
    if (it != cfg.origins.end()) return it->second;
    return {"<default>", 0, 0};
  };
  const auto check_range = [&](const std::string& key, long long v, long long lo, long long hi,
                               std::string_view expectation) {
    if (v < lo || v > hi)
      fail_at(where(key), key,
              "expected " + std::string(expectation) + ", got " + std::to_string(v));
  };
  check_range("device", cfg.device, 0, 1023, kDeviceExpect);
  check_range("benchmark.warmup_iterations", cfg.benchmark.warmup_iterations, 0, 100000,
              kWarmupExpect);
  check_range("benchmark.iterations", cfg.benchmark.iterations, 1, 100000, kItersExpect);
  check_range("transfer.num_streams", cfg.transfer.num_streams, 1, 64, kStreamsExpect);
  const auto check_size = [&](const std::string& key, std::uint64_t v, std::uint64_t lo,
                              std::uint64_t hi, std::string_view expectation) {
    if (v < lo || v > hi)
      fail_at(where(key), key,
              "expected " + std::string(expectation) + ", got " + std::to_string(v));
  };
  constexpr std::uint64_t KiB = 1024, MiB = KiB * 1024, GiB = MiB * 1024;
  check_size("transfer.large_copy_bytes", cfg.transfer.large_copy_bytes, MiB, 64 * GiB,
             kLargeExpect);
  check_size("transfer.sweep.min_bytes", cfg.transfer.sweep.min_bytes, 1, 64 * GiB, kSweepExpect);
  check_size("transfer.sweep.max_bytes", cfg.transfer.sweep.max_bytes, 1, 64 * GiB, kSweepExpect);
  if (cfg.transfer.sweep.max_bytes < cfg.transfer.sweep.min_bytes)
    fail_at(where("transfer.sweep.max_bytes"), "transfer.sweep.max_bytes",
            "must be at least transfer.sweep.min_bytes (" +
                std::to_string(cfg.transfer.sweep.min_bytes) + "), got " +
                std::to_string(cfg.transfer.sweep.max_bytes));
  check_size("transfer.staging.chunk_bytes", cfg.transfer.staging.chunk_bytes, 64 * KiB, GiB,
             kChunkExpect);
  check_range("transfer.staging.buffers", cfg.transfer.staging.buffers, 2, 16, kBuffersExpect);
  check_range("transfer.staging.threads", cfg.transfer.staging.threads, 0, 256, kThreadsExpect);
  check_size("transfer.double_buffer.batch_bytes", cfg.transfer.double_buffer.batch_bytes, MiB,
             4 * GiB, kBatchExpect);
  check_range("transfer.double_buffer.batches", cfg.transfer.double_buffer.batches, 1, 1024,
              kBatchesExpect);
  check_range("transfer.double_buffer.depth", cfg.transfer.double_buffer.depth, 1, 8, kDepthExpect);
  check_size("transfer.multi_gpu.peer_bytes", cfg.transfer.multi_gpu.peer_bytes, MiB, 4 * GiB,
             kPeerExpect);
  check_size("transfer.multi_gpu.nccl_min_bytes", cfg.transfer.multi_gpu.nccl_min_bytes, 8, 8 * GiB,
             kNcclExpect);
  check_size("transfer.multi_gpu.nccl_max_bytes", cfg.transfer.multi_gpu.nccl_max_bytes, 8, 8 * GiB,
             kNcclExpect);
  if (cfg.transfer.multi_gpu.nccl_max_bytes < cfg.transfer.multi_gpu.nccl_min_bytes)
    fail_at(where("transfer.multi_gpu.nccl_max_bytes"), "transfer.multi_gpu.nccl_max_bytes",
            "must be at least transfer.multi_gpu.nccl_min_bytes (" +
                std::to_string(cfg.transfer.multi_gpu.nccl_min_bytes) + "), got " +
                std::to_string(cfg.transfer.multi_gpu.nccl_max_bytes));
  if (cfg.output.directory.empty())
    fail_at(where("output.directory"), "output.directory", "expected a directory path, got \"\"");

  check_range("profiler.sample_interval_ms", cfg.profiler.sample_interval_ms, 1, 1000,
              kIntervalExpect);
  check_range("profiler.matmul.check_size", cfg.profiler.matmul.check_size, 16, 2048, kCheckExpect);
  check_size("profiler.matmul.workspace_bytes", cfg.profiler.matmul.workspace_bytes, 0, 4 * GiB,
             kWorkspaceExpect);
  const auto check_fraction = [&](const std::string& key, double v, bool zero_ok, double hi,
                                  std::string_view expectation) {
    if (!(zero_ok ? v >= 0 : v > 0) || !(v <= hi))
      fail_at(where(key), key,
              "expected " + std::string(expectation) + ", got " + std::to_string(v));
  };
  check_fraction("check.h2d_fraction", cfg.check.h2d_fraction, false, 1, kFractionExpect);
  check_fraction("check.d2h_fraction", cfg.check.d2h_fraction, false, 1, kFractionExpect);
  check_fraction("check.bidirectional_fraction", cfg.check.bidirectional_fraction, false, 1,
                 kFractionExpect);
  check_fraction("check.d2d_fraction", cfg.check.d2d_fraction, false, 1, kFractionExpect);
  check_fraction("check.gemm_fraction", cfg.check.gemm_fraction, false, 1, kFractionExpect);
  check_fraction("check.warn_margin", cfg.check.warn_margin, true, 0.5, kMarginExpect);
  check_size("check.copy_bytes", cfg.check.copy_bytes, MiB, 4 * GiB, kCheckBytesExpect);
  check_range("check.gemm_size", cfg.check.gemm_size, 256, 16384, kGemmSizeExpect);
  for (std::size_t i = 0; i < cfg.profiler.matmul.shapes.size(); ++i)
    for (std::size_t j = 0; j < cfg.profiler.matmul.shapes[i].dims.size(); ++j) {
      const auto d = cfg.profiler.matmul.shapes[i].dims[j];
      const std::string dkey =
          "profiler.matmul.shapes[" + std::to_string(i) + "][" + std::to_string(j) + "]";
      if (d < 1 || d > 65536)
        fail_at(where(dkey), dkey, "expected a dimension in 1..65536, got " + std::to_string(d));
    }
  for (std::size_t i = 0; i < cfg.transfer.tensor_shapes.size(); ++i) {
    const tensor_shape& s = cfg.transfer.tensor_shapes[i];
    const std::string skey = "transfer.tensor_shapes[" + std::to_string(i) + "]";
    for (std::size_t j = 0; j < s.dims.size(); ++j) {
      if (s.dims[j] <= 0) {
        const std::string dkey = skey + "[" + std::to_string(j) + "]";
        source_location loc = where(dkey);
        if (loc.line == 0 && loc.source == "<default>") loc = where(skey);
        fail_at(loc, dkey,
                "expected a positive integer dimension, got " + std::to_string(s.dims[j]));
      }
    }
    if (!shape_bytes(s, cfg.transfer.element_type))
      fail_at(where(skey), skey,
              "shape " + to_string(s) + " of " + std::string(to_string(cfg.transfer.element_type)) +
                  " is larger than 2^64 bytes");
  }
}

config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  config cfg = path.empty() ? parse_config(default_config_text(), "<built-in default>")
                            : parse_config(read_config_file(path), path);
  for (const auto& o : overrides) apply_override(cfg, o);
  validate(cfg);
  return cfg;
}

void to_json(nlohmann::json& j, const config& cfg) {
  nlohmann::json shapes = nlohmann::json::array();
  for (const auto& s : cfg.transfer.tensor_shapes) shapes.push_back(s.dims);
  j = nlohmann::json{
      {"logging", {{"level", to_string(cfg.logging.level)}}},
      {"device", cfg.device},
      {"output", {{"directory", cfg.output.directory}}},
      {"benchmark",
       {{"warmup_iterations", cfg.benchmark.warmup_iterations},
        {"iterations", cfg.benchmark.iterations}}},
      {"memory",
       {{"use_pinned_memory", cfg.memory.use_pinned_memory},
        {"allocator",
         {{"conf", to_conf_string(cfg.memory.allocator.effective())},
          {"expandable_segments", cfg.memory.allocator.effective().expandable_segments}}}}},
      {"transfer",
       {{"num_streams", cfg.transfer.num_streams},
        {"tensor_shapes", shapes},
        {"dtype", to_string(cfg.transfer.element_type)},
        {"large_copy_bytes", cfg.transfer.large_copy_bytes},
        {"sweep",
         {{"enabled", cfg.transfer.sweep.enabled ? nlohmann::json(*cfg.transfer.sweep.enabled)
                                                 : nlohmann::json("auto")},
          {"min_bytes", cfg.transfer.sweep.min_bytes},
          {"max_bytes", cfg.transfer.sweep.max_bytes}}},
        {"double_buffer",
         {{"enabled", cfg.transfer.double_buffer.enabled},
          {"compute_to_copy", cfg.transfer.double_buffer.compute_to_copy},
          {"batch_bytes", cfg.transfer.double_buffer.batch_bytes},
          {"batches", cfg.transfer.double_buffer.batches},
          {"depth", cfg.transfer.double_buffer.depth}}},
        {"staging",
         {{"chunk_bytes", cfg.transfer.staging.chunk_bytes},
          {"buffers", cfg.transfer.staging.buffers},
          {"threads", cfg.transfer.staging.threads}}},
        {"multi_gpu",
         {{"enabled", cfg.transfer.multi_gpu.enabled},
          {"peer_bytes", cfg.transfer.multi_gpu.peer_bytes},
          {"nccl_min_bytes", cfg.transfer.multi_gpu.nccl_min_bytes},
          {"nccl_max_bytes", cfg.transfer.multi_gpu.nccl_max_bytes}}}}},
      {"profiler",
       {{"sample_interval_ms", cfg.profiler.sample_interval_ms},
        {"matmul",
         {{"shapes",
           [&] {
             nlohmann::json a = nlohmann::json::array();
             for (const auto& sh : cfg.profiler.matmul.shapes) a.push_back(sh.dims);
             return a;
           }()},
          {"precisions", cfg.profiler.matmul.precisions},
          {"check_size", cfg.profiler.matmul.check_size},
          {"workspace_bytes", cfg.profiler.matmul.workspace_bytes}}}}},
      {"check",
       {{"h2d_fraction", cfg.check.h2d_fraction},
        {"d2h_fraction", cfg.check.d2h_fraction},
        {"bidirectional_fraction", cfg.check.bidirectional_fraction},
        {"d2d_fraction", cfg.check.d2d_fraction},
        {"gemm_fraction", cfg.check.gemm_fraction},
        {"warn_margin", cfg.check.warn_margin},
        {"copy_bytes", cfg.check.copy_bytes},
        {"gemm_size", cfg.check.gemm_size}}},
  };
}

}  // namespace gpu_basics
