"""The PyTorch models and training steps of bench/cpu_vs_torch's torch rows.

Two ways to write the same model and the same training step, fp32 on the CPU:

  "oracle": the forward of the test oracle, tests/reference/reference_model.py (functions over a
      dict of parameters), as the bench's torch rows were first written: the compiled function
      returns (logits, loss), the RoPE tables are built inside each forward, and
      torch.optim.AdamW runs with its defaults (on the CPU: the per-tensor for-loop, since
      PyTorch's default foreach path is for GPU tensors only). Eager with the explicit softmax,
      eager with SDPA, and SDPA under torch.compile.

  "plain": what a competent PyTorch user runs for this spec: the modules of the shared model
      as bench/torch_model.py builds them (the GPU baseline's model, bench/torch_baseline.py; parameters named,
      shaped and initialized as gcompile's plan says, RoPE tables as buffers, the cross-entropy
      inside the compiled forward and only the loss out), torch.compile(model, dynamic=False),
      F.scaled_dot_product_attention(is_causal=True, enable_gqa=True), AdamW(fused=True) (PyTorch's
      fused CPU kernel, torch >= 2.4) with the plan's per-tensor lr multipliers and weight decay,
      clip_grad_norm_ (foreach, PyTorch's CPU default), zero_grad(set_to_none=True). The plan comes
      from TREE/plan.json when the tree has one (bench/gpu_vs_torch writes it), else from
      `gcompile explain TREE/spec.resolved.toml --json` ($GCOMPILE, else build/compiler/gcompile).
      For a mixture-of-experts tree the plain row runs the oracle's functions with the same
      training-step fixes (RoPE tables built once, only the loss out of the compiled function,
      fused AdamW), as it did when bench/torch_model.py was dense only; its MoE experts target
      torch._grouped_mm on GPUs.

Same math in both: the same resolved spec, the same shapes, norms, gate, RoPE pairing, scales,
AdamW settings (the optim.no_decay classes exempt, optim.lr_mult per class), global grad-norm
clipping at optim.grad_clip, gradient accumulation global_batch / micro_batch, random int64
tokens in [0, vocab); tests/bench/cpu_vs_torch_test.py checks that the two models give the same
loss and gradients on the same weights and tokens. Why the plain row is faster: see
bench/cpu_torch_suspects.py, which times each difference on its own.

Standard library at import; torch is passed in.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))


class BaselineError(Exception):
    """A tree this baseline cannot build a model for."""


def param_class(name):
    """The optim.lr_mult / no_decay class of a reference_model parameter name."""
    if "norm" in name:
        return "norm"
    for key, cls in (("embed_tokens", "embedding"), ("lm_head", "lm_head"), ("router", "router"),
                     ("shared_experts.gate_proj", "shared_gate"), ("shared_experts.up_proj", "shared_up"),
                     ("shared_experts.down_proj", "shared_down"),
                     ("experts.gate_proj", "expert_gate"), ("experts.up_proj", "expert_up"),
                     ("experts.down_proj", "expert_down"), ("q_proj", "attn_q"),
                     ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_o"),
                     ("self_attn.gate_proj", "attn_gate"), ("mlp.gate_proj", "mlp_gate"),
                     ("up_proj", "mlp_up"), ("down_proj", "mlp_down")):
        if key in name:
            return cls
    raise ValueError(f"no class for parameter {name}")


def oracle_module():
    """tests/reference/reference_model.py (the test oracle: gcompile_decoder at its plain execution)."""
    sys.path.insert(0, str(REPO / "tests" / "reference"))
    import reference_model

    return reference_model


def oracle_weights(torch, cfg):
    """The old rows' initialization: ones for gains, 0.02 * N(0, 1) for matrices (the init
    does not change the cost of a step)."""
    return {name: torch.nn.Parameter(torch.ones(shape) if len(shape) == 1 else 0.02 * torch.randn(shape))
            for name, shape in cfg.expected_shapes().items()}


def oracle_groups(spec, W):
    """AdamW groups from the resolved spec's optim.lr_mult and optim.no_decay, by parameter class."""
    o = spec["optim"]
    no_decay, lr_mult = set(o.get("no_decay", [])), o.get("lr_mult", {})
    groups = {}
    for name, p in W.items():
        cls = param_class(name)
        key = (float(lr_mult.get(cls, 1.0)), 0.0 if cls in no_decay else float(o["weight_decay"]))
        groups.setdefault(key, []).append(p)
    return [{"params": ps, "lr": o["lr"] * mult, "weight_decay": wd} for (mult, wd), ps in groups.items()]


