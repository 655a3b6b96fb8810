// The unified lesson on the GPU, part by part and belief by belief, on a small configuration. Each
// test states what the lesson teaches, so a GPU or a driver where it does not hold fails it.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <string>

#include "gpu_basics/lessons/measure.hpp"
#include "gpu_test_util.hpp"

using namespace gpu_basics;
using namespace gpu_basics::lessons;

namespace {

/// Every part off but `part` ("managed", "zero_copy", "ledger", "beliefs"), at small sizes.
config config_of(const std::string& part) {
  std::vector<std::string> sets = {"unified.repetitions=3",
                                   "unified.managed.bytes=64 MiB",
                                   "unified.oversubscription.free_bytes=512 MiB",
                                   "unified.oversubscription.ratios=[0.5, 1.5]",
                                   "unified.oversubscription.chunk_bytes=16 MiB",
                                   "unified.oversubscription.passes=1",
                                   "unified.zero_copy.bytes=32 MiB",
                                   "unified.zero_copy.passes=4",
                                   "unified.beliefs.copy_bytes=64 MiB",
                                   "unified.beliefs.repeats=4",
                                   "unified.beliefs.idle_allocation_bytes=4 GiB",
                                   "unified.beliefs.d2d_max_bytes=1 GiB",
                                   "output.directory=gpu_test_results"};
  for (const char* p : {"managed", "zero_copy", "ledger", "beliefs"})
    sets.push_back("unified." + std::string(p) + ".enabled=" + (part == p ? "true" : "false"));
  return load_config("", sets);
}

unified_result measure_part(const std::string& part) {
  context ctx = open_context(config_of(part));
  ctx.self_exe = GPU_BASICS_CLI;
  return measure_unified(ctx);
}

/// Measured once per part, for the tests of that part.
const unified_result& part(const std::string& name) {
  static std::map<std::string, unified_result> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, measure_part(name)).first;
  return it->second;
}

}  // namespace

TEST(UnifiedGpu, PrefetchBeatsFaultsAndEveryTouchVerified) {
  SKIP_WITHOUT_GPU();
  const auto& r = part("managed");
  ASSERT_TRUE(r.managed);
  EXPECT_FALSE(r.zero_copy || r.ledger || r.beliefs);
  const auto* faults = find_touch(*r.managed, "to_gpu", "faults");
  const auto* prefetch = find_touch(*r.managed, "to_gpu", "prefetch");
  ASSERT_TRUE(faults && prefetch);
  EXPECT_GT(prefetch->bytes_per_s, faults->bytes_per_s);
  EXPECT_EQ(r.managed->touches.size(), 7u);
  for (const auto& t : r.managed->touches) EXPECT_GT(t.bytes_per_s, 0) << t.placement;
  const auto* back_faults = find_touch(*r.managed, "to_cpu", "faults");
  ASSERT_TRUE(back_faults);
}

TEST(UnifiedGpu, OversubscriptionCollapsesPastTheFreeMemory) {
  SKIP_WITHOUT_GPU();
  const auto& r = part("managed");
  ASSERT_TRUE(r.managed && r.managed->oversubscription);
  const auto& o = *r.managed->oversubscription;
  EXPECT_EQ(o.mode, "ballast");
  ASSERT_EQ(o.points.size(), 2u);
  EXPECT_GT(o.ballast_bytes, 0u);
  // Resident at 0.5x (HBM), migrating every pass at 1.5x (PCIe): far slower.
  EXPECT_GT(o.points[0].faults_bytes_per_s, 5 * o.points[1].faults_bytes_per_s);
}

TEST(UnifiedGpu, OversubscriptionRefusesASetTheHostCannotHold) {
  SKIP_WITHOUT_GPU();
  config cfg = config_of("managed");
  apply_override(cfg, "unified.oversubscription.whole_device=true");
  apply_override(cfg, "unified.oversubscription.ratios=[4]");
  apply_override(cfg, "unified.managed.bytes=1 MiB");
  context ctx = open_context(cfg);
  // 4 x the whole device exceeds the H200 host's memory: refused before anything runs.
  EXPECT_THROW((void)measure_unified(ctx), config_error);
}

TEST(UnifiedGpu, ZeroCopyWinsSparseAndLosesRepeatedPasses) {
  SKIP_WITHOUT_GPU();
  const auto& r = part("zero_copy");
  ASSERT_TRUE(r.zero_copy);
  const auto* many = find_access(*r.zero_copy, "passes");
  const auto* sparse = find_access(*r.zero_copy, "sparse");
  ASSERT_TRUE(many && sparse);
  EXPECT_LT(sparse->mapped_s, sparse->copy_then_compute_s);
  EXPECT_GT(many->mapped_s, many->copy_then_compute_s);
  const auto& s = r.zero_copy->support;
  EXPECT_TRUE(s.concurrent_managed_access);  // every GPU this lesson targets (Linux, Pascal+)
  if (!s.pageable_memory_access) {
    EXPECT_FALSE(s.pageable_memory_access_uses_host_page_tables);
  }
}

