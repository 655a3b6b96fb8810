// What config.cpp (reading YAML) and config_keys.cpp (the table of keys) share: where a value was
// written, how errors name it, the readers of scalar values, and a key's implementation.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "gpu_basics/core/config.hpp"

namespace gpu_basics::detail {

struct parse_context {
  std::string source;
  std::string key;
  source_location where;
  int key_pos = -1;   // where the key was written (text offset); -1: --set
  std::string alias;  // " (through an alias of line N)" when the value came through one
};

/// Where a key's value was set (its origin), or "<default>".
using where_fn = std::function<source_location(const std::string& key)>;

struct key_impl {
  std::string name;
  std::string accepts;  // "an integer in 1..64": the expectation errors name
  std::string unit;     // "bytes", "ms", ""
  std::string doc;
  /// Reads the value of the key into cfg; fails with the key's context.
  std::function<void(config&, const YAML::Node&, const parse_context&)> read;
  /// Checks the value of the key in a whole configuration (empty: read checks everything).
  std::function<void(const config&, const where_fn&)> check;
  /// The value, for the results' JSON and the reference's default.
  std::function<nlohmann::json(const config&)> value;
  /// false: documented, but not a key of the results' JSON.
  bool in_results = true;
};

source_location location_of(const std::string& source, const YAML::Node& node);
/// The context of `node`, a part of ctx's value named `key` (an alias keeps the key's place).
parse_context part_of(const parse_context& ctx, std::string key, const YAML::Node& node);
[[noreturn]] void fail(const parse_context& ctx, const std::string& message);
[[noreturn]] void fail_at(const source_location& where, const std::string& key,
                          const std::string& message);
/// How a node reads in an error message: `"four"`, `100`, `a list`, `a mapping`, `nothing`.
std::string describe(const YAML::Node& node);
std::string lower(std::string_view s);
std::optional<std::int64_t> scalar_int(const YAML::Node& node);
int read_int(const YAML::Node& node, const parse_context& ctx, std::string_view expectation);
std::uint64_t read_size(const YAML::Node& node, const parse_context& ctx,
                        std::string_view expectation);
bool read_bool(const YAML::Node& node, const parse_context& ctx);
std::string read_string(const YAML::Node& node, const parse_context& ctx,
                        std::string_view expectation);
/// A YAML document from `text` (the value of `key` for --set), within config_limits.
YAML::Node load_document(std::string_view text, const std::string& source, const std::string& key);
/// Walks a mapping of keys under `prefix`, reading each through `schema`.
void walk_map(const config_schema& schema, config& cfg, const YAML::Node& map,
              const std::string& prefix, const std::string& source);
std::string unknown_key_message(const config_schema& schema, const std::string& key);

}  // namespace gpu_basics::detail
