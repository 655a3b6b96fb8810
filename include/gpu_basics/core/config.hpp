// The configuration of gpu-basics (configs/gpu_basics.yaml) and its loading:
// read (file → text) → parse (text → typed values, type errors) → validate (ranges, sizes).
// Each step is testable from a string. Host-only: no CUDA and no YAML header leaks from here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpu_basics/core/allocator_conf.hpp"
#include "gpu_basics/core/sampling.hpp"

namespace gpu_basics {

enum class log_level { trace, debug, info, warn, error };

/// Element types a transfer tensor can have.
enum class dtype { float32, float16, bfloat16, float64, int8, uint8, int32, int64 };

/// Bytes per element of `t`.
[[nodiscard]] std::size_t dtype_size(dtype t) noexcept;
/// The configuration file's name of `t` ("float32"); "?" outside the enum.
[[nodiscard]] std::string_view to_string(dtype t) noexcept;
/// The configuration file's name of `l` ("info"); "?" outside the enum.
[[nodiscard]] std::string_view to_string(log_level l) noexcept;
/// A dtype from its name, case-insensitive, with the aliases fp32/float, fp16/half, bf16,
/// fp64/double; nullopt for an unknown name.
[[nodiscard]] std::optional<dtype> parse_dtype(std::string_view name);
/// A level from its name, case-insensitive ("warning" for warn); nullopt for an unknown name.
[[nodiscard]] std::optional<log_level> parse_log_level(std::string_view name);

/// Which host copies of a staged copy write with streaming (non-temporal) stores: the copy into
/// the staging ring on upload, the copy into the destination on download.
enum class store_mode { off, uploads, downloads, both };
/// The configuration file's name of `m` ("downloads"); "?" outside the enum.
[[nodiscard]] std::string_view to_string(store_mode m) noexcept;
/// A mode from its name, case-insensitive; also "true" (both) and "false" (off), the values of
/// the key before it took a direction. nullopt for anything else.
[[nodiscard]] std::optional<store_mode> parse_store_mode(std::string_view name);
/// Whether uploads copy into the staging ring with streaming stores under `m`.
[[nodiscard]] constexpr bool streams_uploads(store_mode m) noexcept {
  return m == store_mode::uploads || m == store_mode::both;
}
/// Whether downloads copy into the destination with streaming stores under `m`.
[[nodiscard]] constexpr bool streams_downloads(store_mode m) noexcept {
  return m == store_mode::downloads || m == store_mode::both;
}
/// `m` by name in JSON; reads a name, or true/false from results written before the mode had a
/// direction.
/// @throws json_path_error for anything else.
void to_json(nlohmann::json& j, store_mode m);
void from_json(const nlohmann::json& j, store_mode& m);

/// A tensor shape: dimensions as given (validation rejects non-positive ones).
struct tensor_shape {
  std::vector<std::int64_t> dims;
  bool operator==(const tensor_shape&) const = default;
};

/// Product of the dimensions times the element size, or nullopt if a dimension is not positive
/// or the product does not fit in 64 bits.
[[nodiscard]] std::optional<std::uint64_t> shape_bytes(const tensor_shape& s, dtype t) noexcept;
/// The dimensions as a list: "[1024, 1024]".
[[nodiscard]] std::string to_string(const tensor_shape& s);

/// Parses a byte size as people write it: a whole number of bytes ("9448928051", "4096 B"), or a
/// decimal number with a unit (KiB, MiB, GiB, TiB, kB, MB, GB, TB; case-insensitive, spaces
/// optional) rounded to the nearest byte, half up: "8 MiB", "8.8GiB" (9448928051), "9.5 GB",
/// ".5 KiB". Computed in integers, exact. nullopt for anything else: a sign, an exponent
/// ("1e3GiB"), a fraction of a byte ("1.5", "1.5 B"), more than 19 digits after the point, an
/// unknown unit, more than 2^64 - 1 bytes.
[[nodiscard]] std::optional<std::uint64_t> parse_byte_size(std::string_view text);

/// A size that parse_byte_size() reads, echoed in the unit it was given in, the number as
/// written and the unit spelt as above: "8.8GiB" -> "8.8 GiB", "9.5gb" -> "9.5 GB",
/// "9448928051" -> "9448928051 B". nullopt when parse_byte_size() refuses `text`.
[[nodiscard]] std::optional<std::string> echo_byte_size(std::string_view text);

/// Limits on configuration input, so that no file or --set value can make loading slow or large.
/// Each is documented in docs/configuration.md; going over one is a config_error naming it.
namespace config_limits {
inline constexpr std::size_t file_bytes = 64u << 10;  // a configuration file or --set value
inline constexpr std::size_t key_chars = 64;          // one key name ("num_streams")
inline constexpr std::size_t value_chars = 4096;      // one scalar value (a path, a name)
inline constexpr std::size_t shapes = 64;             // entries of a list of shapes
inline constexpr std::size_t dims = 8;                // dimensions of one shape
inline constexpr std::size_t ratios = 64;             // compute_to_copy, oversubscription.ratios
inline constexpr std::size_t precisions = 16;         // profiler.matmul.precisions
inline constexpr int yaml_depth = 500;  // yaml-cpp's own limit on nesting while parsing
}  // namespace config_limits

/// Where a configuration value came from (file and 1-based line/column, or "--set").
struct source_location {
  std::string source;
  int line = 0;
  int column = 0;
};

struct config {
  struct logging_section {
    log_level level = log_level::info;
  } logging;

