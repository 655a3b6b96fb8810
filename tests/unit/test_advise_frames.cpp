// Where in the user's code: advise reads the Python frames of the requests it names (at peak
// reserved, at peak allocated, the first to fail under a limit) from a snapshot recorded with
// stacks, maps replayed events to the trace's entries (blocks alive before recording come first
// in the replay and have no entry), prints the user's frames and keeps them all in its JSON.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpu_basics/snapshot/advise.hpp"
#include "snapshot_test_util.hpp"

using snapshot_test::have_python;
using snapshot_test::MiB;
using snapshot_test::run_command;
using snapshot_test::scratch;

namespace {

/// A snapshot pickle written by CPython (frame dicts shared, so memoised), one device, frames as
/// stacks="all" records them (20 C++ frames before the Python ones): a 5 MiB
/// block alive before recording (freed first), then requests each made at its own model.py line
/// under shared frames of train.py and PyTorch's linear.py; frees carry no frames.
const char* kMake = R"PY(
import pickle, sys
MiB = 1 << 20
step = {"filename": "train.py", "line": 42, "name": "step"}
main = {"filename": "train.py", "line": 90, "name": "main"}
torch = {"filename": "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py",
         "line": 125, "name": "forward"}
# PyTorch's default stacks="all": C++ frames first, more than any cap on frames kept.
cpp = [{"filename": "/pytorch/c10/cuda/CUDACachingAllocator.cpp", "line": 1000 + k,
        "name": "malloc"} for k in range(20)]
trace = []
def ev(action, i, size, frames):
    trace.append({"action": action, "addr": (1 << 32) + i * 64 * MiB, "size": size, "stream": 0,
                  "time_us": len(trace), "frames": frames})
def alloc(i, size, line, name):
    ev("alloc", i, size,
       cpp + [torch, {"filename": "model.py", "line": line, "name": name}, step, main])
def free(i, size):
    ev("free_requested", i, size, [])
    ev("free_completed", i, size, [])
free(9, 5 * MiB)
alloc(0, 30 * MiB, 10, "embed")
alloc(1, 12 * MiB, 11, "attn")
free(0, 30 * MiB)
alloc(2, 40 * MiB, 12, "mlp")
alloc(3, 3 * MiB, 13, "norm")
free(1, 12 * MiB); free(2, 40 * MiB); free(3, 3 * MiB)
pickle.dump({"segments": [], "device_traces": [trace]}, open(sys.argv[1], "wb"), protocol=4)
)PY";

}  // namespace

TEST(AdviseFrames, TheNamedRequestsCarryTheirOwnFrames) {
  if (!have_python()) GTEST_SKIP() << "no python3 to write a snapshot with frames";
  const auto dir = scratch("frames");
  const std::string path = (dir / "s.pickle").string();
  { std::ofstream(dir / "make.py") << kMake; }
  run_command("python3 " + (dir / "make.py").string() + " " + path);
  const gb::torch_snapshot s = gb::read_torch_snapshot(path);
  const auto policies = gb::advise_policies({}, true);
  gb::advice a = gb::advise_snapshot(s, "s", 0, policies, {56 * MiB}, 1);
  ASSERT_TRUE(gb::attach_frames(a, s, path));
  // Peak reserved: the 40 MiB request (mlp), with 38 MiB cached too small for it.
  const std::vector<std::string> mlp = {
      "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py:125 in forward",
      "model.py:12 in mlp", "train.py:42 in step", "train.py:90 in main"};
  EXPECT_EQ(a.defaults.stranded.request_bytes, 40 * MiB);
  EXPECT_EQ(a.defaults.stranded.frames, mlp);
  // Under 56 MiB the 40 MiB request fails: the 12 MiB block holds the 20 MiB segment that the
  // block alive before recording left, and 20 + 40 MiB pass the limit. Peak allocated comes with
  // the 3 MiB request after it (norm).
  const auto& fit = a.policies[0].fits.at(0);
  ASSERT_TRUE(fit.oom);
  EXPECT_EQ(fit.oom->request_bytes, 40 * MiB);
  EXPECT_EQ(fit.oom->frames, mlp);
  EXPECT_EQ(a.defaults.stranded_at_allocated.request_bytes, 3 * MiB);
  ASSERT_EQ(a.defaults.stranded_at_allocated.frames.size(), 4u);
  EXPECT_EQ(a.defaults.stranded_at_allocated.frames[1], "model.py:13 in norm");

  // The JSON keeps every frame; advice read back from it shows the same.
  const nlohmann::json j = gb::to_json(a);
  EXPECT_EQ(j["defaults"]["peak_reserved_frames"], mlp);
  const gb::advice back = gb::advice_from_json(j, "advice.json");
  EXPECT_EQ(back.defaults.stranded.frames, mlp);
  EXPECT_EQ(back.policies[0].fits.at(0).oom->frames, fit.oom->frames);

  // The text shows the user's frames, PyTorch's own left to the JSON.
  std::string text;
  for (const auto& t : gb::advice_tables(a)) text += gb::presentation::render_text(t);
  EXPECT_NE(text.find("Allocated at: model.py:12 in mlp; train.py:42 in step; train.py:90 in "
                      "main (1 more frames in the JSON)."),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("a request of 40.0 MiB on stream 0x0; after freeing the cache: 12.0 MiB "
                      "allocated, 20.0 MiB reserved, largest free block 8.0 MiB. Allocated at: "
                      "model.py:12 in mlp"),
            std::string::npos)
      << text;
  std::filesystem::remove_all(dir);
}

