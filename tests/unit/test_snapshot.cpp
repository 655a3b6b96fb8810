// The pickle reader and writer, PyTorch memory snapshots both ways, and `gpu-basics replay`.
// Tests that need python3 (to write pickles as CPython does, or to load ours) skip without it.
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "exit_codes.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/fake_backend.hpp"
#include "gpu_basics/snapshot/pickle.hpp"
#include "gpu_basics/snapshot/replay.hpp"
#include "gpu_basics/snapshot/snapshot.hpp"
#include "replay.hpp"
#include "run.hpp"

namespace gb = gpu_basics;
namespace pk = gpu_basics::pickle;
using pk::value;

namespace {

constexpr std::uint64_t MiB = 1 << 20;
const std::string kData = std::string(GPU_BASICS_SOURCE_DIR) + "/tests/data";

/// A fresh scratch directory per test.
std::filesystem::path scratch(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() /
                 ("gpu_basics_snapshot_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

bool have_python() {
  return std::system("python3 -c 'import pickle' >/dev/null 2>&1") == 0;
}

/// Runs `cmd` and returns its stdout; fails the test on a non-zero exit.
std::string run_command(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    ADD_FAILURE() << "cannot run " << cmd;
    return out;
  }
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  EXPECT_EQ(rc, 0) << cmd << "\n" << out;
  return out;
}

std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::filesystem::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary) << s;
}

/// A string literal's bytes, NULs included.
template <std::size_t N>
std::string bytes_of(const char (&s)[N]) {
  return {s, N - 1};
}

/// The message of the format_error that reading `bytes` throws ("" if none).
std::string read_error(const std::string& bytes, pk::read_limits limits = {}) {
  try {
    (void)pk::read(bytes, limits);
  } catch (const gb::format_error& e) {
    return e.what();
  }
  return "";
}

value sample_value() {
  value d = value::dict();
  value ints = value::list();
  for (std::int64_t i :
       {std::int64_t{0}, std::int64_t{1}, std::int64_t{255}, std::int64_t{256}, std::int64_t{65535},
        std::int64_t{65536}, std::int64_t{-1}, std::int64_t{-129}, std::int64_t{INT32_MIN},
        std::int64_t{INT32_MAX}, std::int64_t{1} << 32, (std::int64_t{1} << 47) + 5,
        std::int64_t{0x7f5a04000000}, INT64_MIN, INT64_MAX, -(std::int64_t{1} << 40)})
    ints.append(value::integer(i));
  d.set("ints", ints);
  d.set("reals", value::list({value::real(0.5), value::real(-1e300), value::real(0.0)}));
  d.set("text", value::list({value::str(""), value::str("ascii"), value::str("µs – ✓ 😀")}));
  d.set("flags", value::tuple({value::boolean(true), value::boolean(false), value()}));
  d.set("tuples",
        value::list({value::tuple(), value::tuple({value::integer(1)}),
                     value::tuple({value::integer(1), value::integer(2)}),
                     value::tuple({value::integer(1), value::integer(2), value::integer(3)}),
                     value::tuple({value::integer(1), value::integer(2), value::integer(3),
                                   value::integer(4)})}));
  value big = value::list();
  for (int i = 0; i < 2500; ++i) big.append(value::integer(i * 7919));  // three batches
  d.set("big", big);
  value wide = value::dict();
  for (int i = 0; i < 1200; ++i)
    wide.set(value::integer(i), value::str("k" + std::to_string(i % 3)));
  d.set(value::integer(-7), wide);
  d.set("empty", value::dict());
  return d;
}

}  // namespace

// ---- pickle -------------------------------------------------------------------------------

TEST(Pickle, RoundTripsEveryType) {
  const value v = sample_value();
  const std::string bytes = pk::dumps(v);
  EXPECT_EQ(static_cast<unsigned char>(bytes[0]), 0x80);
  EXPECT_EQ(bytes[1], 2);  // protocol 2: memory_viz reads 2-4
  const value back = pk::read(bytes);
  EXPECT_TRUE(back == v);
  EXPECT_EQ(back.find("ints")->as_items()[13].as_int(), INT64_MIN);
  EXPECT_EQ(back.find(std::int64_t{-7})->as_entries().size(), 1200u);
  // Bytes (never in a snapshot) take protocol 3.
  const value b = value::list({value::bytes(std::string("\0\xff", 2))});
  EXPECT_EQ(pk::dumps(b)[1], 3);
  EXPECT_TRUE(pk::read(pk::dumps(b)) == b);
}

TEST(Pickle, WriterEmitsOnlyOpcodesMemoryVizReads) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  const auto dir = scratch("opcodes");
  write_bytes(dir / "v.pickle", pk::dumps(sample_value()));
  const std::string names = run_command(
      "python3 -c \"import pickletools,sys; print(' '.join(sorted({o.name for o,a,p in "
      "pickletools.genops(open(sys.argv[1],'rb').read())})))\" " +
      (dir / "v.pickle").string());
  // The opcodes of unpickle() in torch/utils/viz/MemoryViz.js.
  const std::set<std::string> memory_viz = {
      "APPENDS",    "BINGET",      "BININT",  "BININT1",     "BININT2",
      "EMPTY_DICT", "EMPTY_LIST",  "FRAME",   "LONG1",       "LONG_BINGET",
      "MARK",       "MEMOIZE",     "PROTO",   "SETITEMS",    "SHORT_BINUNICODE",
      "STOP",       "TUPLE2",      "APPEND",  "NEWFALSE",    "BINPUT",
      "BINUNICODE", "EMPTY_TUPLE", "NEWTRUE", "NONE",        "BINFLOAT",
      "TUPLE",      "TUPLE1",      "TUPLE3",  "LONG_BINPUT", "LIST",
      "DICT",       "SETITEM"};
  std::istringstream in(names);
  std::string name;
  int n = 0;
  for (; in >> name; ++n)
    EXPECT_TRUE(memory_viz.count(name)) << name << " is not read by memory_viz";
  EXPECT_GE(n, 10);  // the sample uses most of them: the list above was really compared
}