  int device = 0;

  /// Steps that hold much of the device's memory (the unified lesson's ballast, oversubscribed
  /// managed memory, the idle allocation) while other processes use the same GPU.
  struct shared_gpu_section {
    /// With other processes on the GPU, the share of its free memory one such step may take; a
    /// step that can shrink does, one that cannot is skipped.
    double free_share = 0.25;
    bool force = false;  // run such steps as asked even beside other processes
  } shared_gpu;

  struct output_section {
    std::string directory = "results";
  } output;

  struct benchmark_section {
    int warmup_iterations = 3;
    int iterations = 20;  // the most samples a figure takes
    int min_samples = 16;
    double max_noise = 0.01;
    double timeout_s = 3.0;

    /// The stopping rule these keys make (core/sampling.hpp); a minimum above the maximum
    /// (iterations: 5 alone) is the maximum.
    [[nodiscard]] stopping_rule rule() const {
      return {warmup_iterations, min_samples < iterations ? min_samples : iterations, iterations,
              max_noise, timeout_s};
    }
  } benchmark;

  struct memory_section {
    bool use_pinned_memory = true;
    /// The caching allocator's options for the lesson's passes: the individual keys
    /// (memory.allocator.expandable_segments, max_split_size_mb, roundup_power2_divisions,
    /// garbage_collection_threshold), then memory.allocator.conf over them, which may hold any
    /// registered key (allocator_keys(): page_release, thread_cache_blocks too). The allocator's
    /// options of it all: parse_allocator_options(conf, options with `policy`)
    /// (memory/caching_allocator.hpp).
    struct allocator_section {
      allocator_policy policy;  // from the individual keys
      std::string conf;         // memory.allocator.conf as written (checked when read)
      /// `policy` with the policy keys of `conf` applied over it.
      [[nodiscard]] allocator_policy effective() const { return apply_policy_keys(conf, policy); }
      /// The conf string of the effective options: effective()'s, then the other keys of `conf`
      /// that change something, as written.
      [[nodiscard]] std::string effective_conf() const;
    } allocator;
  } memory;

  struct transfer_section {
    int num_streams = 4;
    std::vector<tensor_shape> tensor_shapes = {{{1024, 1024}}, {{4096, 4096}}, {{8192, 8192}}};
    dtype element_type = dtype::float32;
    /// Size for the sync-vs-async, staged-upload and cudaHostRegister comparisons.
    std::uint64_t large_copy_bytes = 1ull << 30;
    struct sweep_section {
      /// true, false, or nullopt for "auto": on when the run writes an HTML report (--html).
      std::optional<bool> enabled;
      std::uint64_t min_bytes = 4096;
      std::uint64_t max_bytes = 256ull << 20;
    } sweep;
    struct double_buffer_section {
      bool enabled = true;
      std::vector<double> compute_to_copy = {0.25, 0.5, 1.0, 2.0, 4.0};
      std::uint64_t batch_bytes = 64ull << 20;
      int batches = 32;
      int depth = 2;
    } double_buffer;
    struct staging_section {
      std::uint64_t chunk_bytes = 8ull << 20;
      int buffers = 6;
      int threads = 0;  // 0: one per core, at most 16
      store_mode streaming_stores = store_mode::downloads;
      bool huge_pages = false;
      int pieces_per_thread = 16;  // ranges per thread in each chunk, handed out one at a time
      bool enqueue_while_copying = true;  // upload: a chunk's DMA enqueued during the next copy
      bool variants = true;  // measure the staged copy's variants (the "staging_variants" table)
    } staging;
    struct multi_gpu_section {
      bool enabled = true;
      std::uint64_t peer_bytes = 256ull << 20;
      std::uint64_t nccl_min_bytes = 8;
      std::uint64_t nccl_max_bytes = 1ull << 30;
    } multi_gpu;
  } transfer;

