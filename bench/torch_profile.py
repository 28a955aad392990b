"""Where a PyTorch training step goes: the step profile of bench/torch_baseline.py.

A row's profiled steps run under torch.profiler (CUDA activity on a GPU, the CPU ops on the CPU)
with record_shapes=True; the Chrome trace it exports is read here and every kernel is put into one
of the categories gcompile's `train --profile` uses (templates/profile/step_profile.hpp, the same
strings), so bench/profile_compare.py can join the two tables. The profile is written in
gcompile's schema ("gcompile-profile-1"; categories, ops, idle).

How a kernel is classified (in this order; the first rule that matches wins):
  - launched inside the `gc::optimizer` range (gradient clipping, AdamW, zero_grad) -> optimizer;
  - NCCL -> communication;
  - launched inside an SDPA op (aten::_scaled_dot_product_*, _flash_attention_*, ...) or named
    like an attention kernel (flash_fwd/bwd, fmha, cuDNN sdpa) -> attention;
  - launched inside aten::mm/addmm/bmm/baddbmm (the extern GEMMs Inductor calls): by its shapes
    (below);
  - a GEMM kernel without shapes (e.g. Triton templates of max-autotune) -> gemm.other;
  - Inductor's fused Triton kernels by the aten ops their names list (descriptive_names =
    "original_aten"): embedding -> embedding, (log_)softmax/nll_loss -> lm_head_ce, rsqrt (forward)
    or pow with mean/sum (backward) -> norm (a residual add fused into the norm counts as norm),
    cat with sub/neg/slice (forward) or slice_backward / neg with slice (backward) -> rope, silu ->
    swiglu, sigmoid -> gate (swiglu when the spec has no gate: silu's backward);
  - everything else (autocast's fp32 -> bf16 weight casts, residual adds, copies, the norm gains'
    gradient reductions, memsets) -> other.
idle = the step's wall time (CUDA events around each profiled step) minus the summed kernel time.
Kernels that ran in the window but were launched before it (the previous step's tail: no launch
record in the trace) are left out, and the timed steps' median without the profiler is kept beside
the profiled one (step_ms_unprofiled, idle_ms_unprofiled): the profiler's host overhead can leave
the GPU waiting (0.1B on an H200: 45.2 ms profiled, 38.3 ms timed).

GEMMs by shape: of the three dimensions of a GEMM (M, K, N, whichever is the contraction), one is
the token count of a micro-batch and one is d_model; the third names the projection: the q, k, v
widths -> gemm.qkv, the gate width -> gemm.attn_gate, d_ff -> gemm.mlp_in / gemm.mlp_down, the
vocabulary -> lm_head_ce. The forward, dX and dW GEMMs of a projection have the same three
dimensions; a dimension Inductor padded (d_ff = 5460 runs as 5464) still matches. Projections of
the same two dimensions (at 0.1B q, k, v and o_proj are all 768 x 768;
gate/up (d -> d_ff) and down (d_ff -> d) always are) cannot be told apart by shape: their time is
split in proportion to how many such GEMMs each projection does per step (q, k, v : o = 3 : 1,
mlp_in : mlp_down = 2 : 1). Each projection's forward and dX GEMMs meet the other projection's dX
and forward in exactly these proportions with the same shapes (the same cuBLAS kernel on the same
work), so for them the split is exact; only the dW GEMMs of the two projections are transposes of
each other ([out, N] x [N, in]), whose per-call times the split averages. The profile's notes say
which shapes were split.

Standard library only at import (the trace reading is tested without a GPU); torch is passed in.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import statistics
import tempfile
import time
from collections import defaultdict

SCHEMA = "gcompile-profile-1"
CATEGORIES = ["attention", "gemm.qkv", "gemm.attn_out", "gemm.attn_gate", "gemm.mlp_in", "gemm.mlp_down",
              "gemm.router", "gemm.experts", "gemm.other", "lm_head_ce", "norm", "rope", "swiglu", "gate",
              "embedding", "moe_routing", "optimizer", "communication", "measuring", "other", "idle"]
OPTIMIZER_RANGE = "gc::optimizer"
STEP_RANGE = "gc::step"
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_grouped_mm", "aten::_scaled_mm")
SDPA_OPS = {  # an op in a trace -> the SDPA backend it belongs to
    "aten::_scaled_dot_product_cudnn_attention": "cudnn", "aten::_cudnn_attention_forward": "cudnn",
    "aten::_scaled_dot_product_flash_attention": "flash", "aten::_flash_attention_forward": "flash",
    "aten::_scaled_dot_product_efficient_attention": "efficient", "aten::_efficient_attention_forward": "efficient",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "aten::_scaled_dot_product_attention_math": "math",
}
ATTENTION_STACK = ("scaled_dot_product", "_flash_attention", "_efficient_attention", "_cudnn_attention")
ATTENTION_KERNEL = re.compile(r"flash_fwd|flash_bwd|fmha|sdpa|attention|flash_attn")
GEMM_KERNEL = re.compile(r"gemm|nvjet|xmma|cublas|splitkreduce|triton_tem_fused.*mm|wgmma|cutlass")


class ModelShapes:
    """What the classification needs of a Config (torch_baseline.Config or a test's stand-in)."""

    def __init__(self, cfg):
        self.tokens = cfg.micro_batch * cfg.seq_len
        self.seq_len, self.head_dim, self.d_model = cfg.seq_len, cfg.head_dim, cfg.d_model
        self.gated = cfg.gated_attention != "none"
        d, L = cfg.d_model, cfg.n_layers
        q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        gate = {"none": 0, "headwise": cfg.n_heads, "elementwise": q}[cfg.gated_attention]
        # (category, input dim, output dim, GEMMs of this projection per forward); a fused
        # [q; k; v] or [gate; up] weight (gcompile's layout) is listed too, for completeness.
        self.projections = [("gemm.qkv", d, q, L), ("gemm.qkv", d, kv, 2 * L), ("gemm.qkv", d, q + 2 * kv, 0),
                            ("gemm.attn_out", q, d, L), ("gemm.mlp_in", d, cfg.d_ff, 2 * L),
                            ("gemm.mlp_in", d, 2 * cfg.d_ff, 0), ("gemm.mlp_down", cfg.d_ff, d, L),
                            ("lm_head_ce", d, cfg.vocab_size, 1)]
        if gate:
            self.projections.append(("gemm.attn_gate", d, gate, L))


def gemm_dims(op: str, dims: list):
    """(batch, M, K, N) of a GEMM op's recorded input shapes, or None."""
    mats = [list(x) for x in (dims or []) if isinstance(x, list) and len(x) >= 2]
    if op in ("aten::addmm", "aten::baddbmm") and len(mats) >= 3:
        mats = mats[1:]
    if len(mats) < 2:
        return None
    a, b = mats[0], mats[1]
    if len(a) == 3 and len(b) == 3:
        return a[0], a[1], a[2], b[2]
    if len(a) == 2 and len(b) == 2:
        return 1, a[0], a[1], b[1]
    return None


def _same(dim: int, size: int) -> bool:
    """dim is size, or an unaligned size padded up to a multiple of 4 ... 128 (Inductor pads the
    GEMM dimensions that are no multiple of 8: d_ff = 5460 runs as 5464)."""
    return dim == size or (size % 8 != 0 and any(dim == -(-size // a) * a for a in (4, 8, 16, 32, 64, 128)))


def classify_gemm(dims, shapes: ModelShapes):
    """[(category, fraction)], a description of the split (or None) for GEMM dims (batch, M, K, N)."""
    batch, m, k, n = dims
    if batch > 1 and shapes.seq_len in (m, k, n) and shapes.head_dim in (m, k, n):
        return [("attention", 1.0)], None  # the math SDPA backend's score / value products
    rest = [m * batch, k, n]
    if shapes.tokens not in rest:
        return [("gemm.other", 1.0)], None
    rest.remove(shapes.tokens)
    pair = sorted(rest)
    found = defaultdict(int)
    for cat, a, b, count in shapes.projections:
        if count > 0 and (_same(pair[0], a) and _same(pair[1], b) or _same(pair[0], b) and _same(pair[1], a)):
            found[cat] += count
    if not found:
        return [("gemm.other", 1.0)], None
    total = sum(found.values())
    split = [(c, v / total) for c, v in found.items()]
    if len(split) == 1:
        return split, None
    return split, f"{pair[0]}x{pair[1]} split by count: " + ", ".join(f"{c} {v}" for c, v in found.items())


def classify_name(name: str, stack: list, shapes: ModelShapes):
    """The category of a kernel (or CPU op) that is no GEMM with shapes, from its name and the
    names of the ranges it was launched in."""
    low = name.lower()
    frames = [s.lower() for s in stack]
    if any(OPTIMIZER_RANGE in f or f.startswith("optimizer.") for f in frames) or "adam" in low \
            or "multi_tensor_apply" in low or "lpnorm" in low:
        return "optimizer"
    if "nccl" in low or any("nccl" in f or f.startswith("c10d::") for f in frames):
        return "communication"
    if any(a in f for f in frames for a in ATTENTION_STACK) or ATTENTION_KERNEL.search(low):
        return "attention"
    if GEMM_KERNEL.search(low):
        return "gemm.other"
    text = low + " " + " ".join(f for f in frames if f.startswith("aten::"))
    if "embedding" in text:
        return "embedding"
    if "softmax" in text or "nll_loss" in text or "cross_entropy" in text or "logsumexp" in text:
        return "lm_head_ce"
    if "rsqrt" in text or "rms_norm" in text or ("pow" in low and ("mean" in low or "_sum" in low)):
        return "norm"  # forward: mean(x^2), rsqrt; backward: pow, sum
    if (re.search(r"(^|_|:)cat(_|$)", low) and re.search(r"(^|_)(sub|neg|slice)", low)) \
            or "slice_backward" in low or ("neg" in low and "slice" in low):
        return "rope"  # forward: slices, x1*c - x2*s, cat; backward: slice_backward, neg
    if "silu" in text:
        return "swiglu"
    if "sigmoid" in text:
        return "gate" if shapes.gated else "swiglu"
    return "other"


def classify(launch: dict, shapes: ModelShapes):
    """([(category, fraction)], FLOPs of one call or 0, split description or None)."""
    g = launch.get("gemm")
    name, stack = launch["name"], launch.get("stack", [])
    if g is not None:
        first = classify_name(name, stack, shapes)
        if first in ("optimizer", "communication", "attention"):
            return [(first, 1.0)], 0.0, None
        dims = gemm_dims(g[0], g[1])
        if dims is not None:
            cats, split = classify_gemm(dims, shapes)
            batch, m, k, n = dims
            return cats, 2.0 * batch * m * k * n, split
    return [(classify_name(name, stack, shapes), 1.0)], 0.0, None


def short_name(name: str, limit: int = 90) -> str:
    """A kernel's name without 'void ', its argument list and, past `limit`, its template tail."""
    s = name[5:] if name.startswith("void ") else name
    s = s.replace("(anonymous namespace)::", "")
    depth, cut = 0, len(s)
    for i, ch in enumerate(s):  # the argument list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            cut = i
            break
    s = s[:cut]
    return s if len(s) <= limit else s[:limit - 3] + "..."


# --------------------------------------------------------------------------
# The Chrome trace torch.profiler exports -> launches
# --------------------------------------------------------------------------


def _stacks(intervals: list, points: list) -> list:
    """intervals: (ts, end, index) of one thread, properly nested; points: (t, key). Returns
    (key, [interval indices enclosing t, outermost first]) for every point."""
    intervals = sorted(intervals, key=lambda x: (x[0], -x[1]))
    starts = [iv[0] for iv in intervals]
    out, stack, j = [], [], 0
    for t, key in sorted(points, key=lambda p: p[0]):
        hi = bisect.bisect_right(starts, t)
        while j < hi:
            ts, end, idx = intervals[j]
            while stack and stack[-1][0] <= ts:
                stack.pop()
            stack.append((end, idx))
            j += 1
        while stack and stack[-1][0] < t:
            stack.pop()
        out.append((key, [idx for _, idx in stack]))
    return out


def launches_from_trace(trace) -> tuple:
    """(launches, info) of a Chrome trace (dict or event list). A launch is one device kernel
    (memcpy, memset) with its duration and the host ranges it was launched in; without device
    events (a CPU run) every CPU op with self time is one. info: the SDPA ops seen, the kernel
    count, whether the trace had device events."""
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    host, names, dims = defaultdict(list), [], []
    runtime, ext_ops, kernels = {}, {}, []
    for e in events:
        if e.get("ph") != "X":
            continue
        cat, args = (e.get("cat") or "").lower(), e.get("args") or {}
        ts, dur = float(e.get("ts", 0.0)), float(e.get("dur", 0.0))
        if cat in ("cpu_op", "user_annotation", "operator"):
            idx = len(names)
            names.append((e.get("name", ""), cat))
            dims.append(args.get("Input Dims"))
            host[e.get("tid")].append((ts, ts + dur, idx))
            if args.get("External id") is not None:
                ext_ops[args["External id"]] = (e.get("tid"), ts + min(dur, 1e-3))
        elif cat in ("cuda_runtime", "cuda_driver", "runtime", "hip_runtime"):
            if args.get("correlation") is not None:
                runtime[args["correlation"]] = (e.get("tid"), ts)
        elif cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            kernels.append(e)
    sdpa = sorted({n for n, _ in names if n in SDPA_OPS})
    points, orphans = defaultdict(list), 0
    if kernels:
        for i, k in enumerate(kernels):
            args = k.get("args") or {}
            where = runtime.get(args.get("correlation")) or ext_ops.get(args.get("External id"))
            if where is not None:
                points[where[0]].append((where[1], i))
            else:  # launched before the profiled window (the warm-up step's tail): not this window's
                orphans += 1
        launches = [None] * len(kernels)
        for tid, pts in points.items():
            for i, chain in _stacks(host.get(tid, []), pts):
                k = kernels[i]
                launches[i] = _launch(k.get("name", ""), float(k.get("dur", 0.0)), chain, names, dims)
    else:  # CPU: every op's self time (its duration less its children's)
        launches = []
        for ivs in host.values():
            ordered, stack, chains, child = sorted(ivs, key=lambda x: (x[0], -x[1])), [], {}, defaultdict(float)
            for ts, end, idx in ordered:
                while stack and stack[-1][0] <= ts:
                    stack.pop()
                if stack:
                    child[stack[-1][1]] += end - ts
                chains[idx] = [i for _, i in stack] + [idx]
                stack.append((end, idx))
            for ts, end, idx in ordered:
                self_us = (end - ts) - child[idx]
                if names[idx][1] == "cpu_op" and self_us > 0:
                    launches.append(_launch(names[idx][0], self_us, chains[idx], names, dims))
    info = {"sdpa_ops": sdpa, "device_events": bool(kernels), "launches": len(launches), "orphans": orphans}
    return [l for l in launches if l is not None], info


def _launch(name, dur_us, chain, names, dims) -> dict:
    stack = [names[i][0] for i in chain]
    gemm = next(((names[i][0], dims[i]) for i in reversed(chain) if names[i][0] in GEMM_OPS and dims[i]), None)
    low = [s.lower() for s in stack]
    if any(OPTIMIZER_RANGE in s for s in low):
        pass_ = "step"
    elif any(s.startswith("autograd::engine::evaluate_function") or "backward" in s for s in low):
        pass_ = "backward"
    else:
        pass_ = "forward"
    return {"name": name, "dur_us": dur_us, "stack": stack, "gemm": gemm, "pass": pass_}


def sdpa_backend_seen(info: dict, launches: list):
    """The SDPA backend a profiled step ran (from the aten ops in the trace, else the kernel
    names), or None when no fused SDPA op ran (e.g. the math backend, which Inductor decomposes)."""
    seen = sorted({SDPA_OPS[op] for op in info.get("sdpa_ops", [])})
    if seen:
        return "+".join(seen)
    names = " ".join(l["name"].lower() for l in launches if classify_name(l["name"], [], _NO_GATE) == "attention")
    for key, backend in (("flash_fwd", "flash"), ("flash_bwd", "flash"), ("fmha", "efficient"), ("cudnn", "cudnn"),
                         ("sdpa", "cudnn")):
        if key in names:
            return backend
    return None


class _NoGate:
    gated = False


_NO_GATE = _NoGate()


def build_profile(launches: list, shapes: ModelShapes, step_ms: list, meta: dict, top: int = 40) -> dict:
    """The profile in gcompile's schema from classified launches over len(step_ms) steps."""
    steps = max(len(step_ms), 1)
    ops, kernels, splits = {}, {}, set()
    by_cat = defaultdict(float)
    total_us = 0.0
    for l in launches:
        cats, flops, split = classify(l, shapes)
        if split:
            splits.add(split)
        total_us += l["dur_us"]
        g = gemm_dims(*l["gemm"]) if l.get("gemm") else None
        shape = f" [{g[1] * g[0]}x{g[2]}]x[{g[2]}x{g[3]}]" if g else ""
        kname = short_name(l["name"])
        kk = (kname, "+".join(f"{c} {f:.2f}" if f < 1 else c for c, f in cats))
        kv = kernels.setdefault(kk, {"kernel": kname, "category": kk[1], "calls": 0, "us": 0.0,
                                     "launched_from": l["stack"][-1] if l.get("stack") else None})
        kv["calls"] += 1
        kv["us"] += l["dur_us"]
        for cat, frac in cats:
            by_cat[cat] += l["dur_us"] * frac
            key = (cat, kname + shape, l.get("pass", ""))
            o = ops.setdefault(key, {"calls": 0.0, "us": 0.0, "flops": 0.0, "split": split if frac < 1 else None})
            o["calls"] += frac
            o["us"] += l["dur_us"] * frac
            o["flops"] += flops * frac
    mean_step = statistics.fmean(step_ms) if step_ms else 0.0
    ops_ms = total_us / 1e3 / steps
    idle = mean_step - ops_ms
    meta = dict(meta)
    notes = list(meta.pop("notes", []))
    if idle < 0:
        notes.append(f"the kernels' summed time exceeds the step time by {-idle:.3f} ms (overlapping streams); "
                     "idle is set to 0")
        idle = 0.0

    def share(ms):
        return ms / mean_step if mean_step > 0 else 0.0

    categories = {c: {"ms_per_step": by_cat[c] / 1e3 / steps, "share": share(by_cat[c] / 1e3 / steps)}
                  for c in CATEGORIES if by_cat.get(c, 0.0) > 0}
    categories["idle"] = {"ms_per_step": idle, "share": share(idle)}
    op_rows = []
    for (cat, name, pass_), o in sorted(ops.items(), key=lambda kv: -kv[1]["us"])[:top]:
        ms = o["us"] / 1e3 / steps
        row = {"category": cat, "op": name, "pass": pass_, "calls_per_step": round(o["calls"] / steps, 3),
               "ms_per_step": ms, "share": share(ms),
               "tflops": (o["flops"] / (o["us"] * 1e-6) / 1e12) if o["flops"] and o["us"] > 0 else None,
               "gbps": None}
        if o["split"]:
            row["split"] = o["split"]
        op_rows.append(row)
    audit = [{"kernel": k["kernel"], "category": k["category"], "calls_per_step": round(k["calls"] / steps, 3),
              "ms_per_step": k["us"] / 1e3 / steps, "launched_from": k["launched_from"]}
             for k in sorted(kernels.values(), key=lambda k: -k["us"])[:15]]
    notes += [f"ambiguous GEMM shape {s}" for s in sorted(splits)]
    unprofiled = meta.pop("step_ms_unprofiled", None)
    if unprofiled:
        meta["step_ms_unprofiled"] = unprofiled
        meta["idle_ms_unprofiled"] = max(unprofiled - ops_ms, 0.0)
        if mean_step > 1.15 * unprofiled:
            notes.append(f"the profiled steps took {mean_step:.3f} ms, the timed ones {unprofiled:.3f} ms: the "
                         "profiler's host overhead left the GPU waiting; idle_ms_unprofiled (the timed step less "
                         "the same kernels) is the better estimate of idle time without it")
    out = {"schema": SCHEMA, **meta, "profiled_steps": len(step_ms), "step_ms": mean_step, "ops_ms": ops_ms,
           "idle_ms": idle, "tokens_per_s": (meta.get("tokens_per_step", 0) / (mean_step * 1e-3)) if mean_step else None,
           "categories": categories, "ops": op_rows, "top_kernels": audit, "notes": notes}
    return out


CLASSIFICATION_NOTE = ("kernels grouped as bench/torch_profile.py's docstring says: GEMMs by their shapes (aten::mm "
                       "inputs; same-shaped projections split by count), Inductor's fused Triton kernels by the aten "
                       "ops in their names, attention and the optimizer by the ranges they were launched in; "
                       "top_kernels lists the 15 largest with their category for auditing")


def capture(torch, run_step, steps: int, cuda: bool, workdir: str | None = None) -> tuple:
    """Runs run_step(i) for one untimed profiler warm-up step and `steps` profiled steps under
    torch.profiler; returns (trace dict, [step ms], seconds spent reading the trace)."""
    import warnings
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    tmp = tempfile.mkdtemp(prefix="gc_torch_profile_", dir=workdir)
    path = os.path.join(tmp, "trace.json")
    events, walls = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=acts, record_shapes=True, on_trace_ready=lambda p: p.export_chrome_trace(path),
                     schedule=schedule(wait=0, warmup=1, active=steps, repeat=1)) as prof:
            for i in range(steps + 1):
                if cuda and i > 0:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                t0 = time.perf_counter()
                with record_function(STEP_RANGE):
                    run_step(i)
                if cuda and i > 0:
                    end.record()
                    events.append((start, end))
                elif i > 0:
                    walls.append((time.perf_counter() - t0) * 1e3)
                if cuda and i == steps:
                    torch.cuda.synchronize()
                prof.step()
    if cuda:
        torch.cuda.synchronize()
        walls = [s.elapsed_time(e) for s, e in events]
    t0 = time.perf_counter()
    try:
        with open(path) as f:
            trace = json.load(f)
    finally:
        for name in os.listdir(tmp):
            os.remove(os.path.join(tmp, name))
        os.rmdir(tmp)
    return trace, walls, time.perf_counter() - t0