TEST(AdviseFrames, ASnapshotWithoutStacksHasNone) {
  // The committed snapshot was recorded without stacks: nothing attached, nothing printed.
  const std::string path = snapshot_test::kData + "/h200_torch_snapshot.pickle";
  const gb::torch_snapshot s = gb::read_torch_snapshot(path);
  gb::advice a = gb::advise_snapshot(s, "h200", s.busiest_device(), gb::advise_policies({}), {}, 2);
  EXPECT_FALSE(gb::attach_frames(a, s, path));
  EXPECT_TRUE(a.defaults.stranded.frames.empty());
  std::string text;
  for (const auto& t : gb::advice_tables(a)) text += gb::presentation::render_text(t);
  EXPECT_EQ(text.find("Allocated at"), std::string::npos);
}

namespace {

gpu_basics::torch_trace_event entry(gpu_basics::torch_action a, std::uint64_t addr,
                                    std::uint64_t size) {
  gpu_basics::torch_trace_event e;
  e.action = a;
  e.addr = addr;
  e.size = size;
  return e;
}

}  // namespace

// A snapshot taken at an out-of-memory error ends in the oom entry of the request that failed
// (then perhaps the segments freed before PyTorch gave up): it becomes the last allocation, at an
// address no block has. Where the job went on after it, or there is none, nothing changes.
TEST(AdviseFrames, TheFailedRequestAtTheEndIsReplayedLast) {
  using gpu_basics::torch_action;
  gpu_basics::torch_snapshot s;
  s.device_traces.push_back({entry(torch_action::alloc, 1 << 20, 8 * MiB),
                             entry(torch_action::oom, 0, 64 * MiB),
                             entry(torch_action::segment_free, 40 * MiB, 20 * MiB)});
  gpu_basics::torch_snapshot went_on = s;
  went_on.device_traces[0].push_back(entry(torch_action::alloc, 1 << 20, 4 * MiB));
  gpu_basics::torch_snapshot none;
  none.device_traces.push_back({entry(torch_action::alloc, 1 << 20, 8 * MiB)});

  EXPECT_EQ(gpu_basics::replay_failed_request(s, 0), 64 * MiB);
  const auto& e = s.device_traces[0][1];
  EXPECT_EQ(e.action, torch_action::alloc);
  EXPECT_GT(e.addr, 60 * MiB);  // above every address the trace names
  const auto replay = gpu_basics::to_replay_trace(s, 0);
  ASSERT_EQ(replay.size(), 2u);
  EXPECT_EQ(replay.back().bytes, 64 * MiB);
  EXPECT_NE(replay.back().id, replay.front().id);

  EXPECT_FALSE(gpu_basics::replay_failed_request(went_on, 0));
  EXPECT_EQ(went_on.device_traces[0][1].action, torch_action::oom);
  EXPECT_FALSE(gpu_basics::replay_failed_request(none, 0));
  EXPECT_FALSE(gpu_basics::replay_failed_request(none, 3));
}