  struct profiler_section {
    int sample_interval_ms = 10;
    int power_interval_ms = 500;  // the sampler's averaged cadence (power)
    struct matmul_section {
      std::vector<tensor_shape> shapes = {{{8192, 8192, 8192}}};
      std::vector<std::string> precisions = {"fp16", "bf16", "tf32", "fp32"};
      int check_size = 256;
      std::uint64_t workspace_bytes = 64ull << 20;
    } matmul;
  } profiler;

  /// `gpu-basics unified`: managed memory, zero-copy, the memory ledger, five beliefs.
  struct unified_section {
    int repetitions = 5;  // the most samples of each zero-copy and belief figure (benchmark rule)
    struct managed_section {
      bool enabled = true;
      std::uint64_t bytes = 512ull << 20;  // each first-touch buffer
    } managed;
    struct oversubscription_section {
      bool enabled = true;
      /// false: a cudaMalloc ballast leaves `free_bytes` free and the ratios are of that; true:
      /// no ballast, the ratios are of all free device memory (host memory must hold the sets).
      bool whole_device = false;
      std::uint64_t free_bytes = 2ull << 30;
      std::vector<double> ratios = {0.5, 0.9, 1.1, 1.5};
      std::uint64_t chunk_bytes = 64ull << 20;
      int passes = 2;
    } oversubscription;
    struct zero_copy_section {
      bool enabled = true;
      std::uint64_t bytes = 256ull << 20;
      int passes = 8;  // the several-passes row
    } zero_copy;
    struct ledger_section {
      bool enabled = true;
    } ledger;
    struct beliefs_section {
      bool enabled = true;
      std::uint64_t copy_bytes = 256ull << 20;  // pin-then-copy and the stale read
      int repeats = 10;                         // transfers of the repeated pin-then-copy case
      std::uint64_t idle_allocation_bytes = 100ull << 30;  // NVML utilisation while idle
      std::uint64_t d2d_max_bytes = 4ull << 30;            // largest working set of the D2D sweep
    } beliefs;
  } unified;

  /// `gpu-basics check`: what it measures and the thresholds of its verdicts. Fractions are of
  /// the ceiling named (the PCIe link's theoretical rate at its maximum generation and width, the
  /// HBM datasheet, the bf16 dense peak); defaults and how they were chosen: docs/verdicts.md,
  /// "Node acceptance".
  struct check_section {
    double h2d_fraction = 0.80;            // pinned H2D / link rate per direction
    double d2h_fraction = 0.80;            // pinned D2H / link rate per direction
    double bidirectional_fraction = 0.70;  // H2D + D2H at once / twice the link rate
    double d2d_fraction = 0.75;            // D2D read + write / HBM datasheet
    double gemm_fraction = 0.65;           // bf16 GEMM / datasheet dense peak
    double warn_margin = 0.03;  // WARN when within this many (fraction) points above a threshold
    std::uint64_t copy_bytes = 256ull << 20;  // bytes per check copy
    int gemm_size = 8192;                     // n of the bf16 n x n x n GEMM
  } check;

  /// Source of every key that was set (keys of list items carry "[i]" / "[i][j]").
  std::map<std::string, source_location> origins;
};

// ---- the table of keys ---------------------------------------------------------------------

namespace detail {
struct key_impl;  // how a key is read, checked and written (src/core/config_detail.hpp)
}  // namespace detail

/// One configuration key: its dotted name, how its value is read and checked, where it lives in
/// `config`, and its documentation. Every key is declared once, in config_schema::builtin()
/// (src/core/config_keys.cpp); reading, --set, validation, the results' JSON and the reference in
/// docs/configuration.md all come from that one entry. The builders below make the common kinds.
class config_key {
 public:
  [[nodiscard]] const std::string& name() const;
  /// What the key accepts, as error messages say it: "an integer in 1..64".
  [[nodiscard]] const std::string& accepts() const;
  [[nodiscard]] const std::string& unit() const;
  [[nodiscard]] const std::string& doc() const;

