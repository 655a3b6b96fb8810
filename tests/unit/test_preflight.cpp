// Pre-flight: recordings of a synthetic training job whose sizes are affine in the batch by
// construction (so the trace at any batch is known, and its replay is the prediction's answer),
// recordings that cannot be modelled (a size not affine, sequences that part), workspaces a larger
// batch inserts, the largest batch that fits, and `gpu-basics preflight` end to end.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpu_basics/report/preflight.hpp"
#include "gpu_basics/snapshot/advise.hpp"
#include "gpu_basics/snapshot/pickle.hpp"
#include "gpu_basics/snapshot/preflight.hpp"

#include "cli.hpp"
#include "exit_codes.hpp"
#include "run.hpp"
#include "snapshot_test_util.hpp"

using namespace snapshot_test;
using gb::replay_event;

namespace {

/// How the synthetic job varies.
struct job {
  int steps = 2;
  int layers = 12;
  /// From this batch on, some layers allocate a workspace before their activation (0: never).
  std::size_t workspaces_from = 0;
  /// At this batch, layer 2's activation is 4 KiB larger than affine (0: never).
  std::size_t bent_at = 0;
  /// At this batch, the first step frees two activations in the other order (0: never).
  std::size_t swapped_at = 0;
};

/// A recording of the job at `batch`: parameters and optimizer state (constant, live throughout),
/// then per step a forward pass keeping activations (a + b * batch, small and large ones), a
/// backward pass freeing them in reverse with a gradient each (constant), on two streams; the
/// frames name each allocation's site.
gb::batch_recording job_at(std::size_t batch, const job& j = {}) {
  gb::batch_recording r;
  r.batch = batch;
  r.name = "job_b" + std::to_string(batch) + ".pickle";
  std::uint64_t next = 1;
  const auto alloc = [&](std::size_t bytes, gb::stream_handle stream, const std::string& site) {
    const std::uint64_t id = (next++) << 12;
    r.events.push_back({replay_event::op::alloc, id, bytes, stream});
    r.frames.push_back(site);
    return id;
  };
  const auto free_ = [&](std::uint64_t id, gb::stream_handle stream) {
    r.events.push_back({replay_event::op::free, id, 0, stream});
    r.frames.emplace_back();
  };
  for (int p = 0; p < 6; ++p)
    (void)alloc(3 * MiB + static_cast<std::size_t>(p) * 4096, 0,
                "model.py:" + std::to_string(p) + " in __init__");
  for (int s = 0; s < j.steps; ++s) {
    std::vector<std::uint64_t> acts;
    for (int l = 0; l < j.layers; ++l) {
      const auto ul = static_cast<std::size_t>(l);
      if (j.workspaces_from && batch >= j.workspaces_from && l % 4 == 1) {
        const auto ws = alloc(4 * MiB, 0, "cublas.py:7 in workspace");
        free_(ws, 0);
      }
      std::size_t size = 1000 * ul + 70000 * batch * (ul % 3 + 1) + (l % 2 ? 512 : 0);
      if (l == 2 && batch == j.bent_at) size += 4096;
      acts.push_back(alloc(size, l % 5 == 4 ? 7 : 0,
                           "model.py:" + std::to_string(100 + l) + " in forward; train.py:9"));
    }
    for (int l = j.layers - 1; l >= 0; --l) {
      const auto ul = static_cast<std::size_t>(l);
      const auto g = alloc(256 * 1024 * (ul % 3 + 1), 0,
                           "autograd.py:" + std::to_string(200 + l) + " in backward");
      int which = l;
      if (s == 0 && batch == j.swapped_at && (l == 6 || l == 5)) which = l == 6 ? 5 : 6;
      free_(acts[static_cast<std::size_t>(which)], which % 5 == 4 ? 7 : 0);
      free_(g, 0);
    }
  }
  return r;
}

/// The recordings at `batches`.
std::vector<gb::batch_recording> recordings(const std::vector<std::size_t>& batches,
                                            const job& j = {}) {
  std::vector<gb::batch_recording> v;
  for (const std::size_t b : batches) v.push_back(job_at(b, j));
  return v;
}

/// The message of the preflight_error that building the model throws ("" if none), and its event.
std::pair<std::string, std::size_t> model_error(std::vector<gb::batch_recording> recs) {
  try {
    const gb::batch_model m(std::move(recs));
  } catch (const gb::preflight_error& e) {
    return {e.what(), e.event()};
  }
  return {"", 0};
}

/// The job's trace written as a snapshot pickle, each alloc with its frames.
void write_job_snapshot(const std::filesystem::path& path, const gb::batch_recording& r) {
  pk::items events;
  for (std::size_t i = 0; i < r.events.size(); ++i) {
    const replay_event& e = r.events[i];
    std::size_t size = e.bytes;
    if (e.kind == replay_event::op::free)
      for (std::size_t k = i; k-- > 0;)
        if (r.events[k].id == e.id && r.events[k].kind == replay_event::op::alloc) {
          size = r.events[k].bytes;
          break;
        }
    value ev = value::dict();
    ev.set("action", value::str(e.kind == replay_event::op::alloc ? "alloc" : "free_requested"));
    ev.set("addr", value::integer(static_cast<std::int64_t>(e.id)));
    ev.set("size", value::integer(static_cast<std::int64_t>(size)));
    ev.set("stream", value::integer(static_cast<std::int64_t>(e.stream)));
    ev.set("time_us", value::integer(static_cast<std::int64_t>(i)));
    pk::items frames;
    if (e.kind == replay_event::op::alloc) {
      value f = value::dict();
      f.set("filename", value::str("model.py"));
      f.set("line", value::integer(static_cast<std::int64_t>(r.frames[i].size())));
      f.set("name", value::str(r.frames[i]));
      frames.push_back(std::move(f));
    }
    ev.set("frames", value::list(std::move(frames)));
    events.push_back(std::move(ev));
  }
  write_bytes(path, pk::dumps(snapshot_of_trace(std::move(events))));
}

gb::allocator_options options_of(const std::string& conf) {
  return gb::parse_allocator_options(conf);
}

}  // namespace

