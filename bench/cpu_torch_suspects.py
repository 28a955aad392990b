#!/usr/bin/env python3
"""What makes bench/cpu_vs_torch's first torch.compile row slower than a plain PyTorch model:
each difference between the two timed on its own, in one process, steps interleaved.

The variants go from the row as first written (the test oracle's functions under torch.compile,
bench/cpu_torch_plain.py "oracle") to the plain row (bench/torch_model.py's modules, fused AdamW),
changing one thing at a time:

  oracle              reference_model.forward compiled, returning (logits, loss); RoPE tables
                      built inside each forward; AdamW defaults (the CPU's per-tensor for-loop)
  + loss only         the compiled function returns only the loss
  + RoPE once         the RoPE tables computed once, outside the compiled graph
  + fused AdamW       AdamW(fused=True)
  plain, AdamW loop   bench/torch_model.py's modules (RoPE buffers, loss only), AdamW defaults
  plain               the same with AdamW(fused=True): bench/cpu_vs_torch's plain row
  (--extra adds: plain with AdamW(foreach=True); plain with one GEMM for q, k, v and the gate
  and one for the MLP's gate and up projections, the weights concatenated in the forward;
  plain eager; and torch.compile modes max-autotune and reduce-overhead)

Every variant is built, compiled and warmed up (--warmup steps) first; then the timed steps run
round-robin (one step of each variant in turn, --steps rounds), so that all see the same load on
a shared machine. Per variant: tokens/s from the median and from the fastest step, the median
milliseconds of forward + backward, clipping and the optimizer step, and the speed relative to
the first variant as the median of the per-round ratios (robust to load that changes between
rounds). Each variant's step-0 loss on the same first batch is printed too (same math: the
oracle and plain models start from different random weights, so expect ln V +- 0.01, not equal
values; tests/bench/cpu_vs_torch_test.py checks equal losses on equal weights).

    .venv/bin/python bench/cpu_torch_suspects.py [--tree generated/tiny] [--threads 2] [--steps 40]
        [--warmup 8] [--extra] [--only NAME,...] [--json FILE]
"""

import argparse
import json
import os
import statistics
import sys
import time
import tomllib
import types
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import cpu_torch_plain as ctp  # noqa: E402


def fuse_projections(torch, model, cfg):
    """Rewires the layers of bench/torch_model.py's model (gcompile_decoder's DecoderLayer) to one
    GEMM for q, k, v (and the gate) and one for the MLP's gate and up projections: the plan's
    separate weights are concatenated inside the forward, so the parameters, their init and AdamW
    groups stay the same. The rest is the shared model's own functions."""
    import torch_model

    gd = torch_model.decoder_module()
    F = torch.nn.functional
    H, K, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    if cfg.qk_norm or cfg.norm_placement != "pre" or cfg.moe:
        raise ctp.BaselineError("fused projections: this experiment covers dense pre-norm without QK-norm only")

    def layer_forward(self, h, cos, sin, mask=None, routes=None, run=None):
        B, T, _ = h.shape
        a, attn = self.input_layernorm(h), self.self_attn
        ws = [attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]
        sizes = [H * hd, K * hd, K * hd]
        if cfg.gate_dim:
            ws.append(attn.gate_proj.weight)
            sizes.append(cfg.gate_dim)
        parts = F.linear(a, torch.cat(ws)).split(sizes, dim=-1)
        q, k, v = parts[0].view(B, T, H, hd), parts[1].view(B, T, K, hd), parts[2].view(B, T, K, hd)
        q, k = gd.apply_rope(q, cos, sin).transpose(1, 2), gd.apply_rope(k, cos, sin).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v.transpose(1, 2), is_causal=True, scale=cfg.attn_scale,
                                           **({"enable_gqa": True} if K != H else {})).transpose(1, 2)
        if cfg.gated_attention == "headwise":
            o = o * torch.sigmoid(parts[3]).unsqueeze(-1)
        elif cfg.gated_attention == "elementwise":
            o = o * torch.sigmoid(parts[3]).view(B, T, H, hd)
        h = h + attn.o_proj(o.reshape(B, T, H * hd))
        mlp = self.mlp
        g, u = F.linear(self.post_attention_layernorm(h), torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])).chunk(
            2, dim=-1)
        return h + mlp.down_proj(F.silu(g) * u), None

    for layer in model.module.model.layers:
        layer.forward = types.MethodType(layer_forward, layer)
    model.text += ", fused projections"
    return model


def variants(torch, tree, spec, extra, gcompile):
    """(name, builder) in order; a builder returns a cpu_torch_plain.Runner."""
    cfg = None

    def plain(fused=True, compile_=True, mode=None, fuse=False):
        def build():
            nonlocal cfg
            cfg = cfg or ctp.plan_config(tree, gcompile)
            model = ctp.plain_model(torch, tree, spec, plan_cfg=cfg)
            if fuse:
                fuse_projections(torch, model, cfg)
            r = ctp.Runner(torch, spec, model, compile_ and mode is None, fused, "")
            if compile_ and mode:
                r.forward = torch.compile(model.loss_fn, mode=mode, dynamic=False)
                r.compiled = True
            if fused == "foreach":  # AdamW(foreach=True)
                o = spec["optim"]
                r.opt = torch.optim.AdamW(model.groups, lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"],
                                          weight_decay=o["weight_decay"], foreach=True)
            return r
        return build

    def oracle(logits_out, hoist, fused):
        def build():
            model = ctp.oracle_model(torch, tree, spec, sdpa=True, logits_out=logits_out, hoist_rope=hoist)
            return ctp.Runner(torch, spec, model, True, fused, "")
        return build

    out = [("oracle (as first written)", oracle(True, False, None)),
           ("+ loss only", oracle(False, False, None)),
           ("+ RoPE once", oracle(False, True, None)),
           ("+ fused AdamW", oracle(False, True, True)),
           ("plain, AdamW loop", plain(fused=None)),
           ("plain (the new row)", plain())]
    if extra:
        out += [("plain, AdamW foreach", plain(fused="foreach")),
                ("plain, fused projections", plain(fuse=True)),
                ("plain, eager", plain(compile_=False)),
                ("plain, max-autotune", plain(mode="max-autotune")),
                ("plain, reduce-overhead", plain(mode="reduce-overhead"))]
    return out


