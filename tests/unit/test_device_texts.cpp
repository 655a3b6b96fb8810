// The texts follow the GPU a run was measured on. Every note and every text cell of every lesson
// is rendered from the H200 fixtures (tests/data/h200_all.json, h200_unified.json) and from copies
// of them made here that read as an H100 and as a GPU without a datasheet (name, memory, L2,
// datasheet and the HBM-bound figures changed). A device name may appear only as the run's own
// GPU, its datasheet, or the course's quoted figures; comparisons name what they compare with;
// one GPU gets one line where there is nothing between GPUs to measure.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "gpu_basics/lessons/record.hpp"
#include "test_data.hpp"

using namespace gpu_basics;
using namespace gpu_basics::lessons;

namespace {

using gpu_basics::testing::kData;

nlohmann::json load_json(const std::string& name) {
  std::ifstream in(kData + name, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

/// What makes a run another GPU's: its name and the figures the texts take from the device.
struct gpu_like {
  std::string label;
  std::string name;
  std::uint64_t total_memory_bytes;
  std::uint64_t l2_bytes;
  int memory_bus_width_bits;
  int memory_clock_mhz;
  std::optional<double> datasheet_hbm;  // nullopt: no datasheet known for it
  double hbm_scale;                     // the HBM-bound rates, against the H200's
};

const gpu_like kH200{.label = "H200",
                     .name = "NVIDIA H200",
                     .total_memory_bytes = 150109880320,
                     .l2_bytes = 60ull << 20,
                     .memory_bus_width_bits = 6016,
                     .memory_clock_mhz = 3201,
                     .datasheet_hbm = 4.8e12,
                     .hbm_scale = 1.0};
const gpu_like kH100{.label = "H100",
                     .name = "NVIDIA H100 80GB HBM3",
                     .total_memory_bytes = 85520809984,
                     .l2_bytes = 50ull << 20,
                     .memory_bus_width_bits = 5120,
                     .memory_clock_mhz = 2619,
                     .datasheet_hbm = 3.35e12,
                     .hbm_scale = 3.35 / 4.8};
const gpu_like kUnknown{.label = "RTX",
                        .name = "NVIDIA RTX 6000 Ada Generation",
                        .total_memory_bytes = 51527024640,
                        .l2_bytes = 96ull << 20,
                        .memory_bus_width_bits = 384,
                        .memory_clock_mhz = 10001,
                        .datasheet_hbm = std::nullopt,
                        .hbm_scale = 0.96e12 / 4.8e12};

void set_device(nlohmann::json& g, const gpu_like& like) {
  g["name"] = like.name;
  g["total_memory_bytes"] = like.total_memory_bytes;
  g["free_memory_bytes"] = like.total_memory_bytes - (600ull << 20);
  g["l2_cache_bytes"] = like.l2_bytes;
  g["memory_bus_width_bits"] = like.memory_bus_width_bits;
  g["max_memory_clock_mhz"] = like.memory_clock_mhz;
  g["memory_clock_current_mhz"] = like.memory_clock_mhz;
  if (like.datasheet_hbm)
    g["datasheet_hbm_bytes_per_s"] = *like.datasheet_hbm;
  else
    g.erase("datasheet_hbm_bytes_per_s");
}

/// The fixture `file` as if measured on `like`: the device where the environment and the info
/// lesson name it, the datasheet kept with the transfer lesson, the L2 and the HBM-bound rates
/// of the unified lesson's D2D sweep.
run_record as_if(const std::string& file, const gpu_like& like) {
  nlohmann::json j = load_json(file);
  for (auto& g : j["environment"]["gpus"]) set_device(g, like);
  auto& results = j["results"];
  if (results.contains("info"))
    for (auto& g : results["info"]["gpus"]) set_device(g, like);
  if (results.contains("transfer")) {
    auto& t = results["transfer"];
    if (like.datasheet_hbm)
      t["hbm_bytes_per_s"] = *like.datasheet_hbm;
    else
      t["hbm_bytes_per_s"] = nullptr;
    if (t.contains("multi_gpu") && !t["multi_gpu"].is_null())
      for (auto& row : t["multi_gpu"]["peer"]["cells"])
        for (auto& cell : row)
          for (auto& [key, s] : cell.items())
            if (s.is_object() && key.find("bytes_per_s") != std::string::npos)
              for (const char* k : {"median", "mean", "min", "max", "p25", "p75", "iqr", "stdev"})
                if (s.contains(k)) s[k] = s[k].get<double>() * like.hbm_scale;
  }
  if (results.contains("unified")) {
    auto& d2d = results["unified"]["beliefs"]["d2d"];
    d2d["l2_bytes"] = like.l2_bytes;
    for (auto& p : d2d["points"])
      p["bytes_per_s"] = p["bytes_per_s"].get<double>() * like.hbm_scale;
  }
  return parse_record(std::move(j), like.label + " copy of " + file);
}

/// Every text a reader sees: table titles, headers, text cells and notes, one per line.
std::string texts_of(const std::vector<presentation::report>& reports) {
  std::string out;
  for (const auto& rep : reports)
    for (const auto& t : rep.tables) {
      out += t.title + "\n";
      for (const auto& c : t.columns) out += c.header + "\n";
      for (const auto& row : t.rows)
        for (const auto& v : row)
          if (const auto* s = std::get_if<std::string>(&v)) out += *s + "\n";
      for (const auto& n : t.notes) out += n + "\n";
    }
  return out;
}

std::string notes_of(const std::vector<presentation::report>& reports) {
  std::string out;
  for (const auto& rep : reports)
    for (const auto& t : rep.tables)
      for (const auto& n : t.notes) out += n + "\n";
  return out;
}

/// `text` without every occurrence of `part`.
std::string without(std::string text, const std::string& part) {
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at))
    text.erase(at, part.size());
  return text;
}

const std::vector<std::string> kFixtures = {"h200_all.json", "h200_unified.json"};
const std::vector<const gpu_like*> kGpus = {&kH200, &kH100, &kUnknown};

#define EXPECT_HAS(text, part) \
  EXPECT_NE((text).find(part), std::string::npos) << "missing: " << (part) << "\nin:\n" << (text)
#define EXPECT_LACKS(text, part) \
  EXPECT_EQ((text).find(part), std::string::npos) << "found: " << (part) << "\nin:\n" << (text)

}  // namespace

