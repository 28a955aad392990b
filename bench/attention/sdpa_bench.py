"""PyTorch's causal scaled_dot_product_attention, bf16, forward and forward + backward, on the
attention shapes bench/attention/attention_bench.cu times, once per SDPA backend (flash, cuDNN,
memory-efficient; each forced alone with torch.nn.attention.sdpa_kernel). One JSON object per line,
the same fields as attention_bench's, "impl": "torch_sdpa_<backend>"; a backend that cannot run a
shape on this GPU gives a line with "error" (and whatever it did time) instead of stopping the rest.

    python3 bench/attention/sdpa_bench.py [--iters N] [--warmup N] [--backends flash,cudnn,efficient]
"""
import argparse
import json
import statistics
import warnings

import torch
import torch.nn.functional as F

SHAPES = [("0.1b", 8, 2048, 12, 64), ("1.5b", 8, 2048, 24, 128)]
BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}


def median_ms(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def why(e, caught):
    """The error's first line and the reasons PyTorch warned about (why a backend was not used)."""
    reasons = "; ".join(" ".join(str(w.message).split()) for w in caught)
    msg = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return (f"{type(e).__name__}: {msg}" + (f" ({reasons})" if reasons else ""))[:900]


def bench(backend, q, k, v, dout, iters, warmup):
    """{"fwd_ms", "fwd_bwd_ms"} of one backend (None where it failed) and the error, if any."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = {"fwd_ms": None, "fwd_bwd_ms": None}

    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fwd_bwd():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o.backward(dout)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel([getattr(SDPBackend, BACKENDS[backend])]):
                out["fwd_ms"] = median_ms(fwd, iters, warmup)
                out["fwd_bwd_ms"] = median_ms(fwd_bwd, iters, warmup)
        except RuntimeError as e:
            torch.cuda.synchronize()
            return out, why(e, caught)
    return out, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--backends", default="flash,cudnn,efficient",
                    help="comma-separated, from " + ",".join(BACKENDS) + " (default all)")
    args = ap.parse_args()
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    bad = [b for b in backends if b not in BACKENDS]
    if bad or not backends:
        ap.error(f"--backends: unknown {bad} (choose from {', '.join(BACKENDS)})")

    for name, batch, seq, heads, hd in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(1)
        q, k, v = (torch.randn(batch, heads, seq, hd, device="cuda", dtype=torch.bfloat16, generator=gen,
                               requires_grad=True) for _ in range(3))
        dout = torch.randn(batch, heads, seq, hd, device="cuda", dtype=torch.bfloat16, generator=gen)
        flops = 4.0 * batch * heads * seq * seq * hd / 2.0
        for backend in backends:
            t, err = bench(backend, q, k, v, dout, args.iters, args.warmup)
            row = {"shape": name, "impl": f"torch_sdpa_{backend}", "backend": backend, "batch": batch, "seq_len": seq,
                   "heads": heads, "head_dim": hd,
                   "fwd_ms": round(t["fwd_ms"], 4) if t["fwd_ms"] else None,
                   "fwd_bwd_ms": round(t["fwd_bwd_ms"], 4) if t["fwd_bwd_ms"] else None,
                   "fwd_tflops": round(flops / t["fwd_ms"] / 1e9, 1) if t["fwd_ms"] else None,
                   "fwd_bwd_tflops": round(3.5 * flops / t["fwd_bwd_ms"] / 1e9, 1) if t["fwd_bwd_ms"] else None}
            if err:
                row["error"] = err
            print(json.dumps(row), flush=True)
            q.grad = k.grad = v.grad = None


if __name__ == "__main__":
    main()
