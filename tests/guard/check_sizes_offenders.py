#!/usr/bin/env python3
"""guard.sizes_catch_offenders: scripts/check_sizes.py on a tree made here, in a temporary
directory, that breaks both rules (a 901-line file, an 81-line apps function) beside sources
that keep them (a 900-line file, an 80-line function) and braces, quotes and raw strings in
literals and comments that must not move a function's end. The script must fail naming both
offenders and only them; with the offenders gone it must pass and name the largest file and the
longest function. In a git tree, a file git ignores is not checked.

    tests/guard/check_sizes_offenders.py scripts/check_sizes.py
"""
import os
import shutil
import subprocess
import sys
import tempfile

# Braces, quotes and raw strings in literals and comments, none of them code.
TRICKY = r'''// A comment with an opening brace { and a closing one } and a "quote
/* a block comment { { {
   still the comment } */
#define OPEN_BRACE {
#include <string>

namespace tool {
namespace {
const char* const open_braces = "{{{ \" {";
const char brace = '{';
const char quote = '"';
const char* const raw = R"json({"a": "}}", "b": "\"{"})json";
const char* const raw_paren = R"x(a )" }} )x";
const int million = 1'000'000;
const wchar_t wide = L'}';

struct runner {
  explicit runner(int a) : a_{a}, b_{"}"} {}
  [[nodiscard]] int step() const noexcept { return a_ + '}'; }
  int a_;
  std::string b_;
};

std::string tricky(int x) {
  std::string s = "}";  // a brace } that closes nothing
  s += '}';
  s += R"(}})";
  /* } */
  if (x > 0) s += "\\";
  return s + "}\"}";
}
}  // namespace
'''


def body_lines(n):
    """n lines of a function body, a lambda with its braces among them."""
    lines = ["  auto add = [&](int k) {", "    total += k;", "  };"]
    while len(lines) < n:
        lines.append("  add(%d);  // }" % len(lines))
    return lines[:n]


def function(signature, size, extra=()):
    """A function of `size` lines, counted from its signature to its closing brace, starting with
    the lines `extra`."""
    head = [signature, "  int total = 0;"] + list(extra)
    return head + body_lines(size - len(head) - 2) + ["  return total;", "}"]


def write(root, rel, lines):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def make_tree(root):
    """The fixture; returns the line of long_one's signature in apps/tool/main.cpp."""
    write(root, "src/big.cpp", ["// line %d" % i for i in range(1, 902)])
    write(root, "src/ok.cpp", ["// line %d" % i for i in range(1, 901)])
    write(root, "tests/short.py", ["x = '{'  # }"] * 10)
    main = TRICKY.split("\n")
    long_line = len(main) + 1
    # Closing braces in its literals first: read as code, they would end it early.
    main += function("auto long_one(int n) -> std::string {", 81,
                     ['  const char* s = "}}}";  // {', "  const char c = '}';",
                      '  const char* r = R"(})";', '  const char* q = R"x(" } ")x";',
                      r'  const char* e = "\" } \"";', "  const int k = 1'000 + '}';",
                      "  /* } */"])
    main += function("int exactly_eighty() {", 80)
    main += ["}  // namespace tool", "", "int main() { return tool::long_one(1).empty() ? 1 : 0; }"]
    write(root, "apps/tool/main.cpp", main)
    return long_line


def run(script, root):
    p = subprocess.run([sys.executable, script, "--root", root], capture_output=True, text=True)
    out = p.stdout + p.stderr
    print("$ check_sizes.py --root <fixture>  (exit %d)\n%s" % (p.returncode, out))
    return p.returncode, out


def main():
    script = os.path.abspath(sys.argv[1])
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as root:
        long_line = make_tree(root)
        rc, out = run(script, root)
        expect(rc == 1, "exit 1 with offenders, got %d" % rc)
        expect("src/big.cpp: 901 lines (limit 900)" in out, "src/big.cpp named with 901 lines")
        want = "apps/tool/main.cpp:%d: long_one is 81 lines (limit 80)" % long_line
        expect(want in out, "the long function named: " + want)
        for name in ("ok.cpp", "short.py", "exactly_eighty", "tricky", "runner", "step", "main is"):
            expect(name not in out, "%s not named" % name)
        expect(out.count("(limit") == 2, "two offenders, no more")

        os.remove(os.path.join(root, "src/big.cpp"))
        main_cpp = os.path.join(root, "apps/tool/main.cpp")
        with open(main_cpp) as f:
            lines = f.read().split("\n")
        del lines[lines.index("  add(3);  // }", long_line)]  # long_one: 80 lines now
        with open(main_cpp, "w") as f:
            f.write("\n".join(lines))
        rc, out = run(script, root)
        expect(rc == 0, "exit 0 without offenders, got %d" % rc)
        expect("largest src/ok.cpp (900 lines, limit 900)" in out, "the largest file named")
        expect("main.cpp:%d: long_one (80 lines, limit 80)" % long_line in out,
               "the longest function named, with 80 lines")

        git = shutil.which("git")
        if git:  # in a git tree: tracked and untracked files, not those git ignores
            env = dict(os.environ, GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
            subprocess.run([git, "init", "-q", root], check=True, env=env)
            write(root, ".gitignore", ["/src/generated/"])
            write(root, "src/generated/huge.cpp", ["//"] * 2000)
            write(root, "python/new_big.py", ["#"] * 901)
            rc, out = run(script, root)
            expect(rc == 1 and "python/new_big.py: 901 lines" in out,
                   "git tree: an untracked file is checked")
            expect("huge.cpp" not in out, "git tree: an ignored file is not checked")

    if failures:
        print("guard.sizes_catch_offenders: FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("guard.sizes_catch_offenders: the guard names both offenders and passes without them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
