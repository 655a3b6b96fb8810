#!/usr/bin/env python3
"""guard.links_catch_broken: scripts/check_links.py on a tree made here, in a temporary
directory: a README.md and docs/ pages whose links resolve (files, images, directories, headings
with code spans and punctuation, repeated headings, anchors in the same file), beside links in
code blocks and code spans that must not be checked. It must pass; then, with a link to a missing
file, a link to a missing heading and a broken image added, it must fail naming those three and
only them.

    tests/guard/check_links_broken.py scripts/check_links.py
"""
import os
import subprocess
import sys
import tempfile

README = """# tool

See [the guide](docs/guide.md), [its options](docs/guide.md#options-configsx_ayaml) and
[the second Usage](docs/guide.md#usage-1), the [lessons](docs/lessons/) and
[above](#tool) or [below](#the-apps-settings).
![a picture](docs/pic.png) and [the web](https://example.com/missing.md#nowhere).

    [not a link, an indented code block](missing/in/code.md)

```
[nor in a fence](missing/in/fence.md)
```

And `[nor in a code span](missing/in/span.md)`.

## The app's settings

Text.
"""

GUIDE = """# Guide

![the same picture](pic.png) back to the [README](../README.md#tool).

## Options: `configs/x_a.yaml`

## Usage

## Usage

<a name="custom-anchor"></a>
[to the custom anchor](#custom-anchor) and [a lesson](lessons/one.md#one-lesson).
"""

LESSON = """# One lesson

[up](../guide.md#guide), [a picture](../pic.png).
"""

BROKEN = """
## Broken

[gone](docs/gone.md), [no such heading](docs/guide.md#no-such-heading) and
![no picture](docs/missing.png).
"""


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def run(script, root):
    p = subprocess.run([sys.executable, script, "--root", root], capture_output=True, text=True,
                       check=False)
    return p.returncode, p.stdout + p.stderr


def main():
    script = os.path.abspath(sys.argv[1])
    failures = []
    with tempfile.TemporaryDirectory() as root:
        write(root, "README.md", README)
        write(root, "docs/guide.md", GUIDE)
        write(root, "docs/lessons/one.md", LESSON)
        write(root, "docs/pic.png", "not really a picture")
        rc, out = run(script, root)
        print(out, end="")
        if rc != 0 or "broken" in out:
            failures.append(f"a tree whose links resolve: exit {rc}, expected 0")
        write(root, "README.md", README + BROKEN)
        rc, out = run(script, root)
        print(out, end="")
        if rc != 1:
            failures.append(f"a tree with broken links: exit {rc}, expected 1")
        reported = [line for line in out.splitlines() if line.startswith("README.md:")]
        for target in ("docs/gone.md", "docs/guide.md#no-such-heading", "docs/missing.png"):
            if not any(f": {target}: " in line for line in reported):
                failures.append(f"not reported: {target}")
        if len(reported) != 3:
            failures.append(f"{len(reported)} links reported, expected 3")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
