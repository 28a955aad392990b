"""One row of bench/torch_baseline.py: a fresh model, optimizer and torch.compile under one SDPA
backend setting, its warm-up, timed and profiled steps. Also the GEMM ceiling and the device facts.

Standard library at import; torch is passed in (bench/gpu_vs_torch imports torch_baseline, which
imports this, on machines without torch).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import sys
import time
import warnings

import torch_model
import torch_profile

H100_BF16_DENSE_TFLOPS = 989.0  # H100 SXM datasheet, dense bf16 (no sparsity)
GEMM_N = 8192
SDPA_BACKENDS = ("auto", "flash", "cudnn", "efficient", "math")
DEFAULT_SDPA_BACKENDS = "auto,flash,cudnn"
_ENUM = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}
_LABEL = {"FLASH_ATTENTION": "flash", "CUDNN_ATTENTION": "cudnn", "EFFICIENT_ATTENTION": "efficient", "MATH": "math",
          "OVERRIDEABLE": "overrideable"}


def parse_backends(text: str) -> list:
    """'auto,flash,cudnn' -> ['auto', 'flash', 'cudnn'] (order kept, repeats dropped); ValueError
    names an unknown one."""
    out = []
    for part in (text or "").replace(" ", ",").split(","):
        part = part.strip().lower()
        if not part:
            continue
        if part == "mem_efficient":
            part = "efficient"
        if part not in SDPA_BACKENDS:
            raise ValueError(f"unknown SDPA backend {part!r} (choose from {', '.join(SDPA_BACKENDS)})")
        if part not in out:
            out.append(part)
    if not out:
        raise ValueError("no SDPA backend given")
    return out


def error_row(backend: str, message: str) -> dict:
    return {"sdpa_backend": backend, "sdpa_backend_used": None, "error": message, "step_ms_median": None,
            "tokens_per_s_median": None}


def sdpa_context(torch, backend: str):
    """auto: PyTorch's own choice (no context); else only that backend allowed."""
    if backend == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([getattr(SDPBackend, _ENUM[backend])])


def sdpa_probe(torch, cfg, device, backend: str, use_sdpa_gqa: bool) -> tuple:
    """(the backend F.scaled_dot_product_attention picks for the model's q, k, v under this row's
    setting, None) or (None, why no kernel can run): torch._fused_sdp_choice on tensors of the
    model's shape, layout ([B, T, heads, hd] transposed), dtype and requires_grad."""
    dtype = torch.bfloat16 if cfg.precision == "bf16" else torch.float32
    B, T, H, hd = cfg.micro_batch, cfg.seq_len, cfg.n_heads, cfg.head_dim
    K = cfg.n_kv_heads if use_sdpa_gqa else H
    gqa = {"enable_gqa": True} if K != H else {}
    caught = []
    try:
        q = torch.randn(B, T, H, hd, device=device, dtype=dtype, requires_grad=True).transpose(1, 2)
        k, v = (torch.randn(B, T, K, hd, device=device, dtype=dtype, requires_grad=True).transpose(1, 2)
                for _ in range(2))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with sdpa_context(torch, backend):
                choice = torch._fused_sdp_choice(q, k, v, None, 0.0, True, scale=cfg.attn_scale, **gqa)
    except (RuntimeError, ValueError) as e:
        reasons = "; ".join(" ".join(str(w.message).split()) for w in caught)[:900]
        return None, f"{str(e).splitlines()[0][:300]}" + (f" ({reasons})" if reasons else "")
    from torch.nn.attention import SDPBackend

    name = SDPBackend(int(choice)).name
    if name == "ERROR":
        reasons = "; ".join(" ".join(str(w.message).split()) for w in caught)[:900]
        return None, "no SDPA kernel for these inputs" + (f" ({reasons})" if reasons else "")
    label = _LABEL.get(name, name.lower())
    return (label + " (CPU)" if device.type == "cpu" and label == "flash" else label), None


