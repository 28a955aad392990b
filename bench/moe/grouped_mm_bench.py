"""PyTorch's peer of bench/moe/expert_gemm_bench.cu: the three expert projections of an MoE layer at
moe_3b's shapes (d_model 768, expert d_ff 512, 145 experts, top-9, 2 x 4096 tokens = 73,728 routed
rows, bf16) with torch._grouped_mm, as torchtitan's MoE calls it (weights stacked [E, out, in],
passed transposed; offsets = the cumulative rows per expert, int32), forward and forward + backward
(autograd: dX and dW of each projection). The rows per expert are expert_gemm_bench.cu's
(expert_rows, the same integers). The same fields as expert_gemm_bench's, "impl":
"torch_grouped_mm"; a failure gives a line with "error".

    python3 bench/moe/grouped_mm_bench.py [--iters N] [--warmup N] [--device cuda]
"""
import argparse
import json
import statistics
import time

import torch

D_MODEL, EXPERT_D_FF, EXPERTS, TOP_K, TOKENS = 768, 512, 145, 9, 2 * 4096
ROWS = TOKENS * TOP_K


def expert_rows():
    """expert_gemm_bench.cu's expert_rows(): weight 14 + (37 e mod 29), whole 16-row units."""
    units = ROWS // 16
    weight = [14 + (37 * e) % 29 for e in range(EXPERTS)]
    total = sum(weight)
    rows = [units * w // total for w in weight]
    for e in range(units - sum(rows)):
        rows[e] += 1
    return [16 * r for r in rows]


def median_ms(fn, iters, warmup, device):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if device == "cuda":
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    rows = expert_rows()
    line = {"impl": "torch_grouped_mm", "shape": "moe_3b", "experts": EXPERTS, "top_k": TOP_K, "tokens": TOKENS,
            "rows": sum(rows), "d_model": D_MODEL, "expert_d_ff": EXPERT_D_FF, "max_rows": max(rows),
            "min_rows": min(rows), "torch": torch.__version__}
    try:
        dev = torch.device(args.device)
        g = torch.Generator(device=dev).manual_seed(39)
        offs = torch.tensor(rows, device=dev).cumsum(0).to(torch.int32)

        def randn(*shape, scale=1.0, grad=False):
            t = torch.randn(*shape, device=dev, generator=g, dtype=torch.float32).mul_(scale).to(torch.bfloat16)
            return t.requires_grad_(grad)

        x = randn(ROWS, D_MODEL, grad=True)
        h = randn(ROWS, EXPERT_D_FF, grad=True)
        w_gate = randn(EXPERTS, EXPERT_D_FF, D_MODEL, scale=D_MODEL ** -0.5, grad=True)
        w_up = randn(EXPERTS, EXPERT_D_FF, D_MODEL, scale=D_MODEL ** -0.5, grad=True)
        w_down = randn(EXPERTS, D_MODEL, EXPERT_D_FF, scale=EXPERT_D_FF ** -0.5, grad=True)
        dy_in, dy_out = randn(ROWS, EXPERT_D_FF), randn(ROWS, D_MODEL)

        def forward():
            return (torch._grouped_mm(x, w_gate.transpose(-2, -1), offs=offs),
                    torch._grouped_mm(x, w_up.transpose(-2, -1), offs=offs),
                    torch._grouped_mm(h, w_down.transpose(-2, -1), offs=offs))

        def forward_only():
            with torch.no_grad():
                forward()

        def forward_backward():
            a, b, c = forward()
            torch.autograd.backward([a, b, c], [dy_in, dy_in, dy_out])

        fwd_flop = 3 * 2.0 * ROWS * D_MODEL * EXPERT_D_FF
        line["fwd_ms"] = median_ms(forward_only, args.iters, args.warmup, args.device)
        line["fwd_bwd_ms"] = median_ms(forward_backward, args.iters, args.warmup, args.device)
        line["fwd_tflops"] = round(fwd_flop / line["fwd_ms"] * 1e-9, 1)
        line["fwd_bwd_tflops"] = round(3 * fwd_flop / line["fwd_bwd_ms"] * 1e-9, 1)
    except Exception as e:  # noqa: BLE001  (reported, not raised: the kit tables what ran)
        line["error"] = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:600]
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