def plan_config(tree, gcompile=None):
    """bench/torch_baseline.py's Config of the tree: its spec.resolved.toml and plan (TREE/plan.json,
    else `gcompile explain --json`). Raises BaselineError (a MoE tree, no gcompile, ...)."""
    import torch_baseline

    tree = Path(tree)
    plan = tree / "plan.json"
    try:
        if plan.is_file():
            return torch_baseline.read_config(str(tree / "spec.resolved.toml"), plan_json=str(plan))
        return torch_baseline.read_config(str(tree), gcompile=gcompile)
    except torch_baseline.SpecError as e:
        raise BaselineError(str(e)) from None


class Model:
    """A model to train: loss_fn(tokens, targets) -> loss (uncompiled), its parameters, AdamW
    groups, vocabulary size and a description."""

    def __init__(self, loss_fn, params, groups, vocab, kind, text, module=None):
        self.loss_fn, self.params, self.groups, self.vocab = loss_fn, params, groups, vocab
        self.kind, self.text, self.module = kind, text, module


def oracle_model(torch, tree, spec, sdpa, logits_out=True, hoist_rope=False):
    """The old rows' model: reference_model.forward over a dict of parameters."""
    ref = oracle_module()
    try:
        cfg = ref.Config(tree, {})  # architecture from spec.resolved.toml, scales from src/config.hpp
    except (OSError, ValueError, KeyError) as e:
        raise BaselineError(f"PyTorch model: {e}") from None
    W = oracle_weights(torch, cfg)
    tables = None
    if hoist_rope:  # computed here, so that torch.compile finds them made and treats them as constants
        T = int(spec["train"]["seq_len"])
        tables = ref.gd.rope_tables(torch.arange(T), cfg.hd, cfg.theta, W["model.embed_tokens.weight"].dtype)

    def rope(tokens):
        return tables if tables is not None and tokens.shape[1] == tables[0].shape[0] else None

    if logits_out:
        def loss_fn(tokens, targets):
            return ref.forward(cfg, W, tokens, targets, sdpa=sdpa, cos_sin=rope(tokens))  # (logits, loss)
    else:
        def loss_fn(tokens, targets):
            return ref.forward(cfg, W, tokens, targets, sdpa=sdpa, cos_sin=rope(tokens))[1]
    text = "tests/reference/reference_model.py functions" + (", RoPE tables built once" if hoist_rope else "")
    return Model(loss_fn, list(W.values()), oracle_groups(spec, W), cfg.V, "oracle", text, module=W)


def plain_model(torch, tree, spec, gcompile=None, plan_cfg=None):
    """The plain row's model: bench/torch_model.py's modules for a dense tree, else the oracle's
    functions with the RoPE tables built once and only the loss out."""
    if spec["model"].get("arch", "dense") != "dense":
        m = oracle_model(torch, tree, spec, sdpa=True, logits_out=False, hoist_rope=True)
        m.kind = "oracle-hoisted"
        return m
    import torch_model

    cfg = plan_cfg or plan_config(tree, gcompile)
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    if (major, minor) < (2, 1):
        raise BaselineError(f"torch {torch.__version__}: the plain row needs >= 2.1 (SDPA with scale=)")
    model = torch_model.build_model(cfg, torch, use_sdpa=True, use_sdpa_gqa=(major, minor) >= (2, 5))
    n = sum(p.numel() for p in model.parameters())
    if n != cfg.param_count:
        raise BaselineError(f"bench/torch_model.py has {n} parameters, gcompile's plan {cfg.param_count}")
    return Model(model, list(model.parameters()), torch_model.optimizer_groups(cfg, model), cfg.vocab_size,
                 "modules", "bench/torch_model.py modules", module=model)


