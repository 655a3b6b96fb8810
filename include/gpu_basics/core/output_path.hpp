// Output paths that name themselves per process. A fleet job runs one `gpu-basics check` per node
// (or per task), and each must write its own file: `--json results/{host}.json`. srun expands %N
// only in its own --output/--error patterns, never in a program's arguments, and a shell line
// given to kubectl or sbatch runs once per pod or batch step, so gpu-basics expands the
// placeholders itself. Host-only: the values come from the host name and the environment, passed
// in, so the rules are unit-tested without a launcher.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpu_basics {

/// One placeholder of an output path and what it stands for in this process.
struct path_placeholder {
  std::string name;     // "host": written {host}
  std::string value;    // one file-name part; empty when the placeholder has none here
  std::string missing;  // why it has none ("SLURM_JOB_ID is not set: not in a Slurm job")
};

/// Reads one environment variable: its value, or nullopt when it is unset.
using env_reader = std::function<std::optional<std::string>(std::string_view name)>;

/// The placeholders, in the order the documentation lists them (docs/cli.md):
/// - {host}: the host name up to its first dot (as Slurm's %N shows it);
/// - {task}: the task's rank among its launcher's tasks: the first set of SLURM_PROCID (srun),
///   OMPI_COMM_WORLD_RANK (Open MPI), PMI_RANK (MPICH, Intel MPI), PMIX_RANK (PMIx) and
///   JOB_COMPLETION_INDEX (a Kubernetes Indexed Job); 0 when none is set (one process);
/// - {job}: SLURM_JOB_ID.
/// A value that is not one file-name part (empty, ".", "..", a '/', a control character; a rank
/// that is not a number) leaves its placeholder without a value, saying why.
[[nodiscard]] std::vector<path_placeholder> path_placeholders(std::string_view hostname,
                                                              const env_reader& env);

/// path_placeholders() of this process: gethostname() and getenv().
[[nodiscard]] std::vector<path_placeholder> current_path_placeholders();

/// `path` with each `{name}` replaced by its placeholder's value; `{{` is a literal `{`, and
/// every other character (`}` and `%` among them) stays as it is.
/// @throws format_error naming the placeholder: one that is not in `placeholders` (with the known
/// ones and the nearest), one without a value here (with why), a `{` never closed, or Slurm's
/// %N, %t or %j, which srun does not expand in arguments (with the placeholder to write instead).
[[nodiscard]] std::string expand_output_path(std::string_view path,
                                             const std::vector<path_placeholder>& placeholders);

}  // namespace gpu_basics
