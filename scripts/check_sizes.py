#!/usr/bin/env python3
"""The project's size rules, checked (CI runs it before the build; ctest -R guard runs it too).

    scripts/check_sizes.py [--root DIR] [--ignore PATH]... [--functions]

- no source file (C++/CUDA/Python under src/, include/, apps/, tests/, bench/, fuzz/, python/)
  over 900 lines;
- no function of apps/ (C++) over 80 lines, counted from the line that names it to its closing
  brace; a lambda or local class inside a function counts toward that function.

The files are those git tracks, and untracked ones it does not ignore, when DIR is the top of a
git work tree; elsewhere (a copy of the tree without its history) the directories are walked.
Each offender is printed as PATH: N lines (limit 900) or PATH:LINE: NAME is N lines (limit 80),
and the exit status is 1; on success the largest file and the longest apps function are printed
with their sizes. --ignore exempts a path (noted in the output); --functions lists every apps
function with its size. Standard library only.

Functions are found by a brace-matching scanner over the source with its comments, string and
character literals (raw strings included) and preprocessor lines blanked out (of #if/#else, only
the first branch is kept): a `{` at namespace or class level whose text since the previous `;`,
`{` or `}` ends with `)`, optionally followed by const, noexcept, override, final, a trailing
return type (-> T) or a constructor's initializer list, opens a function body.
"""
import argparse
import bisect
import os
import re
import subprocess
import sys

FILE_LIMIT = 900
FUNCTION_LIMIT = 80
DIRS = ("src", "include", "apps", "tests", "bench", "fuzz", "python")
CXX_SUFFIXES = (".cpp", ".hpp", ".h", ".cc", ".cxx", ".hh", ".hxx", ".cu", ".cuh", ".c", ".inl",
                ".ipp", ".cpp.in", ".hpp.in", ".h.in")
SOURCE_SUFFIXES = CXX_SUFFIXES + (".py",)
FUNCTION_DIRS = ("apps",)

# ---- blanking comments, literals and preprocessor lines --------------------------------------

_RAW_PREFIXES = ("R", "u8R", "uR", "UR", "LR")


def _is_ident(c):
    return c.isalnum() or c == "_"


def _line_end(text, i):
    """The index of the newline that ends the logical line at i (backslash continuations)."""
    n = len(text)
    while True:
        j = text.find("\n", i)
        if j < 0:
            return n
        if j > 0 and text[j - 1] == "\\" or j > 1 and text[j - 1] == "\r" and text[j - 2] == "\\":
            i = j + 1
            continue
        return j


def _quoted_end(text, i, quote):
    """The index of the quote closing the literal whose opening quote is at i (or a newline)."""
    n = len(text)
    j = i + 1
    while j < n:
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == quote or c == "\n":
            return j
        j += 1
    return n


def _after_quoted(text, j):
    """Where scanning goes on after a literal that ended at j (its closing quote, or the newline
    that ended it unterminated, which stays to be seen)."""
    return j if j < len(text) and text[j] == "\n" else j + 1


def blank_source(text):
    """The text with comments, string/char literals and preprocessor lines replaced by spaces,
    newlines kept (so offsets and line numbers stay those of the text). Of each #if/#elif/#else
    chain only the first branch is kept."""
    out = list(text)
    n = len(text)

    def blank(a, b):
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    skipped = []  # (start, end) ranges of #else/#elif branches
    conds = []  # per open #if: start of the branch being skipped, or None
    line_start = True
    i = 0
    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if c == "#" and line_start:
            j = i + 1
            while j < n:  # the directive's end: its line (continued), comments skipped over
                d = text[j]
                if d == "\\" and text.startswith("\n", j + 1):
                    j += 2
                elif d == "\n":
                    break
                elif text.startswith("/*", j):
                    e = text.find("*/", j + 2)
                    j = n if e < 0 else e + 2
                elif text.startswith("//", j):
                    j = _line_end(text, j)
                elif d in "\"'":
                    j = _after_quoted(text, _quoted_end(text, j, d))
                else:
                    j += 1
            m = re.match(r"#\s*(\w+)", text[i:j])
            word = m.group(1) if m else ""
            if word in ("if", "ifdef", "ifndef"):
                conds.append(None)
            elif word in ("elif", "else", "elifdef", "elifndef") and conds:
                if conds[-1] is None:
                    conds[-1] = j
            elif word == "endif" and conds:
                start = conds.pop()
                if start is not None:
                    skipped.append((start, i))
            blank(i, j)
            i = j
            continue
        line_start = False
        if text.startswith("//", i):
            j = _line_end(text, i)
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            e = text.find("*/", i + 2)
            j = n if e < 0 else e + 2
            blank(i, j)
            i = j
        elif c == '"':
            k = i
            while k > 0 and _is_ident(text[k - 1]):
                k -= 1
            paren = text.find("(", i + 1, i + 18)
            if text[k:i] in _RAW_PREFIXES and paren >= 0:
                delim = text[i + 1:paren]
                e = text.find(")" + delim + '"', paren + 1)
                j = n - 1 if e < 0 else e + len(delim) + 1  # the closing quote
            else:
                j = _quoted_end(text, i, '"')
            blank(i + 1, j)
            i = _after_quoted(text, j)
        elif c == "'":
            k = i
            while k > 0 and (_is_ident(text[k - 1]) or text[k - 1] in "'."):
                k -= 1
            if k < i and text[k].isdigit():  # a digit separator: 1'000'000
                i += 1
                continue
            j = _quoted_end(text, i, "'")
            blank(i + 1, j)
            i = _after_quoted(text, j)
        else:
            i += 1
    for a, b in skipped:
        blank(a, b)
    return "".join(out)