TEST(Pickle, ReadsWhatCPythonWritesInEveryProtocol) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  const auto dir = scratch("cpython");
  // A shared list and repeated strings: CPython memoizes them and writes GETs.
  run_command(
      "python3 -c \"import pickle,sys\nshared=[1,2]\nv={'a':[shared,shared,'key','key'],"
      "'big':2**47+5,'neg':-2**63,'huge_pos':2**63-1,'f':1.5,'u':'\\u00b5s \\u2713','t':(1,),"
      "'t4':(1,2,3,4),'b':b'\\x00\\xff','n':None,'yes':True,7:'int key'}\n"
      "w={k:x for k,x in v.items() if k!='b'}\n"
      "for p in range(6): open(sys.argv[1]+str(p),'wb').write(pickle.dumps(v if p>=3 else w,"
      "protocol=p))\" " +
      (dir / "p").string());
  value expect = value::dict();
  value shared = value::list({value::integer(1), value::integer(2)});
  expect.set("a", value::list({shared, shared.clone(), value::str("key"), value::str("key")}));
  expect.set("big", value::integer((std::int64_t{1} << 47) + 5));
  expect.set("neg", value::integer(INT64_MIN));
  expect.set("huge_pos", value::integer(INT64_MAX));
  expect.set("f", value::real(1.5));
  expect.set("u", value::str("µs ✓"));
  expect.set("t", value::tuple({value::integer(1)}));
  expect.set("t4", value::tuple({value::integer(1), value::integer(2), value::integer(3),
                                 value::integer(4)}));
  expect.set("n", value());
  expect.set("yes", value::boolean(true));
  expect.set(value::integer(7), value::str("int key"));
  for (int p = 0; p <= 5; ++p) {
    const value v = pk::read(read_bytes(dir / ("p" + std::to_string(p))));
    ASSERT_TRUE(v.is(value::type::dict)) << p;
    const value* b = v.find("b");
    if (p >= 3) {  // protocols 0-2 write bytes through a class (codecs.encode): left out there
      ASSERT_NE(b, nullptr);
      EXPECT_TRUE(*b == value::bytes(std::string("\0\xff", 2))) << p;
    }
    value rest = value::dict();
    for (const auto& [k, x] : v.as_entries())
      if (!(k.is(value::type::str) && k.as_str() == "b")) rest.set(k, x);
    EXPECT_TRUE(rest == expect) << "protocol " << p;
  }
}

TEST(Pickle, RejectsClassesAndCallsByName) {
  // pickle.dumps(os.system) style: GLOBAL then REDUCE, never followed.
  EXPECT_EQ(read_error(std::string("\x80\x02"
                                   "cos\nsystem\n"
                                   "X\x02\x00\x00\x00ls"
                                   "\x85R.",
                                   22)),
            "pickle: GLOBAL (only plain data is read: no classes, no calls) at offset 2");
  EXPECT_NE(read_error(std::string("\x80\x04\x8c\x02os\x8c\x06system\x93.", 15))
                .find("STACK_GLOBAL (only plain data"),
            std::string::npos);
  EXPECT_NE(read_error(std::string("\x80\x02]R.", 5)).find("REDUCE"), std::string::npos);
  EXPECT_EQ(read_error(std::string("\x80\x02}}b.", 5)),
            "pickle: BUILD (only plain data is read: no classes, no calls) at offset 4");
  EXPECT_EQ(read_error(std::string("\x80\x02).\x81.", 6)),
            "pickle: 2 bytes after STOP at offset 4");
  EXPECT_EQ(read_error(std::string("\x80\x02))\x81.", 5)),
            "pickle: NEWOBJ (only plain data is read: no classes, no calls) at offset 4");
  EXPECT_NE(read_error(std::string("\x80\x04\x8f.", 4)).find("EMPTY_SET"), std::string::npos);
}

TEST(Pickle, RejectsTruncatedStreamsAndLengthsPastTheEnd) {
  const std::string good = pk::dumps(sample_value());
  for (std::size_t n = 0; n < good.size(); n += (n < 200 ? 1 : 97)) {
    const std::string e = read_error(good.substr(0, n));
    EXPECT_NE(e, "") << "a prefix of " << n << " bytes was read";
    EXPECT_EQ(e.find('\n'), std::string::npos);
  }
  EXPECT_EQ(read_error(std::string("\x80\x02X\xff\xff\xff\xff"
                                   "ab.",
                                   10)),
            "pickle: truncated: BINUNICODE of 4294967295 bytes, 3 left at offset 7");
  EXPECT_NE(read_error(std::string("\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\xff.", 12))
                .find("truncated: BINUNICODE8"),
            std::string::npos);
  EXPECT_NE(read_error(std::string("\x80\x02J\x01\x02", 5)).find("truncated: BININT"),
            std::string::npos);
  EXPECT_NE(read_error("\x80\x02]"), "");  // no STOP
  EXPECT_NE(read_error(std::string("\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01.", 14))
                .find("an int beyond 64 bits"),
            std::string::npos);
}