TEST(DeviceTexts, NameOnlyTheRunsOwnGpuOrAQuotedSource) {
  for (const auto& file : kFixtures)
    for (const auto* gpu : kGpus) {
      SCOPED_TRACE(gpu->label + " copy of " + file);
      const run_record rec = as_if(file, *gpu);
      const device_facts facts = facts_of(rec);
      std::string text = texts_of(render(rec));
      ASSERT_FALSE(text.empty());
      // Allowed: the run's own GPU, its datasheet by name, the course's figures as quoted.
      text = without(text, gpu->name);
      if (facts.datasheet) text = without(text, std::string(facts.datasheet->source));
      text = without(text, "(course figures, H100's)");
      for (const char* other : {"H100", "H200", "A100", "RTX"}) EXPECT_LACKS(text, other);
    }
}

TEST(DeviceTexts, FiguresOfAnotherGpuDoNotLeakIntoTheH100s) {
  for (const auto& file : kFixtures) {
    SCOPED_TRACE(file);
    const std::string h100 = texts_of(render(as_if(file, kH100)));
    const std::string h200 = texts_of(render(as_if(file, kH200)));
    // The H200's datasheet HBM rate and L2 show only where the run is an H200's.
    for (const char* h200_figure : {"4.80 TB/s", "60 MiB L2", "L2 60 MiB"})
      EXPECT_LACKS(h100, h200_figure);
    if (file == "h200_all.json") {
      EXPECT_HAS(h200, "4.80 TB/s");
      EXPECT_HAS(h100, "3.35 TB/s, NVIDIA H100 datasheet (SXM)");
      EXPECT_HAS(h100, "GPU 0: NVIDIA H100 80GB HBM3");
      EXPECT_HAS(h100, "fit in the 50 MiB L2 cache");
    }
  }
}

