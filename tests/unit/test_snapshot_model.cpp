// The snapshot model: a PyTorch memory snapshot read from its pickle (and one written from an
// allocator's history), and what is not a snapshot refused in one line.
#include <algorithm>
#include <csignal>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/fake_backend.hpp"
#include "gpu_basics/snapshot/pickle.hpp"
#include "gpu_basics/snapshot/policy_sweep.hpp"
#include "gpu_basics/snapshot/replay.hpp"
#include "gpu_basics/snapshot/snapshot.hpp"

#include "snapshot_test_util.hpp"

using namespace snapshot_test;

TEST(Snapshot, ReadsAProtocol4SnapshotPythonWrites) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  const auto dir = scratch("py4");
  // The structure _dump_snapshot pickles, with 3000 events on device 1 (memoized keys, frames).
  run_command(
      "python3 -c \"import pickle,sys\nev=[]\nfor i in range(1000):\n"
      " a=0x7f0000000000+i*4096\n"
      " ev+= [dict(action='alloc',addr=a,size=512,stream=7,time_us=i,frames=[]),"
      "dict(action='free_requested',addr=a,size=512,stream=7,time_us=i,frames=[]),"
      "dict(action='free_completed',addr=a,size=512,stream=7,time_us=i,frames=[])]\n"
      "seg=dict(device=1,address=0x7f0000000000,total_size=2097152,allocated_size=0,"
      "active_size=0,requested_size=0,stream=7,segment_type='small',segment_pool_id=(0,0),"
      "is_expandable=False,frames=[],blocks=[dict(address=0x7f0000000000,size=2097152,"
      "requested_size=0,state='inactive',frames=[])])\n"
      "ev.insert(0,dict(action='segment_alloc',addr=0x7f0000000000,size=2097152,stream=7,"
      "time_us=0,frames=[{'filename':'x.py','line':3,'name':'f'}]))\n"
      "open(sys.argv[1],'wb').write(pickle.dumps(dict(segments=[seg],device_traces=[[],ev],"
      "allocator_settings=dict(PYTORCH_CUDA_ALLOC_CONF='expandable_segments:False')),"
      "protocol=4))\" " +
      (dir / "s.pickle").string());
  const std::string bytes = read_bytes(dir / "s.pickle");
  ASSERT_GT(bytes.size(), 2u);
  EXPECT_EQ(bytes[1], 4);
  const auto s = gb::read_torch_snapshot((dir / "s.pickle").string());
  EXPECT_EQ(s.busiest_device(), 1);
  ASSERT_EQ(s.device_traces.size(), 2u);
  ASSERT_EQ(s.device_traces[1].size(), 3001u);
  EXPECT_EQ(s.device_traces[1][0].action, gb::torch_action::segment_alloc);
  EXPECT_EQ(s.device_traces[1][3000].action, gb::torch_action::free_completed);
  EXPECT_EQ(s.device_traces[1][2998].addr, 0x7f0000000000u + 999 * 4096);
  EXPECT_EQ(s.device_traces[1][2998].stream, 7);
  EXPECT_EQ(s.segments.at(0).device, 1);
  EXPECT_TRUE(s.segments.at(0).small);
  EXPECT_EQ(s.alloc_conf, "expandable_segments:False");
  const auto trace = gb::to_replay_trace(s, 1);
  EXPECT_EQ(trace.size(), 2000u);  // free_completed after free_requested adds nothing
  const auto r = gb::replay_trace(trace, {});
  EXPECT_EQ(r.peak_reserved, 2 * MiB);
  EXPECT_EQ(gb::recorded(s, 1).peak_reserved, 2 * MiB);
}

