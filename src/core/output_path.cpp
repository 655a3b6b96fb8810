#include "gpu_basics/core/output_path.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/errors.hpp"

namespace gpu_basics {

namespace {

/// Why `value` cannot be one part of a file name, or "" when it can.
std::string why_not_a_name_part(std::string_view value) {
  if (value.empty()) return "it is empty";
  if (value == "." || value == "..") return "it is " + quote_for_message(value);
  if (value.find('/') != std::string_view::npos) return "it holds a '/'";
  if (std::any_of(value.begin(), value.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }))
    return "it holds a control character";
  return "";
}

path_placeholder host_placeholder(std::string_view hostname) {
  const std::string_view shortname = hostname.substr(0, hostname.find('.'));
  if (const auto why = why_not_a_name_part(shortname); !why.empty())
    return {"host", "",
            "the host name " + quote_for_message(hostname) + " is no file name: " + why};
  return {"host", std::string(shortname), ""};
}

/// The launchers' rank variables, most specific first: srun also exports PMI_RANK under
/// --mpi=pmi2, and an Open MPI started by srun sets both.
constexpr std::array<std::string_view, 5> kRankVariables = {
    "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "JOB_COMPLETION_INDEX"};

path_placeholder task_placeholder(const env_reader& env) {
  for (const auto var : kRankVariables) {
    const auto v = env(var);
    if (!v) continue;
    if (v->empty() ||
        !std::all_of(v->begin(), v->end(), [](char c) { return c >= '0' && c <= '9'; }))
      return {"task", "", std::string(var) + "=" + quote_for_message(*v) + " is not a task number"};
    return {"task", *v, ""};
  }
  return {"task", "0", ""};  // no launcher: the only task
}

path_placeholder job_placeholder(const env_reader& env) {
  const auto v = env("SLURM_JOB_ID");
  if (!v) return {"job", "", "SLURM_JOB_ID is not set (not in a Slurm job)"};
  if (const auto why = why_not_a_name_part(*v); !why.empty())
    return {"job", "", "SLURM_JOB_ID=" + quote_for_message(*v) + " is no file name: " + why};
  return {"job", *v, ""};
}

/// Slurm's filename patterns that have a placeholder here: the old recipe's `results/%N.json`
/// would otherwise write one literal file for the whole fleet.
struct slurm_pattern {
  char letter;
  std::string_view placeholder;
};
constexpr std::array<slurm_pattern, 3> kSlurmPatterns = {
    {{'N', "host"}, {'t', "task"}, {'j', "job"}}};

std::string known_list(const std::vector<path_placeholder>& placeholders) {
  std::string list;
  for (const auto& p : placeholders) list += (list.empty() ? "{" : ", {") + p.name + "}";
  return list;
}

const path_placeholder& lookup(std::string_view name,
                               const std::vector<path_placeholder>& placeholders) {
  for (const auto& p : placeholders)
    if (p.name == name) return p;
  std::vector<std::string> names;
  for (const auto& p : placeholders) names.push_back(p.name);
  std::string message = "unknown placeholder {" + printable(name) + "}";
  if (const auto near = nearest_word(name, names)) message += "; did you mean {" + *near + "}?";
  throw format_error(message + " (known: " + known_list(placeholders) + "; {{ is a literal {)");
}

}  // namespace

std::vector<path_placeholder> path_placeholders(std::string_view hostname, const env_reader& env) {
  return {host_placeholder(hostname), task_placeholder(env), job_placeholder(env)};
}

std::vector<path_placeholder> current_path_placeholders() {
  std::array<char, 256> name{};
  const bool named = gethostname(name.data(), name.size() - 1) == 0;
  return path_placeholders(named ? std::string_view(name.data()) : std::string_view(),
                           [](std::string_view var) -> std::optional<std::string> {
                             const char* v = std::getenv(std::string(var).c_str());
                             if (v == nullptr) return std::nullopt;
                             return std::string(v);
                           });
}

std::string expand_output_path(std::string_view path,
                               const std::vector<path_placeholder>& placeholders) {
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    if (c == '%' && i + 1 < path.size()) {
      for (const auto& s : kSlurmPatterns)
        if (path[i + 1] == s.letter)
          throw format_error(std::string("%") + s.letter +
                             " is srun's pattern for its own --output and --error, not expanded "
                             "in a program's arguments; write {" +
                             std::string(s.placeholder) + "}");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < path.size() && path[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const auto close = path.find('}', i + 1);
    if (close == std::string_view::npos)
      throw format_error("a '{' that is never closed (write {{ for a literal {)");
    const auto& p = lookup(path.substr(i + 1, close - i - 1), placeholders);
    if (p.value.empty()) throw format_error("{" + p.name + "} has no value here: " + p.missing);
    out += p.value;
    i = close;
  }
  return out;
}

}  // namespace gpu_basics
