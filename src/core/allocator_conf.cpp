// PYTORCH_CUDA_ALLOC_CONF's syntax. Names and meanings are PyTorch's
// (c10/cuda/CUDAAllocatorConfig).
#include "gpu_basics/core/allocator_conf.hpp"
#include "gpu_basics/core/units.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gpu_basics/core/errors.hpp"

namespace gpu_basics {

namespace {

constexpr std::size_t kMinMaxSplitMb = 20;  // PyTorch: max_split_size_mb must exceed kLargeBuffer

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

[[noreturn]] void bad(std::string_view key, std::string_view expect, std::string_view got) {
  throw logic_error(fmt::format("allocator conf: {}: expected {}, got '{}'", key, expect, got));
}

std::size_t read_uint(std::string_view key, std::string_view v, std::string_view expect) {
  std::size_t n = 0;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || r.ec != std::errc{} || r.ptr != v.data() + v.size()) bad(key, expect, v);
  return n;
}

/// A number, or NaN for anything else (which no range check passes).
double read_double(std::string_view v) {
  double d = 0;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), d);
  return v.empty() || r.ec != std::errc{} || r.ptr != v.data() + v.size() ? std::nan("") : d;
}

bool read_bool(std::string_view key, std::string_view v) {
  if (v == "True" || v == "true" || v == "1") return true;
  if (v == "False" || v == "false" || v == "0") return false;
  bad(key, "True or False", v);
}

/// Splits a list's items on commas outside brackets.
std::vector<std::string_view> split_top(std::string_view s) {
  std::vector<std::string_view> parts;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '[') ++depth;
    if (s[i] == ']') --depth;
    if (s[i] == ',' && depth == 0) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  parts.push_back(s.substr(start));
  return parts;
}

void read_divisions(std::string_view v, allocator_policy& o) {
  constexpr std::string_view key = "roundup_power2_divisions";
  constexpr std::string_view expect_div = "a power of two or 0 (divisions)";
  if (v.empty() || v.front() != '[') {
    const std::size_t d = read_uint(key, v, "a power of two, or a list such as [256:1,>:4]");
    if (d != 0 && !std::has_single_bit(d)) bad(key, expect_div, v);
    o.roundup_power2_divisions.fill(d);
    return;
  }
  if (v.back() != ']') bad(key, "a list closed by ']'", v);
  const std::string_view inner = v.substr(1, v.size() - 2);
  if (trim(inner).empty()) bad(key, "a list of interval:divisions pairs", v);
  bool first = true;
  std::size_t last = 0;
  for (std::string_view item : split_top(inner)) {
    item = trim(item);
    const auto colon = item.find(':');
    if (colon == std::string_view::npos) bad(key, "interval:divisions (e.g. 256:2 or >:4)", item);
    const std::string_view iv = trim(item.substr(0, colon)), dv = trim(item.substr(colon + 1));
    const std::size_t d = read_uint(key, dv, expect_div);
    if (d != 0 && !std::has_single_bit(d)) bad(key, expect_div, dv);
    if (iv == ">") {
      for (std::size_t i = first ? 0 : last + 1; i < kRoundupIntervals; ++i)
        o.roundup_power2_divisions[i] = d;
      last = kRoundupIntervals - 1;
      first = false;
      continue;
    }
    const std::size_t mb = read_uint(key, iv, "an interval start in MiB, a power of two, or '>'");
    if (!std::has_single_bit(mb)) bad(key, "an interval start in MiB that is a power of two", iv);
    const std::size_t index = std::min<std::size_t>(static_cast<std::size_t>(std::countr_zero(mb)),
                                                    kRoundupIntervals - 1);
    if (first) {
      for (std::size_t i = 0; i < index; ++i) o.roundup_power2_divisions[i] = d;
      first = false;
    } else if (index < last) {  // equal: a start past the last interval, clamped as PyTorch does
      bad(key, "interval starts in increasing order", iv);
    }
    o.roundup_power2_divisions[index] = d;
    last = index;
  }
}

}  // namespace

