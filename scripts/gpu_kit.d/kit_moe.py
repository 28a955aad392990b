"""The GPU kit's mixture-of-experts rows (issue 39 item 4), standard library only:

- moe_3b: the committed specs/moe_3b.toml trained for a few steps (tests/cuda/specs/moe_3b_kit.toml:
  4 micro-batches a step): tokens/s, MFU on active FLOPs, device peak against the plan, the losses,
  the routing records, the device → host copies (fails when a step that reads nothing made one);
- moe_experts: the expert projections at moe_3b's shapes, ours (bench/moe/expert_gemm_bench.cu:
  grouped, and per-expert cuBLASLt) against torch._grouped_mm (bench/moe/grouped_mm_bench.py);
- moe_route: one MoE layer's expert-parallel route at moe_3b's shapes for EP 8 on one GPU
  (bench/moe/expert_route_bench.cu): the slotted route's kernels against the host-planned route's
  bubble (fails when the device's permutation differs from the host's or a time is missing).

Each verdict prints one detail line and exits 0 (PASS) or 1 (FAIL).
"""
import math
import sys

from kit_report import read_jsonl

PEAK_TFLOPS = 989.0  # H100/H200 SXM dense bf16, the MFU convention of docs/performance.md


def _fail(message):
    print(message)
    sys.exit(1)


def _routing(records):
    """The last routing record, in a few words: layers, the worst max/mean load, dropped assignments."""
    routing = [r for r in records if r.get("metric") == "moe_routing"]
    if not routing:
        return "no routing record"
    last = routing[-1]
    imbalance = [v for v in (last.get("imbalance") or {}).values() if isinstance(v, (int, float))]
    dropped = sum(v for v in (last.get("dropped") or {}).values() if isinstance(v, (int, float)))
    worst = f", worst max/mean load {max(imbalance):.2f}" if imbalance else ""
    return (f"{len(routing)} routing record(s), last at step {last.get('step')}: {len(last.get('load') or {})} "
            f"MoE layers{worst}, {dropped} dropped")


def _copies(summary):
    """The steps' device → host copies per step (train's summary), and those of the steps that read
    nothing back (issue 39: none)."""
    copies, steps = summary.get("device_to_host_copies_in_steps"), summary.get("steps")
    if copies is None or not steps or steps < 2:
        return ""
    text = f"; {copies / (steps - 1):.0f} device->host copies a step"
    unread = summary.get("unread_steps")
    if unread:
        text += f" ({summary.get('device_to_host_copies_in_unread_steps')} in the {unread} steps that read nothing)"
    return text


def moe_3b(metrics_jsonl, steps):
    """The moe_3b row: the run reached STEPS with finite losses and wrote its summary; reports the
    speed, MFU on active FLOPs (flops_per_token counts the routed experts a token uses, not all),
    memory against the plan (fails when allocated exceeds planned) and the routing records."""
    records = read_jsonl(metrics_jsonl)
    logs = [r for r in records if "loss" in r and isinstance(r.get("step"), int)]
    summary = next((r for r in reversed(records) if r.get("event") == "summary"), None)
    if not logs or summary is None:
        _fail(f"no loss records or no summary in {metrics_jsonl}")
    bad = [r["step"] for r in logs if not math.isfinite(float(r["loss"]))]
    if bad:
        _fail(f"non-finite loss at step(s) {bad[:5]}")
    tps = summary["tokens_per_s_median"]
    mfu = tps * summary.get("flops_per_token", 0.0) / (PEAK_TFLOPS * 1e12)
    peak = summary.get("allocated_device_bytes_peak", 0)
    plan = summary.get("planned_device_bytes", 0)
    detail = (f"{summary.get('steps')} steps, loss {logs[0]['loss']:.3f} -> {logs[-1]['loss']:.3f}; median step "
              f"{summary['step_ms_median']:.0f} ms, {tps:,.0f} tokens/s, MFU@{PEAK_TFLOPS:.0f} {100 * mfu:.1f}% "
              f"(active {summary.get('flops_per_token', 0):.3g} FLOP/token); device peak {peak / 2**30:.2f} / plan "
              f"{plan / 2**30:.2f} GiB; {_routing(records)}{_copies(summary)}")
    if len(logs) < int(steps) and logs[-1]["step"] + 1 < int(steps):
        _fail(f"stopped before step {steps}: " + detail)
    if plan and peak > plan:
        _fail("allocated more than planned: " + detail)
    if summary.get("device_to_host_copies_in_unread_steps"):
        _fail("a step that reads nothing copied from the device: " + detail)
    print(detail)