# ---- functions ---------------------------------------------------------------------------------

_QUALIFIER = re.compile(
    r"(?:\b(?:const|volatile|noexcept|override|final|mutable|constexpr|try)|&&|&)\s*$")
_GROUP_QUALIFIER = re.compile(r"\b(?:noexcept|throw|__attribute__|requires|alignas)\s*$")


def _matching_open(h, close):
    """The index of the ( matching the ) at close, or -1."""
    depth = 0
    for k in range(close, -1, -1):
        if h[k] == ")":
            depth += 1
        elif h[k] == "(":
            depth -= 1
            if depth == 0:
                return k
    return -1


def _cut_trailing_clause(h):
    """h without a trailing return type (-> T) or requires clause outside parentheses."""
    depth = 0
    for k in range(len(h) - 1, 0, -1):
        c = h[k]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
        elif depth == 0:
            if h.startswith("->", k - 1):
                return h[:k - 1]
            if h.startswith("requires", k) and not _is_ident(h[k - 1]) and (
                    k + 8 >= len(h) or not _is_ident(h[k + 8])):
                return h[:k]
    return h


def _params_close(h):
    """The index of the ) closing a function's parameters if the head h (the text before a `{`)
    is a function's, else -1."""
    h = _cut_trailing_clause(h).rstrip()
    while h:
        m = _QUALIFIER.search(h)
        if m:
            h = h[:m.start()].rstrip()
            continue
        if h.endswith(")"):
            o = _matching_open(h, len(h) - 1)
            if o < 0:
                return -1
            g = _GROUP_QUALIFIER.search(h[:o])
            if g:
                h = h[:g.start()].rstrip()
                continue
            return len(h) - 1
        if h.endswith("}"):
            break
        return -1
    if h.endswith("}"):  # a constructor whose initializer list ends with a braced member
        m = re.search(r"\)[\s\w&]*?(?<!:):(?!:)", h)
        if m:
            return _params_close(h[:m.start() + 1])
    return -1


def _function_name(h, close):
    """The name of the function whose head is h, its parameters closing at close; and the offset
    in h where the name starts."""
    o = _matching_open(h, close)
    pre = h[:o].rstrip()
    m = re.search(r"((?:\w+\s*::\s*)*\boperator\b\s*"
                  r"(?:\(\s*\)|\[\s*\]|[^\w\s()]+|\w[\w\s:<>*&]*?))\s*$", pre)
    if not m and pre.endswith("]"):  # a lambda outside a function: its variable's name
        m = re.search(r"(\w+)\s*=\s*\[[^\[\]]*\]\s*$", pre)
        return (m.group(1), m.start(1)) if m else ("<lambda>", len(pre))
    if not m:
        m = re.search(r"((?:\w+\s*(?:<[^;{}()]*>)?\s*::\s*)*~?\w+)\s*(?:<[^;{}()]*>)?\s*$", pre)
    if not m:
        return "<unnamed>", o
    name = re.sub(r"\s+", "", m.group(1))
    if re.fullmatch(r"[A-Z][A-Z0-9_]*", name):  # a macro such as TEST(Suite, Name)
        args = re.sub(r"\s+", " ", h[o + 1:close]).strip()
        name = "%s(%s)" % (name, args)
    return name, m.start(1)


def _head_kind(h):
    if _params_close(h) >= 0:
        return "function"
    if re.search(r"\benum\b", h):
        return "init"
    if re.search(r"\b(?:namespace|extern)\b", h):
        return "scope"
    keywords = list(re.finditer(r"\b(?:class|struct|union)\b", h))
    if keywords and not re.search(r"(?<![=!<>])=(?!=)", h[keywords[-1].end():]):
        return "scope"  # not `struct X x = {`
    return "init"