std::vector<conf_entry> split_conf(std::string_view conf) {
  std::vector<conf_entry> entries;
  if (trim(conf).empty()) return entries;
  int depth = 0;
  std::size_t open = 0, start = 0;
  for (std::size_t i = 0; i <= conf.size(); ++i) {
    if (i < conf.size()) {
      if (conf[i] == '[' && depth++ == 0) open = i;
      if (conf[i] == ']' && depth > 0) --depth;  // a stray one: the value's parser says
      if (conf[i] != ',' || depth != 0) continue;
    } else if (depth > 0) {
      throw logic_error(fmt::format("allocator conf: '[' at offset {} is never closed", open));
    }
    const std::string_view raw = conf.substr(start, i - start);
    const std::string_view item = trim(raw);
    const std::size_t at = start + static_cast<std::size_t>(item.data() - raw.data());
    start = i + 1;
    if (item.empty())
      throw logic_error(
          fmt::format("allocator conf: an empty entry at offset {} (two commas in a row?)", at));
    const auto colon = item.find(':');
    if (colon == std::string_view::npos)
      throw logic_error(fmt::format("allocator conf: '{}': expected key:value", item));
    entries.push_back({trim(item.substr(0, colon)), trim(item.substr(colon + 1)), at});
  }
  return entries;
}

bool apply_policy_key(allocator_policy& o, std::string_view key, std::string_view v) {
  if (key == "max_split_size_mb") {
    const std::string_view expect = "an integer > 20 (MiB)";
    const std::size_t mb = read_uint(key, v, expect);
    if (mb <= kMinMaxSplitMb || mb > (SIZE_MAX / kMiB)) bad(key, expect, v);
    o.max_split_size = mb * kMiB;
  } else if (key == "roundup_power2_divisions") {
    allocator_policy p = o;  // all or nothing
    read_divisions(v, p);
    o = p;
  } else if (key == "garbage_collection_threshold") {
    const double t = read_double(v);
    if (!(t > 0 && t < 1)) bad(key, "a fraction strictly between 0 and 1", v);
    o.garbage_collection_threshold = t;
  } else if (key == "per_process_memory_fraction") {
    const double f = read_double(v);
    if (!(f > 0 && f <= 1)) bad(key, "a fraction above 0, at most 1", v);
    o.per_process_memory_fraction = f;
  } else if (key == "expandable_segments") {
    o.expandable_segments = read_bool(key, v);
  } else {
    return false;
  }
  return true;
}

namespace {

struct key_registry {
  std::mutex mutex;
  std::vector<allocator_key> keys;
};

void add_key(key_registry& r, allocator_key k) {
  for (const auto& x : r.keys)
    if (x.name == k.name)
      throw logic_error(fmt::format("allocator conf: key '{}' of {} is registered already by {}",
                                    k.name, k.module, x.module));
  r.keys.push_back(std::move(k));
}

/// Core's keys: PyTorch's policy knobs, and PyTorch's keys that change nothing here.
void register_policy_keys(key_registry& r) {
  const auto policy_key = [&r](std::string name, std::string accepts, std::string example) {
    auto check = [name](std::string_view v) {
      allocator_policy p;
      (void)apply_policy_key(p, name, v);
    };
    add_key(r, {std::move(name), "core", std::move(accepts), std::move(example), false,
                std::move(check)});
  };
  policy_key("max_split_size_mb", "an integer > 20 (MiB)", "128");
  policy_key("roundup_power2_divisions",
             "0, a power of two, or a list by interval start in MiB such as [256:1,>:4]",
             "[1:1,2:1,4:1,8:1,16:1,32:1,64:1,128:1,256:1,>:4]");
  policy_key("garbage_collection_threshold", "a fraction strictly between 0 and 1", "0.6");
  policy_key("expandable_segments", "True or False", "True");
  policy_key("per_process_memory_fraction", "a fraction above 0, at most 1", "0.5");
  const auto ignored = [&r](std::string name, std::string accepts, std::string example,
                            std::function<void(std::string_view)> check) {
    add_key(r, {std::move(name), "core", std::move(accepts), std::move(example), true,
                std::move(check)});
  };
  ignored("backend", "native", "native", [](std::string_view v) {
    if (v != "native") bad("backend", "native (this allocator is the native one)", v);
  });
  for (const char* name :
       {"release_lock_on_cudamalloc", "pinned_use_cuda_host_register", "pinned_use_host_register"})
    ignored(name, "True or False", "True",
            [name](std::string_view v) { (void)read_bool(name, v); });
  ignored("pinned_num_register_threads", "an integer", "4", [](std::string_view v) {
    (void)read_uint("pinned_num_register_threads", v, "an integer");
  });
}

/// The registry, with core's keys registered on its first use.
key_registry& registry() {
  static key_registry r;
  static std::once_flag once;
  std::call_once(once, [] { register_policy_keys(r); });
  return r;
}

}  // namespace

