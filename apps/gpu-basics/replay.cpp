#include "replay.hpp"

#include <csignal>
#include <functional>
#include <ostream>

#include "exit_codes.hpp"
#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/lessons/record.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "run.hpp"
#include "saved.hpp"

namespace gpu_basics::cli {

int guarded(const std::string& input, std::ostream& err, const std::function<int()>& body) {
  try {
    return body();
  } catch (const logic_error& e) {  // a --policy string, which may hold control characters
    say(err, std::string("--policy: ") + e.what());
    return exit_usage;
  } catch (const format_error& e) {
    say(err, e.what());
    return exit_usage;
  } catch (const io_error& e) {
    say(err, e.what());
    return exit_io;
  } catch (const interrupted& e) {
    say(err, e.what());
    return e.signal_number() == SIGTERM ? exit_terminated : exit_interrupted;
  } catch (const std::bad_alloc&) {
    say(err, "out of host memory reading " + printable(input));
    return exit_out_of_memory;
  } catch (const std::exception& e) {
    say(err, std::string("internal error: ") + e.what());
    return exit_internal;
  }
}

std::optional<std::size_t> device_memory_of(const options& o) {
  if (o.device_memory) return parse_byte_size(*o.device_memory);  // checked by CLI11
  if (!o.device_result) return std::nullopt;
  const lessons::run_record rec = lessons::load_record(*o.device_result);
  const std::uint64_t total = lessons::facts_of(rec).device.total_memory_bytes;
  if (total == 0)
    throw format_error(printable(*o.device_result) +
                       ": --device: the result records no device memory; give --device-memory");
  return static_cast<std::size_t>(total);
}

int run_replay(const options& o, std::ostream& out, std::ostream& err) {
  return guarded(o.input_path, err, [&] {
    if (o.json_path && *o.json_path != "-") check_writable(*o.json_path);
    const auto device_memory = device_memory_of(o);
    // A bad policy: exit 2 before reading.
    const auto policies = replay_policies(o.policies, device_memory);
    const torch_snapshot s = read_torch_snapshot(o.input_path);
    const int device = s.busiest_device();
    replay_report r = replay_snapshot(s, printable(o.input_path), device, policies);
    r.device_memory = device_memory;
    const bool json_to_stdout = o.json_path && *o.json_path == "-";
    if (json_to_stdout) {
      out << saved_json_text(to_json(r));
    } else {
      out << presentation::render_text(replay_table(r)) << "\n";
      check_written(out);  // lost tables: no file written either
      if (o.json_path) write_file_atomically(*o.json_path, saved_json_text(to_json(r)));
    }
    return exit_ok;
  });
}

}  // namespace gpu_basics::cli