class Timed:
    """A Runner with the phases of its step timed separately."""

    def __init__(self, torch, runner):
        self.torch, self.r = torch, runner
        self.rows = []  # (forward + backward, clip, optimizer, all) seconds

    def step(self):
        torch, r = self.torch, self.r
        t0 = time.perf_counter()
        r.opt.zero_grad(set_to_none=True)
        for _ in range(r.accum):
            tokens = torch.randint(0, r.model.vocab, (r.B, r.T), dtype=torch.int64)
            targets = torch.randint(0, r.model.vocab, (r.B, r.T), dtype=torch.int64)
            loss = r.forward(tokens, targets)
            if isinstance(loss, tuple):
                loss = loss[1]
            (loss / r.accum).backward()
        t1 = time.perf_counter()
        if r.clip > 0:
            torch.nn.utils.clip_grad_norm_(r.model.params, r.clip)
        t2 = time.perf_counter()
        r.opt.step()
        t3 = time.perf_counter()
        return (t1 - t0, t2 - t1, t3 - t2, t3 - t0), loss.detach().item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", default="generated/tiny")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=40, help="timed rounds (one step of every variant each)")
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--extra", action="store_true", help="also the extra variants (see the docstring)")
    ap.add_argument("--only", default="", help="comma-separated variant names (prefixes) to run")
    ap.add_argument("--gcompile", default=None, help="gcompile for the plan when TREE has no plan.json")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    tree = Path(args.tree)
    if not tree.is_absolute() and not tree.exists() and (ctp.REPO / tree).exists():
        tree = ctp.REPO / tree
    spec = tomllib.loads((tree / "spec.resolved.toml").read_text())
    ctp.set_threads(torch, args.threads)
    chosen = variants(torch, tree, spec, args.extra, args.gcompile)
    if args.only:
        keep = [s.strip() for s in args.only.split(",") if s.strip()]
        chosen = [(n, b) for n, b in chosen if any(n.startswith(k) for k in keep)]
    t = spec["train"]
    tokens_per_step = int(t["global_batch"]) * int(t["seq_len"])
    torch.manual_seed(0)
    batch = torch.randint(0, int(spec["model"]["vocab_size"]), (int(t["micro_batch"]), int(t["seq_len"]) + 1))
    timed, names, first_loss = [], [], {}
    for name, build in chosen:
        torch.manual_seed(int(spec["experiment"].get("seed", 0)))
        t0 = time.perf_counter()
        r = build()
        with torch.no_grad():
            loss = r.model.loss_fn(batch[:, :-1], batch[:, 1:])
        first_loss[name] = float((loss[1] if isinstance(loss, tuple) else loss).detach())
        tm = Timed(torch, r)
        for _ in range(args.warmup):
            tm.step()
        print(f"cpu_torch_suspects: {name}: built, compiled and warmed up in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr, flush=True)
        timed.append(tm)
        names.append(name)
    load = os.getloadavg()[0]
    for _ in range(args.steps):
        for tm in timed:
            tm.rows.append(tm.step()[0])
    load = max(load, os.getloadavg()[0])
    base = [row[3] for row in timed[0].rows]
    results = []
    print(f"cpu_torch_suspects: {tree}, {args.threads} threads, {args.steps} interleaved rounds after "
          f"{args.warmup} warm-up steps; torch {torch.__version__}; 1-min load average up to {load:.2f}")
    print(f"  {'variant':<28}{'tok/s med':>10}{'tok/s best':>11}{'fwd+bwd ms':>11}{'clip ms':>8}{'AdamW ms':>9}"
          f"{'speed':>7}{'step-0 loss':>12}")
    for name, tm in zip(names, timed):
        allt = [row[3] for row in tm.rows]
        speed = statistics.median(b / a for b, a in zip(base, allt))
        med = [statistics.median(row[i] for row in tm.rows) * 1e3 for i in range(3)]
        res = {"variant": name, "model": tm.r.model.text, "tokens_per_s_median": tokens_per_step / statistics.median(allt),
               "tokens_per_s_best": tokens_per_step / min(allt), "fwd_bwd_ms": med[0], "clip_ms": med[1],
               "adamw_ms": med[2], "speed_vs_first": speed, "step0_loss": first_loss[name]}
        results.append(res)
        print(f"  {name:<28}{res['tokens_per_s_median']:>10.0f}{res['tokens_per_s_best']:>11.0f}{med[0]:>11.1f}"
              f"{med[1]:>8.2f}{med[2]:>9.2f}{speed:>6.3f}x{first_loss[name]:>12.5f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"tree": str(tree), "threads": args.threads, "steps": args.steps,
                                               "warmup": args.warmup, "torch": torch.__version__, "load_max": load,
                                               "variants": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
