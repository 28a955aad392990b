"""PyTorch's causal scaled_dot_product_attention (flash backend), bf16, forward and forward +
backward, on the attention shapes bench/attention/attention_bench.cu times. One JSON object per
line, the same fields."""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F

SHAPES = [("0.1b", 8, 2048, 12, 64), ("1.5b", 8, 2048, 24, 128)]


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for name, batch, seq, heads, hd in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(1)
        q, k, v = (torch.randn(batch, heads, seq, hd, device="cuda", dtype=torch.bfloat16, generator=gen,
                               requires_grad=True) for _ in range(3))
        dout = torch.randn(batch, heads, seq, hd, device="cuda", dtype=torch.bfloat16, generator=gen)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            def fwd():
                with torch.no_grad():
                    F.scaled_dot_product_attention(q, k, v, is_causal=True)

            def fwd_bwd():
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                out.backward(dout)

            fwd_ms = median_ms(fwd, args.iters, args.warmup)
            fwd_bwd_ms = median_ms(fwd_bwd, args.iters, args.warmup)
        flops = 4.0 * batch * heads * seq * seq * hd / 2.0
        print(json.dumps({"shape": name, "impl": "torch_sdpa_flash", "batch": batch, "seq_len": seq, "heads": heads,
                          "head_dim": hd, "fwd_ms": round(fwd_ms, 4), "fwd_bwd_ms": round(fwd_bwd_ms, 4),
                          "fwd_tflops": round(flops / fwd_ms / 1e9, 1),
                          "fwd_bwd_tflops": round(3.5 * flops / fwd_bwd_ms / 1e9, 1)}), flush=True)


if __name__ == "__main__":
    main()
