#!/usr/bin/env python3
"""Every spec key has one meaning in templates/ (issue 40 item 3; docs/architecture.md, "Specialized
kernels").

A knob, `gc::knob<T>("key", default)`, is folded by gcompile to the spec's value. Most keys are
declared once, in config.hpp. A CUDA kernel's shape struct declares again the keys it is
specialized on (cuda/rmsnorm.cuh's `kEps` for model.norm_eps), so that the generated kernel shows
its own constants and `gcompile diff` of two ablations shows them change in the kernel itself.
Those repeats must not drift: every declaration of a key has the same C++ type and the same
default (the value the templates compile and are tested with). This check lists each repeated
key with its places, and fails on a key whose declarations disagree, or on a knob outside
config.hpp, experiment.cpp and cuda/ (new code reads config.hpp's constant instead).

Exit 0 when they agree; otherwise each disagreement is printed with its places. `--self-test`
first checks that disagreements are caught; `--root DIR` checks another copy of templates/;
`--list` prints every repeated key.
"""

from __future__ import annotations

import os
import re
import sys
from collections import defaultdict

from include_rules import template_files  # every C++/CUDA file of templates/, by path

KNOB = re.compile(r'gc::knob<\s*([^>]+?)\s*>\(\s*"([^"]+)"\s*,\s*([^;]+?)\)\s*;', re.S)
# Where a knob may be declared: the knob table, the per-experiment strings, the kernels' shapes.
ALLOWED = ("config.hpp", "experiment.cpp", "cuda/")


def knobs(files: dict[str, str]) -> dict[str, list[tuple[str, int, str, str]]]:
    """key -> [(file, line, type, default)], over every file."""
    out: dict[str, list[tuple[str, int, str, str]]] = defaultdict(list)
    for path, text in sorted(files.items()):
        if path == "gc/knob.hpp":  # defines gc::knob; its comment shows one
            continue
        for m in KNOB.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            default = " ".join(m.group(3).split())
            out[m.group(2)].append((path, line, " ".join(m.group(1).split()), default))
    return out


def problems(table: dict[str, list[tuple[str, int, str, str]]]) -> list[str]:
    found = []
    for key, places in sorted(table.items()):
        for path, line, _, _ in places:
            if not path.startswith(ALLOWED):
                found.append(f"templates/{path}:{line}: declares the knob {key}: outside config.hpp, experiment.cpp and "
                             "cuda/'s shapes, read config.hpp's constant instead")
        meanings = {(t, d) for _, _, t, d in places}
        if len(meanings) > 1:
            where = "; ".join(f"templates/{p}:{l}: gc::knob<{t}>(..., {d})" for p, l, t, d in places)
            found.append(f"{key}: declared with different types or defaults: {where}")
    return found


def self_test() -> None:
    table = knobs({
        "config.hpp": 'inline constexpr float kNormEps = gc::knob<float>("model.norm_eps", 1e-5f);\n'
                      'inline constexpr int kHeads = gc::knob<int>("model.n_heads", 4);\n',
        "cuda/a.cuh": 'static constexpr float kEps = gc::knob<float>("model.norm_eps", 1e-5f);\n'
                      'static constexpr int kHeads = gc::knob<int>(\n    "model.n_heads", 8);\n',
        "cuda/b.cuh": 'static constexpr double kEps = gc::knob<double>("model.norm_eps", 1e-5);\n',
        "model/c.hpp": 'constexpr int kV = gc::knob<int>("model.vocab_size", 256);\n',
        "cuda/d.cuh": 'static constexpr int kR = gc::knob<int>("plan.moe_top_k", 1);\n'
                      'static constexpr long kS = gc::knob<long>("plan.moe_top_k", 1);\n',
    })
    got = problems(table)
    want = ["model.n_heads: declared with different", "model.norm_eps: declared with different",
            "templates/model/c.hpp:1: declares the knob model.vocab_size", "plan.moe_top_k: declared with different"]
    if len(got) != len(want) or not all(g.startswith(w) for g, w in zip(got, want)):
        sys.exit(f"knobs self-test: expected {want}, got {got}")
    if [p[:2] for p in table["model.n_heads"]] != [("config.hpp", 2), ("cuda/a.cuh", 2)]:
        sys.exit(f"knobs self-test: places of model.n_heads: {table['model.n_heads']}")


def main() -> int:
    if "--self-test" in sys.argv:
        self_test()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "templates")
    if "--root" in sys.argv:
        root = sys.argv[sys.argv.index("--root") + 1]
    table = knobs(template_files(root))
    if not table:
        print(f"knobs: no gc::knob in {root}")
        return 1
    repeated = {k: v for k, v in table.items() if len(v) > 1}
    if "--list" in sys.argv:
        for key, places in sorted(repeated.items()):
            print(f"{key}: " + ", ".join(f"{p}:{l}" for p, l, _, _ in places))
    found = problems(table)
    for p in found:
        print(p)
    if found:
        print(f"knobs: {len(found)} problem(s)")
        return 1
    print(f"knobs: {len(table)} keys, {len(repeated)} declared in more than one place, each with one type and "
          "default")
    return 0


if __name__ == "__main__":
    sys.exit(main())
