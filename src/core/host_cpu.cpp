#include "gpu_basics/core/host_cpu.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <sys/resource.h>
#include <unistd.h>

namespace gpu_basics {

std::optional<cpu_ticks> parse_proc_stat(std::string_view text) {
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("cpu ", 0) != 0) continue;
    std::istringstream fields(line.substr(4));
    // user nice system idle iowait irq softirq steal (guest time is inside user already)
    std::uint64_t v[8] = {};
    int n = 0;
    while (n < 8 && fields >> v[n]) ++n;
    if (n < 4) return std::nullopt;
    cpu_ticks t;
    for (int i = 0; i < n; ++i) t.total += v[i];
    t.idle = v[3] + v[4];
    t.steal = v[7];
    return t;
  }
  return std::nullopt;
}

host_cpu_load load_between(const cpu_ticks& a, const cpu_ticks& b, double self_s,
                           double ticks_per_s, unsigned cpus) {
  host_cpu_load l;
  l.cpus = cpus;
  if (b.total <= a.total) return l;
  const auto d = static_cast<double>(b.total - a.total);
  const auto share = [&](double ticks) { return std::clamp(ticks / d, 0.0, 1.0); };
  l.steal = share(static_cast<double>(b.steal - std::min(a.steal, b.steal)));
  const double idle = static_cast<double>(b.idle - std::min(a.idle, b.idle));
  l.busy = share(d - idle - l.steal * d);
  l.self = std::min(share(self_s * ticks_per_s), l.busy);
  l.others = l.busy - l.self;
  return l;
}

namespace {

std::optional<cpu_ticks> read_ticks() {
  std::ifstream in("/proc/stat");
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return parse_proc_stat(text.str());
}

double self_cpu_seconds() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  const auto s = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return s(u.ru_utime) + s(u.ru_stime);
}

std::optional<double> load_1m() {
  std::ifstream in("/proc/loadavg");
  double v = 0;
  if (in >> v) return v;
  return std::nullopt;
}

}  // namespace

host_cpu_meter::host_cpu_meter() : start_(read_ticks()), self_s_(self_cpu_seconds()) {}

std::optional<host_cpu_load> host_cpu_meter::load() const {
  const auto now = read_ticks();
  if (!start_ || !now) return std::nullopt;
  const long hz = sysconf(_SC_CLK_TCK);
  auto l = load_between(*start_, *now, self_cpu_seconds() - self_s_,
                        hz > 0 ? static_cast<double>(hz) : 100.0,
                        std::max(1u, std::thread::hardware_concurrency()));
  l.load_1m = load_1m();
  return l;
}

}  // namespace gpu_basics
