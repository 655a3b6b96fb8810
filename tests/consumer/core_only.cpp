// Links gpu_basics::core alone: configuration, statistics, the data pattern and the host clock.
#include <iostream>
#include <vector>

#include <gpu_basics/core/clock.hpp>
#include <gpu_basics/core/config.hpp>
#include <gpu_basics/core/pattern.hpp>
#include <gpu_basics/core/stats.hpp>

int main() {
  const double t0 = gpu_basics::host_seconds();
  const auto cfg = gpu_basics::load_config("", {"transfer.num_streams=4"});
  std::vector<unsigned char> buf(1000);
  gpu_basics::fill_pattern_host(buf.data(), buf.size(), 7);
  const auto bad = gpu_basics::count_pattern_mismatches_host(buf.data(), buf.size(), 7);
  const auto s = gpu_basics::summarize(std::vector<double>{5, 4, 6});
  std::cout << "core " << cfg.transfer.num_streams << " " << s.median << " " << bad << "\n";
  const bool ok = cfg.transfer.num_streams == 4 && s.median == 5.0 && bad == 0 &&
                  gpu_basics::host_seconds() >= t0;
  return ok ? 0 : 1;
}
