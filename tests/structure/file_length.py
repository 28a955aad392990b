#!/usr/bin/env python3
"""No file over 600 lines in compiler/, templates/, runtime/, bench/, scripts/ or tests/ (issue 40,
"Done when"; the house style: a file a reader holds in their head, split by what it does).

Checks the files git tracks there (every file under them when git is unavailable). Exit 0 when
each has at most LIMIT lines; otherwise each longer file is printed with its length.
`--self-test` first checks the counting on files of its own; `--root DIR` checks another checkout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

LIMIT = 600
FOLDERS = ("compiler", "runtime", "templates", "bench", "scripts", "tests")


def tracked_files(root: str) -> list[str]:
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "--", *FOLDERS], check=True, capture_output=True,
                             text=True).stdout
        return [line for line in out.splitlines() if line]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for folder in FOLDERS:
            for base, _, names in os.walk(os.path.join(root, folder)):
                files += [os.path.relpath(os.path.join(base, n), root) for n in names]
        return sorted(files)


def line_count(path: str) -> int:
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data[:8192]:  # binary: not source
        return 0
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def too_long(root: str, files: list[str]) -> list[tuple[str, int]]:
    out = []
    for rel in files:
        full = os.path.join(root, rel)
        if os.path.isfile(full):
            n = line_count(full)
            if n > LIMIT:
                out.append((rel, n))
    return out


def self_test() -> None:
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "tests"))
        for name, lines in (("ok.py", LIMIT), ("long.cpp", LIMIT + 1)):
            with open(os.path.join(d, "tests", name), "w") as f:
                f.write("x\n" * lines)
        with open(os.path.join(d, "tests", "no_newline.hpp"), "w") as f:
            f.write("x\n" * LIMIT + "y")  # 601 lines, the last unterminated
        got = too_long(d, ["tests/ok.py", "tests/long.cpp", "tests/no_newline.hpp"])
        if got != [("tests/long.cpp", LIMIT + 1), ("tests/no_newline.hpp", LIMIT + 1)]:
            sys.exit(f"file_length self-test: got {got}")


def main() -> int:
    if "--self-test" in sys.argv:
        self_test()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    if "--root" in sys.argv:
        root = sys.argv[sys.argv.index("--root") + 1]
    files = tracked_files(root)
    if "tests/structure/file_length.py" not in files:  # the listing went wrong: nothing would be checked
        print(f"file_length: the files under {root} were not listed (this script is not among {len(files)})")
        return 1
    found = too_long(root, files)
    for rel, n in found:
        print(f"{rel}: {n} lines (at most {LIMIT}: split it by what its parts do)")
    if found:
        return 1
    print(f"file_length: {len(files)} files, none over {LIMIT} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