// (a) Sizes affine by construction: the prediction at batches never recorded (between the
// recordings and beyond them) is the replay of the job at that batch, byte for byte.
TEST(Preflight, AffineSizesPredictTheJobsOwnReplayExactly) {
  const gb::batch_model m(recordings({2, 4, 8}));
  EXPECT_TRUE(m.grows(2));
  for (std::size_t b = 0; b < 3; ++b) EXPECT_EQ(m.unmatched(b), 0u);
  const gb::preflight_report r = gb::run_preflight(m, {3, 13, 24}, std::nullopt, 2);
  ASSERT_EQ(r.predictions.size(), 6u);
  const gb::allocator_options recommended = options_of(r.recommended);
  for (const auto& p : r.predictions) {
    const auto& o = p.which == "defaults" ? gb::allocator_options{} : recommended;
    EXPECT_EQ(p.policy, p.which == "defaults" ? std::string() : r.recommended);
    const gb::replay_result direct = gb::replay_trace(job_at(p.batch).events, o);
    EXPECT_EQ(p.peak_reserved, direct.peak_reserved) << p.batch << " " << p.which;
    EXPECT_EQ(p.peak_allocated, direct.peak_allocated) << p.batch << " " << p.which;
  }
  // The peaks grow with the batch (the model is not the largest recording replayed again).
  EXPECT_LT(r.predictions[2].peak_reserved, r.predictions[4].peak_reserved);
  // Two recordings suffice.
  const gb::batch_model two(recordings({4, 8}));
  const auto at40 = gb::predict_at(two, 40, {});
  EXPECT_EQ(at40.peak_reserved, gb::replay_trace(job_at(40).events, {}).peak_reserved);
  EXPECT_EQ(at40.peak_allocated, gb::replay_trace(job_at(40).events, {}).peak_allocated);
}

// The benchmarks' transformer trace (varying batches, reused ids, a recommendation other than the
// defaults) scaled as s + s / 64 * batch: the prediction under the recommendation is the scaled
// trace's replay.
TEST(Preflight, TheRecommendationIsReplayedAsAdviseNamesIt) {
  const auto base = gb::transformer_trace(4);
  const auto at = [&](std::size_t batch) {
    gb::batch_recording r{batch, "transformer", base, {}};
    for (auto& e : r.events) e.bytes += e.bytes / 64 * batch;
    return r;
  };
  const gb::batch_model m({at(2), at(4), at(8)});
  const auto r = gb::run_preflight(m, {32}, std::nullopt, 2);
  const auto a = gb::advise_snapshot(gb::torch_snapshot_of(at(8).events), "t", 0,
                                     gb::advise_policies({}), {}, 2);
  EXPECT_EQ(r.recommended, gb::lines_of(a).conf);
  EXPECT_NE(r.recommended, "");  // so that the recommendation's own replay is what is checked
  ASSERT_EQ(r.predictions.size(), 2u);
  const auto direct = gb::replay_trace(at(32).events, options_of(r.recommended));
  EXPECT_EQ(r.predictions[1].which, "recommended");
  EXPECT_EQ(r.predictions[1].policy, r.recommended);
  EXPECT_EQ(r.predictions[1].peak_reserved, direct.peak_reserved);
  EXPECT_EQ(r.predictions[1].peak_allocated, direct.peak_allocated);
  EXPECT_EQ(r.predictions[0].peak_reserved, gb::replay_trace(at(32).events, {}).peak_reserved);
  // The largest batch under the recommendation: it fits, the next does not.
  const std::size_t limit = 2 * direct.peak_reserved;
  const auto fits = [&](std::size_t b) {
    const auto trace = at(b).events;
    return gb::replay_under_limit(gb::prepare_trace(trace), options_of(r.recommended), limit)
        .fits();
  };
  const auto found = gb::largest_fitting_batch(m, options_of(r.recommended), limit);
  ASSERT_TRUE(found);
  EXPECT_GT(*found, 32u);
  EXPECT_TRUE(fits(*found)) << *found;
  EXPECT_FALSE(fits(*found + 1)) << *found;
}

// The synthesized trace keeps the recording's order and streams, each block a fresh id; at a
// recorded batch it is that recording.
TEST(Preflight, TheSynthesizedTraceIsTheJobAtThatBatch) {
  const gb::batch_model m(recordings({2, 4, 8}));
  const auto t = m.trace_at(32);
  const auto want = job_at(32).events;
  ASSERT_EQ(t.size(), want.size());
  std::map<std::uint64_t, std::uint64_t> ids;  // ours -> the job's
  for (std::size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(t[i].kind, want[i].kind) << i;
    EXPECT_EQ(t[i].stream, want[i].stream) << i;
    if (t[i].kind == replay_event::op::alloc) {
      EXPECT_EQ(t[i].bytes, want[i].bytes) << i;
      EXPECT_TRUE(ids.emplace(t[i].id, want[i].id).second) << "id reused at " << i;
    } else {
      EXPECT_EQ(ids.at(t[i].id), want[i].id) << i;
    }
  }
  for (const std::size_t b : {2u, 4u, 8u}) {
    const auto at = m.trace_at(b);
    const auto& rec = m.recordings()[b == 2 ? 0 : b == 4 ? 1 : 2].events;
    ASSERT_EQ(at.size(), rec.size());
    for (std::size_t i = 0; i < at.size(); ++i)
      EXPECT_EQ(at[i].bytes, rec[i].bytes) << b << " " << i;
  }
}