TEST(Snapshot, WrittenFromAnAllocatorLoadsInPython) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  auto backend = std::make_shared<gb::fake_backend>(std::size_t{1} << 30);
  gb::allocator_options o;
  o.history_capacity = 1000;
  gb::caching_allocator a(backend, o);
  std::vector<void*> keep;
  for (std::size_t n : {std::size_t{1000}, 300 * 1024ul, 3 * MiB, 25 * MiB})
    keep.push_back(a.allocate(n, 0));
  a.deallocate(a.allocate(64 * 1024, 1));
  a.deallocate(keep[1]);
  a.deallocate(keep[2]);
  const auto segments = a.segments();
  const auto history = a.history();
  std::size_t allocs = 0, frees = 0, completed = 0;
  for (const auto& e : history) {
    allocs += e.kind == gb::history_kind::alloc;
    frees += e.kind == gb::history_kind::free;
    completed += e.kind == gb::history_kind::free_completed;
  }
  // Every free gets a free_completed: from the history, or added by the writer.
  const std::size_t events = history.size() + frees - completed;

  ASSERT_EQ(allocs, 5u);
  ASSERT_EQ(frees, 3u);
  std::size_t blocks = 0;
  for (const auto& s : segments) blocks += s.blocks.size();
  const auto dir = scratch("ours");
  const std::string path = (dir / "ours.pickle").string();
  gb::write_snapshot(path, segments, history, 1, o);
  const auto j = nlohmann::json::parse(run_command(
      "python3 -c \"import pickle,sys,json,collections\ns=pickle.load(open(sys.argv[1],'rb'))\n"
      "t=s['device_traces']\nprint(json.dumps(dict(keys=sorted(s),"
      "segments=len(s['segments']),blocks=sum(len(g['blocks']) for g in s['segments']),"
      "segment_keys=sorted(s['segments'][0]),block_keys=sorted(s['segments'][0]['blocks'][0]),"
      "event_keys=sorted(t[1][0]),traces=[len(x) for x in t],"
      "actions=collections.Counter(e['action'] for e in t[1]),"
      "device=s['segments'][0]['device'],conf=s['allocator_settings']['PYTORCH_CUDA_ALLOC_CONF'],"
      "addr_ok=all(b['address']>=g['address'] for g in s['segments'] for b in g['blocks']))))\" " +
      path));
  EXPECT_EQ(j["keys"], nlohmann::json({"allocator_settings", "device_traces",
                                       "external_annotations", "segments"}));
  EXPECT_EQ(j["segments"], segments.size());
  EXPECT_EQ(j["blocks"], blocks);
  EXPECT_EQ(j["segment_keys"],
            nlohmann::json({"active_size", "address", "allocated_size", "blocks", "device",
                            "frames", "is_expandable", "requested_size", "segment_pool_id",
                            "segment_type", "stream", "total_size"}));
  EXPECT_EQ(j["block_keys"],
            nlohmann::json({"address", "frames", "requested_size", "size", "state"}));
  EXPECT_EQ(j["event_keys"],
            nlohmann::json({"action", "addr", "frames", "size", "stream", "time_us"}));
  EXPECT_EQ(j["traces"][0], 0);
  EXPECT_EQ(j["traces"][1], events);  // each free: requested, then completed
  EXPECT_EQ(j["actions"]["alloc"], allocs);
  EXPECT_EQ(j["actions"]["free_requested"], frees);
  EXPECT_EQ(j["actions"]["free_completed"], frees);
  EXPECT_EQ(j["device"], 1);
  EXPECT_EQ(j["conf"], "");
  EXPECT_EQ(j["addr_ok"], true);
  // And our own reader agrees.
  const auto back = gb::read_torch_snapshot(path);
  EXPECT_EQ(back.segments.size(), segments.size());
  EXPECT_EQ(back.device_traces.at(1).size(), events);
  for (auto* p : keep)
    if (p != keep[1] && p != keep[2]) a.deallocate(p);
}

TEST(Snapshot, AFreeAwaitingOtherStreamsCompletesWhereTheHistorySays) {
  using gb::history_kind;
  const std::vector<gb::history_event> h = {
      {history_kind::segment_alloc, 1000, 0x1000, 2 * MiB, 0},
      {history_kind::alloc, 2000, 0x1000, 4096, 0},
      {history_kind::free, 3000, 0x1000, 4096, 0},  // used on stream 5: pending
      {history_kind::alloc, 4000, 0x2000, 4096, 0},
      {history_kind::free_completed, 5000, 0x1000, 4096, 0},
      {history_kind::free, 6000, 0x2000, 4096, 0},  // completes at once
  };
  std::ostringstream out;
  gb::write_snapshot(out, {}, h);
  const value v = pk::read(out.str());
  std::vector<std::string> actions;
  for (const auto& e : v.find("device_traces")->as_items().at(0).as_items())
    actions.push_back(e.find("action")->as_str() + "@" +
                      std::to_string(e.find("time_us")->as_int()));
  EXPECT_EQ(actions,
            (std::vector<std::string>{"segment_alloc@1", "alloc@2", "free_requested@3", "alloc@4",
                                      "free_completed@5", "free_requested@6", "free_completed@6"}));
}

