// Output paths that name themselves per task: {host}, {task} and {job} expanded from a host name
// and an environment given here, the errors that name what is wrong, and the CLI expanding every
// output option before it checks them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <sstream>

#include "cli.hpp"
#include "exit_codes.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/output_path.hpp"

using namespace gpu_basics;

namespace {

env_reader fake_env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    const auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

/// `path` expanded with this host name and environment, or "error: " and the format_error's
/// message.
std::string expand(std::string_view path, std::string_view host,
                   std::map<std::string, std::string> vars) {
  try {
    return expand_output_path(path, path_placeholders(host, fake_env(std::move(vars))));
  } catch (const format_error& e) {
    return std::string("error: ") + e.what();
  }
}

}  // namespace

TEST(OutputPath, SlurmTasksGetOneFileEach) {
  EXPECT_EQ(expand("results/{host}-{task}.json", "gpu017", {{"SLURM_PROCID", "5"}}),
            "results/gpu017-5.json");
  EXPECT_EQ(expand("r/{job}/{host}.json", "gpu017", {{"SLURM_JOB_ID", "4242"}}),
            "r/4242/gpu017.json");
}

TEST(OutputPath, TheHostIsItsShortName) {
  EXPECT_EQ(expand("{host}.json", "gpu017.cluster.example.org", {}), "gpu017.json");
  EXPECT_EQ(expand("{host}.json", "", {}),
            "error: {host} has no value here: the host name \"\" is no file name: it is empty");
}

TEST(OutputPath, TheTaskIsTheFirstLaunchersRankOrZero) {
  EXPECT_EQ(expand("{task}", "h", {}), "0");
  EXPECT_EQ(expand("{task}", "h", {{"OMPI_COMM_WORLD_RANK", "3"}}), "3");
  EXPECT_EQ(expand("{task}", "h", {{"PMI_RANK", "7"}}), "7");
  EXPECT_EQ(expand("{task}", "h", {{"PMIX_RANK", "8"}}), "8");
  EXPECT_EQ(expand("{task}", "h", {{"JOB_COMPLETION_INDEX", "12"}}), "12");
  // srun with --mpi=pmi2 exports PMI_RANK too: Slurm's own rank comes first.
  EXPECT_EQ(expand("{task}", "h", {{"PMI_RANK", "1"}, {"SLURM_PROCID", "2"}}), "2");
}

TEST(OutputPath, ARankThatIsNotANumberIsRefusedWhereItIsUsed) {
  const std::map<std::string, std::string> env = {{"SLURM_PROCID", "../x"}};
  EXPECT_EQ(expand("{task}.json", "h", env),
            "error: {task} has no value here: SLURM_PROCID=\"../x\" is not a task number");
  EXPECT_EQ(expand("{host}.json", "h", env), "h.json");  // not used: no error
}

TEST(OutputPath, AJobOutsideSlurmIsRefusedWithWhy) {
  EXPECT_EQ(expand("{job}.json", "h", {}),
            "error: {job} has no value here: SLURM_JOB_ID is not set (not in a Slurm job)");
  EXPECT_EQ(expand("{job}", "h", {{"SLURM_JOB_ID", "a/b"}}),
            "error: {job} has no value here: SLURM_JOB_ID=\"a/b\" is no file name: it holds a '/'");
}

TEST(OutputPath, AnUnknownPlaceholderIsNamedWithTheNearest) {
  EXPECT_EQ(
      expand("r/{hots}.json", "h", {}),
      "error: unknown placeholder {hots}; did you mean {host}? (known: {host}, {task}, {job}; {{ "
      "is a literal {)");
  EXPECT_EQ(expand("r/{}.json", "h", {}),
            "error: unknown placeholder {} (known: {host}, {task}, {job}; {{ is a literal {)");
  EXPECT_EQ(expand("r/{host.json", "h", {}),
            "error: a '{' that is never closed (write {{ for a literal {)");
}