TEST(UnifiedGpu, LedgerMeasuresTheContextInAFreshChild) {
  SKIP_WITHOUT_GPU();
  const auto& r = part("ledger");
  ASSERT_TRUE(r.ledger);
  ASSERT_EQ(r.ledger->method, "child_process");
  const ledger_probe* lazy = find_probe(*r.ledger, "LAZY");
  const ledger_probe* eager = find_probe(*r.ledger, "EAGER");
  ASSERT_TRUE(lazy && eager);
  EXPECT_GT(step_delta(*lazy, "context").value_or(0), 64ll << 20);  // a context is not free
  EXPECT_GE(step_delta(*eager, "context").value_or(0), step_delta(*lazy, "context").value_or(0));
  EXPECT_GE(step_delta(*lazy, "allocator_blocks").value_or(0), 512ll << 20);
  EXPECT_EQ(step_delta(*lazy, "allocator_free_half").value_or(-1), 0);  // cached, still counted
  EXPECT_EQ(lazy->allocator_reserved_bytes, 512ll << 20);
  EXPECT_EQ(lazy->allocator_allocated_bytes, 256ll << 20);
  EXPECT_GT(process_bytes(*lazy), lazy->allocator_reserved_bytes);  // what nvidia-smi shows more
}

TEST(UnifiedGpu, LedgerWithoutTheExecutableSaysSo) {
  SKIP_WITHOUT_GPU();
  context ctx = open_context(config_of("ledger"));
  const auto r = measure_unified(ctx);  // no self_exe
  ASSERT_TRUE(r.ledger);
  EXPECT_TRUE(r.ledger->probes.empty());
  EXPECT_EQ(r.ledger->method.rfind("unavailable", 0), 0u) << r.ledger->method;
}

TEST(UnifiedGpu, BeliefPinThenCopyIsSlowerForOneTransfer) {
  SKIP_WITHOUT_GPU();
  const auto& b = part("beliefs").beliefs;
  ASSERT_TRUE(b && b->pin);
  EXPECT_GT(b->pin->pin_then_copy_once_s, b->pin->pageable_copy_s);
  EXPECT_LT(b->pin->pinned_copy_s, b->pin->pageable_copy_s);  // a reused pinned buffer pays
}

TEST(UnifiedGpu, BeliefStaleReadFindsStaleBytesBeforeTheSyncAndNoneAfter) {
  SKIP_WITHOUT_GPU();
  const auto& b = part("beliefs").beliefs;
  ASSERT_TRUE(b && b->stale_read);
  EXPECT_GT(b->stale_read->wrong_before_sync, b->stale_read->bytes / 2);
  EXPECT_EQ(b->stale_read->wrong_after_sync, 0u);
}

TEST(UnifiedGpu, BeliefPoolThresholdZeroGivesMemoryBackAndPaysForIt) {
  SKIP_WITHOUT_GPU();
  const auto& b = part("beliefs").beliefs;
  ASSERT_TRUE(b && b->pool);
  ASSERT_EQ(b->pool->rows.size(), 2u);
  const auto& zero = b->pool->rows[0];
  const auto& keep = b->pool->rows[1];
  EXPECT_EQ(zero.release_threshold, 0u);
  EXPECT_EQ(keep.release_threshold, std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(zero.reserved_after_sync_bytes, 0u);
  EXPECT_GE(keep.reserved_after_sync_bytes, b->pool->bytes);
  EXPECT_GT(zero.pair_with_sync_s, keep.pair_with_sync_s);
}

TEST(UnifiedGpu, BeliefNvmlUtilisationIsBusyTimeNotFullness) {
  SKIP_WITHOUT_GPU();
  const auto& b = part("beliefs").beliefs;
  ASSERT_TRUE(b);
  if (!b->nvml_util) GTEST_SKIP() << "NVML's utilisation is not readable here";
  EXPECT_GE(b->nvml_util->idle_used_bytes, b->nvml_util->idle_allocation_bytes);
  EXPECT_LT(b->nvml_util->idle_memory_util_percent, 10);
  EXPECT_GT(b->nvml_util->busy_memory_util_percent, 50);
}

TEST(UnifiedGpu, BeliefD2DHasAnL2PlateauAboveTheHbmPlateau) {
  SKIP_WITHOUT_GPU();
  const auto& b = part("beliefs").beliefs;
  ASSERT_TRUE(b && b->d2d);
  EXPECT_GT(b->d2d->l2_bytes, 0u);
  const auto l2 = l2_plateau(*b->d2d);
  const auto hbm = hbm_plateau(*b->d2d);
  ASSERT_TRUE(l2 && hbm);
  EXPECT_GT(*l2, 1.3 * *hbm);
}
