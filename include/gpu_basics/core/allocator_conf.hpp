// PYTORCH_CUDA_ALLOC_CONF's syntax, "key:value,key:value" (a value may be a bracketed list,
// "[256:1,512:2,>:4]"), read by one tokenizer (split_conf), and the registry of the keys such a
// string may hold. Each module registers the keys it owns, as PyTorch's
// REGISTER_ALLOCATOR_CONFIG_PARSE_HOOK does, but by an explicit call rather than a static
// initialiser (an object of a static library that nothing references is never linked, and its
// initialisers never run): core registers PyTorch's policy keys below on the registry's first use;
// memory registers the allocator's own keys in register_allocator_keys()
// (memory/caching_allocator.hpp), which its parser calls first.
//
// Also the policy knobs of a PyTorch-style caching allocator, with PyTorch's names and meanings.
// Host-only and in core, so the configuration can check a conf string where it is written
// (memory.allocator.conf) and the allocator can apply it (memory/caching_allocator.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpu_basics {

/// Power-of-two intervals of roundup_power2_divisions: [0, 2 MiB), [2, 4 MiB), ... [32 GiB, inf).
inline constexpr std::size_t kRoundupIntervals = 16;

struct allocator_policy {
  /// PyTorch's max_split_size_mb, in bytes: blocks at least this large are never split for
  /// requests below it, and requests below it never take them; a request at least this large
  /// takes a cached block only if it wastes less than 20 MiB. SIZE_MAX: no limit.
  std::size_t max_split_size = SIZE_MAX;
  /// PyTorch's roundup_power2_divisions: a request in the power-of-two interval i (index 0 up to
  /// 2 MiB, then one per doubling, the last from 32 GiB) is rounded up to the next of
  /// divisions[i] equal steps of that interval; 0 or 1 keep plain 512-byte rounding.
  std::array<std::size_t, kRoundupIntervals> roundup_power2_divisions{};
  /// PyTorch's garbage_collection_threshold (0 = off): with a reserved limit, once reserved
  /// passes this fraction of it, whole cached blocks that have been free longest are returned
  /// before a new segment is requested.
  double garbage_collection_threshold = 0;
  /// PyTorch's expandable_segments: one growable virtual range per stream and pool.
  bool expandable_segments = false;
  /// PyTorch's per_process_memory_fraction (0 = none): reserved may not pass this fraction of
  /// the device's total memory, as torch.cuda.set_per_process_memory_fraction sets it; the
  /// allocator turns it into its reserved limit where the device is known.
  double per_process_memory_fraction = 0;

  bool operator==(const allocator_policy&) const = default;
};

/// One key:value entry of a conf string, spaces around each part trimmed; `position`: the offset
/// of the entry in the string.
struct conf_entry {
  std::string_view key;
  std::string_view value;
  std::size_t position = 0;
  bool operator==(const conf_entry&) const = default;
};

/// The entries of a conf string, in order: split on commas outside brackets, each at its first
/// ':'. Keys are not looked up here. Blank: none.
/// @throws logic_error naming the piece: "allocator conf: 'x': expected key:value", "allocator
/// conf: an empty entry at offset 7 (two commas in a row?)", "allocator conf: '[' at offset 3
/// is never closed".
[[nodiscard]] std::vector<conf_entry> split_conf(std::string_view conf);

/// A key a conf string may hold, as its module registers it.
struct allocator_key {
  std::string name;
  std::string module;   // the module that owns (and applies) it: "core", "memory"
  std::string accepts;  // what a value may be ("True or False")
  /// A valid value other than the default, as to_conf_string writes it back (an ignored key:
  /// one it accepts): docs and tests.
  std::string example;
  /// PyTorch's key that this allocator accepts (its value checked) and ignores.
  bool ignored = false;
  /// Checks a value. @throws logic_error "allocator conf: <name>: expected ..., got '...'".
  std::function<void(std::string_view value)> check;
};

/// Adds a key to the registry (thread-safe).
/// @throws logic_error when a key of that name is registered already.
void register_allocator_key(allocator_key key);
/// Every registered key, in registration order (PyTorch's first).
[[nodiscard]] std::vector<allocator_key> allocator_keys();
/// The registered key of that name, if any.
[[nodiscard]] std::optional<allocator_key> find_allocator_key(std::string_view name);
/// The entries of `conf` (split_conf), each key registered and each value checked by its key.
/// @throws logic_error naming the bad part: split_conf's errors, "allocator conf: unknown key
/// 'x' (known: ...)", or the key's own.
std::vector<conf_entry> check_allocator_conf(std::string_view conf);

/// Applies one entry to the policy when its key is one of the policy's (PyTorch's
/// max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold,
/// expandable_segments, per_process_memory_fraction); false, and `p` unchanged, for any other key.
/// @throws logic_error naming the key and the bad value.
bool apply_policy_key(allocator_policy& p, std::string_view key, std::string_view value);

/// `base` with the policy keys of a conf string applied: "expandable_segments:True,
/// max_split_size_mb:128,roundup_power2_divisions:[256:1,>:4],garbage_collection_threshold:0.6".
/// The whole string is checked (check_allocator_conf); keys of other modules (page_release, ...)
/// and PyTorch's keys that change nothing here (backend:native, release_lock_on_cudamalloc,
/// pinned_*) leave the policy as it is. The allocator's own options: parse_allocator_options.
/// @throws logic_error naming the bad part ("allocator conf: max_split_size_mb: expected an
/// integer > 20 (MiB), got 'x'") for an unknown key, a bad value or bad syntax.
[[nodiscard]] allocator_policy apply_policy_keys(std::string_view conf, allocator_policy base = {});
/// The conf string of what differs from the defaults (empty for defaults), in the syntax
/// apply_policy_keys reads.
[[nodiscard]] std::string to_conf_string(const allocator_policy& p);

/// The reserved limit a per_process_memory_fraction sets on a device of `device_total` bytes,
/// as PyTorch computes it (the fraction times the total, rounded down); SIZE_MAX for no fraction.
[[nodiscard]] std::size_t fraction_limit(double fraction, std::size_t device_total) noexcept;

}  // namespace gpu_basics