TEST(OutputPath, OtherCharactersStayAsTheyAre) {
  EXPECT_EQ(expand("plain/run.json", "h", {}), "plain/run.json");
  EXPECT_EQ(expand("a{{b}c}}-{host}.json", "h", {}), "a{b}c}}-h.json");
  EXPECT_EQ(expand("100%/50%x-%.json", "h", {}), "100%/50%x-%.json");
}

TEST(OutputPath, SlurmsPatternsAreRefusedWithThePlaceholderToWrite) {
  EXPECT_EQ(
      expand("results/%N.json", "h", {{"SLURM_PROCID", "0"}}),
      "error: %N is srun's pattern for its own --output and --error, not expanded in a program's "
      "arguments; write {host}");
  EXPECT_NE(expand("r/%t.json", "h", {}).find("write {task}"), std::string::npos);
  EXPECT_NE(expand("r/%j.json", "h", {}).find("write {job}"), std::string::npos);
}

TEST(OutputPath, ThisProcessHasAHostAndATask) {
  const auto values = current_path_placeholders();
  ASSERT_EQ(values.size(), 3u);
  EXPECT_EQ(values[0].name, "host");
  EXPECT_FALSE(values[0].value.empty()) << values[0].missing;
  EXPECT_EQ(values[0].value.find('.'), std::string::npos);
}

namespace {

/// Sets an environment variable for one test's length.
class scoped_env {
 public:
  scoped_env(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~scoped_env() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

cli::parse_result parse(std::vector<std::string> args, std::string* err = nullptr) {
  args.insert(args.begin(), "gpu-basics");
  std::ostringstream o, e;
  auto r = cli::parse(args, o, e);
  if (err) *err = e.str();
  return r;
}

}  // namespace

TEST(OutputPath, TheCliExpandsEveryOutput) {
  const scoped_env rank("SLURM_PROCID", "3");
  const scoped_env job("SLURM_JOB_ID", "77");
  const auto r = parse({"memory", "--json", "r/{task}.json", "--csv", "r/{task}.csv", "--html",
                        "r/{job}-{task}.html", "--trace", "r/{task}.trace.json", "--snapshot",
                        "r/{task}.pickle"});
  ASSERT_TRUE(r.opts);
  EXPECT_EQ(r.opts->json_path, "r/3.json");
  EXPECT_EQ(r.opts->csv_path, "r/3.csv");
  EXPECT_EQ(r.opts->html_path, "r/77-3.html");
  EXPECT_EQ(r.opts->trace_path, "r/3.trace.json");
  EXPECT_EQ(r.opts->snapshot_path, "r/3.pickle");
  const auto rep = parse({"report", "a.json", "-o", "{task}.html"});
  ASSERT_TRUE(rep.opts);
  EXPECT_EQ(rep.opts->html_path, "3.html");
  const auto chk = parse({"check", "--from", "{task}.json", "--json", "{task}.json"});
  ASSERT_TRUE(chk.opts);
  EXPECT_EQ(chk.opts->from_path, "{task}.json");  // inputs are read as given
}

TEST(OutputPath, TheCliNamesTheOptionOfAPathItCannotExpand) {
  std::string err;
  const auto r = parse({"check", "--json", "results/%N.json"}, &err);
  EXPECT_FALSE(r.opts);
  EXPECT_EQ(r.exit_code, cli::exit_usage);
  EXPECT_EQ(err,
            "gpu-basics: --json \"results/%N.json\": %N is srun's pattern for its own --output and "
            "--error, not expanded in a program's arguments; write {host}\n");
  EXPECT_EQ(parse({"report", "a.json", "-o", "{nope}.html"}, &err).exit_code, cli::exit_usage);
  EXPECT_EQ(err.rfind("gpu-basics: -o \"{nope}.html\": unknown placeholder {nope}", 0), 0u) << err;
}