TEST(Snapshot, RejectsWhatIsNotASnapshotInOneLineNamingTheFile) {
  const auto dir = scratch("bad");
  const auto snapshot_of = [](value root) { return pk::dumps(root); };
  value no_segments = value::dict();
  no_segments.set("device_traces", value::list());
  value no_traces = value::dict();
  no_traces.set("segments", value::list());
  value empty_traces = value::dict();
  empty_traces.set("segments", value::list());
  empty_traces.set("device_traces", value::list({value::list(), value::list()}));
  value bad_event = value::dict();
  bad_event.set("segments", value::list());
  value ev = value::dict();
  ev.set("action", value::str("alloc"));
  ev.set("addr", value::str("0x10"));
  bad_event.set("device_traces", value::list({value::list({ev})}));
  const std::string good = read_bytes(kData + "/snapshot_small.pickle");
  // A str field far longer than any real one (used again and again through the memo, it would be
  // copied each time).
  const value long_action = snapshot_of_trace({trace_event(std::string(5000, 'x'), 16, 512)});
  const std::pair<std::string, std::string> cases[] = {
      {snapshot_of(long_action),
       "device_traces[0][0] 'action' is a str of 5000 bytes; at most 4096 are read"},
      {std::string("\x80\x02\x00\x00", 4),
       "pickle: opcode 0x00 (only plain data is read: no classes, no calls) at offset 2"},
      {"{\"schema_version\": 2}", "not a pickle"},
      {"", "empty file"},
      {good.substr(0, good.size() / 2), "truncated"},
      {snapshot_of(value::list({value::integer(1)})),
       "a pickle of a list, not a PyTorch memory snapshot"},
      {snapshot_of(no_segments), "a pickled dict without 'segments'"},
      {snapshot_of(no_traces),
       "without 'device_traces' (taken without recording history): record one with "
       "torch.cuda.memory._record_memory_history("},
      {snapshot_of(empty_traces), "device_traces are empty"},
      {snapshot_of(bad_event), "device_traces[0][0] 'addr' is a str, expected an int"},
  };
  int i = 0;
  for (const auto& [bytes, message] : cases) {
    const auto path = (dir / ("case" + std::to_string(i++) + ".pickle")).string();
    write_bytes(path, bytes);
    try {
      (void)gb::read_torch_snapshot(path);
      ADD_FAILURE() << message << ": read";
    } catch (const gb::format_error& e) {
      const std::string w = e.what();
      EXPECT_EQ(w.rfind(path + ": ", 0), 0u) << w;
      EXPECT_NE(w.find(message), std::string::npos) << w;
      EXPECT_EQ(w.find('\n'), std::string::npos) << w;
    }
  }
}

TEST(SnapshotStream, ABadEntryLateInATraceIsNamedByItsIndex) {
  // 2500 entries in batches of 1000: the one at 1500 is in the second, after entries taken.
  pk::items events;
  for (int i = 0; i < 2500; ++i) events.push_back(trace_event("alloc", 4096 * (i + 1), 512));
  value bad = value::dict();
  bad.set("action", value::str("alloc"));
  bad.set("addr", value::str("0x10"));
  events[1500] = bad;
  const std::string bytes = pk::dumps(snapshot_of_trace(events));
  try {
    (void)gb::parse_torch_snapshot(bytes, "s.pickle");
    ADD_FAILURE() << "read";
  } catch (const gb::format_error& x) {
    EXPECT_EQ(std::string(x.what()),
              "s.pickle: device_traces[0][1500] 'addr' is a str, expected an int");
  }
}
