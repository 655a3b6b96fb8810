// The lesson framework: the registry, saved runs (schema 2 and the upgrade of schema 1), and the
// info lesson's steps. Lesson-specific tests live in test_lesson_<name>.cpp.
#include <gtest/gtest.h>

#include <random>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/lessons/info.hpp"
#include "gpu_basics/lessons/record.hpp"
#include "gpu_basics/lessons/registry.hpp"

using namespace gpu_basics;
using namespace gpu_basics::lessons;

namespace {

device_info random_device(std::mt19937& rng, int index) {
  std::uniform_int_distribution<int> small(1, 200);
  device_info d;
  d.index = index;
  d.name = index % 2 ? "NVIDIA H100 80GB HBM3" : "NVIDIA H200";
  d.pci_bus_id = "0000:0" + std::to_string(index) + ":00.0";
  d.compute_capability_major = 9;
  d.compute_capability_minor = small(rng) % 10;
  d.sm_count = small(rng);
  d.l2_cache_bytes = static_cast<std::uint64_t>(small(rng)) << 20;
  d.total_memory_bytes = static_cast<std::uint64_t>(small(rng)) << 30;
  d.free_memory_bytes = d.total_memory_bytes - (static_cast<std::uint64_t>(small(rng)) << 20);
  d.memory_bus_width_bits = 128 * small(rng);
  d.copy_engines = small(rng) % 8;
  d.max_sm_clock_mhz = 1000 + small(rng);
  d.max_memory_clock_mhz = 2000 + small(rng);
  d.ecc_enabled = small(rng) % 2 == 0;
  d.runtime_version = 13000 + 10 * (small(rng) % 10);
  d.driver_api_version = 12000 + 10 * (small(rng) % 10);
  d.driver_version = "580." + std::to_string(small(rng));
  d.pcie_generation_current = 1 + small(rng) % 5;
  d.pcie_generation_max = 5;
  d.pcie_width_current = 8;
  d.pcie_width_max = 16;
  d.sm_clock_current_mhz = static_cast<unsigned>(small(rng));
  d.memory_clock_current_mhz = std::nullopt;
  d.power_limit_mw = 1000u * static_cast<unsigned>(small(rng)) + 250u;
  d.temperature_c = static_cast<unsigned>(small(rng) % 90);
  return d;
}

nlohmann::json environment_for(const std::vector<device_info>& gpus, int device) {
  nlohmann::json g = nlohmann::json::array();
  for (const auto& d : gpus) g.push_back(d);
  return {{"gpus", g}, {"nvml", "ok"}, {"config", {{"device", device}}}};
}

}  // namespace

TEST(Registry, NamesEveryLessonOnceInRunOrder) {
  std::vector<std::string> names;
  for (const auto& l : registry()) {
    names.emplace_back(l.name);
    EXPECT_EQ(l.measure, nullptr) << l.name;  // measuring_registry() adds it (a CUDA edge)
    EXPECT_NE(l.render, nullptr) << l.name;
    EXPECT_NE(l.upgrade_v1, nullptr) << l.name;
    EXPECT_FALSE(l.description.empty()) << l.name;
    EXPECT_EQ(find_lesson(l.name), &l);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"info", "memory", "transfer", "profile", "unified",
                                             "check"}));
  EXPECT_EQ(find_lesson("all"), nullptr);
  EXPECT_EQ(find_lesson("bogus"), nullptr);
}

TEST(DeviceInfoJson, RoundTripsEveryField) {
  std::mt19937 rng(7);
  for (int i = 0; i < 20; ++i) {
    const device_info d = random_device(rng, i);
    const nlohmann::json j = d;
    EXPECT_EQ(nlohmann::json::parse(j.dump()).get<device_info>(), d) << j.dump();
  }
}

TEST(InfoLesson, ResultRoundTripsThroughText) {
  std::mt19937 rng(11);
  info_result r{{random_device(rng, 0), random_device(rng, 1)}, "NVML not found"};
  const nlohmann::json j = r;
  EXPECT_EQ(nlohmann::json::parse(j.dump()).get<info_result>(), r);
}

