#!/usr/bin/env python3
"""Docs that cannot drift: every repository path and code identifier that README.md and docs/*.md
write in backticks exists in the tree.

- A path (a span with a '/' or a source-file extension, no spaces) names a tracked file or
  directory, from the repository root or from one of the roots a reader would look in
  (templates/, compiler/, runtime/, tests/, scripts/, bench/); a bare file name may live in any
  folder. Placeholders are marked by capitals (`generated/NAME/train`, `RUN/profile.json`,
  `KIT/run`), `<...>`, `*` or `{a,b}` and are not checked.
- Paths that are not the repository's by nature are listed below with the place they live in
  (a generated tree, a run directory, a Hugging Face export, the GPU kit, a user's own files);
  a span under one of those names is not checked.
- A code identifier (kConstant, CamelCase, snake_case_name, ns::name, name()) occurs in some
  tracked source file, unless it is an outside library's (listed below).

Exit status 0 when every reference resolves; 1 with one line per dangling reference
(FILE:LINE: `span`: why).
"""
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SEARCH_ROOTS = ["", "templates/", "compiler/", "runtime/", "tests/", "scripts/", "bench/"]

# Names that are not this repository's files, by where they live.
NOT_IN_REPOSITORY = {
    # a generated tree (generated/NAME/): its sources, build directory and copied runtime
    "src/": "a generated tree's sources", "build/": "a build directory", "manifest.json": "a generated tree",
    "plan.json": "a generated tree (gcompile explain --json)", "runtime/third_party/": "a generated tree's copy",
    "python/": "an export's modeling code", "embedded_presets.cpp": "generated in the build directory", "nlohmann/json.hpp": "the json library's header",
    # a run directory (runs/NAME/N/)
    "state.json": "a checkpoint", "profile.json": "a run directory (train --profile)", "tb/": "a run directory",
    "images/": "a run directory", "runs/profile.json": "the GPU kit's results", "checkpoints/": "a run directory",
    # a Hugging Face export
    "config.json": "an export", "generation_config.json": "an export", "tokenizer_config.json": "an export",
    "special_tokens_map.json": "an export", "vocab.txt": "a tokenizer's files",
    # the GPU kit (gpu-kit/, prepared here, run on the GPU machine) and its results
    "gpu-kit/": "the GPU kit", "gpu-kit/run": "the GPU kit", "trees/": "the GPU kit", "store/": "the GPU kit",
    "store/index.json": "the GPU kit", "bin/": "the GPU kit", "kit.json": "the GPU kit",
    "command.txt": "the GPU kit", "summary.md": "the GPU kit's results", "summary.json": "the GPU kit's results",
    "rows.json": "the bench's results", "build-bench/": "the bench's results",
    "profile_compare.md": "the bench's results (RESULTS/SPEC/)",
    # a user's own experiment files in the examples
    "experiments/": "a user's own specs",
}
# TensorBoard tags and ratios written like paths (docs/metrics.md, docs/spec.md).
NOT_PATHS = re.compile(r"^(sink_score|stable_rank|moe_routing|summary)/|^1/|^ours/torch$")
EXTERNAL_IDENTIFIERS = {
    "cublasGemmGroupedBatchedEx": "cuBLAS",
    "basic_json": "nlohmann/json",
    "m_data": "nlohmann/json",
}

SPAN = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"^[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]*)+/?$|^[A-Za-z0-9_\-]+\.(hpp|cpp|cu|cuh|py|md|toml|txt|in|json|sh)$")
IDENT = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*::)*[A-Za-z_][A-Za-z0-9_]*(\(\))?$")
PLACEHOLDER = re.compile(r"[A-Z]{2,}|<|\*|\{|\bN\b")


def tracked_files():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    files = set(out)
    dirs = set()
    for f in files:
        parts = f.split("/")
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))
    return files, dirs


def is_code_identifier(name):
    last = name.split("::")[-1]
    return bool(re.match(r"^k[A-Z]", last) or "::" in name or re.search(r"[a-z][A-Z]", last) or
                ("_" in last and last.lower() == last and len(last) > 3))


def not_in_repository(path):
    p = path.rstrip("/")
    for name in NOT_IN_REPOSITORY:
        n = name.rstrip("/")
        if p == n or (name.endswith("/") and p.startswith(n + "/")) or p.endswith("/" + n):
            return True
    return False


def check_path(span, files, dirs):
    if span.startswith(("http", "~", "/", "$", ".", "-")) or PLACEHOLDER.search(span) or NOT_PATHS.search(span):
        return None
    if not_in_repository(span):
        return None
    p = span.rstrip("/")
    if any(r + p in files or r + p in dirs for r in SEARCH_ROOTS):
        return None
    if "/" not in p and any(f.endswith("/" + p) for f in files):
        return None
    return "no such file or directory in the repository"


def main(docs):
    files, dirs = tracked_files()
    sources = [f for f in files if not f.endswith(".md")]
    corpus = []
    for f in sources:
        try:
            with open(os.path.join(ROOT, f), errors="ignore") as fh:
                corpus.append(fh.read())
        except (OSError, UnicodeDecodeError):
            pass
    corpus = "\n".join(corpus)
    problems = []
    for doc in docs:
        with open(os.path.join(ROOT, doc)) as fh:
            for number, line in enumerate(fh, 1):
                for m in SPAN.finditer(line):
                    span = m.group(1).strip()
                    if " " in span:
                        continue
                    why = None
                    if PATH.match(span):
                        why = check_path(span, files, dirs)
                    elif IDENT.match(span) and is_code_identifier(span.rstrip("()")):
                        last = span.rstrip("()").split("::")[-1]
                        if last not in corpus and last not in EXTERNAL_IDENTIFIERS:
                            why = "no source file mentions it"
                    if why:
                        problems.append(f"{doc}:{number}: `{span}`: {why}")
    for p in problems:
        print(p)
    print(f"doc_references: {len(problems)} dangling reference(s) in {len(docs)} files")
    return 1 if problems else 0


if __name__ == "__main__":
    docs = sys.argv[1:] or ["README.md"] + sorted(
        os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
    sys.exit(main(docs))
