#!/usr/bin/env python3
"""A program's main in templates/ (`*_main.cpp`, `*_main.cu`) gives the specializer nothing to do.

The specializer parses only the files that hold what a pass edits: `knob<` (pass 1) or
`if constexpr` (pass 2), found as plain text, as compiler/specialize/specialize.cpp's run_pass
finds them. The headers share one parse per language; a main is parsed alone, so a main holding
either costs every specialization a parse of its own (1-2 s of Clang: docs/performance.md,
"Fourteenth session"). Spec-dependent code of a main belongs in a header (docs/extending.md).

Exit 0 when no main holds either; otherwise each main is printed with the line that does.
`--self-test` first checks the search on files of its own; `--root DIR` checks another checkout.
"""

from __future__ import annotations

import os
import sys
import tempfile

NEEDLES = ("knob<", "if constexpr")  # the passes' needles (specialize.cpp)


def mains(templates: str) -> list[str]:
    out = []
    for base, _, names in os.walk(templates):
        out += [os.path.join(base, n) for n in names if n.endswith(("_main.cpp", "_main.cu"))]
    return sorted(out)


def offending_lines(path: str) -> list[tuple[int, str]]:
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    return [(i + 1, line.strip()) for i, line in enumerate(lines) if any(n in line for n in NEEDLES)]


def self_test() -> None:
    with tempfile.TemporaryDirectory() as d:
        files = {
            "train_main.cpp": "int main() {\n  if constexpr (kMoe) {\n  }\n}\n",
            "parity_main.cu": "// nothing here\nint main() {}\n",
            "probe_main.cpp": "const int k = gc::knob<int>(\"x\");\n",
            "helper.hpp": "if constexpr (kMoe) {}\n",  # a header: parsed with the others, allowed
        }
        for name, text in files.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        found = {os.path.basename(m): offending_lines(m) for m in mains(d)}
        want = {"parity_main.cu": [], "probe_main.cpp": [(1, files["probe_main.cpp"].strip())],
                "train_main.cpp": [(2, "if constexpr (kMoe) {")]}
        if found != want:
            sys.exit(f"mains_unparsed self-test: got {found}")


def main() -> int:
    if "--self-test" in sys.argv:
        self_test()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    if "--root" in sys.argv:
        root = sys.argv[sys.argv.index("--root") + 1]
    found = mains(os.path.join(root, "templates"))
    if not any(m.endswith("train_main.cpp") for m in found):  # the listing went wrong
        print(f"mains_unparsed: no templates/train_main.cpp under {root}")
        return 1
    bad = 0
    for path in found:
        for number, line in offending_lines(path):
            rel = os.path.relpath(path, root)
            print(f"{rel}:{number}: {line}\n  a main is specialized in a parse of its own: move this into a header")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