TEST(InfoLesson, NotesFollowFromTheDevice) {
  std::mt19937 rng(3);
  device_info d = random_device(rng, 0);
  d.copy_engines = 5;
  d.pcie_generation_current = 4;
  d.pcie_generation_max = 5;
  d.pcie_width_max = 16;
  const info_result r{{d}, "ok"};
  const auto notes = explain_info(r, device_facts::of(d, "ok"));
  std::string all;
  for (const auto& n : notes) {
    EXPECT_EQ(n.table_id, "gpu0");
    all += n.text + "\n";
  }
  EXPECT_NE(all.find("5 copy engines"), std::string::npos) << all;
  const double link = *pcie_link_bytes_per_s(5, 16);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f GB/s per direction", link / 1e9);
  EXPECT_NE(all.find(buf), std::string::npos) << all;
  std::snprintf(buf, sizeof buf, "~%.0fx the PCIe link", 4.8e12 / link);
  EXPECT_NE(all.find(buf), std::string::npos) << all;
  EXPECT_NE(all.find("below its maximum generation"), std::string::npos) << all;
  // At its maximum generation the link note is absent.
  d.pcie_generation_current = 5;
  std::string again;
  for (const auto& n : explain_info({{d}, "ok"}, device_facts::of(d, "ok"))) again += n.text;
  EXPECT_EQ(again.find("below its maximum generation"), std::string::npos);
}

TEST(InfoLesson, PresentShowsTheDevice) {
  std::mt19937 rng(5);
  const device_info d = random_device(rng, 3);
  const auto tables = present_info({{d}, "ok"});
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_EQ(tables[0].id, "gpu3");
  ASSERT_EQ(tables[0].columns.size(), 3u);
  const auto cell = [&](const std::string& property) -> presentation::value {
    for (const auto& row : tables[0].rows)
      if (std::get<std::string>(row[0]) == property) return row[1];
    ADD_FAILURE() << property;
    return {};
  };
  EXPECT_EQ(std::get<std::int64_t>(cell("streaming multiprocessors")), d.sm_count);
  EXPECT_EQ(std::get<std::string>(cell("driver")), *d.driver_version);
  EXPECT_EQ(std::get<std::string>(cell("PCIe link (max)")), "Gen5 x16");
}

TEST(Record, SchemaTwoRoundTripsAndRendersLikeTheLiveRun) {
  std::mt19937 rng(9);
  const std::vector<device_info> gpus = {random_device(rng, 0), random_device(rng, 1)};
  run_record rec;
  rec.command = "info";
  rec.environment = environment_for(gpus, 1);
  rec.results.emplace_back("info", nlohmann::json(info_result{gpus, "ok"}));
  const auto live = render(rec);
  const nlohmann::json file = to_json(rec, live);
  EXPECT_EQ(file["schema_version"], kSchemaVersion);
  const run_record back = parse_record(nlohmann::json::parse(file.dump()), "x.json");
  EXPECT_EQ(back.command, "info");
  ASSERT_EQ(back.results.size(), 1u);
  EXPECT_EQ(back.results[0].second.get<info_result>(), (info_result{gpus, "ok"}));
  const auto again = render(back);
  ASSERT_EQ(again.size(), live.size());
  for (std::size_t i = 0; i < live[0].tables.size(); ++i)
    EXPECT_EQ(presentation::render_text(again[0].tables[i]),
              presentation::render_text(live[0].tables[i]));
  EXPECT_EQ(facts_of(back).device, gpus[1]);  // the GPU the config selected
}

TEST(Record, AllPrefixesTableIdsAndKeepsErrors) {
  std::mt19937 rng(1);
  const std::vector<device_info> gpus = {random_device(rng, 0)};
  run_record rec;
  rec.command = "all";
  rec.environment = environment_for(gpus, 0);
  rec.results.emplace_back("info", nlohmann::json(info_result{gpus, "ok"}));
  rec.errors.emplace_back("memory", "out of memory: 1 TiB");
  const nlohmann::json file = to_json(rec, render(rec));
  EXPECT_EQ(file["tables"][0]["id"], "info.gpu0");
  EXPECT_EQ(file["errors"]["memory"], "out of memory: 1 TiB");
  const run_record back = parse_record(file, "x.json");
  ASSERT_EQ(back.errors.size(), 1u);
  EXPECT_EQ(back.errors[0].first, "memory");
}

