#!/usr/bin/env python3
"""Relative links in the project's Markdown must resolve (ctest -R guard.links runs it).

    scripts/check_links.py [--root DIR] [FILE.md ...]

Checks README.md, CONTRIBUTING.md and every docs/**/*.md under DIR (default: the repository that
holds this script), or the files given (relative to DIR). For each link or image, `[text](target)`
or `![alt](target)`, outside code blocks and code spans, whose target has no scheme (`https:`,
`mailto:`, ...):

- the path, relative to the file that links, must exist (a file or a directory);
- a `#fragment` (alone: the same file) must be the anchor of a heading of that Markdown file, as
  GitHub makes them: lower case, punctuation but `-` and `_` dropped, spaces to `-`, a repeated
  heading suffixed `-1`, `-2`, ...; or an explicit `<a name="...">` / `id="..."`.

Each broken link is printed as FILE:LINE: TARGET: why, and the exit status is 1; on success the
number of files and relative links checked is printed. Standard library only.
"""
import argparse
import os
import re
import sys
import urllib.parse

DEFAULT_FILES = ("README.md", "CONTRIBUTING.md")
DEFAULT_DIRS = ("docs",)

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
_EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def prose_lines(text):
    """(line number, line) for each line outside fenced and indented code blocks."""
    fence = None
    prev_blank, prev_code = True, False
    for number, line in enumerate(text.split("\n"), 1):
        m = _FENCE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        blank = not line.strip()
        code = not blank and line.startswith("    ") and (prev_blank or prev_code)
        if not blank:
            prev_code = code
        prev_blank = blank
        if not code:
            yield number, line


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = _CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)   # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)                       # inline HTML
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache):
    if path not in cache:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        found, seen = set(), {}
        for _, line in prose_lines(text):
            m = _HEADING.match(line)
            if m:
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
            found.update(_EXPLICIT_ANCHOR.findall(line))
        cache[path] = found
    return cache[path]


def links(text):
    """(line number, target) of every link and image in prose."""
    for number, line in prose_lines(text):
        line = _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)
        for m in _LINK.finditer(line):
            target = m.group(1)
            if target.startswith("<") and target.endswith(">"):
                target = target[1:-1]
            yield number, target


def check_file(root, rel, cache):
    """(broken links as strings, relative links checked)."""
    path = os.path.join(root, rel)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    broken, count = [], 0
    for number, target in links(text):
        if _SCHEME.match(target) or target.startswith("//"):
            continue
        count += 1
        where = f"{rel}:{number}: {target}"
        part, _, fragment = target.partition("#")
        part = urllib.parse.unquote(part)
        dest = os.path.normpath(os.path.join(os.path.dirname(path), part)) if part else path
        if not os.path.exists(dest):
            broken.append(f"{where}: no such file ({os.path.relpath(dest, root)})")
            continue
        if not fragment:
            continue
        if os.path.isdir(dest) or not dest.endswith(".md"):
            broken.append(f"{where}: an anchor into a file that is not Markdown")
            continue
        if urllib.parse.unquote(fragment) not in anchors(dest, cache):
            broken.append(f"{where}: no heading with anchor #{fragment} in "
                          f"{os.path.relpath(dest, root)}")
    return broken, count


def default_files(root):
    files = [f for f in DEFAULT_FILES if os.path.isfile(os.path.join(root, f))]
    for d in DEFAULT_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, d)):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(".md"):
                    files.append(os.path.relpath(os.path.join(dirpath, name), root))
    return files


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))))
    parser.add_argument("files", nargs="*")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    files = args.files or default_files(root)
    cache, broken, count = {}, [], 0
    for rel in files:
        b, n = check_file(root, rel, cache)
        broken += b
        count += n
    for line in broken:
        print(line)
    if broken:
        print(f"{len(broken)} broken relative link(s) in {len(files)} file(s)", file=sys.stderr)
        return 1
    print(f"links: {count} relative links in {len(files)} files resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