TEST(Pickle, RejectsBadStructure) {
  EXPECT_NE(read_error("\x80\x02."), "");                       // STOP on an empty stack
  EXPECT_NE(read_error("\x80\x02]e."), "");                     // APPENDS without MARK
  EXPECT_NE(read_error("\x80\x02}](K\x01u."), "");              // SETITEMS on a list
  EXPECT_NE(read_error("\x80\x02}(]K\x01u."), "");              // a list as a dict key
  EXPECT_NE(read_error("\x80\x02K\x01K\x02."), "");             // two values at STOP
  EXPECT_NE(read_error(std::string("\x80\x02h\x05.", 4)), "");  // GET of a memo never PUT
  EXPECT_NE(read_error("\x80\x09N."), "");                      // protocol 9
}

TEST(Pickle, BoundsNestingAndValueCount) {
  // 2000 nested lists: [[[...]]].
  std::string deep = "\x80\x02";
  for (int i = 0; i < 2000; ++i) deep += ']';
  for (int i = 0; i < 1999; ++i) deep += 'a';
  deep += '.';
  EXPECT_NE(read_error(deep).find("nesting deeper than 1000"), std::string::npos);
  // The same depth built through the memo: each level GETs the last one.
  std::string memo_deep("\x80\x02]q\x00", 5);
  for (int i = 0; i < 1200; ++i)
    memo_deep += std::string(
        "0]h\x00"
        "aq\x00",
        7);
  memo_deep += '.';
  EXPECT_NE(read_error(memo_deep).find("nesting deeper than 1000"), std::string::npos);
  // Doubling through the memo ("billion laughs"): 2^40 values if followed.
  std::string laughs(
      "\x80\x02]K\x01"
      "a"
      "q\x00",
      8);
  for (int i = 0; i < 40; ++i) laughs += std::string("0(h\x00h\x00lq\x00", 9);
  laughs += '.';
  EXPECT_NE(read_error(laughs, {1000, 1'000'000}).find("more than 1000000 values"),
            std::string::npos);
  std::string wide = "\x80\x02](";
  for (int i = 0; i < 200; ++i) wide += "K\x01";
  wide += "e.";
  EXPECT_NE(read_error(wide, {1000, 100}).find("more than 100 values"), std::string::npos);
  EXPECT_EQ(read_error(wide), "");
}

TEST(Pickle, MemoisedValuesAreSharedNotCopied) {
  // A 64 KiB str memoised once and used 1000 times: one buffer, not 1000 copies.
  std::string text_used("\x80\x02](X\x00\x00\x01\x00", 9);
  text_used += std::string(65536, 'a');
  text_used += std::string("q\x01", 2);
  for (int i = 0; i < 999; ++i) text_used += std::string("h\x01", 2);
  text_used += "e.";
  const value texts = pk::read(text_used);
  ASSERT_EQ(texts.as_items().size(), 1000u);
  for (const auto& t : texts.as_items()) EXPECT_EQ(&t.as_str(), &texts.as_items()[0].as_str());
  // A list used twice: [X, X], X shared.
  const value twice =
      pk::read(bytes_of("\x80\x02](]q\x01K\x01"
                        "ah\x01"
                        "e."));
  ASSERT_EQ(twice.as_items().size(), 2u);
  EXPECT_EQ(&twice.as_items()[0].as_items(), &twice.as_items()[1].as_items());
  EXPECT_EQ(twice,
            value::list({value::list({value::integer(1)}), value::list({value::integer(1)})}));
  EXPECT_EQ(twice.tree_values(), 5u);
  // A shared list changed later is copied first: the memo's stays as it was, and a list appended
  // to itself makes no cycle.
  EXPECT_EQ(pk::read(bytes_of("\x80\x02]q\x00K\x01"
                              "ah\x00K\x02"
                              "a\x86.")),
            value::tuple({value::list({value::integer(1)}),
                          value::list({value::integer(1), value::integer(2)})}));
  EXPECT_EQ(pk::read(bytes_of("\x80\x02]q\x00h\x00"
                              "a.")),
            value::list({value::list()}));
  EXPECT_EQ(pk::read(bytes_of("\x80\x02]q\x00"
                              "2a.")),
            value::list({value::list()}));
  // CPython's pattern: EMPTY_LIST, PUT, then APPENDS fill the list the memo holds.
  EXPECT_EQ(pk::read(bytes_of("\x80\x02(]q\x00(K\x01K\x02"
                              "eh\x00"
                              "l.")),
            value::list({value::list({value::integer(1), value::integer(2)}),
                         value::list({value::integer(1), value::integer(2)})}));
}

TEST(Pickle, ARealSnapshotStaysFarWithinTheValueBudget) {
  // The default budget is 8 values per byte of input (at least 50 million); a real snapshot's
  // tree has about 0.2 per byte.
  const std::string bytes = read_bytes(kData + "/h200_torch_snapshot.pickle");
  const value v = pk::read(bytes);
  EXPECT_LT(v.tree_values(), bytes.size() / 2);
  EXPECT_GT(v.tree_values(), bytes.size() / 10);
}