// (b) One allocation not affine across three recordings: refused, naming it and its frames.
TEST(Preflight, ASizeThatIsNotAffineIsRefusedNamingTheEventAndItsFrames) {
  job j;
  j.bent_at = 8;
  const auto [message, event] = model_error(recordings({2, 4, 8}, j));
  ASSERT_NE(message, "");
  EXPECT_NE(message.find("not affine"), std::string::npos) << message;
  EXPECT_NE(message.find("model.py:102 in forward"), std::string::npos) << message;
  const auto rec = job_at(8, j);
  EXPECT_EQ(rec.frames.at(event), "model.py:102 in forward; train.py:9") << message;
  EXPECT_NE(message.find("event " + std::to_string(event) + " of batch 8"), std::string::npos)
      << message;
  // With two recordings nothing checks it: the same bend is a line through two points.
  EXPECT_EQ(model_error(recordings({4, 8}, j)).first, "");
}

// (c) Sequences that part with no consistent alignment (two frees in the other order): refused,
// naming the event where they part.
TEST(Preflight, RecordingsWhoseSequencesPartAreRefusedNamingTheEvent) {
  // An allocation of another size class in place of one (smaller at the larger batch): refused.
  auto recs = recordings({4, 8});
  recs[1].events[10].bytes = recs[0].events[10].bytes / 2;
  const auto [message, event] = model_error(std::move(recs));
  ASSERT_NE(message, "");
  EXPECT_NE(message.find("in place of another"), std::string::npos) << message;
  EXPECT_NE(message.find("no consistent alignment"), std::string::npos) << message;
  EXPECT_NE(message.find(" part at event 10 of batch 4 (alloc of"), std::string::npos) << message;
  EXPECT_NE(message.find("where the other has event 10 of batch 8 (alloc of"), std::string::npos)
      << message;  // what each recording has there
  EXPECT_EQ(event, 10u) << message;
}

// Frees in another order (as PyTorch's recordings of one transformer had them at batch 2 and 4:
// a small block freed at another place): aligned, and each batch replays its closest recording's
// order, so the prediction at each recorded batch is that recording's own replay.
TEST(Preflight, FreesInAnotherOrderAreAlignedAndEachRecordingsOrderIsKept) {
  job j;
  j.swapped_at = 8;
  const gb::batch_model m(recordings({4, 8, 16}, j));
  EXPECT_EQ(m.unmatched(0) + m.unmatched(1) + m.unmatched(2), 0u);
  for (const std::size_t b : {3u, 4u, 8u, 16u, 40u}) {
    const auto want = job_at(b, b == 8 ? j : job{}).events;
    const auto got = m.trace_at(b);
    ASSERT_EQ(got.size(), want.size()) << b;
    std::size_t frees_differ = 0;  // the swap is at batch 8 only
    for (std::size_t i = 0; i < got.size(); ++i)
      frees_differ += got[i].kind != want[i].kind || got[i].bytes != want[i].bytes;
    EXPECT_EQ(frees_differ, 0u) << b;
    const auto p = gb::predict_at(m, b, {});
    const auto d = gb::replay_trace(want, {});
    EXPECT_EQ(p.peak_reserved, d.peak_reserved) << b;
    EXPECT_EQ(p.peak_allocated, d.peak_allocated) << b;
  }
}

// (d) A larger batch inserts workspaces: aligned, kept from the recordings that have them, and
// predicted exactly on both sides of where they start.
TEST(Preflight, WorkspacesALargerBatchInsertsAreAlignedAndPredicted) {
  job j;
  j.workspaces_from = 8;
  const gb::batch_model m(recordings({2, 4, 8}, j));
  const std::size_t inserted = 2 * 3 * 2;  // alloc and free, 3 layers, 2 steps
  EXPECT_EQ(m.unmatched(2), inserted);
  EXPECT_EQ(m.unmatched(0), 0u);
  for (const std::size_t b : {3u, 16u, 50u}) {
    const auto want = job_at(b, j).events;
    EXPECT_EQ(m.trace_at(b).size(), want.size()) << b;
    for (const auto& o : {gb::allocator_options{}, options_of("expandable_segments:True")}) {
      const auto p = gb::predict_at(m, b, o);
      const auto d = gb::replay_trace(want, o);
      EXPECT_EQ(p.peak_reserved, d.peak_reserved) << b;
      EXPECT_EQ(p.peak_allocated, d.peak_allocated) << b;
    }
  }
}

// (e) The largest batch that fits: it fits, the next does not (replayed directly under the limit),
// for the defaults and for the recommendation.
TEST(Preflight, TheLargestBatchFitsAndTheNextDoesNot) {
  const gb::batch_model m(recordings({2, 4, 8}));
  const std::size_t limit = gb::replay_trace(job_at(37).events, {}).peak_reserved + 5 * MiB;
  const auto r = gb::run_preflight(m, {8}, limit, 2);
  ASSERT_TRUE(r.fit);
  EXPECT_EQ(r.fit->limit, limit);
  EXPECT_EQ(r.fit->policy, r.recommended);
  const auto fits = [&](std::size_t b, const gb::allocator_options& o) {
    const auto trace = job_at(b).events;
    return gb::replay_under_limit(gb::prepare_trace(trace), o, limit).fits();
  };
  for (const auto& [found, o] : {std::pair{r.fit->defaults, gb::allocator_options{}},
                                 std::pair{r.fit->recommended, options_of(r.recommended)}}) {
    ASSERT_TRUE(found);
    EXPECT_GE(*found, 37u);
    EXPECT_TRUE(fits(*found, o)) << *found;
    EXPECT_FALSE(fits(*found + 1, o)) << *found;
  }
  // A limit below the smallest batch's need: 0; a job that does not grow: any batch.
  EXPECT_EQ(gb::largest_fitting_batch(m, {}, 1 * MiB), 0u);
  auto flat = recordings({2, 4});
  flat[1].events = flat[0].events;
  EXPECT_EQ(gb::largest_fitting_batch(gb::batch_model(std::move(flat)), {}, 1024 * MiB),
            std::nullopt);
}