TEST(DeviceTexts, TheBeliefsTableComparesTheRunsGpuWithTheCourse) {
  const auto why = [](const gpu_like& gpu) {
    for (const auto& rep : render(as_if("h200_unified.json", gpu)))
      for (const auto& t : rep.tables)
        if (t.id == "beliefs")
          for (const auto& row : t.rows)
            if (std::get<std::string>(row[0]).find("course figures") != std::string::npos)
              return std::get<std::string>(row[2]);
    ADD_FAILURE() << "no course row in the beliefs table";
    return std::string();
  };
  const std::string h200 = why(kH200), h100 = why(kH100), other = why(kUnknown);
  EXPECT_HAS(h200, "on this NVIDIA H200, L2 and datasheet HBM rate differ from the course's");
  EXPECT_HAS(h100, "on this NVIDIA H100 80GB HBM3, L2 and datasheet HBM rate match the course's");
  EXPECT_HAS(other,
             "on this NVIDIA RTX 6000 Ada Generation, L2 differs from the course's (no datasheet "
             "known for its HBM)");
  // The notes print under the tables as text and beside them in the HTML report: the cell
  // names the table whose notes give the figures, not a direction.
  for (const auto* w : {&h200, &h100, &other}) {
    EXPECT_HAS(*w, "(the notes of the D2D sweep give the figures)");
    EXPECT_LACKS(*w, "below");
    EXPECT_LACKS(*w, "above");
  }
}

TEST(DeviceTexts, ComparisonsSayWhatTheyCompareWith) {
  // "(1.1x slower)" reads both ways; each "Nx faster/slower" in brackets names its other side.
  const std::regex bare(R"(\d+(\.\d+)?x (faster|slower)\))");
  for (const auto& file : kFixtures)
    for (const auto* gpu : kGpus) {
      SCOPED_TRACE(gpu->label + " copy of " + file);
      const std::string text = texts_of(render(as_if(file, *gpu)));
      std::smatch m;
      EXPECT_FALSE(std::regex_search(text, m, bare)) << m.str(0) << "\nin:\n" << text;
    }
  const std::string unified = notes_of(render(as_if("h200_unified.json", kH100)));
  EXPECT_HAS(unified, "x faster than mapped");    // the fixture's 8 passes: the copy won
  EXPECT_HAS(unified, "x faster than the copy");  // its sparse access: mapped won
}

TEST(DeviceTexts, OneGpuSaysWhatItCannotMeasureInOneLine) {
  for (const auto* gpu : kGpus) {
    SCOPED_TRACE(gpu->label);
    const auto reports = render(as_if("h200_all.json", *gpu));
    std::vector<std::string> ids;
    for (const auto& rep : reports)
      if (rep.lesson == "transfer")
        for (const auto& t : rep.tables) ids.push_back(t.id);
    for (const char* left_out : {"p2p_bandwidth_peer_off", "p2p_bidirectional_peer_off"})
      EXPECT_EQ(std::count(ids.begin(), ids.end(), left_out), 0) << left_out;
    const std::string text = texts_of(reports);
    EXPECT_LACKS(text, "staged through the host");
    EXPECT_LACKS(text, "busbw GB/s");
    EXPECT_LACKS(text, "A link that is full duplex");
    const std::string notes = notes_of(reports);
    EXPECT_HAS(notes, "- With one GPU there is no peer:");
    EXPECT_HAS(notes, "- With one rank nothing crosses a link, so there is no bus bandwidth");
    EXPECT_HAS(text, "collectives on 1 rank, float32");
  }
}

TEST(DeviceTexts, CopyEnginesFollowTheRunsGpu) {
  const auto notes_with = [](int engines) {
    nlohmann::json j = load_json("h200_all.json");
    for (auto& g : j["environment"]["gpus"]) g["copy_engines"] = engines;
    for (auto& g : j["results"]["info"]["gpus"]) g["copy_engines"] = engines;
    j["results"]["transfer"]["copy_engines"] = engines;
    return notes_of(render(parse_record(std::move(j), "h200_all.json with other copy engines")));
  };
  const std::string three = notes_with(3), one = notes_with(1);
  EXPECT_HAS(three,
             "- 3 copy engines: a host-to-device copy, a device-to-host copy and kernels "
             "can all run at once");
  EXPECT_HAS(three,
             "the GPU has 3 copy engines: an H2D and a D2H copy on two streams run at the "
             "same time");
  EXPECT_LACKS(one, "can all run at once");
  EXPECT_LACKS(one, "run at the same time");
  EXPECT_HAS(one,
             "- 1 copy engine: a copy can run beside kernels, but host-to-device and "
             "device-to-host copies take turns");
  EXPECT_HAS(one,
             "the GPU has 1 copy engine: an H2D and a D2H copy on two streams take turns, "
             "so together they moved");
}
