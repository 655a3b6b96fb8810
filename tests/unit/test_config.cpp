#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>

#include <nlohmann/json.hpp>

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/json.hpp"

using namespace gpu_basics;

namespace {
std::string repo_file(const std::string& rel) {
  return std::string(GPU_BASICS_SOURCE_DIR) + "/" + rel;
}

nlohmann::json as_json(const config& c) {
  return nlohmann::json(c);
}

config load_text(const std::string& yaml) {
  config c = parse_config(yaml, "test.yaml");
  validate(c);
  return c;
}
}  // namespace

TEST(Config, ShippedFileParsesValidatesAndMatchesBuiltInDefaults) {
  const config from_file = load_config(repo_file("configs/gpu_basics.yaml"));
  EXPECT_EQ(as_json(from_file), as_json(config{}));
  const config built_in = load_config("");
  EXPECT_EQ(as_json(built_in), as_json(config{}));
  EXPECT_EQ(read_config_file(repo_file("configs/gpu_basics.yaml")),
            std::string(default_config_text()));
}

TEST(Config, EveryKnownKeyIsInTheShippedFile) {
  const std::string text(default_config_text());
  for (const auto& key : known_config_keys()) {
    const auto leaf = key.substr(key.rfind('.') + 1);
    EXPECT_NE(text.find(leaf + ":"), std::string::npos) << key << " is not documented in the file";
  }
}

TEST(Config, PartialConfigKeepsDefaults) {
  const config c = load_text("transfer:\n  num_streams: 8\n");
  EXPECT_EQ(c.transfer.num_streams, 8);
  EXPECT_EQ(c.transfer.tensor_shapes, config{}.transfer.tensor_shapes);
  EXPECT_EQ(c.benchmark.iterations, config{}.benchmark.iterations);
  EXPECT_TRUE(c.memory.use_pinned_memory);
  EXPECT_EQ(c.origins.at("transfer.num_streams").line, 2);
}

TEST(Config, EmptyTextAndEmptySectionGiveDefaults) {
  EXPECT_EQ(as_json(load_text("")), as_json(config{}));
  EXPECT_EQ(as_json(load_text("transfer:\n")), as_json(config{}));
  EXPECT_EQ(as_json(load_text("# only a comment\n")), as_json(config{}));
}

TEST(Config, ValuesOfEveryTypeParse) {
  const config c = load_text(
      "logging: {level: DEBUG}\ndevice: 1\noutput: {directory: out/x}\n"
      "benchmark: {warmup_iterations: 0, iterations: 7}\nmemory: {use_pinned_memory: false}\n"
      "transfer: {num_streams: 64, dtype: BF16, tensor_shapes: [[3], [2, 3, 4]]}\n");
  EXPECT_EQ(c.logging.level, log_level::debug);
  EXPECT_EQ(c.device, 1);
  EXPECT_EQ(c.output.directory, "out/x");
  EXPECT_EQ(c.benchmark.warmup_iterations, 0);
  EXPECT_EQ(c.benchmark.iterations, 7);
  EXPECT_FALSE(c.memory.use_pinned_memory);
  EXPECT_EQ(c.transfer.num_streams, 64);
  EXPECT_EQ(c.transfer.element_type, dtype::bfloat16);
  ASSERT_EQ(c.transfer.tensor_shapes.size(), 2u);
  EXPECT_EQ(c.transfer.tensor_shapes[1].dims, (std::vector<std::int64_t>{2, 3, 4}));
  EXPECT_EQ(*shape_bytes(c.transfer.tensor_shapes[1], c.transfer.element_type), 48u);
}

TEST(Config, LogLevelIsCaseInsensitive) {
  for (const char* s : {"trace", "Debug", "INFO", "Warn", "error", "WARNING"})
    EXPECT_TRUE(parse_log_level(s).has_value()) << s;
  EXPECT_FALSE(parse_log_level("verbose").has_value());
}