// A long recording (about 100k events): still exact. (Its time is a benchmark's matter.)
TEST(Preflight, AHundredThousandEventRecordingIsPredictedExactly) {
  job j;
  j.steps = 1100;
  j.layers = 30;
  j.workspaces_from = 8;
  const auto t0 = std::chrono::steady_clock::now();
  const gb::batch_model m(recordings({2, 4, 8}, j));
  ASSERT_GT(m.recordings().back().events.size(), 100000u);
  const auto p = gb::predict_at(m, 64, {});
  const auto d = gb::replay_trace(job_at(64, j).events, {});
  EXPECT_EQ(p.peak_reserved, d.peak_reserved);
  EXPECT_EQ(p.peak_allocated, d.peak_allocated);
  const auto found = gb::largest_fitting_batch(m, {}, d.peak_reserved);
  ASSERT_TRUE(found);
  EXPECT_GE(*found, 64u);
  std::cout << "[ preflight ] " << m.recordings().back().events.size()
            << " events: model, one prediction and the largest batch in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
            << " s\n";
}

// (f) `gpu-basics preflight` on snapshot files: its JSON, and bad input as exit 2 with one line,
// nothing written.
TEST(Preflight, TheCommandWritesItsJsonAndRefusesBadInput) {
  const auto dir = scratch("preflight_cli");
  job j;
  j.workspaces_from = 8;
  std::vector<std::string> files;
  for (const std::size_t b : {2u, 4u, 8u}) {
    files.push_back((dir / ("b" + std::to_string(b) + ".pickle")).string());
    write_job_snapshot(files.back(), job_at(b, j));
  }
  const std::size_t limit = 256 * MiB;
  std::string out, err;
  const auto run = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv{"gpu-basics", "preflight"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::ostringstream po, pe, so, se;
    const auto parsed = gb::cli::parse(argv, po, pe);
    if (!parsed.opts) {
      out = po.str();
      err = pe.str();
      return parsed.exit_code;
    }
    const int rc = gb::cli::run(*parsed.opts, so, se);
    out = so.str();
    err = se.str();
    return rc;
  };
  const std::string json = (dir / "p.json").string();
  ASSERT_EQ(run({files[0], files[1], files[2], "--batches", "2,4,8", "--at", "16", "--at", "5",
                 "--fit", "256MiB", "--json", json}),
            gb::cli::exit_ok)
      << err;
  EXPECT_NE(out.find("Predicted peaks"), std::string::npos) << out;
  const auto j2 = nlohmann::json::parse(read_bytes(json));
  ASSERT_EQ(j2["predictions"].size(), 4u);
  for (const auto& p : j2["predictions"]) {
    for (const char* k : {"batch", "policy", "peak_allocated_bytes", "peak_reserved_bytes"})
      EXPECT_TRUE(p.contains(k)) << k;
  }
  EXPECT_EQ(j2["predictions"][0]["batch"], 16);
  EXPECT_EQ(j2["predictions"][0]["policy"], "");
  EXPECT_EQ(j2["predictions"][0]["peak_reserved_bytes"],
            gb::replay_trace(job_at(16, j).events, {}).peak_reserved);
  EXPECT_EQ(j2["predictions"][2]["batch"], 5);
  const auto& lb = j2["largest_batch"];
  EXPECT_EQ(lb["limit_bytes"], limit);
  EXPECT_EQ(lb["policy"], j2["recommended_policy"]);
  ASSERT_TRUE(lb["defaults"].is_number()) << lb;
  const auto b = lb["defaults"].get<std::size_t>();
  const auto fits = [&](std::size_t n) {
    const auto trace = job_at(n, j).events;
    return gb::replay_under_limit(gb::prepare_trace(trace), {}, limit).fits();
  };
  EXPECT_TRUE(fits(b));
  EXPECT_FALSE(fits(b + 1));
  ASSERT_TRUE(lb["recommended"].is_number()) << lb;

  // Bad input: one line, exit 2, nothing written.
  const std::string none = (dir / "none.json").string();
  EXPECT_EQ(run({files[0], files[1], "--batches", "2,4,8", "--json", none}), gb::cli::exit_usage);
  EXPECT_NE(err.find("3 batches for 2 recordings"), std::string::npos) << err;
  EXPECT_EQ(run({files[0], files[1], "--batches", "4,2"}), gb::cli::exit_usage);
  EXPECT_NE(err.find("must increase"), std::string::npos) << err;
  EXPECT_EQ(run({files[0], files[1], "--batches", "2,4", "--fit", "lots"}), gb::cli::exit_usage);
  EXPECT_EQ(run({files[0], files[1], "--batches", "2,4", "--at", "0"}), gb::cli::exit_usage);
  EXPECT_EQ(run({files[0], "--batches", "2"}), gb::cli::exit_usage);
  EXPECT_NE(err.find("2 or 3 recordings, got 1"), std::string::npos) << err;
  EXPECT_EQ(run({files[0], files[1], "--batches", "2,4", "--fit", "1GiB", "--fit", "2GiB"}),
            gb::cli::exit_usage);
  // A limit no replay can hold: refused, not answered at the replay's cap.
  EXPECT_EQ(run({files[0], files[1], "--batches", "2,4", "--fit", "4TiB", "--json", none}),
            gb::cli::exit_usage);
  EXPECT_NE(err.find("--fit \"4TiB\": a limit below 4 TiB"), std::string::npos) << err;
  EXPECT_EQ(run({files[0], files[1], "--batches", "2,4", "--fit", "5TiB"}), gb::cli::exit_usage);
  write_bytes(dir / "x.pickle", "not a pickle at all");
  EXPECT_EQ(run({files[0], (dir / "x.pickle").string(), "--batches", "2,4", "--json", none}),
            gb::cli::exit_usage);
  EXPECT_EQ(err.rfind("gpu-basics: ", 0), 0u) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("x.pickle"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(none));
}

