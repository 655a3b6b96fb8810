#include "run.hpp"

#include <ostream>

#include <spdlog/spdlog.h>

#include "exit_codes.hpp"
#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/environment.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/logging.hpp"
#include "lesson.hpp"

namespace gpu_basics::cli {

namespace {

using lesson_fn = report (*)(context&);

lesson_fn lesson_for(const std::string& command) {
  if (command == "info") return run_info;
  if (command == "memory") return run_memory;
  if (command == "transfer") return run_transfer;
  if (command == "profile") return run_profile;
  throw logic_error("unknown command " + command);
}

/// The exit code and message for an error escaping a command.
std::pair<int, std::string> classify(const std::exception& e) {
  if (dynamic_cast<const no_device_error*>(&e)) return {exit_no_gpu, e.what()};
  if (dynamic_cast<const out_of_memory*>(&e)) return {exit_out_of_memory, e.what()};
  if (dynamic_cast<const verification_error*>(&e)) return {exit_verification, std::string("verification failed: ") + e.what()};
  if (dynamic_cast<const cuda_error*>(&e)) return {exit_cuda, e.what()};
  if (dynamic_cast<const io_error*>(&e)) return {exit_io, e.what()};
  if (dynamic_cast<const config_error*>(&e)) return {exit_usage, e.what()};
  return {exit_internal, std::string("internal error: ") + e.what()};
}

/// Every lesson in turn. A lesson that fails is reported (one line, and under "errors" in the
/// JSON) and the others still run; the first failure's exit code is returned in *code.
report run_all(context& ctx, std::ostream& out, std::ostream& err, bool print, int* code) {
  report all;
  all.command = "all";
  for (const auto& c : commands()) {
    if (c == "all") continue;
    report r;
    try {
      r = lesson_for(c)(ctx);
    } catch (const no_device_error&) {
      throw;  // nothing else can run either
    } catch (const std::exception& e) {
      const auto [rc, message] = classify(e);
      err << "gpu-basics: " << c << ": " << message << "\n";
      all.extra["errors"][c] = message;
      if (*code == exit_ok) *code = rc;
      (void)cudaGetLastError();
      continue;
    }
    if (print) {
      out << "==== gpu-basics " << c << " ====\n\n";
      for (const auto& t : r.tables) out << render_text(t) << "\n";
    }
    for (auto& t : r.tables) {
      t.id = c + "." + t.id;
      all.tables.push_back(std::move(t));
    }
    for (const auto& [k, v] : r.extra.items()) all.extra[c][k] = v;
  }
  return all;
}

}  // namespace

int run(const options& o, std::ostream& out, std::ostream& err) {
  const auto fail = [&](int code, const std::string& message) {
    err << "gpu-basics: " << message << "\n";
    return code;
  };
  config cfg;
  try {
    // The configuration is validated before any GPU is touched.
    cfg = load_config(o.config_path, o.overrides);
    if (o.log_level) cfg.logging.level = *parse_log_level(*o.log_level);
  } catch (const config_error& e) {
    return fail(exit_usage, e.what());
  }
  try {
    setup_logging(cfg.logging.level);
    context ctx;
    ctx.cfg = cfg;
    ctx.trace_path = o.trace_path;
    (void)visible_device_count();  // no GPU: one clear line before anything else is said
    std::string why;
    ctx.nv = nvml::open(&why);
    ctx.nvml_status = ctx.nv ? "ok" : why;
    if (!ctx.nv) spdlog::info("{}; PCIe link and clock readings are omitted", why);
    ctx.devices = query_devices(ctx.nv.get());
    if (cfg.device >= static_cast<int>(ctx.devices.size()))
      throw no_device_error("device: " + std::to_string(cfg.device) + " does not exist: " +
                            std::to_string(ctx.devices.size()) + " GPU(s) visible (indices 0.." +
                            std::to_string(ctx.devices.size() - 1) + ")");
    GPU_BASICS_CUDA_TRY(cudaSetDevice(cfg.device));

    const bool json_to_stdout = o.json_path && *o.json_path == "-";
    report r;
    int code = exit_ok;
    if (o.command == "all") {
      r = run_all(ctx, out, err, !json_to_stdout, &code);
    } else {
      r = lesson_for(o.command)(ctx);
      if (!json_to_stdout)
        for (const auto& t : r.tables) out << render_text(t) << "\n";
    }
    r.environment = environment_json(ctx.cfg, ctx.devices, ctx.nvml_status);
    if (json_to_stdout) {
      out << to_json(r).dump(2) << "\n";
    } else if (o.json_path) {
      write_json(r, *o.json_path);
      spdlog::info("wrote {}", *o.json_path);
    }
    if (o.csv_path)
      for (const auto& f : write_csv(r, *o.csv_path)) spdlog::info("wrote {}", f);
    return code;
  } catch (const std::exception& e) {
    const auto [code, message] = classify(e);
    return fail(code, message);
  }
}

}  // namespace gpu_basics::cli