TEST(Pickle, CheckStartRefusesWhatReadRefusesAtTheSameOffset) {
  EXPECT_NO_THROW(
      pk::check_start(std::string("\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}", 12)));
  EXPECT_NO_THROW(pk::check_start(std::string("\x80\x02}q\x00(X\x06\x00\x00\x00seg", 14)));
  const std::string garbage("\x80\x02\x00\x00\x00", 5);
  try {
    pk::check_start(garbage);
    ADD_FAILURE() << "accepted";
  } catch (const gb::format_error& e) {
    EXPECT_EQ(std::string(e.what()), read_error(garbage));
    EXPECT_NE(std::string(e.what()).find("opcode 0x00"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pk::check_start("\x80\x09"), gb::format_error);
}

TEST(Pickle, CtrlCStopsTheRead) {
  gb::install_interrupt_handlers();
  std::raise(SIGINT);
  EXPECT_THROW((void)pk::read(read_bytes(kData + "/h200_torch_snapshot.pickle")), gb::interrupted);
  gb::clear_interrupt();
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

// ---- snapshots ----------------------------------------------------------------------------

namespace {
value trace_event(const std::string& action, std::int64_t addr, std::int64_t size) {
  value e = value::dict();
  e.set("action", value::str(action));
  e.set("addr", value::integer(addr));
  e.set("size", value::integer(size));
  e.set("stream", value::integer(0));
  e.set("time_us", value::integer(0));
  return e;
}
/// A snapshot of one device's trace, with no segments left, and `conf` as its allocator conf.
value snapshot_of_trace(pk::items events, const std::string& conf = "") {
  value root = value::dict();
  root.set("segments", value::list());
  root.set("device_traces", value::list({value::list(std::move(events))}));
  value settings = value::dict();
  settings.set("PYTORCH_CUDA_ALLOC_CONF", value::str(conf));
  root.set("allocator_settings", settings);
  return root;
}
}  // namespace

TEST(Snapshot, HandMadeSnapshotReplaysToThePeakWorkedOutByHand) {
  const auto s = gb::read_torch_snapshot(kData + "/snapshot_small.pickle");
  ASSERT_EQ(s.device_traces.size(), 1u);
  EXPECT_EQ(s.segments.size(), 4u);
  EXPECT_EQ(s.device_traces[0].size(), 9u);
  EXPECT_EQ(s.alloc_conf, "");
  std::size_t rebuilt = 0;
  const auto trace = gb::to_replay_trace(s, 0, &rebuilt);
  // X (8 MiB, freed in the trace, never allocated there) and W (4 KiB, allocated at the end, no
  // event) are allocated first; then A1, A2, free X, B, free A1.
  EXPECT_EQ(rebuilt, 2u);
  ASSERT_EQ(trace.size(), 7u);
  EXPECT_EQ(trace[0].bytes, 8 * MiB);
  EXPECT_EQ(trace[1].bytes, 4096u);
  EXPECT_EQ(trace[4].kind, gb::replay_event::op::free);
  EXPECT_EQ(trace[4].id, trace[0].id);
  // Under the defaults, by hand: X 8 MiB (1-10 MiB) takes a 20 MiB segment (20); W 4 KiB takes
  // a 2 MiB small segment (22); A1 1 MiB fits the rest of it (22); A2 does not (2 MiB - 4 KiB -
  // 1 MiB left): a new 2 MiB small segment (24); freeing X leaves its 20 MiB cached, which a
  // 30 MiB request cannot use: a 30 MiB segment (54). Peak 54 MiB, four segments.
  const auto r = gb::replay_trace(trace, {});
  EXPECT_EQ(r.peak_reserved, 54 * MiB);
  EXPECT_EQ(r.backend_allocations, 4);
  EXPECT_EQ(r.peak_requested, 32 * MiB + 4096);  // X + W + A1 + A2 = 10 MiB + 4 KiB, then 32
  // PyTorch's own figures: 54 MiB at the end, +32 MiB of segments in the trace, so 22 MiB at the
  // start and a 54 MiB peak, from two segment_allocs.
  const auto rec = gb::recorded(s, 0);
  EXPECT_EQ(rec.reserved_at_end, 54 * MiB);
  EXPECT_EQ(rec.reserved_at_start, 22 * MiB);
  EXPECT_EQ(rec.peak_reserved, 54 * MiB);
  EXPECT_EQ(rec.backend_allocations, 2);
  EXPECT_EQ(rec.peak_requested, 32 * MiB + 4096);
  EXPECT_EQ(rec.events, 9u);
}

TEST(Snapshot, ARealH200SnapshotReplaysToPyTorchsOwnPeak) {
  // examples/record_snapshot.py on the H200 (PyTorch 2.11, default allocator settings): 12 steps
  // of a small transformer with a sequence length that changes every step, recorded after the
  // model existed. Our native-like replay follows PyTorch's placement: its peak reserved is
  // PyTorch's own, to the byte (a rebuilt start, blocks alive before recording packed afresh
  // rather than in PyTorch's segments, could move it; here it does not).
  const auto s = gb::read_torch_snapshot(kData + "/h200_torch_snapshot.pickle");
  std::size_t rebuilt = 0;
  const auto trace = gb::to_replay_trace(s, 0, &rebuilt);
  EXPECT_EQ(rebuilt, 30u);
  const auto rec = gb::recorded(s, 0);
  EXPECT_EQ(rec.peak_reserved, 248u * MiB);
  gb::allocator_options defaults;
  const auto ours = gb::replay_trace(trace, defaults);
  EXPECT_EQ(ours.peak_requested, rec.peak_requested);
  EXPECT_EQ(ours.peak_reserved, rec.peak_reserved);
  // The thread caches change nothing here either.
  defaults.thread_cache_blocks = 0;
  EXPECT_EQ(gb::replay_trace(trace, defaults).peak_reserved, ours.peak_reserved);
}

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

TEST(Snapshot, SizesBeyond64BitsAreAnErrorNeverWrapped) {
  const auto s = gb::parse_torch_snapshot(
      pk::dumps(snapshot_of_trace({trace_event("segment_alloc", 0x1000, INT64_MAX),
                                   trace_event("segment_alloc", 0x2000, INT64_MAX)})),
      "big.pickle");
  try {
    (void)gb::recorded(s, 0);
    ADD_FAILURE() << "no error";
  } catch (const gb::format_error& e) {
    EXPECT_NE(std::string(e.what()).find("beyond 64 bits"), std::string::npos) << e.what();
  }
  try {
    (void)gb::replay_snapshot(s, "big.pickle", 0,
                              gb::policy_list({""}, {}, gb::repeated_policy::refuse));
    ADD_FAILURE() << "no error";
  } catch (const gb::format_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("big.pickle: ", 0), 0u) << e.what();
  }
  const std::size_t half = SIZE_MAX / 2 + 1;
  EXPECT_THROW((void)gb::peak_requested({{gb::replay_event::op::alloc, 1, half, 0},
                                         {gb::replay_event::op::alloc, 2, half, 0}}),
               gb::format_error);
}

TEST(Snapshot, CtrlCStopsParsingAndReplaying) {
  const std::string bytes = pk::dumps(snapshot_of_trace({trace_event("alloc", 16, 512)}));
  const auto s = gb::parse_torch_snapshot(bytes, "s.pickle");
  const auto trace = gb::mixed_trace();
  gb::install_interrupt_handlers();
  std::raise(SIGINT);
  EXPECT_THROW((void)gb::parse_torch_snapshot(bytes, "s.pickle"), gb::interrupted);
  EXPECT_THROW((void)gb::replay_trace(trace, {}), gb::interrupted);
  EXPECT_THROW((void)gb::peak_requested(trace), gb::interrupted);
  gb::clear_interrupt();
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
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

// ---- gpu-basics replay --------------------------------------------------------------------

namespace {
int run_cli(gb::cli::options o, std::string& out, std::string& err) {
  std::ostringstream so, se;
  const int rc = gb::cli::run(o, so, se);
  out = so.str();
  err = se.str();
  return rc;
}
gb::cli::options replay_options(const std::string& input) {
  gb::cli::options o;
  o.command = "replay";
  o.input_path = input;
  return o;
}
}  // namespace

TEST(ReplayCommand, ABadFileIsOneLineAndExitTwoWritingNothing) {
  const auto dir = scratch("cli_bad");
  write_bytes(dir / "x.pickle", "not a pickle at all");
  auto o = replay_options((dir / "x.pickle").string());
  o.json_path = (dir / "out.json").string();
  std::string out, err;
  EXPECT_EQ(run_cli(o, out, err), gb::cli::exit_usage);
  EXPECT_EQ(err, "gpu-basics: " + (dir / "x.pickle").string() +
                     ": not a pickle (a PyTorch memory snapshot is one, from "
                     "torch.cuda.memory._dump_snapshot)\n");
  EXPECT_EQ(out, "");
  EXPECT_FALSE(std::filesystem::exists(dir / "out.json"));
  auto p = replay_options(kData + "/snapshot_small.pickle");
  p.policies = {"max_split_size_mb:x"};
  EXPECT_EQ(run_cli(p, out, err), gb::cli::exit_usage);
  EXPECT_EQ(err.rfind("gpu-basics: --policy: allocator conf: max_split_size_mb: ", 0), 0u) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1);
}

TEST(ReplayCommand, PrintsEveryPolicyAndPyTorchsOwnFigures) {
  const auto dir = scratch("cli_good");
  auto o = replay_options(kData + "/snapshot_small.pickle");
  o.policies = {"max_split_size_mb:32,expandable_segments:True"};
  o.json_path = (dir / "replay.json").string();
  std::string out, err;
  ASSERT_EQ(run_cli(o, out, err), gb::cli::exit_ok) << err;
  EXPECT_EQ(err, "");
  EXPECT_NE(out.find("| (defaults)"), std::string::npos) << out;
  EXPECT_NE(out.find("| PyTorch (recorded)"), std::string::npos) << out;
  EXPECT_NE(out.find("max_split_size_mb:32,expandable_segments:True"), std::string::npos);
  EXPECT_NE(out.find("Lowest peak reserved: "), std::string::npos);
  const auto j = nlohmann::json::parse(read_bytes(dir / "replay.json"));
  ASSERT_EQ(j["policies"].size(), gb::replay_policies({}).size() + 1);
  EXPECT_EQ(j["policies"][0]["conf"], "");
  EXPECT_EQ(j["policies"][0]["peak_reserved_bytes"], 54 * MiB);  // worked out above
  EXPECT_EQ(j["recorded"]["peak_reserved_bytes"], 54 * MiB);
  EXPECT_EQ(j["replay_events"], 7);
  EXPECT_EQ(j["gc_reserved_limit_bytes"], 54 * MiB);
  std::uint64_t lowest = UINT64_MAX;
  for (const auto& p : j["policies"])
    if (!p["peak_reserved_bytes"].is_null())
      lowest = std::min(lowest, p["peak_reserved_bytes"].get<std::uint64_t>());
  bool best_is_lowest = false;
  for (const auto& p : j["policies"])
    if (p["conf"] == j["best_conf"]) best_is_lowest = p["peak_reserved_bytes"] == lowest;
  EXPECT_TRUE(best_is_lowest) << j.dump(2);
}

TEST(ReplayCommand, ParsesPoliciesAndMemorySnapshot) {
  std::ostringstream o, e;
  const auto r = gb::cli::parse({"gpu-basics", "replay", "s.pickle", "--policy", "a:1", "--policy",
                                 "b:2", "--json", "r.json"},
                                o, e);
  ASSERT_TRUE(r.opts) << e.str();
  EXPECT_EQ(r.opts->input_path, "s.pickle");
  EXPECT_EQ(r.opts->policies, (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_EQ(r.opts->json_path, "r.json");
  const auto m = gb::cli::parse({"gpu-basics", "memory", "--snapshot", "m.pickle"}, o, e);
  ASSERT_TRUE(m.opts);
  EXPECT_EQ(m.opts->snapshot_path, "m.pickle");
  EXPECT_FALSE(gb::cli::parse({"gpu-basics", "transfer", "--snapshot", "m.pickle"}, o, e).opts);
  EXPECT_FALSE(gb::cli::parse({"gpu-basics", "replay"}, o, e).opts);
}

TEST(ReplayCommand, ABlankOrRepeatedPolicyIsRefused) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{" "}, "gpu-basics: --policy: a blank policy \" \"; give a PYTORCH_CUDA_ALLOC_CONF string"},
      {{"\t"}, "gpu-basics: --policy: a blank policy \"\\t\""},
      {{"expandable_segments:True"},
       "gpu-basics: --policy: \"expandable_segments:True\" is the same policy as "
       "\"expandable_segments:True\", already in the sweep"},
      {{"max_split_size_mb:300", "max_split_size_mb:300"},
       "gpu-basics: --policy: \"max_split_size_mb:300\" is the same policy as "
       "\"max_split_size_mb:300\""},
      {{"expandable_segments:False"}, "is the same policy as the defaults"},
  };
  for (const auto& [policies, message] : cases) {
    auto o = replay_options(kData + "/snapshot_small.pickle");
    o.policies = policies;
    std::string out, err;
    EXPECT_EQ(run_cli(o, out, err), gb::cli::exit_usage) << message;
    EXPECT_NE(err.find(message), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_EQ(out, "");
  }
}

TEST(ReplayCommand, StringsFromTheFileAreEscapedInTheTableAndValidInTheJson) {
  const auto dir = scratch("cli_escapes");
  const auto path = (dir / "s.pickle").string();
  write_bytes(
      path, pk::dumps(snapshot_of_trace({trace_event("alloc", 16, 512)}, "\x1b[31mred\xff\xfe\r")));
  auto o = replay_options(path);
  std::string out, err;
  ASSERT_EQ(run_cli(o, out, err), gb::cli::exit_ok) << err;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  EXPECT_NE(out.find("PyTorch (recorded) \\x1b[31mred\\xff\\xfe\\r"), std::string::npos) << out;
  o.json_path = "-";
  ASSERT_EQ(run_cli(o, out, err), gb::cli::exit_ok) << err;
  EXPECT_EQ(err, "");
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["recorded"]["alloc_conf"], "\x1b[31mred\xef\xbf\xbd\xef\xbf\xbd\r");
}

// ---- large snapshots, read as they stream in ------------------------------------------------

namespace {

/// Hands out the bytes a few at a time, as a file read in chunks would, and again on rewind().
class trickle_source final : public pk::byte_source {
 public:
  trickle_source(std::string bytes, std::size_t step, bool sized)
      : bytes_(std::move(bytes)), step_(step), sized_(sized) {}
  std::size_t read(char* out, std::size_t n) override {
    n = std::min({n, step_, bytes_.size() - at_});
    std::copy_n(bytes_.data() + at_, n, out);
    at_ += n;
    return n;
  }
  void rewind() override { at_ = 0; }
  [[nodiscard]] std::optional<std::uint64_t> size() const override {
    if (!sized_) return std::nullopt;
    return bytes_.size();
  }

 private:
  std::string bytes_;
  std::size_t step_;
  bool sized_;
  std::size_t at_ = 0;
};

/// Counts what read() offers it and takes every dict with an "action".
class counting_sink final : public pk::item_sink {
 public:
  bool take(std::uint64_t, const value& item) override {
    if (!item.find("action")) return false;
    ++values;
    return true;
  }
  bool take(std::uint64_t, std::span<const pk::flat_entry> item) override {
    if (std::none_of(item.begin(), item.end(), [](const auto& e) { return e.key == "action"; }))
      return false;
    ++flat;
    return true;
  }
  void untake(std::uint64_t, std::size_t n) override { flat -= n; }
  void clear() override { values = flat = 0; }
  std::size_t values = 0, flat = 0;
};

const char* action_name(gb::torch_action a) {
  static const char* names[] = {"alloc",        "free_requested", "free_completed", "segment_alloc",
                                "segment_free", "segment_map",    "segment_unmap",  "oom",
                                "snapshot",     "other"};
  return names[static_cast<int>(a)];
}

/// Each device trace as lines "action addr size stream time", from the tree a plain read makes.
std::vector<std::vector<std::string>> plain_traces(const value& root) {
  std::vector<std::vector<std::string>> out;
  for (const auto& t : root.find("device_traces")->as_items()) {
    auto& lines = out.emplace_back();
    for (const auto& e : t.as_items()) {
      const auto num = [&](const char* k) {
        const value* x = e.find(k);
        return x && x->is(value::type::integer) ? x->as_int() : 0;
      };
      lines.push_back(e.find("action")->as_str() + " " + std::to_string(num("addr")) + " " +
                      std::to_string(num("size")) + " " + std::to_string(num("stream")) + " " +
                      std::to_string(num("time_us")));
    }
  }
  return out;
}

/// The same lines from a parsed snapshot.
std::vector<std::vector<std::string>> parsed_traces(const gb::torch_snapshot& s) {
  std::vector<std::vector<std::string>> out;
  for (const auto& t : s.device_traces) {
    auto& lines = out.emplace_back();
    for (const auto& e : t)
      lines.push_back(std::string(action_name(e.action)) + " " + std::to_string(e.addr) + " " +
                      std::to_string(e.size) + " " + std::to_string(e.stream) + " " +
                      std::to_string(e.time_us));
  }
  return out;
}

/// `v` with every value under a "frames" key replaced by None, as read() with that opaque key
/// leaves them.
value without_frames(const value& v) {
  if (v.is(value::type::list) || v.is(value::type::tuple)) {
    pk::items c;
    for (const auto& e : v.as_items()) c.push_back(without_frames(e));
    return v.is(value::type::tuple) ? value::tuple(std::move(c)) : value::list(std::move(c));
  }
  if (!v.is(value::type::dict)) return v;
  value d = value::dict();
  for (const auto& [k, x] : v.as_entries())
    d.set(k, k.is(value::type::str) && k.as_str() == "frames" ? value() : without_frames(x));
  return d;
}

/// The bytes python3 writes for `expr` (a snapshot-like dict built by `setup`), protocol 4.
std::string python_pickle(const std::string& name, const std::string& setup,
                          const std::string& expr) {
  const auto path = scratch("py_" + name) / "s.pickle";
  run_command("python3 -c \"import pickle,sys\n" + setup + "\nopen(sys.argv[1],'wb').write(" +
              "pickle.dumps(" + expr + ",protocol=4))\" " + path.string());
  return read_bytes(path);
}

const pk::read_options kStreaming{{}, {"frames"}, nullptr};

}  // namespace

TEST(SnapshotStream, AGeneratedTrainingSnapshotReadsAsItsPlainTree) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  // The benchmark's generator: CPython's protocol 4 with frames, memoised frames lists used
  // again by free_completed, several streams, 64 KiB frames, batches of 1000.
  const auto path = scratch("gen") / "s.pickle";
  run_command("python3 " + std::string(GPU_BASICS_SOURCE_DIR) +
              "/bench/replay_snapshot.py --events 12000 --write " + path.string());
  const std::string bytes = read_bytes(path);
  const value plain = pk::read(bytes);
  const auto expected = plain_traces(plain);
  ASSERT_EQ(expected.size(), 1u);
  ASSERT_GE(expected[0].size(), 12000u);
  const auto from_file = gb::read_torch_snapshot(path.string());
  EXPECT_EQ(parsed_traces(from_file), expected);
  EXPECT_EQ(from_file.segments.size(), plain.find("segments")->as_items().size());
  EXPECT_EQ(parsed_traces(gb::parse_torch_snapshot(bytes, "s.pickle")), expected);
  // Past the first batches (which define the keys and frames), every entry is read straight from
  // the bytes; none is held in the list.
  counting_sink sink;
  const value taken = pk::read(bytes, pk::read_options{{}, {"frames"}, &sink});
  const auto& trace = taken.find("device_traces")->as_items().at(0);
  EXPECT_EQ(trace.taken(), expected[0].size());
  EXPECT_TRUE(trace.as_items().empty());
  EXPECT_NE(trace.list_id(), 0u);
  EXPECT_EQ(sink.values + sink.flat, expected[0].size());
  EXPECT_GT(sink.flat, sink.values * 4);
  // Without a sink, the frames are left out and the rest is the plain tree.
  EXPECT_EQ(pk::read(bytes, kStreaming), without_frames(plain));
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

TEST(SnapshotStream, AValueLeftOutButUsedElsewhereIsReadAsThePlainTree) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  const std::string setup =
      "fr=[dict(name='f',filename='x.py',line=1)]\n"
      "ev=[dict(action='alloc',addr=16*i+16,size=512,stream=0,time_us=i,frames=fr) "
      "for i in range(3000)]";
  // The frames list, left out under "frames", is the value of another key too: read plainly.
  const std::string shared =
      python_pickle("shared", setup, "dict(segments=[],device_traces=[ev],extra=fr)");
  const value plain = pk::read(shared);
  EXPECT_EQ(pk::read(shared, kStreaming), plain);
  EXPECT_EQ(parsed_traces(gb::parse_torch_snapshot(shared, "s.pickle")), plain_traces(plain));
  // The same trace twice (one list used again): both devices have it.
  const std::string twice =
      python_pickle("twice", setup, "dict(segments=[],device_traces=[ev,ev])");
  const auto s = gb::parse_torch_snapshot(twice, "s.pickle");
  ASSERT_EQ(s.device_traces.size(), 2u);
  EXPECT_EQ(s.device_traces[0].size(), 3000u);
  EXPECT_EQ(parsed_traces(s), plain_traces(pk::read(twice)));
  // A segment with an "action" (taken as if it were a trace entry): read plainly, a segment.
  const std::string odd = python_pickle(
      "odd", setup,
      "dict(segments=[dict(action='alloc',address=4096,total_size=2097152)],device_traces=[ev])");
  const auto o = gb::parse_torch_snapshot(odd, "s.pickle");
  ASSERT_EQ(o.segments.size(), 1u);
  EXPECT_EQ(o.segments[0].total_size, 2097152u);
  EXPECT_EQ(parsed_traces(o), plain_traces(pk::read(odd)));
}