namespace {
/// One event of a hand-written recording: 'a' (alloc of `bytes` with `frames`) or 'f' (free).
struct ev {
  char kind;
  std::uint64_t id;
  std::size_t bytes = 0;
  std::string frames;
};
gb::batch_recording recording_of(std::size_t batch, const std::vector<ev>& events) {
  gb::batch_recording r;
  r.batch = batch;
  r.name = "hand_b" + std::to_string(batch) + ".pickle";
  for (const ev& e : events) {
    r.events.push_back(
        {e.kind == 'a' ? replay_event::op::alloc : replay_event::op::free, e.id, e.bytes, 0});
    r.frames.push_back(e.kind == 'a' ? e.frames : std::string());
  }
  return r;
}
}  // namespace

// Recordings of different steps: one step against ten is refused (most of the longer one has no
// counterpart), and so is a recording with nothing to model.
TEST(Preflight, RecordingsOfDifferentStepsOrNoEventsAreRefused) {
  job one, ten;
  one.steps = 1;
  ten.steps = 10;
  const auto [message, event] = model_error({job_at(4, one), job_at(8, ten)});
  ASSERT_NE(message, "");
  EXPECT_NE(message.find("job_b8.pickle (batch 8)"), std::string::npos) << message;
  EXPECT_NE(message.find("not the same job's steps"), std::string::npos) << message;
  // The same number of steps: accepted.
  EXPECT_EQ(model_error({job_at(4, ten), job_at(8, ten)}).first, "");
  gb::batch_recording empty{2, "empty.pickle", {}, {}};
  const auto [m2, e2] = model_error({empty, job_at(8)});
  EXPECT_NE(m2.find("empty.pickle (batch 2): no allocations"), std::string::npos) << m2;
}

// An allocation that grows between the two smaller recordings but that the largest does not have:
// the batches above the largest are its model's, which does not grow, so every batch fits (not
// the search's cap).
TEST(Preflight, WhatGrowsIsTheLargestRecordingsModelAboveIt) {
  const ev k{'a', 2, 4 * MiB, "k.py:2 in step"};
  const ev fk{'f', 2, 0, ""};
  const gb::batch_model m(
      {recording_of(2, {{'a', 1, 1 * MiB, "a.py:1 in step"}, {'f', 1, 0, ""}, k, fk}),
       recording_of(4, {{'a', 1, 2 * MiB, "a.py:1 in step"}, {'f', 1, 0, ""}, k, fk}),
       recording_of(8, {k, fk})});
  EXPECT_TRUE(m.grows(0));
  EXPECT_FALSE(m.grows(2));
  EXPECT_EQ(gb::largest_fitting_batch(m, {}, 1024 * MiB), std::nullopt);
}

// A size whose line through two recordings comes below 0 at small batches (1 MiB at batch 4,
// 4 MiB at batch 8): refused once, when the model is built, naming the event; not read as "does not
// fit" inside the search, nor refused only at `--at 1`.
TEST(Preflight, ASizeBelowZeroAtBatchOneIsRefusedWhenTheModelIsBuilt) {
  // Live to the end (not scratch): its line is the model, and it is wrong at batch 1.
  const auto [message, event] = model_error({recording_of(4, {{'a', 1, 1 * MiB, "x.py:3 in f"}}),
                                             recording_of(8, {{'a', 1, 4 * MiB, "x.py:3 in f"}})});
  EXPECT_NE(message.find("below 0 at batch 1"), std::string::npos) << message;
  EXPECT_NE(message.find("event 0 of batch 8 (alloc of 4194304 B on stream 0, frames: x.py:3"),
            std::string::npos)
      << message;
  EXPECT_EQ(event, 0u);
  // Exactly 0 at batch 1 (1 MiB at batch 2, 3 MiB at batch 4): accepted.
  EXPECT_EQ(model_error({recording_of(2, {{'a', 1, 1 * MiB, ""}}),
                         recording_of(4, {{'a', 1, 3 * MiB, ""}})})
                .first,
            "");
}

// Scratch (freed within its operation) whose size is not affine, as cuDNN's workspaces were in a
// CNN recorded with PyTorch (1392656, 3801104 and 7012368 B at batch 2, 4 and 8): taken from the
// two recordings nearest each batch, counted and named; live longer, the same sizes are refused.
TEST(Preflight, ScratchNotAffineIsTakenFromTheNearestRecordingsAndNamed) {
  const auto rec = [](std::size_t b, std::size_t ws, std::size_t between) {
    std::vector<ev> e{{'a', 1, b * MiB, "m.py:1 in forward"}, {'a', 2, ws, "conv.py:9 in conv"}};
    for (std::size_t i = 0; i < between; ++i) e.push_back({'a', 10 + i, 4096, "m.py:2 in f"});
    e.push_back({'f', 2, 0, ""});
    e.push_back({'f', 1, 0, ""});
    return recording_of(b, e);
  };
  const auto ws = [](std::size_t b) { return b == 2 ? 2 * MiB : b == 4 ? 5 * MiB : 6 * MiB; };
  const gb::batch_model m({rec(2, ws(2), 0), rec(4, ws(4), 0), rec(8, ws(8), 0)});
  EXPECT_EQ(m.scratch(2).count, 1u);
  EXPECT_NE(m.scratch(2).first.find("event 1 of batch 8 (alloc of 6291456 B on stream 0, frames: "
                                    "conv.py:9 in conv"),
            std::string::npos)
      << m.scratch(2).first;
  const auto at = [&](std::size_t b) { return m.trace_at(b)[1].bytes; };
  EXPECT_EQ(at(16), 8 * MiB);           // 6 MiB + (6 - 5) MiB / 4 per batch above 8
  EXPECT_EQ(at(3), 3 * MiB + MiB / 2);  // between 2 and 4
  EXPECT_EQ(at(6), 5 * MiB + MiB / 2);
  EXPECT_EQ(at(1), 1 * MiB);                     // below 2: in proportion to it
  EXPECT_EQ(m.trace_at(16)[0].bytes, 16 * MiB);  // the affine tensor is still its line
  // Live across more than kScratchSpan events: not scratch, refused.
  const std::size_t n = gb::batch_model::kScratchSpan;
  const auto [message, event] = model_error({rec(2, ws(2), n), rec(4, ws(4), n), rec(8, ws(8), n)});
  EXPECT_NE(message.find("is not affine in the batch"), std::string::npos) << message;
  EXPECT_EQ(event, 1u) << message;
  // The report counts it per recording and names it.
  const auto r = gb::run_preflight(m, {16}, std::nullopt, 1, false);
  EXPECT_EQ(r.scratch, (std::vector<std::size_t>{1, 1, 1}));
  const auto j = gb::to_json(r);
  EXPECT_EQ(j.at("not_affine_scratch"), nlohmann::json({1, 1, 1}));
  const auto tables = gb::preflight_tables(r);
  bool named = false;
  for (const auto& note : tables.at(0).notes)
    named = named || note.find("event 1 of batch 8") != std::string::npos;
  EXPECT_TRUE(named);
}