def measure_gemm_ceiling(torch, device, reps: int = 20, n: int = GEMM_N) -> float:
    """Median TFLOP/s of an n^3 bf16 matrix product on random data."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    c = torch.empty(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(a, b, out=c)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))  # ms
    if not torch.isfinite(c.float().abs().sum()):
        raise RuntimeError("the GEMM ceiling's product is not finite")
    del a, b, c
    torch.cuda.empty_cache()
    return 2.0 * n**3 / (statistics.median(times) * 1e-3) / 1e12


def device_info(torch) -> dict:
    info = {"torch": torch.__version__, "cuda_runtime": getattr(torch.version, "cuda", None)}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update({"device": p.name, "sm_count": p.multi_processor_count,
                     "device_memory_bytes": p.total_memory, "capability": f"{p.major}.{p.minor}"})
    return info


class Shared:
    """What every row of one run shares: arguments, spec, device, the token batches, the ceiling."""

    def __init__(self, torch, args, cfg, device, data, ceiling, use_sdpa, use_sdpa_gqa, major, deadline=None):
        self.torch, self.args, self.cfg, self.device, self.data = torch, args, cfg, device, data
        self.ceiling, self.use_sdpa, self.use_sdpa_gqa, self.major = ceiling, use_sdpa, use_sdpa_gqa, major
        self.cuda = device.type == "cuda"
        self.deadline = deadline  # time.monotonic() after which no row or profile starts
        self.device_name = torch.cuda.get_device_name(0) if self.cuda else "cpu"

    def over_budget(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


def log(msg: str):
    print(f"torch_baseline: {msg}", file=sys.stderr, flush=True)


def run_row(sh: Shared, backend: str, warmup: int, steps: int) -> dict:
    """Builds, compiles, warms up, times and profiles one row; raises on failure."""
    torch, args, cfg, cuda = sh.torch, sh.args, sh.cfg, sh.cuda
    t_row = time.perf_counter()
    row = {"sdpa_backend": backend}
    if sh.use_sdpa:
        probe, err = sdpa_probe(torch, cfg, sh.device, "auto" if not cuda else backend, sh.use_sdpa_gqa)
        if err:
            return error_row(backend, f"{backend}: {err}")
        row["sdpa_backend_probe"] = probe
    else:
        row["sdpa_backend_probe"] = "explicit softmax (torch < 2.1)"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(args.seed)  # the same initial weights in every row
    t0 = time.perf_counter()
    if sh.major >= 2:
        with sh.device:  # allocate and initialize on the device
            model = torch_model.build_model(cfg, torch, sh.use_sdpa, sh.use_sdpa_gqa)
    else:
        model = torch_model.build_model(cfg, torch, sh.use_sdpa, sh.use_sdpa_gqa).to(sh.device)
    n_params = sum(p.numel() for p in model.parameters())
    if n_params != cfg.param_count:
        raise RuntimeError(f"model has {n_params} parameters, gcompile's plan {cfg.param_count}")
    fused = cuda and sh.major >= 2
    opt = torch.optim.AdamW(torch_model.optimizer_groups(cfg, model), lr=cfg.lr, betas=cfg.betas, eps=cfg.adam_eps,
                            **({"fused": True} if fused else {}))
    compiled = model
    if not args.no_compile:
        kwargs = {"dynamic": False}
        if args.compile_mode != "default":
            kwargs["mode"] = args.compile_mode
        compiled = torch.compile(model, **kwargs)
    params = list(model.parameters())
    init_s = time.perf_counter() - t0
    data, n_batches = sh.data, len(sh.data)
    bf16 = cfg.precision == "bf16"

    def train_step(step: int, mark: bool = False):
        loss_sum = None
        for micro in range(cfg.grad_accum):
            batch = data[(step * cfg.grad_accum + micro) % n_batches]
            with torch.autocast(device_type=sh.device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = compiled(batch[:, :-1], batch[:, 1:]) / cfg.grad_accum
            loss.backward()
            loss_sum = loss.detach() if loss_sum is None else loss_sum + loss.detach()
        rf = torch.profiler.record_function(torch_profile.OPTIMIZER_RANGE) if mark else contextlib.nullcontext()
        with rf:
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip, **({"foreach": True} if cuda else {}))
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss_sum

    losses, times_ms, first_step_s, peak_with_warmup = [], [], None, None
    with sdpa_context(torch, backend) if cuda else contextlib.nullcontext():
        for step in range(warmup):
            ts = time.perf_counter()
            losses.append(train_step(step))
            if step == 0:
                if cuda:
                    torch.cuda.synchronize()
                first_step_s = time.perf_counter() - ts
                log(f"{backend}: first step (compilation) {first_step_s:.1f} s")
        if cuda:
            torch.cuda.synchronize()
            peak_with_warmup = torch.cuda.max_memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        events = []
        for step in range(warmup, warmup + steps):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                losses.append(train_step(step))
                end.record()
                events.append((start, end))
            else:
                ts = time.perf_counter()
                losses.append(train_step(step))
                times_ms.append((time.perf_counter() - ts) * 1e3)
        if cuda:
            torch.cuda.synchronize()
            times_ms = [s.elapsed_time(e) for s, e in events]
            row["peak_device_bytes"] = torch.cuda.max_memory_allocated()
            row["peak_device_bytes_with_warmup"] = max(peak_with_warmup, row["peak_device_bytes"])
            row["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
        loss_values = [float(x) for x in losses]
        if not all(math.isfinite(x) for x in loss_values):
            raise RuntimeError(f"non-finite loss: {loss_values}")
        step_ms = statistics.median(times_ms)
        tps = cfg.tokens_per_step / (step_ms * 1e-3)
        fpt = cfg.flops_per_token
        row.update({
            "warmup_steps": warmup, "timed_steps": steps, "step_ms_median": step_ms, "step_ms_min": min(times_ms),
            "step_ms_max": max(times_ms), "tokens_per_s_median": tps,
            "mfu_989": tps * fpt / (H100_BF16_DENSE_TFLOPS * 1e12),
            "mfu_ceiling": (tps * fpt / (sh.ceiling * 1e12)) if sh.ceiling else None,
            "init_s": init_s, "first_step_s": first_step_s, "loss_first": loss_values[0], "loss_last": loss_values[-1],
            "compile": "off" if args.no_compile else args.compile_mode, "fused_adamw": fused,
        })
        row["sdpa_backend_used"] = row["sdpa_backend_probe"]
        row["sdpa_backend_used_from"] = "torch._fused_sdp_choice on the model's q, k, v"
        if args.profile_steps > 0 and not sh.over_budget():
            profile_row(sh, row, backend, warmup + steps, train_step)
        else:
            if args.profile_steps > 0:
                row["profile_error"] = "skipped: --budget-s reached"
            check_backend(sh, row, warmup + steps, train_step)
    row["row_s"] = time.perf_counter() - t_row
    if cuda and backend != "auto" and row["sdpa_backend_used"] not in (backend, None):
        # A forced backend the compiled step did not run (e.g. a cached graph of another row): its
        # times are no measurement of that backend.
        timing = {k: row.pop(k) for k in ("step_ms_median", "tokens_per_s_median", "mfu_989", "mfu_ceiling")}
        row.update({"mismatched_timing": timing, "step_ms_median": None, "tokens_per_s_median": None,
                    "error": f"forced {backend}, but the compiled step ran {row['sdpa_backend_used']}: "
                             f"no measurement of {backend}"})
    return row


def check_backend(sh: Shared, row: dict, step: int, train_step):
    """Without a profile: one more step under a CPU-only profiler, whose SDPA op names the backend
    the compiled step really ran (cheap: no CUDA activity, few host ops under torch.compile)."""
    if not sh.cuda:
        return
    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            train_step(step)
        names = {e.name for e in prof.events()}
    seen = sorted({torch_profile.SDPA_OPS[n] for n in names if n in torch_profile.SDPA_OPS})
    if seen:
        row["sdpa_backend_used"] = "+".join(seen)
        row["sdpa_backend_used_from"] = "one step under a CPU-only profiler (" + ", ".join(
            sorted(n for n in names if n in torch_profile.SDPA_OPS)) + ")"


def profile_row(sh: Shared, row: dict, backend: str, first_step: int, train_step):
    """Profiles --profile-steps more steps of the row; fills row["profile"] (or row["profile_error"])
    and, when the trace shows a fused SDPA op, row["sdpa_backend_used"] from it."""
    torch, args, cfg = sh.torch, sh.args, sh.cfg
    try:
        trace, step_ms, read_s = torch_profile.capture(torch, lambda i: train_step(first_step + i, mark=True),
                                                       args.profile_steps, sh.cuda)
        launches, info = torch_profile.launches_from_trace(trace)
        del trace
    except Exception as e:  # noqa: BLE001 - a profiler failure must not lose the timed row
        row["profile_error"] = f"{type(e).__name__}: {str(e)[:400]}"
        return
    seen = torch_profile.sdpa_backend_seen(info, launches)
    if seen:
        row["sdpa_backend_used"] = seen
        row["sdpa_backend_used_from"] = "the profiled step's SDPA op (" + ", ".join(info["sdpa_ops"] or ["kernels"]) + ")"
        if row.get("sdpa_backend_probe") and row["sdpa_backend_probe"] != seen:
            row["sdpa_backend_note"] = f"torch._fused_sdp_choice said {row['sdpa_backend_probe']}, the step ran {seen}"
    label = backend if backend != "auto" else f"auto={row['sdpa_backend_used']}"
    notes = [f"{info['orphans']} kernels launched before the profiled window (the previous step's tail) are "
             "left out"] if info.get("orphans") else []
    notes += [torch_profile.CLASSIFICATION_NOTE,
              f"step_ms: CUDA events around each profiled step, under the profiler (the timed steps ran without "
              f"it: median {row['step_ms_median']:.3f} ms)" if sh.cuda else
              "CPU: op self times, wall-clock steps (a smoke test)"]
    if not info["device_events"] and sh.cuda:
        notes.append("the trace has no CUDA kernels (CUPTI unavailable?)")
    meta = {"implementation": "torch eager" if args.no_compile else "torch.compile", "backend": sh.device.type,
            "sdpa_backend": label, "device": sh.device_name, "clock": "torch.profiler (CUPTI) "
            "kernel times; CUDA events per step" if sh.cuda else "torch.profiler CPU op self times; wall clock per step",
            "spec": cfg.name, "warmup_steps": first_step + 1, "micro_batches_per_step": cfg.grad_accum,
            "tokens_per_step": cfg.tokens_per_step, "notes": notes,
            "step_ms_unprofiled": row["step_ms_median"] if sh.cuda else None}
    row["profile"] = torch_profile.build_profile(launches, torch_profile.ModelShapes(cfg), step_ms, meta)
    row["profile"]["trace_read_s"] = read_s