TEST(SnapshotStream, SharedFramesCountOnceAgainstTheBudgetUnlessUsedElsewhere) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  // Every entry's frames is one memoised list of 1000 frames: 2000 entries come to 14 million
  // values as a tree, but the frames are never walked.
  const std::string setup =
      "fr=[dict(name='f%d'%i,filename='x.py',line=i) for i in range(1000)]\n"
      "ev=[dict(action='alloc',addr=16*i+16,size=512,stream=0,time_us=i,frames=fr) "
      "for i in range(2000)]";
  const std::string bytes = python_pickle("budget", setup, "dict(segments=[],device_traces=[ev])");
  const pk::read_limits limits{1000, 1'000'000};
  EXPECT_NE(read_error(bytes, limits).find("more than 1000000 values"), std::string::npos);
  EXPECT_NO_THROW((void)pk::read(bytes, pk::read_options{limits, {"frames"}, nullptr}));
  counting_sink sink;
  EXPECT_NO_THROW((void)pk::read(bytes, pk::read_options{limits, {"frames"}, &sink}));
  EXPECT_EQ(sink.values + sink.flat, 2000u);
  // Used elsewhere too, the list is walked there: the plain budget applies.
  const std::string walked =
      python_pickle("walked", setup, "dict(segments=[],device_traces=[ev],extra=[fr]*2000)");
  try {
    (void)pk::read(walked, pk::read_options{limits, {"frames"}, nullptr});
    ADD_FAILURE() << "read";
  } catch (const gb::format_error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 1000000 values"), std::string::npos);
  }
}

