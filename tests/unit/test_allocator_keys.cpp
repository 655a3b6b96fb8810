// Every key of the allocator conf registry, set through each route a user has (the YAML's
// memory.allocator.conf, --policy of replay and advise, GPU_BASICS_ALLOC_CONF) and read back in
// the allocator options it gives. The keys come from the registry: a new key is covered as soon
// as it is registered, and fails here until every route applies it. The Python package's route
// (configure, then conf) is python/tests/test_cpu.py's, over the same registry.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gpu_basics/core/allocator_conf.hpp"
#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/snapshot/policy_sweep.hpp"

namespace gb = gpu_basics;

namespace {

std::vector<gb::allocator_key> registered_keys() {
  gb::register_allocator_keys();
  return gb::allocator_keys();
}

/// GPU_BASICS_ALLOC_CONF set for the scope, as it was after.
class scoped_env {
 public:
  explicit scoped_env(const std::string& value) {
    if (const char* old = std::getenv(gb::kAllocConfEnv)) old_ = old;
    ::setenv(gb::kAllocConfEnv, value.c_str(), 1);
  }
  ~scoped_env() {
    if (old_)
      ::setenv(gb::kAllocConfEnv, old_->c_str(), 1);
    else
      ::unsetenv(gb::kAllocConfEnv);
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  std::optional<std::string> old_;
};

std::string yaml_with_conf(const std::string& conf) {
  return "memory:\n  allocator:\n    conf: \"" + conf + "\"\n";
}

struct route {
  const char* name;
  std::function<gb::allocator_options(const std::string& conf)> options_of;
};

/// The routes, each from a conf string to the allocator options that route gives.
const std::vector<route>& routes() {
  static const std::vector<route> all = {
      {"YAML memory.allocator.conf",
       [](const std::string& conf) {
         const gb::config c = gb::parse_config(yaml_with_conf(conf), "keys.yaml");
         return gb::allocator_options_of(c.memory.allocator.policy, c.memory.allocator.conf);
       }},
      {"--policy", [](const std::string& conf) { return gb::parse_user_policy(conf); }},
      {"GPU_BASICS_ALLOC_CONF",
       [](const std::string& conf) {
         const scoped_env env(conf);
         return gb::allocator_options_from_environment();
       }},
  };
  return all;
}

}  // namespace

TEST(AllocatorKeys, RegistryHoldsEveryKeyOfTheAllocatorOptions) {
  std::vector<std::string> names;
  for (const auto& k : registered_keys()) {
    names.push_back(k.name);
    EXPECT_FALSE(k.accepts.empty()) << k.name;
    EXPECT_FALSE(k.example.empty()) << k.name;
    EXPECT_TRUE(k.check) << k.name;
    EXPECT_TRUE(k.module == "core" || k.module == "memory") << k.name << ": " << k.module;
  }
  // One per field of allocator_options a conf string sets (reserved_limit and history_capacity
  // have their own calls: set_reserved_limit, set_history_capacity), and PyTorch's ignored ones.
  for (const char* want :
       {"max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold",
        "expandable_segments", "page_release", "thread_cache_blocks", "backend",
        "release_lock_on_cudamalloc", "pinned_use_cuda_host_register", "pinned_use_host_register",
        "pinned_num_register_threads"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  EXPECT_THROW(gb::register_allocator_key({"page_release", "test", "x", "x", false, {}}),
               gb::logic_error);
  // Registering twice is harmless (every entry point calls it).
  gb::register_allocator_keys();
  EXPECT_EQ(gb::allocator_keys().size(), names.size());
}

TEST(AllocatorKeys, EveryKeyIsSetAndReadBackThroughEveryRoute) {
  const gb::allocator_options defaults;
  for (const auto& k : registered_keys()) {
    const std::string conf = k.name + ":" + k.example;
    const gb::allocator_options direct = gb::parse_allocator_options(conf);
    // What the allocator's options hold, written back: the key and its example, alone.
    EXPECT_EQ(gb::to_conf_string(direct), k.ignored ? "" : conf) << conf;
    if (k.ignored)
      EXPECT_EQ(direct, defaults) << conf;
    else
      EXPECT_NE(direct, defaults) << conf << ": the example changes nothing";
    for (const route& r : routes()) {
      SCOPED_TRACE(std::string(r.name) + " " + conf);
      gb::allocator_options o;
      ASSERT_NO_THROW(o = r.options_of(conf));
      EXPECT_EQ(o, direct);
      EXPECT_EQ(gb::to_conf_string(o), k.ignored ? "" : conf);
    }
    // The configuration reports the key in its effective conf (results' memory.allocator.conf).
    const gb::config c = gb::parse_config(yaml_with_conf(conf), "keys.yaml");
    EXPECT_EQ(c.memory.allocator.effective_conf(), k.ignored ? "" : conf);
  }
}

TEST(AllocatorKeys, EveryKeysBadValueIsRefusedByEveryRouteNamingTheKey) {
  for (const auto& k : registered_keys()) {
    const std::string conf = k.name + ":not-a-value";
    for (const route& r : routes()) {
      SCOPED_TRACE(std::string(r.name) + " " + conf);
      try {
        (void)r.options_of(conf);
        ADD_FAILURE() << "accepted";
      } catch (const std::exception& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find(k.name), std::string::npos) << m;
        EXPECT_NE(m.find("not-a-value"), std::string::npos) << m;
        if (std::string(r.name) == "GPU_BASICS_ALLOC_CONF") {
          EXPECT_EQ(m.rfind("GPU_BASICS_ALLOC_CONF: ", 0), 0u) << m;
        }
        if (std::string(r.name).starts_with("YAML")) {
          EXPECT_EQ(m.rfind("keys.yaml:3", 0), 0u) << m;
        }
      }
    }
  }
}

TEST(AllocatorKeys, AllKeysTogetherAndTheLastOfARepeatedKeyWins) {
  std::string all;
  for (const auto& k : registered_keys())
    all += (all.empty() ? "" : ",") + k.name + ":" + k.example;
  const gb::allocator_options o = gb::parse_allocator_options(all);
  for (const route& r : routes()) EXPECT_EQ(r.options_of(all), o) << r.name;
  EXPECT_EQ(gb::parse_allocator_options(gb::to_conf_string(o)), o);
  EXPECT_EQ(gb::parse_allocator_options("thread_cache_blocks:3,thread_cache_blocks:0")
                .thread_cache_blocks,
            0u);
  EXPECT_EQ(gb::parse_allocator_options("thread_cache_blocks:64").thread_cache_blocks, 64u);
  EXPECT_THROW((void)gb::parse_allocator_options("thread_cache_blocks:65"), gb::logic_error);
}

TEST(AllocatorKeys, SplitConfNamesTheOffendingPiece) {
  const auto e = gb::split_conf(" a:1 , b:[1:2,>:4],c: x ");
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0], (gb::conf_entry{"a", "1", 1}));
  EXPECT_EQ(e[1], (gb::conf_entry{"b", "[1:2,>:4]", 7}));
  EXPECT_EQ(e[2], (gb::conf_entry{"c", "x", 19}));
  EXPECT_TRUE(gb::split_conf("  ").empty());
  const auto error = [](std::string_view conf) {
    try {
      (void)gb::split_conf(conf);
    } catch (const gb::logic_error& x) {
      return std::string(x.what());
    }
    return std::string();
  };
  EXPECT_EQ(error("a:1,,b:2"), "allocator conf: an empty entry at offset 4 (two commas in a row?)");
  EXPECT_EQ(error("a:1,bee"), "allocator conf: 'bee': expected key:value");
  EXPECT_EQ(error("a:[1:2,b:3"), "allocator conf: '[' at offset 2 is never closed");
  EXPECT_EQ(error("x]y"), "allocator conf: 'x]y': expected key:value");
  // An unknown key names itself and the known ones.
  try {
    (void)gb::parse_allocator_options("page_releas:eager");
    ADD_FAILURE();
  } catch (const gb::logic_error& x) {
    const std::string m = x.what();
    EXPECT_NE(m.find("unknown key 'page_releas'"), std::string::npos) << m;
    EXPECT_NE(m.find("page_release, thread_cache_blocks"), std::string::npos) << m;
  }
}