TEST(Config, StreamingStoresTakeADirectionAndTheOldBooleans) {
  const std::pair<const char*, store_mode> cases[] = {{"off", store_mode::off},
                                                      {"Uploads", store_mode::uploads},
                                                      {"downloads", store_mode::downloads},
                                                      {"both", store_mode::both},
                                                      {"true", store_mode::both},
                                                      {"yes", store_mode::both},
                                                      {"on", store_mode::both},
                                                      {"no", store_mode::off},
                                                      {"false", store_mode::off}};
  for (const auto& [text, mode] : cases) {
    const config c =
        load_text(std::string("transfer:\n  staging:\n    streaming_stores: ") + text + "\n");
    EXPECT_EQ(c.transfer.staging.streaming_stores, mode) << text;
    EXPECT_EQ(parse_store_mode(to_string(c.transfer.staging.streaming_stores)), mode);
  }
  EXPECT_TRUE(streams_uploads(store_mode::both) && streams_downloads(store_mode::both));
  EXPECT_TRUE(streams_uploads(store_mode::uploads) && !streams_downloads(store_mode::uploads));
  EXPECT_TRUE(!streams_uploads(store_mode::downloads) && streams_downloads(store_mode::downloads));
  EXPECT_TRUE(!streams_uploads(store_mode::off) && !streams_downloads(store_mode::off));

  // In results: the name; true and false from files written before the mode had a direction.
  EXPECT_EQ(nlohmann::json(store_mode::downloads), "downloads");
  EXPECT_EQ(nlohmann::json(true).get<store_mode>(), store_mode::both);
  EXPECT_EQ(nlohmann::json(false).get<store_mode>(), store_mode::off);
  EXPECT_EQ(nlohmann::json("uploads").get<store_mode>(), store_mode::uploads);
  for (const nlohmann::json& bad : {nlohmann::json("sideways"), nlohmann::json(1)}) {
    store_mode m{};
    try {
      read_json(bad, m);
      ADD_FAILURE() << bad.dump();
    } catch (const json_path_error& e) {
      EXPECT_NE(std::string(e.what()).find("expected off, uploads, downloads or both, got"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(Config, OverridesApplyWithTheSameParsing) {
  config c = parse_config(default_config_text(), "<built-in>");
  apply_override(c, "transfer.num_streams=8");
  apply_override(c, "transfer.tensor_shapes=[[16, 16]]");
  apply_override(c, "memory.use_pinned_memory=false");
  apply_override(c, "logging.level=warn");
  validate(c);
  EXPECT_EQ(c.transfer.num_streams, 8);
  EXPECT_EQ(c.transfer.tensor_shapes, (std::vector<tensor_shape>{{{16, 16}}}));
  EXPECT_FALSE(c.memory.use_pinned_memory);
  EXPECT_EQ(c.logging.level, log_level::warn);
  EXPECT_EQ(c.origins.at("transfer.num_streams").source, "--set");
}

struct bad_override {
  const char* assignment;
  const char* message;
};

TEST(Config, BadOverridesNameTheKey) {
  const bad_override cases[] = {
      {"transfer.num_streams=100",
       "--set: transfer.num_streams: expected an integer in 1..64, got 100"},
      {"transfer.num_streams=four",
       "--set: transfer.num_streams: expected an integer in 1..64, got \"four\""},
      {"transfer.num_stream=4",
       "--set: transfer.num_stream: unknown key; did you mean 'transfer.num_streams'?"},
      {"no_equals_sign", "--set: expected key=value, got \"no_equals_sign\""},
      {"transfer=4", "--set: transfer: is a section"},
      {"transfer.tensor_shapes=[[1, 2]", "--set: transfer.tensor_shapes: invalid YAML value"},
      {"transfer.num streams=8", "--set: a key with a space in it: \"transfer.num streams\""},
      {" =8", "--set: expected key=value, got \" =8\""},
      {"device=0\n---\n1", "--set: device: a second YAML document"},
      {"transfer.dtype=\"\\e]0;title\\a\"", "got \"\\x1b]0;title\\x07\""},
  };
  for (const auto& bc : cases) {
    config c;
    try {
      apply_override(c, bc.assignment);
      validate(c);
      ADD_FAILURE() << bc.assignment << " was accepted";
    } catch (const config_error& e) {
      EXPECT_NE(std::string(e.what()).find(bc.message), std::string::npos)
          << bc.assignment << " gave: " << e.what();
    }
  }
}

struct bad_input {
  const char* name;
  std::string yaml;
  const char* key;  // the key the error must name ("" = none: malformed YAML)
  int line;
  const char* message;  // a substring of the message
};

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

class BadConfig : public ::testing::TestWithParam<bad_input> {};

TEST_P(BadConfig, OneErrorNamingFileLineAndKey) {
  const bad_input& b = GetParam();
  try {
    (void)load_text(b.yaml);
    FAIL() << b.name << ": accepted";
  } catch (const config_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.source(), "test.yaml") << what;
    EXPECT_EQ(e.line(), b.line) << what;
    EXPECT_EQ(e.key(), b.key) << what;
    EXPECT_NE(what.find(b.message), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "more than one line: " << what;
    EXPECT_EQ(what.rfind("test.yaml:" + std::to_string(b.line) + ":", 0), 0u) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Inputs, BadConfig,
    ::testing::Values(
        bad_input{"malformed", "transfer:\n  num_streams: [1, 2\n", "", 3, "invalid YAML"},
        bad_input{"malformed_indent", "transfer:\n  num_streams: 4\n dtype: float32\n", "", 3,
                  "invalid YAML"},
        bad_input{"unknown_section", "transfr:\n  num_streams: 4\n", "transfr", 1,
                  "did you mean 'transfer'?"},
        bad_input{"unknown_key", "transfer:\n  num_stream: 4\n", "transfer.num_stream", 2,
                  "unknown key; did you mean 'transfer.num_streams'?"},
        bad_input{"key_in_wrong_section", "memory:\n  num_streams: 4\n", "memory.num_streams", 2,
                  "did you mean 'transfer.num_streams'?"},
        bad_input{"nccl_range_inverted",
                  "transfer:\n  multi_gpu:\n    nccl_min_bytes: 1 MiB\n    nccl_max_bytes: 4 KiB\n",
                  "transfer.multi_gpu.nccl_max_bytes", 4,
                  "must be at least transfer.multi_gpu.nccl_min_bytes (1048576)"},
        bad_input{"peer_bytes_too_small", "transfer:\n  multi_gpu:\n    peer_bytes: 4 KiB\n",
                  "transfer.multi_gpu.peer_bytes", 3, "expected a size in 1 MiB..4 GiB"},
        bad_input{"multi_gpu_enabled_not_bool", "transfer:\n  multi_gpu:\n    enabled: maybe\n",
                  "transfer.multi_gpu.enabled", 3, "maybe"},
        bad_input{"wrong_type", "transfer:\n  num_streams: four\n", "transfer.num_streams", 2,
                  "expected an integer in 1..64, got \"four\""},
        bad_input{"float_for_int", "transfer:\n  num_streams: 2.5\n", "transfer.num_streams", 2,
                  "expected an integer in 1..64, got 2.5"},
        bad_input{"int_overflow", "transfer:\n  num_streams: 99999999999\n", "transfer.num_streams",
                  2, "got 99999999999"},
        bad_input{"streams_zero", "transfer:\n  num_streams: 0\n", "transfer.num_streams", 2,
                  "expected an integer in 1..64, got 0"},
        bad_input{"streams_too_many", "\ntransfer:\n  num_streams: 65\n", "transfer.num_streams", 3,
                  "expected an integer in 1..64, got 65"},
        bad_input{"list_for_int", "transfer:\n  num_streams: [4]\n", "transfer.num_streams", 2,
                  "got a list"},
        bad_input{
            "zero_dimension", "transfer:\n  tensor_shapes:\n    - [1024, 1024]\n    - [1024, 0]\n",
            "transfer.tensor_shapes[1][1]", 4, "expected a positive integer dimension, got 0"},
        bad_input{"negative_dimension", "transfer:\n  tensor_shapes: [[-5, 3]]\n",
                  "transfer.tensor_shapes[0][0]", 2, "got -5"},
        bad_input{"shape_bytes_overflow",
                  "transfer:\n  tensor_shapes: [[4294967296, 4294967296]]\n",
                  "transfer.tensor_shapes[0]", 2, "larger than 2^64 bytes"},
        bad_input{"shapes_not_a_list", "transfer:\n  tensor_shapes: 5\n", "transfer.tensor_shapes",
                  2, "expected a list of shapes"},
        bad_input{"shapes_empty", "transfer:\n  tensor_shapes: []\n", "transfer.tensor_shapes", 2,
                  "got an empty list"},
        bad_input{"shape_not_a_list", "transfer:\n  tensor_shapes: [5, 6]\n",
                  "transfer.tensor_shapes[0]", 2, "expected a shape"},
        bad_input{"dimension_not_a_number", "transfer:\n  tensor_shapes: [[1024, x]]\n",
                  "transfer.tensor_shapes[0][1]", 2, "got \"x\""},
        bad_input{"bad_dtype", "transfer:\n  dtype: float13\n", "transfer.dtype", 2,
                  "expected one of float32, float16"},
        bad_input{"bad_store_mode", "transfer:\n  staging:\n    streaming_stores: sideways\n",
                  "transfer.staging.streaming_stores", 3,
                  "expected off, uploads, downloads or both (true: both), got \"sideways\""},
        bad_input{"bad_log_level", "logging:\n  level: loud\n", "logging.level", 2,
                  "expected one of trace, debug, info, warn, error, got \"loud\""},
        bad_input{"bad_bool", "memory:\n  use_pinned_memory: maybe\n", "memory.use_pinned_memory",
                  2, "expected true or false, got \"maybe\""},
        bad_input{"duplicate_key", "device: 0\ndevice: 1\n", "device", 2,
                  "duplicate key (first given at line 1)"},
        bad_input{"section_not_a_mapping", "transfer: 5\n", "transfer", 1,
                  "expected a mapping of transfer.* keys"},
        bad_input{"top_level_not_a_mapping", "- a\n- b\n", "", 1,
                  "expected a mapping of keys at the top level"},
        bad_input{"negative_device", "device: -1\n", "device", 1, "expected a device index"},
        bad_input{"zero_iterations", "benchmark:\n  iterations: 0\n", "benchmark.iterations", 2,
                  "expected an integer in 1..100000, got 0"},
        bad_input{"directory_not_a_string", "output:\n  directory: [a, b]\n", "output.directory", 2,
                  "expected a directory path, got a list"},
        bad_input{"empty_value", "transfer:\n  num_streams:\n", "transfer.num_streams", 2,
                  "got nothing"},
        bad_input{"plus_minus_zero", "device: +-0\n", "device", 1, "got \"+-0\""},
        bad_input{"dotted_key", "transfer.num_streams: 8\n", "transfer.num_streams", 1,
                  "a dotted key; in a file, nest it: 'transfer:' with 'num_streams: ...'"},
        bad_input{"dotted_key_in_section", "transfer:\n  sweep.enabled: true\n",
                  "transfer.sweep.enabled", 2, "a dotted key"},
        bad_input{"second_document", "device: 0\n---\ndevice: 1\n", "", 2,
                  "a second YAML document"},
        bad_input{"only_document_markers", "---\n---\ndevice: 1\n", "", 2,
                  "a second YAML document"},
        bad_input{"key_too_long", "transfer:\n  " + std::string(100, 'k') + ": 1\n", "transfer", 2,
                  "a key of 100 characters, \"kkkkkkkkkkkkkkkkkkkkkkkk\"... (100 characters); a "
                  "key name is at most 64"},
        bad_input{"key_over_yaml_limit", std::string(1100, 'k') + ": 1\n", "", 1,
                  "invalid YAML: a ':' where no value can start: a key longer than 1024"},
        bad_input{"value_too_long", "transfer:\n  dtype: " + std::string(5000, 'x') + "\n",
                  "transfer.dtype", 2, "a value of 5000 characters"},
        bad_input{"too_deep", "device: " + std::string(600, '[') + std::string(600, ']') + "\n", "",
                  1, "invalid YAML: nested more than 500 levels deep"},
        bad_input{"too_many_shapes",
                  "transfer:\n  tensor_shapes: [" + repeat("[1], ", 64) + "[1]]\n",
                  "transfer.tensor_shapes", 2, "a list of 65 shapes; at most 64 are allowed"},
        bad_input{"too_many_dims", "transfer:\n  tensor_shapes: [[1, 1, 1, 1, 1, 1, 1, 1, 1]]\n",
                  "transfer.tensor_shapes[0]", 2, "a list of 9 dimensions; at most 8"},
        bad_input{
            "too_many_ratios",
            "transfer:\n  double_buffer:\n    compute_to_copy: [" + repeat("1, ", 64) + "1]\n",
            "transfer.double_buffer.compute_to_copy", 3, "a list of 65 ratios; at most 64"},
        bad_input{"too_many_precisions",
                  "profiler:\n  matmul:\n    precisions: [" + repeat("fp16, ", 16) + "fp32]\n",
                  "profiler.matmul.precisions", 3, "a list of 17 precisions; at most 16"},
        bad_input{"control_characters", "transfer:\n  dtype: \"\\e[31m\\0x\"\n", "transfer.dtype",
                  2, "got \"\\x1b[31m\\x00x\""},
        bad_input{"nul_byte", std::string("device: 0\ntransfer:\0\n", 20), "", 2,
                  "a control character (\\x00) in the text"},
        bad_input{"unclosed_list", "transfer:\n  tensor_shapes: [[1, 2]\n", "", 3,
                  "invalid YAML: a '[' without its ']'"},
        bad_input{"value_through_alias", "transfer:\n  dtype: &a float32\n  num_streams: *a\n",
                  "transfer.num_streams", 3, "got \"float32\" (through an alias of line 2)"},
        bad_input{"shape_through_alias",
                  "transfer:\n  tensor_shapes: &s [[1, 2]]\nprofiler:\n  matmul:\n    shapes: *s\n",
                  "profiler.matmul.shapes[0]", 5,
                  "expected 3 dimensions, got 2 (through an alias of line 2)"}),
    [](const ::testing::TestParamInfo<bad_input>& p) { return std::string(p.param.name); });

TEST(Config, ErrorColumnPointsAtTheValue) {
  try {
    (void)load_text("transfer:\n  num_streams: four\n");
    FAIL();
  } catch (const config_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "test.yaml:2:16: transfer.num_streams: expected an integer in 1..64, got \"four\"");
  }
}

TEST(Config, MissingFileIsAConfigErrorNamingIt) {
  try {
    (void)load_config("/nonexistent/dir/gpu_basics.yaml");
    FAIL();
  } catch (const config_error& e) {
    EXPECT_EQ(e.source(), "/nonexistent/dir/gpu_basics.yaml");
    EXPECT_NE(std::string(e.what()).find("cannot read the configuration file"), std::string::npos);
  }
}

TEST(Config, NearestKeySuggestsOnlyCloseNames) {
  EXPECT_EQ(nearest_config_key("transfer.num_streem"), "transfer.num_streams");
  EXPECT_EQ(nearest_config_key("logging.levl"), "logging.level");
  EXPECT_FALSE(nearest_config_key("completely.unrelated_thing").has_value());
}

TEST(Config, ShapeBytes) {
  EXPECT_EQ(shape_bytes({{8192, 8192}}, dtype::float32), 268435456u);
  EXPECT_EQ(shape_bytes({{3, 5}}, dtype::float16), 30u);
  EXPECT_FALSE(shape_bytes({{}}, dtype::float32).has_value());
  EXPECT_FALSE(shape_bytes({{0, 4}}, dtype::float32).has_value());
  EXPECT_FALSE(shape_bytes({{1LL << 62, 4}}, dtype::float32).has_value());
  EXPECT_FALSE(shape_bytes({{1LL << 61}}, dtype::int64).has_value());  // exactly 2^64
  EXPECT_EQ(shape_bytes({{1LL << 60}}, dtype::int64), 1ull << 63);
}

TEST(Config, OverridesTolerateSpacesAroundTheEqualsSign) {
  config c;
  apply_override(c, "transfer.num_streams = 8");
  apply_override(c, "  device=1 ");
  EXPECT_EQ(c.transfer.num_streams, 8);
  EXPECT_EQ(c.device, 1);
  EXPECT_EQ(c.origins.at("transfer.num_streams").source, "--set");
}

TEST(Config, LongKeysAreRejectedBeforeTheNearestKeySearch) {
  const std::string key(10u << 20, 'k');  // 10 MiB
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(nearest_config_key(key).has_value());
  config c;
  try {
    apply_override(c, key + "=1");
    FAIL();
  } catch (const config_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("a key of 10485760 characters"), std::string::npos) << what.substr(0, 200);
    EXPECT_LT(what.size(), 200u);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST(Config, TextOverTheSizeLimitIsRejectedUnparsed) {
  const std::string text = "x: [" + std::string(config_limits::file_bytes, '1') + "]\n";
  try {
    (void)parse_config(text, "big.yaml");
    FAIL();
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 64 KiB (65536 bytes)"), std::string::npos)
        << e.what();
  }
}

TEST(Config, AWholeFileOfShapesLoadsInUnderASecond) {
  // The worst a file under the limit can do: as many list entries as fit.
  std::string text = "transfer:\n  tensor_shapes: [";
  while (text.size() + 4 < config_limits::file_bytes) text += "1, ";
  text += "1]\n";
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW((void)parse_config(text, "many.yaml"), config_error);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

namespace {
/// The message of the config_error that reading `path` throws ("" if none).
std::string read_error(const std::string& path) {
  try {
    (void)read_config_file(path);
  } catch (const config_error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Config, OnlyARegularFileOfBoundedSizeIsRead) {
  const std::string dir = ::testing::TempDir() + "config_files";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  EXPECT_EQ(read_error(dir), dir + ": is a directory, not a configuration file");
  EXPECT_EQ(read_error("/dev/zero"),
            "/dev/zero: is not a regular file (a device, FIFO or socket); give a YAML file");
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();  // a FIFO with no writer: no wait
  EXPECT_EQ(read_error(fifo),
            fifo + ": is not a regular file (a device, FIFO or socket); give a YAML file");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  const std::string big = dir + "/big.yaml";
  std::ofstream(big) << std::string(config_limits::file_bytes + 1, '#');
  EXPECT_EQ(read_error(big), big +
                                 ": the configuration file is 65537 bytes; at most 64 KiB "
                                 "(65536 bytes) is read");
  const std::string fits = dir + "/fits.yaml";
  std::ofstream(fits) << std::string(config_limits::file_bytes, '#');
  EXPECT_EQ(read_config_file(fits).size(), config_limits::file_bytes);
  std::filesystem::remove_all(dir);
}

TEST(Config, MessagesQuoteCutAndEscapeValues) {
  EXPECT_EQ(quote_for_message("four"), "\"four\"");
  EXPECT_EQ(quote_for_message("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(quote_for_message(std::string("\x1b[2J\0\n\t", 7)), "\"\\x1b[2J\\x00\\n\\t\"");
  EXPECT_EQ(quote_for_message("abcdef", 3), "\"abc\"... (6 characters)");
  EXPECT_EQ(quote_for_message("gr\xc3\xb6\xc3\x9f"
                              "e"),
            "\"gr\xc3\xb6\xc3\x9f"
            "e\"");  // UTF-8 kept
  EXPECT_EQ(quote_for_message("\xc2\x9b"
                              "1m"),
            "\"\\xc2\\x9b1m\"");                               // C1 control (CSI)
  EXPECT_EQ(quote_for_message("\xff\xc3"), "\"\\xff\\xc3\"");  // not UTF-8
  EXPECT_EQ(printable("a\nb"), "a\\nb");
}

TEST(Config, EndlessEmptyDocumentsStopAtTheSecond) {
  // Found by the fuzzer: yaml-cpp reads endless empty documents from this text, and loading all
  // of them ran out of memory. Now parsing stops at the second document.
  std::ifstream in(repo_file("fuzz/corpus/config/regress_endless_documents_no_nul"),
                   std::ios::binary);
  const std::string input((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(input.size(), 1u);
  const auto start = std::chrono::steady_clock::now();
  try {
    (void)parse_config(std::string_view(input).substr(1), "test.yaml");  // byte 0: the harness's
    FAIL();
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("a second YAML document"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

// ---- the table of keys -------------------------------------------------------------------------

TEST(ConfigTable, ShippedFileSetsEveryKeyOfTheTable) {
  const config c = parse_config(std::string(default_config_text()), "gpu_basics.yaml");
  for (const auto& k : config_schema::builtin().keys())
    EXPECT_TRUE(c.origins.count(k.name())) << k.name() << " is not set in configs/gpu_basics.yaml";
}

TEST(ConfigTable, AKeyAddedToTheTableIsReadCheckedSetSerialisedAndDocumented) {
  config_schema s = config_schema::builtin();
  s.add(int_key(
      "lesson.unified.fault_batches", +[](config& c) -> int& { return c.benchmark.iterations; }, 1,
      7, "", "a key of a lesson to come"));
  config c = s.parse("lesson:\n  unified:\n    fault_batches: 5\n", "t.yaml");
  EXPECT_EQ(c.benchmark.iterations, 5);
  EXPECT_EQ(c.origins.at("lesson.unified.fault_batches").line, 3);

  const config bad = s.parse("lesson:\n  unified:\n    fault_batches: 9\n", "t.yaml");
  try {
    s.validate(bad);
    ADD_FAILURE() << "9 is outside 1..7";
  } catch (const config_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "t.yaml:3:20: lesson.unified.fault_batches: expected an integer in 1..7, got 9");
  }
  try {
    (void)s.parse("lesson:\n  unified:\n    fault_batch: 2\n", "t.yaml");
    ADD_FAILURE() << "a misspelt key was accepted";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'lesson.unified.fault_batches'"),
              std::string::npos)
        << e.what();
  }
  s.apply_override(c, "lesson.unified.fault_batches=6");
  EXPECT_EQ(c.benchmark.iterations, 6);
  EXPECT_EQ(s.to_json(c)["lesson"]["unified"]["fault_batches"], 6);
  EXPECT_NE(s.reference_markdown().find(
                "| `lesson.unified.fault_batches` | `20` | an integer in 1..7 | a key of a lesson "
                "to come |"),
            std::string::npos)
      << s.reference_markdown();

  EXPECT_EQ(config_schema::builtin().find("lesson.unified.fault_batches"), nullptr);
  EXPECT_THROW(s.add(int_key(
                   "device", +[](config& cfg) -> int& { return cfg.device; }, 0, 1, "", "twice")),
               logic_error);
  EXPECT_THROW(
      s.add(int_key(
          "transfer", +[](config& cfg) -> int& { return cfg.device; }, 0, 1, "", "a section")),
      logic_error);
}

TEST(ConfigTable, DefaultsAreDocumentedAsTheFileWritesThem) {
  std::map<std::string, config_key_doc> docs;
  for (auto& d : config_schema::builtin().docs()) docs[d.key] = d;
  EXPECT_EQ(docs.at("logging.level").default_value, "info");
  EXPECT_EQ(docs.at("transfer.large_copy_bytes").default_value, "1 GiB");
  EXPECT_EQ(docs.at("transfer.multi_gpu.nccl_min_bytes").default_value, "8");
  EXPECT_EQ(docs.at("transfer.sweep.min_bytes").default_value, "4 KiB");
  EXPECT_EQ(docs.at("transfer.tensor_shapes").default_value,
            "[[1024, 1024], [4096, 4096], [8192, 8192]]");
  EXPECT_EQ(docs.at("check.h2d_fraction").default_value, "0.8");
  EXPECT_EQ(docs.at("memory.allocator.max_split_size_mb").default_value, "0");
  EXPECT_EQ(docs.at("memory.allocator.conf").default_value, "\"\"");
  EXPECT_EQ(docs.at("transfer.staging.chunk_bytes").accepts,
            "a size in 64 KiB..1 GiB (e.g. \"8 MiB\")");
}

TEST(ConfigTable, ResultsJsonHoldsEveryKeyButThePolicyKnobs) {
  const nlohmann::json j = config{};
  std::vector<std::string> leaves;
  const std::function<void(const nlohmann::json&, const std::string&)> walk =
      [&](const nlohmann::json& v, const std::string& at) {
        if (!v.is_object()) return leaves.push_back(at);
        for (auto it = v.begin(); it != v.end(); ++it)
          walk(it.value(), at.empty() ? it.key() : at + "." + it.key());
      };
  walk(j, "");
  std::vector<std::string> want;
  for (const auto& k : known_config_keys())
    if (k.rfind("memory.allocator.", 0) != 0 || k == "memory.allocator.conf" ||
        k == "memory.allocator.expandable_segments")
      want.push_back(k);
  std::sort(leaves.begin(), leaves.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(leaves, want);
  EXPECT_EQ(j["transfer"]["sweep"]["enabled"], "auto");
  EXPECT_EQ(j["memory"]["allocator"]["conf"], "");
}

/// The reference of keys in docs/configuration.md is the table's (GPU_BASICS_UPDATE_DOCS=1
/// rewrites it).
TEST(ConfigTable, TheDocsReferenceIsGeneratedFromTheTable) {
  const std::string path = repo_file("docs/configuration.md");
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string begin =
      "<!-- config-keys:begin (generated from src/core/config_keys.cpp) -->\n";
  const std::string end = "<!-- config-keys:end -->";
  const auto b = text.find(begin), e = text.find(end);
  ASSERT_NE(b, std::string::npos) << "docs/configuration.md has no " << begin;
  ASSERT_NE(e, std::string::npos) << "docs/configuration.md has no " << end;
  const std::string want = config_schema::builtin().reference_markdown();
  const std::string have = text.substr(b + begin.size(), e - b - begin.size());
  if (have != want && std::getenv("GPU_BASICS_UPDATE_DOCS")) {
    std::ofstream(path) << text.substr(0, b + begin.size()) << want << text.substr(e);
    GTEST_SKIP() << "docs/configuration.md rewritten";
  }
  EXPECT_EQ(have, want) << "the reference of config keys in docs/configuration.md is out of date: "
                           "run GPU_BASICS_UPDATE_DOCS=1 build/default/tests/gpu_basics_unit_tests "
                           "--gtest_filter='ConfigTable.*'";
}
