// The allocator's conf string on the CPU: PyTorch's keys and syntax (PYTORCH_CUDA_ALLOC_CONF),
// gpu-basics' own page_release, what is written back, errors that name the bad part, and the
// rounding of roundup_power2_divisions.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "allocator_test_util.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"

using namespace gpu_basics;
using namespace gpu_basics::test_util;

namespace {
std::string conf_error(std::string_view conf) {
  try {
    (void)parse_allocator_options(conf);
  } catch (const logic_error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(AllocatorConf, ReadsPyTorchsKeysAndSyntax) {
  const auto o = parse_allocator_options(
      " expandable_segments:True, max_split_size_mb:128,garbage_collection_threshold:0.6,"
      "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
  EXPECT_TRUE(o.expandable_segments);
  EXPECT_EQ(o.max_split_size, 128 * MiB);
  EXPECT_DOUBLE_EQ(o.garbage_collection_threshold, 0.6);
  // The first interval fills everything below it; '>' everything after the last one.
  for (std::size_t i = 0; i <= 8; ++i) EXPECT_EQ(o.roundup_power2_divisions[i], 1u) << i;
  EXPECT_EQ(o.roundup_power2_divisions[9], 2u);
  EXPECT_EQ(o.roundup_power2_divisions[10], 4u);
  for (std::size_t i = 11; i < kRoundupIntervals; ++i) EXPECT_EQ(o.roundup_power2_divisions[i], 8u);
  const auto single = parse_allocator_options("roundup_power2_divisions:4");
  for (auto d : single.roundup_power2_divisions) EXPECT_EQ(d, 4u);
  EXPECT_FALSE(parse_allocator_options("expandable_segments:False").expandable_segments);
  EXPECT_EQ(parse_allocator_options("backend:native,release_lock_on_cudamalloc:True"),
            allocator_options{});
  EXPECT_EQ(parse_allocator_options(""), allocator_options{});
}

TEST(AllocatorConf, WritesWhatItReads) {
  for (const char* conf :
       {"expandable_segments:True", "max_split_size_mb:256", "roundup_power2_divisions:4",
        "roundup_power2_divisions:[1:1,2:1,4:1,8:1,16:1,32:1,64:1,128:1,256:1,512:2,>:4]",
        "expandable_segments:True,max_split_size_mb:64,garbage_collection_threshold:0.5",
        "expandable_segments:True,page_release:eager", "page_release:deferred"}) {
    const auto o = parse_allocator_options(conf);
    EXPECT_EQ(to_conf_string(o), conf);
    EXPECT_EQ(parse_allocator_options(to_conf_string(o)), o) << conf;
  }
  EXPECT_EQ(to_conf_string(allocator_options{}), "");
  EXPECT_EQ(
      parse_allocator_options(" page_release:deferred ,expandable_segments:True").release_pages,
      page_release::deferred);
}

TEST(AllocatorConf, BadStringsNameTheBadPart) {
  EXPECT_NE(conf_error("max_split_size_mb:20").find("max_split_size_mb: expected an integer > 20"),
            std::string::npos);
  EXPECT_NE(conf_error("max_split_size_mb:abc").find("got 'abc'"), std::string::npos);
  EXPECT_NE(conf_error("expandable_segments:yes")
                .find("expandable_segments: expected True or "
                      "False, got 'yes'"),
            std::string::npos);
  EXPECT_NE(conf_error("roundup_power2_divisions:3").find("power of two"), std::string::npos);
  EXPECT_NE(conf_error("roundup_power2_divisions:[300:2]").find("'300'"), std::string::npos);
  EXPECT_NE(conf_error("roundup_power2_divisions:[512:2,256:1]").find("increasing"),
            std::string::npos);
  EXPECT_NE(conf_error("roundup_power2_divisions:[256:2").find("closed"), std::string::npos);
  EXPECT_NE(conf_error("per_process_memory_fraction:0").find("above 0, at most 1"),
            std::string::npos);
  EXPECT_NE(conf_error("per_process_memory_fraction:1.5").find("got '1.5'"), std::string::npos);
  EXPECT_NE(conf_error("per_process_memory_fraction:nan").find("got 'nan'"), std::string::npos);
  EXPECT_NE(conf_error("garbage_collection_threshold:1.0").find("strictly between 0 and 1"),
            std::string::npos);
  EXPECT_NE(conf_error("max_split_mb:128").find("unknown key 'max_split_mb'"), std::string::npos);
  EXPECT_NE(conf_error("expandable_segments").find("expected key:value"), std::string::npos);
  EXPECT_NE(conf_error("expandable_segments:True,,max_split_size_mb:64").find("empty entry"),
            std::string::npos);
  EXPECT_NE(conf_error("backend:cudaMallocAsync").find("backend"), std::string::npos);
  EXPECT_NE(conf_error("expandable_segments:True,page_release:lazy")
                .find("page_release: expected deferred, eager or keep, got 'lazy'"),
            std::string::npos);
}

TEST(AllocatorConf, IntervalStartsPastTheLastIntervalAreClampedAsPyTorchDoes) {
  // 32768 and 65536 MiB both fall in the last interval (from 32 GiB): PyTorch accepts the list,
  // the later value winning.
  const auto o = parse_allocator_options("roundup_power2_divisions:[1:2,32768:4,65536:8]");
  EXPECT_EQ(o.roundup_power2_divisions.front(), 2u);
  EXPECT_EQ(o.roundup_power2_divisions.back(), 8u);
  EXPECT_NE(conf_error("roundup_power2_divisions:[65536:8,1:2]").find("increasing"),
            std::string::npos);
}

TEST(AllocatorConf, MemoryFractionIsPyTorchsKeyAndSetsTheLimitOfTheDevice) {
  const auto o = parse_allocator_options("per_process_memory_fraction:0.25");
  EXPECT_DOUBLE_EQ(o.per_process_memory_fraction, 0.25);
  EXPECT_EQ(o.reserved_limit, SIZE_MAX);  // the device is not known until an allocator has one
  EXPECT_EQ(gpu_basics::to_conf_string(o), "per_process_memory_fraction:0.25");
  EXPECT_EQ(gpu_basics::fraction_limit(0.25, 1000), 250u);
  EXPECT_EQ(gpu_basics::fraction_limit(0.3333, 1000), 333u);  // rounded down, as PyTorch
  EXPECT_EQ(gpu_basics::fraction_limit(0, 1000), SIZE_MAX);
}

TEST(AllocatorConf, RoundupPowerTwoDivisionsRoundsAsPyTorch) {
  allocator_options o;
  EXPECT_EQ(round_request(1200 * KiB, o), 1200 * KiB);  // no divisions: 512-byte steps
  o.roundup_power2_divisions.fill(4);
  // 1200 KiB lies in [1, 2) MiB: steps of 256 KiB -> 1280 KiB.
  EXPECT_EQ(round_request(1200 * KiB, o), 1280 * KiB);
  EXPECT_EQ(round_request(1 * MiB, o), 1 * MiB);      // a power of two stays
  EXPECT_EQ(round_request(5 * MiB + 1, o), 6 * MiB);  // [4, 8) MiB in 1 MiB steps
  EXPECT_EQ(round_request(1500, o), 1536u);           // below 512 x 4: 512-byte rounding
  EXPECT_EQ(round_request(3000, o), 3072u);           // 2048..4096 in 512-byte steps
  EXPECT_EQ(round_request(100, o), 512u);
}
