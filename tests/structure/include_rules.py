#!/usr/bin/env python3
"""The include rules of templates/ (docs/architecture.md, "Layers"), checked on every file.

The two backends are peers over a neutral core: what both share lives in core/, which includes
only core/; model/, metrics/, train/, analysis/, profile/, cuda/ and the top-level headers include
nothing from cpu/ (the CPU model alias and the CPU metric ops live with the engine and the CPU
backend; the programs, *_main.cpp and parity_main.cu, compose everything); cpu/ and cuda/ hold kernels and their backend, and include nothing from model/,
engine/ or train/. engine/ is where a model meets its backend and may include both, and nothing
from train/; train/ reaches engine/ only through the interface (engine.hpp), the one factory
(make_engine.hpp) and the host model (cpu_model.hpp).

gcompile itself (compiler/) has templates/ on its planner's include path for the rules written once
for it and the tree: it may include only core/ from there, and no include may name a file that
both compiler/ and templates/ hold (which one it reads would depend on the include order).

Exit 0 when every rule holds; otherwise each violation is printed as FILE:LINE: the include and
the rule it breaks. `--self-test` first checks that violating files are caught; `--root DIR`
checks another copy of templates/.
"""

from __future__ import annotations

import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

# (folders the rule applies to, the include prefixes they may not use, why)
RULES = [
    (("model/", "metrics/", "train/", "analysis/", "profile/", "cuda/", ""),
     ("cpu/",), "only engine/ (and cpu/ itself) include the CPU backend: the backends are peers"),
    (("cpu/", "cuda/"), ("model/", "engine/", "train/"),
     "a backend holds kernels and their backend only, below the model"),
    (("engine/",), ("train/",), "engine/ sits below train/: the loop uses an engine, never the reverse"),
]

# (folders, a prefix, the only headers under it they may include, why): train/ includes directly
# the engine interface, the one factory and the host model, never an engine itself or its ZeRO-1
# shards (the factory includes those).
ALLOWED = [
    (("train/",), "engine/", ("engine/engine.hpp", "engine/make_engine.hpp", "engine/cpu_model.hpp"),
     "train/ sees engine/ through engine.hpp, the factory make_engine.hpp and the host model cpu_model.hpp"),
]


def folder_of(path: str) -> str:
    """'cpu/moe.hpp' -> 'cpu/', 'config.hpp' -> '' (a top-level header), 'train_main.cpp' ->
    'program' (the programs at the top compose everything)."""
    if "/" in path:
        return path.split("/", 1)[0] + "/"
    return "" if path.endswith(".hpp") else "program"


def violations(files: dict[str, str]) -> list[str]:
    out = []
    for path, text in sorted(files.items()):
        folder = folder_of(path)
        for match in INCLUDE.finditer(text):
            target = match.group(1)
            line = text.count("\n", 0, match.start()) + 1
            if folder == "core/" and not target.startswith("core/"):
                out.append(f"{path}:{line}: includes \"{target}\": core/ is the neutral ground floor and includes "
                           "only core/")
                continue
            for sources, banned, why in RULES:
                if folder in sources and target.startswith(banned):
                    out.append(f"{path}:{line}: includes \"{target}\": {why}")
            for sources, prefix, allowed, why in ALLOWED:
                if folder in sources and target.startswith(prefix) and target not in allowed:
                    out.append(f"{path}:{line}: includes \"{target}\": {why}")
    return out


def compiler_violations(compiler_files: dict[str, str], template_paths: set[str],
                        compiler_paths: set[str]) -> list[str]:
    """compiler/'s includes that reach into templates/ beyond core/, or that name a file both hold."""
    out = []
    for path, text in sorted(compiler_files.items()):
        for match in INCLUDE.finditer(text):
            target = match.group(1)
            if target not in template_paths:
                continue
            line = text.count("\n", 0, match.start()) + 1
            if target in compiler_paths:
                out.append(f"compiler/{path}:{line}: includes \"{target}\", which compiler/ and templates/ both "
                           "hold: the include order decides which one is read")
            elif not target.startswith("core/"):
                out.append(f"compiler/{path}:{line}: includes templates' \"{target}\": gcompile includes only "
                           "templates/core/ (the rules written once for it and the tree)")
    return out


def template_files(root: str) -> dict[str, str]:
    files = {}
    for base, _, names in os.walk(root):
        for name in names:
            if name.endswith((".hpp", ".cpp", ".cu", ".cuh")):
                full = os.path.join(base, name)
                with open(full, encoding="utf-8") as f:
                    files[os.path.relpath(full, root).replace(os.sep, "/")] = f.read()
    return files


def self_test() -> None:
    caught = violations({
        "model/x.hpp": '#include "config.hpp"\n#include "cpu/backend.hpp"\n',
        "cuda/y.cuh": '#include "engine/engine.hpp"\n',
        "core/z.hpp": '#include <cmath>\n#include "vocabulary.hpp"\n',
        "engine/ok.hpp": '#include "cpu/backend.hpp"\n#include "model/model.hpp"\n',
        "cpu/ok.hpp": '#include "core/blas.hpp"\n#include "metrics/activation_stats.hpp"\n',
        "ok_main.cpp": '#include "cpu/metric_ops.hpp"\n',
        "shared.hpp": '#include "cpu/common.hpp"\n',
        "engine/cycle.hpp": '#include "engine/engine.hpp"\n#include "train/host_state.hpp"\n',
        "train/deep.hpp": '#include "engine/engine.hpp"\n#include "engine/make_engine.hpp"\n#include "engine/zero.hpp"\n',
    })
    want = ["core/z.hpp:2:", "cuda/y.cuh:1:", "engine/cycle.hpp:2:", "model/x.hpp:2:", "shared.hpp:1:",
            "train/deep.hpp:3:"]
    got = [v.split(" ", 1)[0] for v in caught]
    if got != want:
        sys.exit(f"include_rules self-test: expected violations at {want}, got {caught}")
    caught = compiler_violations(
        {"plan/x.cpp": '#include "core/kernel_rules.hpp"\n#include "cuda/common.cuh"\n#include "plan/plan.hpp"\n',
         "emit/y.cpp": '#include <vector>\n#include "common/text.hpp"\n'},
        {"core/kernel_rules.hpp", "cuda/common.cuh", "common/text.hpp"}, {"plan/plan.hpp", "common/text.hpp"})
    got = [v.split(" ", 1)[0] for v in caught]
    if got != ["compiler/emit/y.cpp:2:", "compiler/plan/x.cpp:2:"]:
        sys.exit(f"include_rules self-test: compiler/ rules: got {caught}")


def main() -> int:
    if "--self-test" in sys.argv:
        self_test()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "templates")
    if "--root" in sys.argv:  # another copy of templates/ (an older commit's, say)
        root = sys.argv[sys.argv.index("--root") + 1]
    templates = template_files(root)
    found = [f"templates/{v}" for v in violations(templates)]
    compiler = template_files(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "compiler"))
    found += compiler_violations(compiler, set(templates), set(compiler))
    for v in found:
        print(v)
    if found:
        print(f"include_rules: {len(found)} include(s) break the layering (docs/architecture.md, \"Layers\")")
        return 1
    print("include_rules: every include of templates/ follows the layering; compiler/ includes only templates/core/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