TEST(SnapshotStream, ReadingInChunksIsReadingWhole) {
  const std::string real = read_bytes(kData + "/h200_torch_snapshot.pickle");
  for (const std::size_t step : {std::size_t{1}, std::size_t{7}, std::size_t{4096}}) {
    trickle_source in(real, step, step != 7);
    EXPECT_EQ(pk::read(in, {}), pk::read(real)) << step;
    counting_sink sink;
    EXPECT_EQ(pk::read(in, pk::read_options{{}, {"frames"}, &sink}),
              pk::read(real, pk::read_options{{}, {"frames"}, &sink}));
  }
  // The same message for a truncated stream, bytes after STOP, a bad opcode, wherever it is.
  const std::string small = read_bytes(kData + "/snapshot_small.pickle");
  for (const std::string& bytes :
       {small.substr(0, 1), small.substr(0, small.size() / 3), small.substr(0, small.size() - 1),
        small + "xyz", small.substr(0, 2) + "c" + small.substr(2)}) {
    const std::string expected = read_error(bytes);
    ASSERT_NE(expected, "");
    for (const bool sized : {false, true}) {
      trickle_source in(bytes, 5, sized);
      try {
        (void)pk::read(in, kStreaming);
        ADD_FAILURE() << expected;
      } catch (const gb::format_error& e) {
        EXPECT_EQ(std::string(e.what()), expected);
      }
    }
  }
}