def find_functions(text):
    """[(name, first line, last line)] of the function bodies of a C++ source."""
    s = blank_source(text)
    newlines = [k for k, c in enumerate(s) if c == "\n"]

    def line_of(index):
        return bisect.bisect_left(newlines, index) + 1

    functions = []
    stack = []  # "scope", "function", "inner" (within a function), "init" (braces of a value)
    head = 0  # where the text before the next `{` at scope level starts
    current = None  # (name, first line) of the function being read
    for k, c in enumerate(s):
        if c == "{":
            if stack and stack[-1] in ("function", "inner", "init"):
                stack.append("inner" if stack[-1] != "init" else "init")
                continue
            h = s[head:k]
            kind = _head_kind(h)
            if kind == "function":
                name, at = _function_name(h, _params_close(h))
                current = (name, line_of(head + at))
            stack.append(kind)
            if kind != "init":
                head = k + 1
        elif c == "}":
            if not stack:
                head = k + 1
                continue
            kind = stack.pop()
            if kind == "function" and current:
                functions.append((current[0], current[1], line_of(k)))
                current = None
            if kind in ("function", "scope"):
                head = k + 1
        elif c == ";" and (not stack or stack[-1] == "scope"):
            head = k + 1
    return functions


# ---- the tree ---------------------------------------------------------------------------------


def count_lines(text):
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def source_files(root):
    """The checked files, as paths relative to root with / separators, sorted."""
    names = None
    try:
        top = subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, check=True).stdout.strip()
        if os.path.realpath(top) == os.path.realpath(root):
            listed = subprocess.run(
                ["git", "-C", root, "ls-files", "-z", "--cached", "--others",
                 "--exclude-standard", "--"] + list(DIRS),
                capture_output=True, text=True, check=True).stdout
            names = [p for p in listed.split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        names = None
    if names is None:
        names = []
        for d in DIRS:
            for dirpath, dirnames, filenames in os.walk(os.path.join(root, d)):
                dirnames[:] = [x for x in dirnames if not x.startswith(".") and x != "__pycache__"]
                rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
                names += [rel + "/" + f for f in filenames]
    return sorted({p for p in names if p.endswith(SOURCE_SUFFIXES)
                   and os.path.isfile(os.path.join(root, p))})


def main(argv=None):
    default_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=default_root, help="the tree to check (default: this one)")
    ap.add_argument("--ignore", action="append", default=[], metavar="PATH",
                    help="a path (relative to the root) to leave out; repeatable")
    ap.add_argument("--functions", action="store_true", help="list every apps function")
    args = ap.parse_args(argv)
    root = args.root
    if not os.path.isdir(root):
        print("check_sizes: %s is not a directory" % root, file=sys.stderr)
        return 2
    ignored = {p.strip("/") for p in args.ignore}
    files = [p for p in source_files(root) if p not in ignored]
    offenders = []
    largest = None  # (lines, path)
    longest = None  # (lines, path, line, name)
    for path in files:
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = count_lines(text)
        if largest is None or lines > largest[0]:
            largest = (lines, path)
        if lines > FILE_LIMIT:
            offenders.append("%s: %d lines (limit %d)" % (path, lines, FILE_LIMIT))
        if path.split("/")[0] in FUNCTION_DIRS and path.endswith(CXX_SUFFIXES):
            for name, first, last in find_functions(text):
                size = last - first + 1
                if args.functions:
                    print("%s:%d: %s: %d lines" % (path, first, name, size))
                if longest is None or size > longest[0]:
                    longest = (size, path, first, name)
                if size > FUNCTION_LIMIT:
                    offenders.append("%s:%d: %s is %d lines (limit %d)"
                                     % (path, first, name, size, FUNCTION_LIMIT))
    for p in sorted(ignored):
        print("check_sizes: %s ignored (--ignore)" % p)
    if offenders:
        for o in offenders:
            print(o)
        print("check_sizes: %d offender(s) in %d files: split files over %d lines and apps "
              "functions over %d lines (CONTRIBUTING.md)"
              % (len(offenders), len(files), FILE_LIMIT, FUNCTION_LIMIT), file=sys.stderr)
        return 1
    if largest:
        print("check_sizes: %d files, largest %s (%d lines, limit %d)"
              % (len(files), largest[1], largest[0], FILE_LIMIT))
    else:
        print("check_sizes: no source files under %s" % root)
    if longest:
        print("check_sizes: longest apps function %s:%d: %s (%d lines, limit %d)"
              % (longest[1], longest[2], longest[3], longest[0], FUNCTION_LIMIT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
