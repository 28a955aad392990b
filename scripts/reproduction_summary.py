#!/usr/bin/env python3
"""The figures docs/reproductions.md quotes, from a finished `scripts/reproduce NAME` sweep.

    scripts/reproduction_summary.py NAME OUT

Reads OUT/sweep.json and every point's RUN/metrics.jsonl (standard library only). For
`loss` it also runs the token-level comparison (seed 000 §2.5) of γ = 1 against γ = 0.5 at
each (ε, gate) setting with the trees' own ./analyze, writing RUN/vs-gamma0.5.compare.json
into each γ = 1 run (scripts/reproduce then redraws the report with them).
"""
import json
import math
import os
import subprocess
import sys


def records(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def metric(recs, name):
    return [r for r in recs if r.get("metric") == name]


def final_val_loss(recs):
    vals = [r["val_loss"] for r in recs if "val_loss" in r]
    return vals[-1] if vals else float("nan")


def mean(xs):
    xs = [x for x in xs if x == x]
    return sum(xs) / len(xs) if xs else float("nan")


def points(out):
    with open(os.path.join(out, "sweep.json")) as f:
        sweep = json.load(f)
    for p in sweep["points"]:
        p["run_dir"] = os.path.join(out, p["run"])
        p["recs"] = records(p["run_dir"])
    return sweep["points"]


def plain(value):
    """A sweep setting as written on the command line: TOML strings lose their quotes."""
    return value.strip("'\"")


def label(p, keys):
    return ", ".join(f"{k.split('.')[-1]}={plain(p['settings'][k])}" for k in keys if k in p["settings"])


def anchor(pts, out):
    print("| γ | seed | train | test | inferential | symmetric |")
    print("|---|---|---|---|---|---|")
    by_gamma = {}
    for p in pts:
        last = metric(p["recs"], "anchor")[-1]["values"]
        g, s = p["settings"]["init.gamma"], p["settings"]["experiment.seed"]
        by_gamma.setdefault(float(g), []).append(last)
        print(f"| {g} | {s} | {last['train']:.3f} | {last['test']:.3f} | {last['inferential']:.3f} | "
              f"{last['symmetric']:.3f} |")
    print("\nmean over seeds; a run counts as inferential or symmetric when that accuracy is the larger of the two "
          "and at least 0.25 (else neither):\n")
    print("| γ | γ at d = 400 (γ·ln d / ln 400) | test | inferential | symmetric | runs: inferential / symmetric / neither |")
    print("|---|---|---|---|---|---|")
    d_model = 128
    for g in sorted(by_gamma):
        v = by_gamma[g]
        kinds = [solution(x) for x in v]
        print(f"| {g} | {g * math.log(d_model) / math.log(400):.2f} | {mean([x['test'] for x in v]):.3f} | "
              f"{mean([x['inferential'] for x in v]):.3f} | {mean([x['symmetric'] for x in v]):.3f} | "
              f"{kinds.count('inferential')} / {kinds.count('symmetric')} / {kinds.count('neither')} |")


def solution(acc):
    """Which answer a run gives the held-out pair."""
    best = max(("inferential", "symmetric"), key=lambda k: acc[k])
    return best if acc[best] >= 0.25 else "neither"


def mean_keyed(rec, prefix=""):
    return mean([v for k, v in rec["values"].items() if k.startswith(prefix) or not prefix])


def condensation(pts, out):
    for p in pts:
        sr = metric(p["recs"], "stable_rank")
        cs = metric(p["recs"], "cosine_similarity")
        series = [(r["step"], mean_keyed(r)) for r in sr]
        low = min(series, key=lambda t: t[1])
        print(f"{label(p, ['init.gamma'])}: stable rank (mean over matrices) "
              f"start {series[0][1]:.2f}, minimum {low[1]:.2f} at step {low[0]}, end {series[-1][1]:.2f}")
        print("  trajectory: " + ", ".join(f"{s}:{v:.2f}" for s, v in series[:: max(1, len(series) // 12)]))
        if cs:
            cos = [(r["step"], mean_keyed(r)) for r in cs]  # values: mean |C_ij| per matrix
            top = max(cos, key=lambda t: t[1])
            print(f"  row cosine (mean over matrices): start {cos[0][1]:.3f}, maximum {top[1]:.3f} at step "
                  f"{top[0]}, end {cos[-1][1]:.3f}")
        print(f"  final val_loss {final_val_loss(p['recs']):.4f}")


def sinks(pts, out):
    for p in pts:
        ss = metric(p["recs"], "sink_score")
        series = [(r["step"], mean_keyed(r)) for r in ss]
        print(f"{label(p, ['init.gamma', 'model.gated_attention'])}: sink score (mean over layers) "
              + ", ".join(f"{s}:{v:.3f}" for s, v in series[:: max(1, len(series) // 8)])
              + f", end {series[-1][1]:.3f}; final val_loss {final_val_loss(p['recs']):.4f}")


def analyze(tree, *args):
    return subprocess.run([os.path.join(tree, "analyze"), *args], check=True, capture_output=True, text=True)


def loss(pts, out):
    print("| γ | ε | gate | final val_loss |")
    print("|---|---|---|---|")
    for p in pts:
        s = p["settings"]
        print(f"| {s['init.gamma']} | {s['model.norm_eps']} | {plain(s['model.gated_attention'])} | "
              f"{final_val_loss(p['recs']):.4f} |")
    # Token level: γ = 1 (A, small init) against γ = 0.5 (B) at each (ε, gate).
    groups = {}
    for p in pts:
        s = p["settings"]
        groups.setdefault((s["model.norm_eps"], plain(s["model.gated_attention"])), {})[s["init.gamma"]] = p
    for (eps, gate), pair in sorted(groups.items()):
        small, large = pair.get("1.0"), pair.get("0.5")
        if not small or not large:
            continue
        files = []
        for p in (small, large):
            f = os.path.join(out, p["name"] + ".tokens.safetensors")
            analyze(p["tree"], "tokens", p["run_dir"], "-o", f)
            files.append(f)
        # In the γ = 1 run's directory, where `gcompile report` picks *.compare.json up.
        target = os.path.join(small["run_dir"], "vs-gamma0.5.compare.json")
        analyze(small["tree"], "compare", files[0], files[1], "-o", target)
        with open(target) as f:
            c = json.load(f)
        deciles = " ".join(f"{d['mean']:+.4f}" for d in c["deciles"])
        print(f"\nε={eps}, gate={gate}: γ=1 vs γ=0.5 over {c['tokens']} tokens: mean loss "
              f"{c['a']['mean_loss']:.4f} vs {c['b']['mean_loss']:.4f}, mean Δsym p {c['mean_delta_sym_p']:+.4f}, "
              f"fraction improved {c['fraction_improved']:.3f}\n  Δsym p by difficulty decile (easy→hard): {deciles}")


def complexity(pts, out):
    for p in pts:
        sr = metric(p["recs"], "stable_rank")
        pn = metric(p["recs"], "param_norm")
        print(f"{label(p, ['init.gamma', 'optim.weight_decay'])}: final val_loss {final_val_loss(p['recs']):.4f}; "
              f"stable rank (mean) {mean_keyed(sr[-1]):.2f}; param norm (mean over classes) "
              f"{mean_keyed(pn[-1]):.2f}")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("anchor", "condensation", "sinks", "loss", "complexity"):
        sys.exit("usage: reproduction_summary.py anchor|condensation|sinks|loss|complexity OUT")
    name, out = sys.argv[1], sys.argv[2]
    globals()[name](points(out), out)


if __name__ == "__main__":
    main()