TEST(Record, SchemaOneInfoIsUpgraded) {
  std::mt19937 rng(2);
  const std::vector<device_info> gpus = {random_device(rng, 0)};
  // What schema 1 wrote for `info`: the tables and, at top level, "gpus".
  nlohmann::json v1 = {{"schema_version", 1},
                       {"command", "info"},
                       {"environment", environment_for(gpus, 0)},
                       {"tables", nlohmann::json::array()},
                       {"gpus", gpus}};
  for (const auto& t : present_info({gpus, "ok"})) v1["tables"].push_back(presentation::to_json(t));
  const run_record rec = parse_record(v1, "old.json");
  EXPECT_EQ(rec.schema_version, 1);
  ASSERT_EQ(rec.results.size(), 1u);
  EXPECT_EQ(rec.results[0].second.get<info_result>().gpus, gpus);
}

TEST(Record, BadFilesGetOneClearError) {
  const auto message = [](const nlohmann::json& j) -> std::string {
    try {
      (void)parse_record(j, "f.json");
    } catch (const format_error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(message(nlohmann::json::array()).find("not a gpu-basics results file"),
            std::string::npos);
  EXPECT_NE(message({{"foo", 1}}).find("not a gpu-basics results file"), std::string::npos);
  EXPECT_NE(message({{"schema_version", "2"}, {"command", "info"}}).find("must be an integer"),
            std::string::npos);
  EXPECT_NE(message({{"schema_version", 99}, {"command", "info"}}).find("schema_version 99"),
            std::string::npos);
  EXPECT_NE(message({{"schema_version", 2}, {"command", "bogus"}}).find("unknown lesson 'bogus'"),
            std::string::npos);
  EXPECT_NE(message({{"schema_version", 2}, {"command", "info"}}).find("without a \"results\""),
            std::string::npos);
  EXPECT_NE(message({{"schema_version", 2}, {"command", "all"}, {"results", {{"nope", 1}}}})
                .find("unknown lesson 'nope'"),
            std::string::npos);
  EXPECT_NE(message({{"schema_version", 1}, {"command", "all"}, {"tables", {{{"id", "x"}}}}})
                .find("names no lesson"),
            std::string::npos);
  // A result of the wrong shape is found when rendered.
  run_record rec;
  rec.command = "info";
  rec.environment = environment_for({device_info{}}, 0);
  rec.results.emplace_back("info", nlohmann::json{{"gpus", 3}});
  EXPECT_THROW((void)render(rec), format_error);
  rec.environment = nlohmann::json::object();
  EXPECT_THROW((void)facts_of(rec), format_error);
}

TEST(Record, LoadRecordNamesTheFile) {
  try {
    (void)load_record("/nonexistent/results.json");
    FAIL();
  } catch (const format_error& e) {  // an input that cannot be read is bad input (exit 2)
    EXPECT_NE(std::string(e.what()).find("/nonexistent/results.json"), std::string::npos);
  }
}

TEST(AttachNotes, GoUnderTheirTable) {
  std::vector<presentation::table> t(2);
  t[0].id = "a";
  t[1].id = "b";
  attach_notes(t, {{"b", "1"}, {"a", "2"}, {"zzz", "3"}, {"b", "4"}});
  EXPECT_EQ(t[0].notes, (std::vector<std::string>{"2"}));
  EXPECT_EQ(t[1].notes, (std::vector<std::string>{"1", "3", "4"}));
}

#if !GPU_BASICS_TEST_HOST_ONLY
#include "gpu_basics/lessons/measure.hpp"

// The host registry has no measure step (a host-only build links no GPU code); the measuring
// registry is the same lessons, in the same order, each with one.
TEST(Registry, MeasuringRegistryIsTheRegistryWithEveryMeasureStep) {
  const auto& host = gpu_basics::lessons::registry();
  const auto& measuring = gpu_basics::lessons::measuring_registry();
  ASSERT_EQ(measuring.size(), host.size());
  for (std::size_t i = 0; i < host.size(); ++i) {
    EXPECT_EQ(measuring[i].name, host[i].name);
    EXPECT_EQ(host[i].measure, nullptr) << host[i].name;
    EXPECT_NE(measuring[i].measure, nullptr) << host[i].name;
    EXPECT_EQ(measuring[i].render, host[i].render) << host[i].name;
  }
}
#endif
