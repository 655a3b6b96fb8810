#include <iostream>
#include <vector>

#include <gpu_basics/core/config.hpp>
#include <gpu_basics/core/stats.hpp>

int main() {
  const auto cfg = gpu_basics::load_config("", {"transfer.num_streams=3"});
  const std::vector<double> v = {3, 1, 2};
  const auto s = gpu_basics::summarize(v);
  std::cout << cfg.transfer.num_streams << " " << s.median << "\n";
  return (cfg.transfer.num_streams == 3 && s.median == 2.0) ? 0 : 1;
}