TEST(SnapshotStream, PreparedAndParallelReplaysGiveTheSameResults) {
  for (const auto& trace : {gb::mixed_trace(20000), gb::transformer_trace(8)}) {
    const auto prepared = gb::prepare_trace(trace);
    EXPECT_EQ(prepared.peak_requested, gb::peak_requested(trace));
    for (const char* conf : {"", "expandable_segments:True", "max_split_size_mb:64"}) {
      const auto o = gb::parse_allocator_conf(conf);
      const auto a = gb::replay_trace(trace, o), b = gb::replay_trace(prepared, o);
      EXPECT_EQ(a.peak_reserved, b.peak_reserved) << conf;
      EXPECT_EQ(a.peak_allocated, b.peak_allocated) << conf;
      EXPECT_EQ(a.peak_requested, b.peak_requested) << conf;
      EXPECT_EQ(a.backend_allocations, b.backend_allocations) << conf;
      EXPECT_EQ(a.fragmentation_at_peak, b.fragmentation_at_peak) << conf;
    }
  }
  const auto s = gb::read_torch_snapshot(kData + "/h200_torch_snapshot.pickle");
  const auto confs = gb::replay_policies({"max_split_size_mb:32,garbage_collection_threshold:0.8"});
  const auto strip = [](nlohmann::json j) {
    j.erase("seconds");
    j.erase("events_per_s");
    j.erase("table");
    for (auto& p : j["policies"]) p.erase("seconds");
    return j;
  };
  const auto one = strip(gb::to_json(gb::replay_snapshot(s, "s", 0, confs, 1)));
  for (const unsigned threads : {2u, 3u, 16u})
    EXPECT_EQ(strip(gb::to_json(gb::replay_snapshot(s, "s", 0, confs, threads))), one) << threads;
  EXPECT_EQ(strip(gb::to_json(gb::replay_snapshot(s, "s", 0, confs))), one);
}
