// libFuzzer harness for results files: the bytes as a file read the way show, report, compare
// and check --from read it (lessons::load_record), then rendered as show renders it, drawn as
// report draws it, and judged as check --from judges it. The only exception allowed out is
// format_error (bad input, exit 2); any other, a sanitizer report, a run over the time limit or
// memory over the RSS limit is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/lessons/check.hpp"
#include "gpu_basics/lessons/record.hpp"
#include "gpu_basics/report/report.hpp"
#include "gpu_basics/verdict/node.hpp"
#include "scratch_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = fuzz::scratch_path("results");
  if (!fuzz::write_file(path, {reinterpret_cast<const char*>(data), size})) return 0;
  try {
    const gpu_basics::lessons::run_record rec = gpu_basics::lessons::load_record(path);
    (void)gpu_basics::lessons::render(rec);
    (void)gpu_basics::report::render_html({{"fuzz", rec}});
    (void)gpu_basics::verdict::check_of(rec,
                                        gpu_basics::lessons::thresholds_of(gpu_basics::config{}));
  } catch (const gpu_basics::format_error&) {
    // the one expected answer to bad input
  }
  return 0;
}
