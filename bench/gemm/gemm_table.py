#!/usr/bin/env python3
"""The table of bench/gemm_candidates from gemm_candidates' JSON lines (standard library only).

For each candidate, each variant's GEMMs (ms, TFLOP/s) and their sum; then what the variant
changes against the first one listed (today's): per layer for the MLP down projection (times the
1.5B's 24 layers for a step), per step for the LM head; and the gradient memset's time.
"""
import json
import sys

LAYERS = {"1.5b": 24, "0.1b": 12, "small": 1}


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip().startswith("{")]
    if not rows:
        print(f"gemm_table: no results in {path}", file=sys.stderr)
        return 1
    print("\n| candidate | shape | variant | GEMM | ms | TFLOP/s |")
    print("|---|---|---|---|---:|---:|")
    for r in rows:
        rate = f"{r['tflops']:.0f}" if r["tflops"] else (f"{r['gbps']:.0f} GB/s" if r["gbps"] else "")
        print(f"| {r['candidate']} | {r['shape']} | {r['variant']} | {r['gemm']} | {r['ms']:.3f} | {rate} |")
    sums = {}
    for r in rows:
        sums.setdefault((r["candidate"], r["shape"]), {}).setdefault(r["variant"], 0.0)
        sums[(r["candidate"], r["shape"])][r["variant"]] += r["ms"]
    print("\n| candidate | shape | variant | ms (GEMMs summed) | per step | against the first variant |")
    print("|---|---|---|---:|---:|---:|")
    for (candidate, shape), variants in sums.items():
        first = next(iter(variants.values()))
        scale = LAYERS.get(shape, 1) if candidate in ("dff_stride", "dff_pad") else 1
        for variant, ms in variants.items():
            delta = (ms - first) * scale
            print(f"| {candidate} | {shape} | {variant} | {ms:.3f} | {ms * scale:.2f} | {delta:+.2f} ms |")
    print("\nper step: dff_stride and dff_pad × the shape's layers (each layer runs the three GEMMs once per micro-batch);"
          " head_chunk and grad_memset once per micro-batch / step as measured")
    return 0


def detail(path):
    """One line for the GPU kit's summary: each candidate's variants (GEMMs summed) and the change
    per step against the first variant."""
    rows = [json.loads(line) for line in open(path) if line.strip().startswith("{")]
    if not rows:
        print(f"no results in {path}")
        return 1
    sums = {}
    for r in rows:
        sums.setdefault((r["candidate"], r["shape"]), {}).setdefault(r["variant"], 0.0)
        sums[(r["candidate"], r["shape"])][r["variant"]] += r["ms"]
    parts = []
    for (candidate, shape), variants in sums.items():
        first = next(iter(variants.values()))
        scale = LAYERS.get(shape, 1) if candidate in ("dff_stride", "dff_pad") else 1
        text = ", ".join(f"{v} {ms:.2f} ms" + (f" ({(ms - first) * scale:+.1f} ms/step)" if i > 0 else "")
                         for i, (v, ms) in enumerate(variants.items()))
        parts.append(f"{candidate} {shape}: {text}")
    print("; ".join(parts))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--detail":
        sys.exit(detail(sys.argv[2]))
    sys.exit(main(sys.argv[1]) if len(sys.argv) == 2 else 2)