// Scratch whose last segment rises though its first and last sizes are equal (64, 32, 64 MiB at
// 4, 8, 16; frameless, as the backward's are): the largest recording's model grows above 16.
TEST(Preflight, ScratchWhoseLastSegmentRisesMakesTheModelGrow) {
  const auto rec = [](std::size_t b, std::size_t ws) {
    std::vector<ev> e{{'a', 2, ws, ""}, {'f', 2, 0, ""}};
    for (std::uint64_t i = 10; i < 20; ++i) e.push_back({'a', i, 8 * MiB, ""});  // constants
    return recording_of(b, e);
  };
  const gb::batch_model m({rec(4, 64 * MiB), rec(8, 32 * MiB), rec(16, 64 * MiB)});
  EXPECT_TRUE(m.grows(2));
  EXPECT_GT(m.trace_at(32)[0].bytes, 64 * MiB);
}

// Two tensors that grow with the batch, the second twice the first (as a PyTorch job recorded on
// an H100 had them, without Python frames): at twice the batch the first is as large as the second
// was. Recordings of the same steps are matched position by position, not shifted onto the equal
// sizes, and the prediction is exact.
TEST(Preflight, TheSameStepsAreMatchedByPositionThoughSizesRecur) {
  const auto rec = [](std::size_t b) {
    return recording_of(b, {{'a', 1, b * 2 * MiB, ""},
                            {'a', 2, b * 4 * MiB, ""},
                            {'f', 2, 0, ""},
                            {'f', 1, 0, ""},
                            {'a', 3, 1 * MiB, ""},
                            {'f', 3, 0, ""}});
  };
  const gb::batch_model m({rec(2), rec(4), rec(8)});
  EXPECT_EQ(m.unmatched(0) + m.unmatched(1) + m.unmatched(2), 0u);
  const auto t = m.trace_at(16);
  ASSERT_EQ(t.size(), 6u);
  EXPECT_EQ(t[0].bytes, 32 * MiB);
  EXPECT_EQ(t[1].bytes, 64 * MiB);
  EXPECT_EQ(t[4].bytes, 1 * MiB);
}

// A constant allocation after an inserted workspace of another size (the same frames as it, or
// none): matched with itself (constant at every batch), the workspace kept at its size.
TEST(Preflight, AConstantIsMatchedWithItselfNotWithAnInsertedWorkspace) {
  for (const std::string frames : {"k.py:5 in step", ""}) {
    const gb::batch_model m({recording_of(4, {{'a', 1, 4 * MiB, frames}, {'f', 1, 0, ""}}),
                             recording_of(8, {{'a', 2, 6 * MiB, frames},
                                              {'a', 1, 4 * MiB, frames},
                                              {'f', 2, 0, ""},
                                              {'f', 1, 0, ""}})});
    EXPECT_FALSE(m.grows(1)) << frames;
    const auto t = m.trace_at(1024);
    ASSERT_EQ(t.size(), 4u);
    EXPECT_EQ(t[0].bytes, 6 * MiB) << frames;
    EXPECT_EQ(t[1].bytes, 4 * MiB) << frames;
    EXPECT_EQ(m.unmatched(1), 2u);
  }
}

// The model is piecewise (each batch is its closest recording's): batch 2's recording has a
// 200 MiB workspace batch 8's does not, so batches 1 to 4 never fit 60 MiB while 5 and 6 do. The
// search finds 6 (not 0, which one bisection over 0 .. 8 gives) and says the fit is not monotone.
TEST(Preflight, TheLargestBatchIsSearchedInEachRecordingsRangeOfBatches) {
  const gb::batch_model m({recording_of(2, {{'a', 1, 20 * MiB, "a.py:1 in f"},
                                            {'f', 1, 0, ""},
                                            {'a', 2, 200 * MiB, "w.py:2 in g"},
                                            {'f', 2, 0, ""}}),
                           recording_of(8, {{'a', 1, 80 * MiB, "a.py:1 in f"}, {'f', 1, 0, ""}})});
  const std::size_t limit = 60 * MiB;
  const auto fits = [&](std::size_t b) {
    const auto trace = m.trace_at(b);
    return gb::replay_under_limit(gb::prepare_trace(trace), {}, limit).fits();
  };
  bool monotone = true;
  const auto found = gb::largest_fitting_batch(m, {}, limit, &monotone);
  ASSERT_TRUE(found);
  EXPECT_GE(*found, 5u);
  EXPECT_TRUE(fits(*found)) << *found;
  EXPECT_FALSE(fits(*found + 1)) << *found;
  EXPECT_FALSE(fits(4));
  EXPECT_FALSE(monotone);
  const auto r = gb::run_preflight(m, {5}, limit, 2);
  ASSERT_TRUE(r.fit);
  EXPECT_FALSE(r.fit->monotone);
  EXPECT_EQ(gb::to_json(r)["largest_batch"]["monotone"], false);
  // A monotone one says so.
  bool m2 = false;
  (void)gb::largest_fitting_batch(gb::batch_model(recordings({2, 4, 8})), {}, 64 * MiB, &m2);
  EXPECT_TRUE(m2);
}