def adamw(torch, groups, spec, fused):
    """torch.optim.AdamW with the spec's lr, betas, eps and weight decay; fused: PyTorch's fused
    kernel (on the CPU since torch 2.4; else the foreach path), None: PyTorch's default."""
    o = spec["optim"]
    kwargs = {}
    if fused:
        major, minor = (int(x) for x in torch.__version__.split(".")[:2])
        kwargs = {"fused": True} if (major, minor) >= (2, 4) else {"foreach": True}
    return torch.optim.AdamW(groups, lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"],
                             weight_decay=o["weight_decay"], **kwargs)


class Runner:
    """One torch row: a model, its AdamW and (compiled or eager) forward, the training step, and
    its timings. warm_up() runs the untimed steps (compilation happens in the first), time(n)
    times n more and keeps their seconds."""

    def __init__(self, torch, spec, model, compile_, fused_adamw, label):
        self.torch, self.spec, self.model, self.label = torch, spec, model, label
        t = spec["train"]
        self.B, self.T = int(t["micro_batch"]), int(t["seq_len"])
        self.accum = int(t["global_batch"]) // self.B
        self.clip = float(spec["optim"].get("grad_clip", 0.0))
        self.opt = adamw(torch, model.groups, spec, fused_adamw)
        self.forward = model.loss_fn
        if compile_:
            kwargs = {"dynamic": False} if model.kind == "modules" else {}
            self.forward = torch.compile(model.loss_fn, **kwargs)
        self.compiled, self.fused_adamw = compile_, bool(fused_adamw)
        self.seconds, self.losses = [], []

    def step(self):
        torch = self.torch
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        for _ in range(self.accum):
            tokens = torch.randint(0, self.model.vocab, (self.B, self.T), dtype=torch.int64)
            targets = torch.randint(0, self.model.vocab, (self.B, self.T), dtype=torch.int64)
            loss = self.forward(tokens, targets)
            if isinstance(loss, tuple):
                loss = loss[1]
            (loss / self.accum).backward()
        if self.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.params, self.clip)
        self.opt.step()
        seconds = time.perf_counter() - t0
        self.losses.append(loss.detach().item())  # after the clock: the loss of the last micro-batch
        return seconds

    def warm_up(self, steps):
        for _ in range(steps):
            self.step()

    def time(self, steps):
        block = [self.step() for _ in range(steps)]
        self.seconds.extend(block)
        return statistics.median(block)

    def result(self, blocks=None):
        """Median over all timed steps; blocks: the per-round medians (their spread is reported)."""
        median = statistics.median(self.seconds)
        out = {"tokens_per_s": self.B * self.T * self.accum / median, "ms_per_step": median * 1e3,
               "steps": len(self.seconds), "final_loss": self.losses[-1] if self.losses else float("nan"),
               "first_loss": self.losses[0] if self.losses else float("nan"),
               "parameters": sum(p.numel() for p in self.model.params), "model": self.model.text,
               "compiled": self.compiled, "fused_adamw": self.fused_adamw}
        if blocks and len(blocks) > 1:
            tps = [self.B * self.T * self.accum / s for s in blocks]
            out["tokens_per_s_rounds"] = tps
        return out


def set_threads(torch, threads):
    torch.set_num_threads(threads)
    if not getattr(set_threads, "interop_set", False):  # once per process, before any parallel work
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass
        set_threads.interop_set = True
