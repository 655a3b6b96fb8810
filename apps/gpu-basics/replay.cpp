#include "replay.hpp"

#include <csignal>
#include <functional>
#include <ostream>

#include "exit_codes.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
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

int run_replay(const options& o, std::ostream& out, std::ostream& err) {
  return guarded(o.input_path, err, [&] {
    if (o.json_path && *o.json_path != "-") check_writable(*o.json_path);
    const auto policies = replay_policies(o.policies);  // a bad one: exit 2 before reading
    const torch_snapshot s = read_torch_snapshot(o.input_path);
    const int device = s.busiest_device();
    const replay_report r = replay_snapshot(s, printable(o.input_path), device, policies);
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
