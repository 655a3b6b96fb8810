// libFuzzer harness for the configuration front door: YAML text, --set assignments and the
// nearest-key search, on arbitrary bytes. The only exception allowed out is config_error; any
// other, a sanitizer report, a run over the time limit or memory over the RSS limit is a finding.
// The first byte picks the entry point; the rest is its input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/errors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 3) {
      case 0: {  // a configuration file's text, then the checks load_config makes
        const gpu_basics::config c = gpu_basics::parse_config(text, "fuzz.yaml");
        gpu_basics::validate(c);
        break;
      }
      case 1: {  // --set assignments, one per line, over the defaults
        gpu_basics::config c;
        std::size_t start = 0;
        while (start <= text.size()) {
          const std::size_t end = std::min(text.find('\n', start), text.size());
          gpu_basics::apply_override(c, text.substr(start, end - start));
          start = end + 1;
        }
        gpu_basics::validate(c);
        break;
      }
      default:  // the "did you mean" search
        (void)gpu_basics::nearest_config_key(text);
        (void)gpu_basics::nearest_word(text, gpu_basics::known_config_keys());
        (void)gpu_basics::quote_for_message(text);
        break;
    }
  } catch (const gpu_basics::config_error&) {
    // the one expected answer to bad input
  }
  return 0;
}