// One recording ends and the other goes on for more than the differences' limit (1024 steps of
// one allocation against 10240): refused where they part, not kept as one unchecked inserted
// stretch.
TEST(Preflight, ATailPastTheOtherRecordingsEndIsRefused) {
  const auto steps = [](std::size_t batch, std::uint64_t n) {
    std::vector<ev> v;
    for (std::uint64_t i = 1; i <= n; ++i) {
      v.push_back({'a', i, 4096, "x.py:1 in step"});
      v.push_back({'f', i, 0, ""});
    }
    return recording_of(batch, v);
  };
  const auto [message, event] = model_error({steps(1, 1024), steps(2, 10240)});
  EXPECT_NE(message.find("part at their event 2048 / 2048: one ends there"), std::string::npos)
      << message;
  EXPECT_EQ(event, 2048u);
}

// Frees in LIFO order around an inserted workspace of the same size and site as a constant (batch
// 8 [alloc W, alloc K, free K, free W] against batch 4 [alloc K, free K]): aligned (the
// allocations alone, each free with its block's), not refused.
TEST(Preflight, AnInsertionWithLifoFreesIsAligned) {
  for (const std::string frames : {"k.py:5 in step", ""}) {
    const gb::batch_model m({recording_of(4, {{'a', 1, 4 * MiB, frames}, {'f', 1, 0, ""}}),
                             recording_of(8, {{'a', 2, 4 * MiB, frames},
                                              {'a', 1, 4 * MiB, frames},
                                              {'f', 1, 0, ""},
                                              {'f', 2, 0, ""}})});
    EXPECT_EQ(m.unmatched(1), 2u) << frames;
    EXPECT_FALSE(m.grows(1)) << frames;
    EXPECT_EQ(gb::predict_at(m, 64, {}).peak_allocated, 8 * MiB) << frames;
  }
}

// A frame's text is bounded (a snapshot of long file names and functions would otherwise hold
// every allocation's frames whole): cut at 512 characters, "..." after it.
TEST(Preflight, LongFramesAreCutWhenRead) {
  const auto dir = scratch("preflight_frames");
  auto r = recording_of(2, {{'a', 1, 4096, std::string(5000, 'n')}, {'f', 1, 0, ""}});
  write_job_snapshot(dir / "long.pickle", r);
  const gb::batch_recording read = gb::read_batch_recording((dir / "long.pickle").string(), 2);
  ASSERT_EQ(read.frames.size(), 2u);
  EXPECT_EQ(read.frames[0].size(), 512u + 3u) << read.frames[0].substr(0, 40);
  EXPECT_EQ(read.frames[0].substr(0, 14), "model.py:5000 ");
  EXPECT_EQ(read.frames[0].substr(512), "...");
}

// `--html`: the page's chart draws the report's curve (the JSON's "curve"): both policies at every
// batch of it, reaching past the largest batch, the limit and each policy's largest batch as the
// JSON's largest_batch; the terminal's tables under it. An unwritable page: exit 7, nothing
// written.
TEST(Preflight, ThePageDrawsTheJsonsCurveLimitAndLargestBatches) {
  const auto dir = scratch("preflight_html");
  job j;
  j.workspaces_from = 8;
  std::vector<std::string> args;
  for (const std::size_t b : {2u, 4u, 8u}) {
    args.push_back((dir / ("b" + std::to_string(b) + ".pickle")).string());
    write_job_snapshot(args.back(), job_at(b, j));
  }
  for (const char* a : {"--batches", "2,4,8", "--at", "16", "--fit", "256MiB"}) args.push_back(a);
  std::string err;
  const auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv{"gpu-basics", "preflight"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::ostringstream po, pe, so, se;
    const auto parsed = gb::cli::parse(argv, po, pe);
    if (!parsed.opts) {
      err = pe.str();
      return parsed.exit_code;
    }
    const int rc = gb::cli::run(*parsed.opts, so, se);
    err = se.str();
    return rc;
  };
  const std::string json_path = (dir / "p.json").string(), html_path = (dir / "p.html").string();
  ASSERT_EQ(run({"--json", json_path, "--html", html_path}), gb::cli::exit_ok) << err;
  const auto js = nlohmann::json::parse(read_bytes(json_path));
  const std::string html = read_bytes(html_path);
  const std::string open = "<script type=\"application/json\" id=\"gb-charts\">";
  const auto from = html.find(open);
  ASSERT_NE(from, std::string::npos);
  const auto to = html.find("</script>", from);
  const auto specs =
      nlohmann::json::parse(html.substr(from + open.size(), to - from - open.size()));
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0]["id"], "preflight-peaks");
  const auto& config = specs[0]["config"];
  const auto& datasets = config["data"]["datasets"];
  ASSERT_EQ(datasets.size(), 2u);

  // The points: the JSON's curve, defaults then the recommendation at each batch.
  const auto& curve = js["curve"];
  ASSERT_TRUE(curve.is_array());
  ASSERT_EQ(curve.size() % 2, 0u);
  const std::size_t n = curve.size() / 2;
  EXPECT_GE(n, gb::kCurvePoints);
  for (std::size_t w = 0; w < 2; ++w) {
    const auto& data = datasets[w]["data"];
    ASSERT_EQ(data.size(), n) << w;
    for (std::size_t k = 0; k < n; ++k) {
      const auto& p = curve[2 * k + w];
      EXPECT_EQ(p["which"], w == 0 ? "defaults" : "recommended");
      EXPECT_EQ(data[k]["x"].get<double>(), p["batch"].get<double>()) << k;
      EXPECT_EQ(data[k]["y"].get<double>(), p["peak_reserved_bytes"].get<double>()) << k;
    }
  }
  // The curve holds the recorded batches and --at's prediction as the predictions have it.
  std::map<std::size_t, nlohmann::json> by_batch;
  for (std::size_t k = 0; k < n; ++k)
    by_batch[curve[2 * k]["batch"].get<std::size_t>()] = curve[2 * k];
  for (const std::size_t b : {2u, 4u, 8u, 16u}) EXPECT_TRUE(by_batch.count(b)) << b;
  EXPECT_EQ(by_batch[16]["peak_reserved_bytes"], js["predictions"][0]["peak_reserved_bytes"]);

  // The limit and the largest batches: the JSON's.
  const auto& lb = js["largest_batch"];
  ASSERT_TRUE(lb["defaults"].is_number() && lb["recommended"].is_number()) << lb;
  const auto d = lb["defaults"].get<std::size_t>(), r = lb["recommended"].get<std::size_t>();
  ASSERT_GT(d, 8u);
  const auto& ann = config["options"]["plugins"]["annotation"]["annotations"];
  EXPECT_EQ(ann["limit"]["yMin"].get<double>(), lb["limit_bytes"].get<double>());
  if (d == r) {
    EXPECT_EQ(ann["largest"]["xMin"].get<double>(), static_cast<double>(d)) << ann;
  } else {
    EXPECT_EQ(ann["largest_defaults"]["xMin"].get<double>(), static_cast<double>(d)) << ann;
    EXPECT_EQ(ann["largest_recommended"]["xMin"].get<double>(), static_cast<double>(r)) << ann;
  }
  // Past the largest batch: a quarter past the larger one.
  const auto top = static_cast<double>(std::max(d, r));
  EXPECT_EQ(curve[curve.size() - 1]["batch"].get<double>(), std::ceil(1.25 * top));
  EXPECT_TRUE(by_batch.count(d) && by_batch.count(r));
  // The tables the terminal shows.
  for (const char* title : {"Predicted peaks", "The largest batch that fits", "the recordings"})
    EXPECT_NE(html.find(title), std::string::npos) << title;

  // Without --html, no curve; a page that cannot be written: exit 7, one line, nothing written.
  ASSERT_EQ(run({"--json", json_path}), gb::cli::exit_ok) << err;
  EXPECT_FALSE(nlohmann::json::parse(read_bytes(json_path)).contains("curve"));
  const std::string none = (dir / "none.json").string();
  // (Its directory is a file.)
  EXPECT_EQ(run({"--json", none, "--html", (dir / "b2.pickle" / "p.html").string()}),
            gb::cli::exit_io);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("p.html"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(none));
  EXPECT_EQ(run({"--html", "-"}), gb::cli::exit_usage);
  EXPECT_NE(err.find("--html needs a file path"), std::string::npos) << err;
}