  explicit config_key(std::shared_ptr<const detail::key_impl> impl);
  [[nodiscard]] const detail::key_impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<const detail::key_impl> impl_;
};

/// An integer key in [lo, hi] stored in `*field(cfg)`. `accepts`: the expectation errors name
/// (default "an integer in lo..hi").
[[nodiscard]] config_key int_key(std::string name, int& (*field)(config&), int lo, int hi,
                                 std::string unit, std::string doc, std::string accepts = "");
/// A byte size in [lo, hi] (an integer or a number with a unit); `example`: as written in the
/// expectation, e.g. "\"8 MiB\"".
[[nodiscard]] config_key size_key(std::string name, std::uint64_t& (*field)(config&),
                                  std::uint64_t lo, std::uint64_t hi, std::string example,
                                  std::string doc);
/// A number in (0, hi], or [0, hi] when `zero_ok`.
[[nodiscard]] config_key fraction_key(std::string name, double& (*field)(config&), bool zero_ok,
                                      double hi, std::string accepts, std::string doc);
/// true or false.
[[nodiscard]] config_key bool_key(std::string name, bool& (*field)(config&), std::string doc);

/// One key's row in the reference: its default as the YAML file would write it.
struct config_key_doc {
  std::string key, default_value, accepts, unit, doc;
};

/// The keys, in the order they are documented, and everything derived from them.
class config_schema {
 public:
  /// The keys of configs/gpu_basics.yaml.
  [[nodiscard]] static const config_schema& builtin();

  /// Adds a key (a lesson's own, or a test's).
  /// @throws logic_error when the name is taken or is a section of other keys.
  void add(config_key key);
  [[nodiscard]] const config_key* find(std::string_view name) const;
  /// True when `prefix` is a section: some key starts with "prefix.".
  [[nodiscard]] bool is_section(std::string_view prefix) const;
  [[nodiscard]] const std::vector<config_key>& keys() const { return keys_; }

  [[nodiscard]] config parse(std::string_view text, std::string_view source_name,
                             const config& base = config{}) const;
  void apply_override(config& cfg, std::string_view assignment) const;
  /// Each key's own check, in the table's order (a relation between keys with the later key).
  void validate(const config& cfg) const;
  [[nodiscard]] nlohmann::json to_json(const config& cfg) const;
  [[nodiscard]] std::vector<config_key_doc> docs() const;
  /// The reference as a Markdown table (key, default, accepts, meaning).
  [[nodiscard]] std::string reference_markdown() const;
  [[nodiscard]] std::optional<std::string> nearest_key(std::string_view key) const;

 private:
  std::vector<config_key> keys_;
};

/// The default configuration file's text, built into the binary.
[[nodiscard]] std::string_view default_config_text() noexcept;

/// Reads a configuration file into a string. Only a regular file of at most
/// config_limits::file_bytes is read; a FIFO, device or directory is refused without blocking.
/// @throws config_error (naming the file) when it is not such a file or cannot be read.
[[nodiscard]] std::string read_config_file(const std::string& path);

/// Parses YAML text over `base` (keys not given keep base's values). `source_name` appears in
/// errors.
/// Keys are nested mappings (dotted keys are for --set only); one YAML document; config_limits.
/// @throws config_error for malformed YAML, unknown, dotted or duplicate keys, wrong types, and
/// input over a limit.
[[nodiscard]] config parse_config(std::string_view text, std::string_view source_name,
                                  const config& base = config{});

/// Applies one `key=value` override (value in YAML syntax). Same parsing as the file; spaces
/// around the key and the '=' are ignored.
/// @throws config_error (source "--set") for a missing '=', an unknown key, a section, or a
/// value of the wrong type.
void apply_override(config& cfg, std::string_view assignment);

/// Checks ranges and sizes.
/// @throws config_error naming the first bad key and where it was set.
void validate(const config& cfg);

/// read → parse → overrides → validate. An empty path means the built-in default.
/// @throws config_error from whichever step fails.
[[nodiscard]] config load_config(const std::string& path,
                                 const std::vector<std::string>& overrides = {});

/// Every known leaf key, dotted ("transfer.num_streams").
[[nodiscard]] std::vector<std::string> known_config_keys();

/// The known key closest to `key` (edit distance), if one is close enough to suggest.
[[nodiscard]] std::optional<std::string> nearest_config_key(std::string_view key);

/// The name in `names` closest to `word` (edit distance, ignoring case) when it is close enough
/// to suggest (at most 2 edits, or a third of the word's length) and is not `word` itself.
[[nodiscard]] std::optional<std::string> nearest_word(std::string_view word,
                                                      const std::vector<std::string>& names);

/// The effective configuration as JSON (for results' environment block).
void to_json(nlohmann::json& j, const config& cfg);

}  // namespace gpu_basics