void register_allocator_key(allocator_key key) {
  key_registry& r = registry();
  std::lock_guard lock(r.mutex);
  add_key(r, std::move(key));
}

std::vector<allocator_key> allocator_keys() {
  key_registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.keys;
}

std::optional<allocator_key> find_allocator_key(std::string_view name) {
  key_registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& k : r.keys)
    if (k.name == name) return k;
  return std::nullopt;
}

std::vector<conf_entry> check_allocator_conf(std::string_view conf) {
  const std::vector<conf_entry> entries = split_conf(conf);
  if (entries.empty()) return entries;
  const std::vector<allocator_key> keys = allocator_keys();
  for (const conf_entry& e : entries) {
    const auto k =
        std::find_if(keys.begin(), keys.end(), [&](const auto& x) { return x.name == e.key; });
    if (k == keys.end()) {
      std::vector<std::string_view> names;
      for (const auto& x : keys) names.push_back(x.name);
      throw logic_error(fmt::format("allocator conf: unknown key '{}' (known: {})", e.key,
                                    fmt::join(names, ", ")));
    }
    if (k->check) k->check(e.value);
  }
  return entries;
}

allocator_policy apply_policy_keys(std::string_view conf, allocator_policy base) {
  for (const conf_entry& e : check_allocator_conf(conf))
    (void)apply_policy_key(base, e.key, e.value);
  return base;
}

std::string to_conf_string(const allocator_policy& o) {
  const allocator_policy d;
  std::vector<std::string> parts;
  if (o.expandable_segments != d.expandable_segments)
    parts.push_back(
        fmt::format("expandable_segments:{}", o.expandable_segments ? "True" : "False"));
  if (o.max_split_size != d.max_split_size)
    parts.push_back(fmt::format("max_split_size_mb:{}", o.max_split_size / kMiB));
  if (o.roundup_power2_divisions != d.roundup_power2_divisions) {
    const auto& r = o.roundup_power2_divisions;
    if (std::all_of(r.begin(), r.end(), [&](std::size_t x) { return x == r[0]; })) {
      parts.push_back(fmt::format("roundup_power2_divisions:{}", r[0]));
    } else {
      // Every interval up to the last change, then '>' for the rest (an interval left out of a
      // list keeps its old value, so none may be skipped).
      std::size_t tail = r.size() - 1;
      while (tail > 0 && r[tail - 1] == r.back()) --tail;
      std::string list;
      for (std::size_t i = 0; i < tail; ++i)
        list += fmt::format("{}:{},", std::size_t{1} << i, r[i]);
      list += fmt::format(">:{}", r.back());
      parts.push_back(fmt::format("roundup_power2_divisions:[{}]", list));
    }
  }
  if (o.garbage_collection_threshold != d.garbage_collection_threshold)
    parts.push_back(fmt::format("garbage_collection_threshold:{}", o.garbage_collection_threshold));
  if (o.per_process_memory_fraction != d.per_process_memory_fraction)
    parts.push_back(fmt::format("per_process_memory_fraction:{}", o.per_process_memory_fraction));
  return fmt::format("{}", fmt::join(parts, ","));
}

std::size_t fraction_limit(double fraction, std::size_t device_total) noexcept {
  if (!(fraction > 0)) return SIZE_MAX;
  const double bytes = std::floor(fraction * static_cast<double>(device_total));
  return bytes >= static_cast<double>(SIZE_MAX) ? SIZE_MAX : static_cast<std::size_t>(bytes);
}

}  // namespace gpu_basics