def moe_experts(ours_jsonl, torch_jsonl):
    """The moe_experts row: each of our implementations' forward and forward + backward times and
    its ratio to torch._grouped_mm (>1: ours faster); fails when a side has no time or the grouped
    kernels and cuBLASLt (or the sm90 kernels and the grouped kernels) disagree beyond bf16 rounding
    (2e-2 relative to the largest value)."""
    ours, torch_rows = read_jsonl(ours_jsonl), read_jsonl(torch_jsonl)
    peer = next((r for r in torch_rows if r.get("fwd_bwd_ms")), None)
    parts = []
    for r in ours:
        if not r.get("fwd_bwd_ms"):
            continue
        ratio = (f" ({peer['fwd_ms'] / r['fwd_ms']:.2f}x / {peer['fwd_bwd_ms'] / r['fwd_bwd_ms']:.2f}x torch)"
                 if peer else "")
        parts.append(f"{r['impl']}: fwd {r['fwd_ms']:.3f} ms ({r['fwd_tflops']:.0f} TFLOP/s), fwd+bwd "
                     f"{r['fwd_bwd_ms']:.3f} ms ({r['fwd_bwd_tflops']:.0f} TFLOP/s){ratio}")
    if peer:
        parts.append(f"torch._grouped_mm {peer.get('torch', '')}: fwd {peer['fwd_ms']:.3f} ms, fwd+bwd "
                     f"{peer['fwd_bwd_ms']:.3f} ms ({peer['fwd_bwd_tflops']:.0f} TFLOP/s)")
    parts += [f"torch error: {r['error']}" for r in torch_rows if r.get("error")]
    diff = max((r.get("max_rel_diff_grouped_vs_cublaslt", 0.0) for r in ours), default=float("nan"))
    rows = {(r.get("rows"), r.get("max_rows"), r.get("min_rows")) for r in ours + torch_rows if r.get("rows")}
    parts.append(f"grouped vs cuBLASLt max rel diff {diff:.2g}")
    # The warpgroup-MMA kernels (cuda/grouped_gemm_sm90.cuh), where the bench ran them, against the
    # grouped kernels' outputs.
    sm90 = [r["max_rel_diff_vs_grouped"] for r in ours if "max_rel_diff_vs_grouped" in r]
    if sm90:
        parts.append(f"sm90 kernels vs grouped max rel diff {max(sm90):.2g}")
    detail = "; ".join(parts)
    if len(rows) > 1:
        _fail("the two benches routed different rows per expert: " + detail)
    if not any(r.get("impl") == "gcompile_grouped" and r.get("fwd_bwd_ms") for r in ours) or not peer:
        _fail(detail or "no results")
    if not diff <= 2e-2:
        _fail("grouped kernels disagree with cuBLASLt: " + detail)
    if sm90 and not max(sm90) <= 2e-2:
        _fail("the sm90 kernels disagree with the grouped kernels: " + detail)
    print(detail)


def moe_route(jsonl_path):
    """The moe_route row: per MoE layer and micro-batch, the slotted route's kernels and the
    host-planned route's bubble past the layer's earlier work, and the slots' padding."""
    records = read_jsonl(jsonl_path)
    head = next((r for r in records if "slot_rows" in r), None)
    times = {r.get("impl"): r.get("ms") for r in records if "impl" in r}
    if head is None or not all(isinstance(times.get(k), (int, float)) for k in ("slotted", "host_planned")):
        _fail(f"no route header or times in {jsonl_path}")
    detail = (f"EP {head['group']}, {head['assignments']:,} routed rows a rank: slotted {times['slotted']:.3f} ms "
              f"(pack, route, unpack; {head['group']} slots of {head['slot_rows']:,} rows, padding "
              f"x{head['padding']:.2f} on the wire), host-planned {times['host_planned']:.3f} ms (the wait, the "
              f"plan and the copies) per MoE layer and micro-batch")
    if times["slotted"] > 0 and times["host_planned"] > 0:
        detail += f"; host-planned / slotted {times['host_planned'] / times['slotted']:.2f}x"
    if head.get("route_equal") is not True:
        _fail("the device's permutation differs from the host's: " + detail)
    print(detail)


COMMANDS = {"moe-3b": moe_3b, "moe-experts": moe_experts, "moe-route": moe_route}
