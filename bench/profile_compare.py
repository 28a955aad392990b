#!/usr/bin/env python3
"""Where a training step goes, gcompile beside PyTorch: one Markdown table of step profiles.

    python3 bench/profile_compare.py OURS_profile.json TORCH_profile.json [TORCH2.json ...] [--markdown FILE]

Each file is a profile in the "gcompile-profile-1" schema: `train --profile N` writes RUN/profile.json
("implementation": "gcompile"), bench/torch_baseline.py --profile-dir writes profile_torch_<backend>.json
("implementation": "torch.compile"). The table has one row per category (gcompile's categories, in
their order; a category one side lacks counts 0 there), then idle (step time no op covers) and the
step, each as ms per step and share of that implementation's step; then, per other profile, the
time outside attention (every other op plus idle) against the first profile's. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys

CATEGORIES = ["attention", "gemm.qkv", "gemm.attn_out", "gemm.attn_gate", "gemm.mlp_in", "gemm.mlp_down",
              "gemm.router", "gemm.experts", "gemm.other", "lm_head_ce", "norm", "rope", "swiglu", "gate",
              "embedding", "moe_routing", "optimizer", "communication", "measuring", "other"]


class ProfileError(Exception):
    pass


def load(path: str) -> dict:
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise ProfileError(f"{path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ProfileError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("categories", {}), dict):
        raise ProfileError(f"{path}: not a step profile (no categories object)")
    if doc.get("schema") not in (None, "gcompile-profile-1"):
        raise ProfileError(f"{path}: schema {doc.get('schema')!r}, expected gcompile-profile-1")
    return doc


def num(x) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else 0.0


def label(doc: dict) -> str:
    impl = str(doc.get("implementation", "?"))
    if impl == "gcompile":
        return "ours"
    backend = doc.get("sdpa_backend")
    return f"torch({backend})" if backend else impl


def ms(doc: dict, category: str) -> float:
    entry = doc.get("categories", {}).get(category)
    if isinstance(entry, dict):
        return num(entry.get("ms_per_step"))
    return num(entry)  # tolerate {"category": ms}


def step_ms(doc: dict) -> float:
    s = num(doc.get("step_ms"))
    if s > 0:
        return s
    return sum(ms(doc, c) for c in doc.get("categories", {}))  # ops + idle when step_ms is absent


def idle_ms(doc: dict) -> float:
    if "idle" in doc.get("categories", {}):
        return ms(doc, "idle")
    return max(num(doc.get("idle_ms")), 0.0)


def timed_step_ms(doc: dict) -> float:
    """The step without the profiler where the profile has it (torch's timed steps), else step_ms."""
    return num(doc.get("step_ms_unprofiled")) or step_ms(doc)


def outside_attention(doc: dict) -> float:
    """Every op but attention, plus idle: the (timed) step less its attention time."""
    return max(timed_step_ms(doc) - ms(doc, "attention"), 0.0)


def fmt_ms(x: float) -> str:
    return f"{x:.3f}"


def fmt_share(x: float, total: float) -> str:
    return f"{100.0 * x / total:.1f}%" if total > 0 else "n/a"


def compare(docs: list) -> str:
    """The Markdown text for the profiles (the first is the reference of the outside-attention lines)."""
    labels = [label(d) for d in docs]
    seen = {c for d in docs for c in d.get("categories", {})} - {"idle"}
    cats = [c for c in CATEGORIES if c in seen and any(ms(d, c) > 0 for d in docs)]
    cats += sorted(c for c in seen if c not in CATEGORIES and any(ms(d, c) > 0 for d in docs))
    steps = [step_ms(d) for d in docs]
    head = ["category"]
    for lab in labels:
        head += [f"{lab} ms/step", "share"]
    lines = []
    facts = []
    for lab, d in zip(labels, docs):
        facts.append(f"{lab}: {d.get('implementation', '?')}, {d.get('device', '?')}, spec {d.get('spec', '?')}, "
                     f"{d.get('profiled_steps', '?')} profiled steps, {num(d.get('tokens_per_step')):,.0f} tokens/step")
    lines += [f"- {f}" for f in facts] + [""]
    tokens = {num(d.get("tokens_per_step")) for d in docs if num(d.get("tokens_per_step")) > 0}
    if len(tokens) > 1:
        lines += ["- note: the profiles' steps hold different token counts; compare shares, not ms", ""]
    lines += ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]

    def row(name, values):
        cells = [name]
        for v, total in zip(values, steps):
            cells += [fmt_ms(v), fmt_share(v, total)]
        return "| " + " | ".join(cells) + " |"

    for c in cats:
        lines.append(row(c, [ms(d, c) for d in docs]))
    lines.append(row("idle", [idle_ms(d) for d in docs]))
    lines.append(row("**step**", steps))
    unprofiled = any(num(d.get("step_ms_unprofiled")) for d in docs)
    if unprofiled:  # torch's profiled steps run slower than its timed ones (the profiler's host work)
        cells = ["step, timed without the profiler"]
        for d in docs:
            t = num(d.get("step_ms_unprofiled"))
            cells += [fmt_ms(t), f"idle {fmt_ms(num(d.get('idle_ms_unprofiled')))}"] if t else ["-", "-"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    ref = outside_attention(docs[0])
    for lab, d in zip(labels[1:], docs[1:]):
        other = outside_attention(d)
        ratio = f" (time ratio {ref / other:.2f})" if other > 0 else ""
        lines.append(f"outside attention: {labels[0]} {ref:.3f} ms vs {lab} {other:.3f} ms{ratio}; "
                     f"attention {ms(docs[0], 'attention'):.3f} ms vs {ms(d, 'attention'):.3f} ms")
    if unprofiled and len(docs) > 1:
        lines.append("(outside attention: the step less attention, each side's step timed without the profiler "
                     "where the profile has that time, else its profiled step)")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Side-by-side table of step profiles (gcompile-profile-1).")
    p.add_argument("profiles", nargs="+", help="the first is the reference (gcompile's RUN/profile.json), then "
                   "one or more torch profiles")
    p.add_argument("--markdown", metavar="FILE", help="also write the table to FILE")
    p.add_argument("--title", default="Step profile: gcompile vs PyTorch", help="the heading of the table")
    args = p.parse_args(argv)
    try:
        docs = [load(path) for path in args.profiles]
    except ProfileError as e:
        print(f"profile_compare: error: {e}", file=sys.stderr)
        return 1
    text = f"### {args.title}\n\n" + compare(docs)
    print(text, end="")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
