// The lesson commands in a host-only build (GPU_BASICS_HOST_ONLY): it was built without CUDA, so
// it cannot measure; it says so in one line. check --from runs (run.cpp), as it needs no GPU.
#include <ostream>

#include "exit_codes.hpp"
#include "run.hpp"

namespace gpu_basics::cli {

int measure_lessons(const options& o, config, const std::optional<lessons::run_record>&,
                    std::ostream&, std::ostream& err) {
  err << "gpu-basics: " << o.command
      << " measures on a GPU, and this gpu-basics was built host-only (without CUDA): it reads "
         "and draws saved runs (show, report, compare, replay, advise, check --from); measure "
         "with a gpu-basics built with CUDA\n";
  return exit_no_gpu;
}

int run_ledger_probe(const std::vector<std::string>&, std::ostream&, std::ostream& err) {
  err << "gpu-basics: ledger-probe measures on a GPU, and this gpu-basics was built host-only\n";
  return exit_no_gpu;
}

}  // namespace gpu_basics::cli