// The page of a report made by hand: each policy's largest batch as its own line where they
// differ, none where no batch fits or every batch does, no limit without a fit; the points the
// predictions where there is no curve.
TEST(Preflight, ThePageMarksEachPolicysLargestBatchAsTheReportHasIt) {
  gb::preflight_report r;
  r.files = {"a.pickle", "b.pickle"};
  r.batches = {2, 4};
  r.events = {10, 10};
  r.unmatched = {0, 0};
  r.recommended = "expandable_segments:True";
  for (const std::size_t b : {2u, 4u})
    for (const char* w : {"defaults", "recommended"})
      r.predictions.push_back({b, w, w[0] == 'd' ? "" : r.recommended, b * MiB, 2 * b * MiB});
  const auto chart_of = [](const std::string& html) {
    const std::string open = "<script type=\"application/json\" id=\"gb-charts\">";
    const auto from = html.find(open) + open.size();
    return nlohmann::json::parse(html.substr(from, html.find("</script>", from) - from))[0];
  };
  const auto annotations = [&](const gb::preflight_report& x) {
    return chart_of(gb::report::render_preflight_html(
        x))["config"]["options"]["plugins"]["annotation"]["annotations"];
  };
  // No fit: the predictions drawn, no line.
  const auto c = chart_of(gb::report::render_preflight_html(r));
  ASSERT_EQ(c["config"]["data"]["datasets"].size(), 2u);
  EXPECT_EQ(c["config"]["data"]["datasets"][1]["data"].size(), 2u);
  EXPECT_NE(c["config"]["data"]["datasets"][1]["label"].get<std::string>().find(r.recommended),
            std::string::npos);
  EXPECT_TRUE(annotations(r).empty());
  // Different largest batches: two lines; none found (0) or every batch (nullopt): none.
  r.fit = gb::preflight_fit{64 * MiB, 40, 52, r.recommended, true};
  auto a = annotations(r);
  EXPECT_EQ(a["limit"]["yMin"].get<double>(), 64.0 * MiB);
  EXPECT_EQ(a["largest_defaults"]["xMin"].get<double>(), 40.0);
  EXPECT_EQ(a["largest_recommended"]["xMin"].get<double>(), 52.0);
  EXPECT_FALSE(a.contains("largest"));
  r.fit->defaults = 0;
  r.fit->recommended = std::nullopt;
  a = annotations(r);
  EXPECT_TRUE(a.contains("limit"));
  EXPECT_EQ(a.size(), 1u) << a;
  // No batch to reach past: the curve is the recorded and --at batches alone.
  EXPECT_EQ(gb::preflight_curve_batches(r), (std::vector<std::size_t>{2, 4}));
  r.fit->recommended = 100;
  const auto batches = gb::preflight_curve_batches(r);
  EXPECT_EQ(batches.front(), 2u);
  EXPECT_EQ(batches.back(), 125u);
  EXPECT_TRUE(std::is_sorted(batches.begin(), batches.end()));
  EXPECT_GE(batches.size(), gb::kCurvePoints);
  EXPECT_NE(std::find(batches.begin(), batches.end(), 100u), batches.end());
}
