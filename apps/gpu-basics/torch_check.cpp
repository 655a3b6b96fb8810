#include "torch_check.hpp"

#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"

namespace gpu_basics::cli {

namespace {

/// `s` quoted for the shell: '...' with each ' written as '\''.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// PyTorch's parser of PYTORCH_CUDA_ALLOC_CONF, by the name this PyTorch gives it.
constexpr const char* kProbe =
    "import sys, torch\n"
    "f = getattr(torch._C, '_accelerator_setAllocatorSettings', None) or "
    "torch.cuda.memory._set_allocator_settings\n"
    "f(sys.argv[1])\n";

}  // namespace

void check_with_torch(const std::string& python, const std::string& conf) {
  std::string c = conf;
  const std::string key = "per_process_memory_fraction:";
  if (const auto at = c.find(key + "\"$("); at != std::string::npos)
    c = c.substr(0, at) + key + "0.5";
  else if (const auto sub = c.find(key + "$("); sub != std::string::npos)
    c = c.substr(0, sub) + key + "0.5";
  const std::string cmd =
      fmt::format("{} -c {} {} 2>&1", quoted(python), quoted(kProbe), quoted(c));
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) throw format_error("--torch-python: cannot start " + printable(python));
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe.get())) > 0 && out.size() < 65536;)
    out.append(buf, n);
  const int rc = pclose(pipe.release());
  if (rc == 0) return;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  const auto nl = out.rfind('\n');
  const std::string last = nl == std::string::npos ? out : out.substr(nl + 1);
  throw format_error(fmt::format("--torch-python: {} does not accept {}: {}", printable(python),
                                 quote_for_message(c), printable(last.substr(0, 300))));
}

}  // namespace gpu_basics::cli
