#!/usr/bin/env python3
"""PyTorch baseline for gcompile's GPU benchmark (bench/gpu_vs_torch).

The same Llama-style decoder as a gcompile spec describes, written the way a
user would write it in PyTorch, trained on random tokens and timed.

Everything that describes the spec comes from gcompile itself; this script
re-implements none of the spec's semantics:

  - `gcompile resolve SPEC` (the spec with its extends chain, preset and
    defaults merged in; a tree's spec.resolved.toml is the same text) gives
    the model's sizes and switches, the batch sizes, precision and AdamW's
    lr, betas, eps and grad_clip;
  - `gcompile explain SPEC --json` (the plan) gives every parameter tensor
    (name, shape, init distribution and std, lr multiplier, weight decay), the
    embedding / attention / logit scales, the parameter count and the FLOPs
    per token (docs/architecture.md, "Counting conventions").

Without gcompile on the machine (a GPU kit's trees), pass the plan saved
earlier with --plan-json and the tree's spec.resolved.toml as --spec-toml.

The model: RMSNorm with the spec's eps (mean of squares in fp32), RoPE with
rotate_half pairing (dimension i with i + head_dim/2), grouped-query attention,
optional QK-norm, optional sigmoid output gate (headwise: one scalar per head,
elementwise: one per channel) multiplied into each head's attention output
before W_O, SwiGLU MLP, tied or untied LM head, pre or sandwich norm, optional
embedding norm; parameter names and shapes are checked against the plan and
every tensor is initialized as the plan says. Training: torch.compile(model)
(the loss is inside the compiled forward), F.scaled_dot_product_attention
(is_causal=True) restricted to the flash backend, bf16 autocast with fp32
parameters (train.precision = "bf16"), AdamW(fused=True) with the plan's
per-tensor lr multipliers and weight decay, global grad-norm clipping
(foreach), gradient accumulation global_batch / micro_batch,
zero_grad(set_to_none=True).

Timing: CUDA events around every optimizer step; the first --warmup steps
(compilation, autotuning, AdamW state allocation) are left out and the median
of the rest is reported. Peak memory is torch.cuda.max_memory_allocated() over
the timed steps (the counter is reset after the warm-up), and also over the
whole run. MFU = tokens/s * FLOP/token / peak, against the H100 SXM
datasheet's dense bf16 989 TFLOP/s and against a measured bf16 GEMM ceiling
(median of timed 8192^3 torch.matmul on random data).

Output: one JSON line on stdout; progress and warnings on stderr.

  python3 bench/torch_baseline.py --spec-toml generated/NAME/spec.resolved.toml --steps 40 --warmup 10
  python3 bench/torch_baseline.py --spec-toml generated/NAME/spec.resolved.toml --plan-json PLAN.json ...
  python3 bench/torch_baseline.py --ceiling-only

The spec reading (read_config) imports without torch, so bench/gpu_vs_torch
reuses it for its own rows.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

try:
    import tomllib  # Python >= 3.11
except ModuleNotFoundError:  # pragma: no cover - older Pythons
    try:
        import tomli as tomllib  # type: ignore[no-redef]
    except ModuleNotFoundError:
        tomllib = None  # type: ignore[assignment]

H100_BF16_DENSE_TFLOPS = 989.0  # H100 SXM datasheet, dense bf16 (no sparsity)
GEMM_N = 8192
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class SpecError(Exception):
    """A spec that gcompile rejects or that this baseline does not support."""


# --------------------------------------------------------------------------
# The spec, as gcompile resolves and plans it (pure Python)
# --------------------------------------------------------------------------


def find_gcompile(path: str | None = None) -> str:
    """path, else $GCOMPILE, else build/compiler/gcompile in the repository."""
    path = path or os.environ.get("GCOMPILE") or os.path.join(REPO_ROOT, "build", "compiler", "gcompile")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise SpecError(f"gcompile not found at {path} (build it, pass --gcompile PATH or set $GCOMPILE; "
                        "or pass a saved plan with --plan-json)")
    return path


def run_gcompile(gcompile: str, *args: str) -> str:
    """gcompile's stdout; its stderr (warnings) only when it fails."""
    cmd = [gcompile, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SpecError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}):\n{proc.stderr.rstrip()}")
    return proc.stdout


def read_toml(path: str) -> dict:
    if tomllib is None:
        raise SpecError("reading TOML needs Python >= 3.11 (tomllib) or the tomli package")
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: not valid TOML: {e}") from None


def read_json(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file") from None
    except json.JSONDecodeError as e:
        raise SpecError(f"{path}: not valid JSON: {e}") from None


def resolve_and_plan(spec: str, gcompile: str | None = None, plan_json: str | None = None) -> tuple:
    """(resolved spec, plan): `gcompile resolve` and `gcompile explain --json`
    of spec, or, with plan_json, spec read as a resolved spec and the saved plan."""
    if plan_json:
        resolved, plan = read_toml(spec), read_json(plan_json)
        names = resolved.get("experiment", {}).get("name"), plan.get("experiment", {}).get("name")
        if names[0] != names[1]:
            raise SpecError(f"{plan_json} plans experiment {names[1]!r}, {spec} is {names[0]!r}")
        return resolved, plan
    if not os.path.isfile(spec):
        raise SpecError(f"{spec}: no such file")
    gcompile = find_gcompile(gcompile)
    if tomllib is None:
        raise SpecError("reading TOML needs Python >= 3.11 (tomllib) or the tomli package")
    resolved, plan = run_gcompile(gcompile, "resolve", spec), run_gcompile(gcompile, "explain", spec, "--json")
    try:
        return tomllib.loads(resolved), json.loads(plan)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        raise SpecError(f"{gcompile} printed something unreadable for {spec}: {e}") from None


@dataclass
class Config:
    name: str
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    norm_eps: float
    norm_placement: str  # pre | sandwich
    embedding_norm: bool
    qk_norm: bool
    tie_embeddings: bool
    gated_attention: str  # none | headwise | elementwise
    rope_theta: float
    embedding_scale: float
    attn_scale: float
    logit_scale: float
    seq_len: int
    micro_batch: int
    global_batch: int
    precision: str  # bf16 | fp32
    lr: float
    betas: tuple
    adam_eps: float
    grad_clip: float
    params: list  # the plan's tensors: name, class, shape, init, lr_mult, weight_decay, ...
    param_count: int
    matmul_params: int
    flops_per_token: float

    @property
    def grad_accum(self) -> int:
        return self.global_batch // self.micro_batch

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def gate_dim(self) -> int:
        return {"none": 0, "headwise": self.n_heads, "elementwise": self.q_dim}[self.gated_attention]


def _section(doc: dict, section: str):
    """need(key): doc[section][key], or a SpecError naming section.key."""
    table = doc.get(section, {})

    def need(key: str):
        if key not in table:
            raise SpecError(f"the resolved spec has no {section}.{key} (pass gcompile's resolve output)")
        return table[key]

    return need


def _batches(train, micro_batch_override: int | None) -> tuple:
    """(micro_batch, global_batch); an override keeps the micro-batches per step."""
    micro_batch, global_batch = int(train("micro_batch")), int(train("global_batch"))
    if micro_batch_override:
        global_batch = micro_batch_override * max(1, global_batch // micro_batch)
        micro_batch = micro_batch_override
    return micro_batch, global_batch


def config_from(resolved: dict, plan: dict, micro_batch_override: int | None = None) -> Config:
    exp, model, train, optim = (_section(resolved, s) for s in ("experiment", "model", "train", "optim"))
    if model("arch") != "dense":
        raise SpecError(f"model.arch = {model('arch')!r}: the baseline covers dense models only")
    if model("activation") != "swiglu":
        raise SpecError(f"model.activation = {model('activation')!r}: only swiglu is supported")
    if train("precision") not in ("bf16", "fp32"):
        raise SpecError(f"train.precision = {train('precision')!r} is not bf16 or fp32")
    micro_batch, global_batch = _batches(train, micro_batch_override)
    scales, flops = plan["scales"], plan["flops"]
    betas = optim("betas")
    return Config(
        name=str(exp("name")), vocab_size=int(model("vocab_size")), d_model=int(model("d_model")),
        n_layers=int(model("n_layers")), n_heads=int(model("n_heads")), n_kv_heads=int(model("n_kv_heads")),
        head_dim=int(model("head_dim")), d_ff=int(model("d_ff")), norm_eps=float(model("norm_eps")),
        norm_placement=str(model("norm_placement")), embedding_norm=bool(model("embedding_norm")),
        qk_norm=bool(model("qk_norm")), tie_embeddings=bool(model("tie_embeddings")),
        gated_attention=str(model("gated_attention")), rope_theta=float(model("rope_theta")),
        embedding_scale=float(scales["embedding"]), attn_scale=float(scales["attention"]),
        logit_scale=float(scales["logits"]),
        seq_len=int(train("seq_len")), micro_batch=micro_batch, global_batch=global_batch,
        precision=str(train("precision")), lr=float(optim("lr")), betas=(float(betas[0]), float(betas[1])),
        adam_eps=float(optim("eps")), grad_clip=float(optim("grad_clip")),
        params=list(plan["params"]), param_count=int(plan["counts"]["total"]),
        matmul_params=int(flops["matmul_params"]), flops_per_token=float(flops["per_token"]),
    )


def read_config(path: str, micro_batch_override: int | None = None, gcompile: str | None = None,
                plan_json: str | None = None) -> Config:
    """path: a spec file, a spec.resolved.toml or a generated tree directory;
    plan_json: a saved `gcompile explain --json` (then path must be resolved)."""
    if os.path.isdir(path):
        path = os.path.join(path, "spec.resolved.toml")
    resolved, plan = resolve_and_plan(path, gcompile, plan_json)
    try:
        return config_from(resolved, plan, micro_batch_override)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise SpecError(f"unexpected gcompile output ({type(e).__name__}: {e})") from None


def median(values):
    values = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(values) if values else None


# --------------------------------------------------------------------------
# The model and the timed training loop (need torch)
# --------------------------------------------------------------------------


def build_model(cfg: Config, torch, use_sdpa: bool, use_sdpa_gqa: bool):
    """The decoder, its parameters named as the plan names them and
    initialized as it says. use_sdpa: F.scaled_dot_product_attention with
    scale= (torch >= 2.1); use_sdpa_gqa: its enable_gqa= (torch >= 2.5), else
    K/V are repeated."""
    nn = torch.nn
    F = torch.nn.functional

    class RMSNorm(nn.Module):
        def __init__(self, dim: int, eps: float):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            xf = x.float() if x.element_size() < 4 else x  # mean of squares in fp32 at least
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
            return (y * self.weight).to(x.dtype)

    def rope(x, cos, sin):
        # x [B, T, heads, hd]; cos/sin [T, hd/2]; pairs (i, i + hd/2).
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        c = cos[None, :, None, :].to(x.dtype)
        s = sin[None, :, None, :].to(x.dtype)
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            d = cfg.d_model
            self.q_proj = nn.Linear(d, cfg.q_dim, bias=False)
            self.k_proj = nn.Linear(d, cfg.kv_dim, bias=False)
            self.v_proj = nn.Linear(d, cfg.kv_dim, bias=False)
            if cfg.qk_norm:
                self.q_norm = RMSNorm(cfg.head_dim, cfg.norm_eps)
                self.k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps)
            if cfg.gate_dim:
                self.gate_proj = nn.Linear(d, cfg.gate_dim, bias=False)
            self.o_proj = nn.Linear(cfg.q_dim, d, bias=False)
            if cfg.norm_placement == "sandwich":
                self.out_norm = RMSNorm(d, cfg.norm_eps)

        def forward(self, x, cos, sin):
            B, T, _ = x.shape
            H, K, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
            q = self.q_proj(x).view(B, T, H, hd)
            k = self.k_proj(x).view(B, T, K, hd)
            v = self.v_proj(x).view(B, T, K, hd)
            if cfg.qk_norm:
                q, k = self.q_norm(q), self.k_norm(k)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, T, hd]
            if K != H and not use_sdpa_gqa:
                k = k.repeat_interleave(H // K, dim=1)
                v = v.repeat_interleave(H // K, dim=1)
            if use_sdpa:
                kwargs = {"enable_gqa": True} if (K != H and use_sdpa_gqa) else {}
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=cfg.attn_scale, **kwargs)
            else:  # torch < 2.1 (CPU smoke tests only)
                scores = (q @ k.transpose(-1, -2)) * cfg.attn_scale
                mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
                o = torch.softmax(scores.float().masked_fill(mask, float("-inf")), dim=-1).to(v.dtype) @ v
            o = o.transpose(1, 2)  # [B, T, H, hd]
            if cfg.gated_attention == "headwise":
                o = o * torch.sigmoid(self.gate_proj(x)).unsqueeze(-1)
            elif cfg.gated_attention == "elementwise":
                o = o * torch.sigmoid(self.gate_proj(x)).view(B, T, H, hd)
            o = self.o_proj(o.reshape(B, T, H * hd))
            return self.out_norm(o) if cfg.norm_placement == "sandwich" else o

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
            self.up_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
            self.down_proj = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)
            if cfg.norm_placement == "sandwich":
                self.out_norm = RMSNorm(cfg.d_model, cfg.norm_eps)

        def forward(self, x):
            m = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
            return self.out_norm(m) if cfg.norm_placement == "sandwich" else m

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)
            self.self_attn = Attention()
            self.post_attention_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)
            self.mlp = MLP()

        def forward(self, h, cos, sin):
            h = h + self.self_attn(self.input_layernorm(h), cos, sin)
            return h + self.mlp(self.post_attention_layernorm(h))

    class Body(nn.Module):  # Hugging Face's LlamaModel layout: the plan's "model." names
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
            if cfg.embedding_norm:
                self.embed_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
            self.layers = nn.ModuleList(Block() for _ in range(cfg.n_layers))
            self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Body()
            if not cfg.tie_embeddings:
                self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
            inv_freq = cfg.rope_theta ** (-torch.arange(0, cfg.head_dim // 2, dtype=torch.float64) * 2.0 / cfg.head_dim)
            angles = torch.arange(cfg.seq_len, dtype=torch.float64)[:, None] * inv_freq[None, :]
            self.register_buffer("rope_cos", angles.cos().float(), persistent=False)
            self.register_buffer("rope_sin", angles.sin().float(), persistent=False)

        def forward(self, tokens, targets):
            m = self.model
            h = m.embed_tokens(tokens)
            if cfg.embedding_scale != 1.0:
                h = h * cfg.embedding_scale
            if cfg.embedding_norm:
                h = m.embed_norm(h)
            for layer in m.layers:
                h = layer(h, self.rope_cos, self.rope_sin)
            h = m.norm(h)
            head = m.embed_tokens.weight if cfg.tie_embeddings else self.lm_head.weight
            logits = F.linear(h, head)
            if cfg.logit_scale != 1.0:
                logits = logits * cfg.logit_scale
            if logits.element_size() < 4:
                logits = logits.float()
            return F.cross_entropy(logits.view(-1, cfg.vocab_size), targets.reshape(-1))

    model = Decoder()
    with torch.no_grad():
        for p, entry in plan_tensors(model, cfg):
            init_tensor(torch, p, entry["init"])
    return model


def plan_tensors(model, cfg: Config) -> list:
    """(parameter, its plan entry) for every parameter of the model; the
    model must have exactly the plan's tensors, with the plan's shapes."""
    plan = {entry["name"]: entry for entry in cfg.params}
    named = dict(model.named_parameters())
    missing, extra = sorted(plan.keys() - named.keys()), sorted(named.keys() - plan.keys())
    if missing or extra:
        raise RuntimeError(f"the model's tensors differ from gcompile's plan: missing {missing}, not in the plan {extra}")
    for name, p in named.items():
        if list(p.shape) != list(plan[name]["shape"]):
            raise RuntimeError(f"{name}: shape {list(p.shape)}, gcompile's plan {plan[name]['shape']}")
    return [(p, plan[name]) for name, p in named.items()]


def init_tensor(torch, p, init: dict):
    """Samples p as the plan's init entry says (docs/spec.md, "Distributions")."""
    kind = init["kind"]
    if kind == "constant":
        p.fill_(init["value"])
    elif kind == "normal":
        torch.nn.init.normal_(p, mean=0.0, std=init["std"])
    elif kind == "trunc_normal":
        cut = init["cutoff"] * init["std"]
        torch.nn.init.trunc_normal_(p, mean=0.0, std=init["std"], a=-cut, b=cut)
    elif kind == "uniform":
        bound = math.sqrt(3.0) * init["std"]
        torch.nn.init.uniform_(p, -bound, bound)
    else:
        raise RuntimeError(f"init kind {kind!r} in gcompile's plan is unknown to this baseline")


def optimizer_groups(cfg: Config, model) -> list:
    """AdamW param groups keyed by the plan's (lr multiplier, weight decay)."""
    groups: dict = {}
    for p, entry in plan_tensors(model, cfg):
        groups.setdefault((float(entry["lr_mult"]), float(entry["weight_decay"])), []).append(p)
    return [{"params": ps, "lr": cfg.lr * mult, "weight_decay": decay} for (mult, decay), ps in groups.items()]


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


def run_benchmark(args, cfg: Config) -> dict:
    import torch

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("torch_baseline: error: torch sees no CUDA device (torch.cuda.is_available() is False)")
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    bf16 = cfg.precision == "bf16"
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    use_sdpa = hasattr(torch.nn.functional, "scaled_dot_product_attention") and (major, minor) >= (2, 1)
    use_sdpa_gqa = use_sdpa and (major, minor) >= (2, 5)
    if cuda and not use_sdpa:
        raise SystemExit(f"torch_baseline: error: torch {torch.__version__} is too old (need >= 2.1 for SDPA with scale=)")

    result = {"impl": "torch", "spec": cfg.name, **device_info(torch)}
    ceiling = args.ceiling_tflops
    if cuda and ceiling is None and not args.no_ceiling:
        ceiling = measure_gemm_ceiling(torch, device)
    result["gemm_ceiling_tflops"] = ceiling

    t0 = time.perf_counter()
    if major >= 2:
        with device:  # allocate and initialize on the device
            model = build_model(cfg, torch, use_sdpa, use_sdpa_gqa)
    else:
        model = build_model(cfg, torch, use_sdpa, use_sdpa_gqa).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    if n_params != cfg.param_count:
        raise RuntimeError(f"model has {n_params} parameters, gcompile's plan {cfg.param_count}")
    fused = cuda and major >= 2
    opt = torch.optim.AdamW(optimizer_groups(cfg, model), lr=cfg.lr, betas=cfg.betas, eps=cfg.adam_eps,
                            **({"fused": True} if fused else {}))
    compiled = model
    if not args.no_compile:
        if not hasattr(torch, "compile"):
            raise SystemExit("torch_baseline: error: this torch has no torch.compile (need >= 2.0; or --no-compile)")
        kwargs = {"dynamic": False}
        if args.compile_mode != "default":
            kwargs["mode"] = args.compile_mode
        compiled = torch.compile(model, **kwargs)
    params = [p for p in model.parameters()]
    init_s = time.perf_counter() - t0

    # Random token batches, generated on the device up front and rotated.
    gen = torch.Generator(device=device).manual_seed(args.seed)
    n_batches = 4
    data = [torch.randint(0, cfg.vocab_size, (cfg.micro_batch, cfg.seq_len + 1), device=device, generator=gen)
            for _ in range(n_batches)]

    def autocast():
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16)

    def train_step(step: int):
        loss_sum = None
        for micro in range(cfg.grad_accum):
            batch = data[(step * cfg.grad_accum + micro) % n_batches]
            with autocast():
                loss = compiled(batch[:, :-1], batch[:, 1:]) / cfg.grad_accum
            loss.backward()
            loss_sum = loss.detach() if loss_sum is None else loss_sum + loss.detach()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip, **({"foreach": True} if cuda else {}))
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss_sum

    sdpa_ctx = None
    if cuda and args.sdpa_backend == "flash":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        sdpa_ctx = sdpa_kernel([SDPBackend.FLASH_ATTENTION])
        result["sdpa_backend"] = "flash (only backend allowed)"
    else:
        result["sdpa_backend"] = "auto" if use_sdpa else "explicit softmax (torch < 2.1)"

    losses, times_ms = [], []
    first_step_s = None
    if sdpa_ctx is not None:
        sdpa_ctx.__enter__()
    try:
        for step in range(args.warmup):
            ts = time.perf_counter()
            losses.append(train_step(step))
            if step == 0:
                if cuda:
                    torch.cuda.synchronize()
                first_step_s = time.perf_counter() - ts
            print(f"torch_baseline: warm-up step {step + 1}/{args.warmup}", file=sys.stderr)
        if cuda:
            torch.cuda.synchronize()
            peak_with_warmup = torch.cuda.max_memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        events = []
        for step in range(args.warmup, args.warmup + args.steps):
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
    finally:
        if sdpa_ctx is not None:
            sdpa_ctx.__exit__(None, None, None)

    loss_values = [float(x) for x in losses]
    if not all(math.isfinite(x) for x in loss_values):
        raise RuntimeError(f"non-finite loss: {loss_values}")
    step_ms = statistics.median(times_ms)
    tps = cfg.tokens_per_step / (step_ms * 1e-3)
    fpt = cfg.flops_per_token
    result.update({
        "precision": cfg.precision,
        "micro_batch": cfg.micro_batch,
        "grad_accum": cfg.grad_accum,
        "seq_len": cfg.seq_len,
        "tokens_per_step": cfg.tokens_per_step,
        "params_total": cfg.param_count,
        "matmul_params": cfg.matmul_params,
        "flops_per_token": fpt,
        "warmup_steps": args.warmup,
        "timed_steps": args.steps,
        "step_ms_median": step_ms,
        "step_ms_min": min(times_ms),
        "step_ms_max": max(times_ms),
        "tokens_per_s_median": tps,
        "mfu_989": tps * fpt / (H100_BF16_DENSE_TFLOPS * 1e12),
        "mfu_ceiling": (tps * fpt / (ceiling * 1e12)) if ceiling else None,
        "init_s": init_s,
        "first_step_s": first_step_s,
        "loss_first": loss_values[0] if loss_values else None,
        "loss_last": loss_values[-1] if loss_values else None,
        "ln_vocab": math.log(cfg.vocab_size),
        "compile": "off" if args.no_compile else args.compile_mode,
        "fused_adamw": fused,
    })
    if cuda:
        result["peak_device_bytes"] = torch.cuda.max_memory_allocated()
        result["peak_device_bytes_with_warmup"] = max(peak_with_warmup, result["peak_device_bytes"])
        result["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    return result


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="PyTorch baseline of a gcompile spec: times training steps on random "
                                "tokens and prints one JSON line.")
    p.add_argument("--spec-toml", help="a tree's spec.resolved.toml (or the tree directory, or a spec file)")
    p.add_argument("--gcompile", default=None, metavar="PATH",
                   help="the gcompile that resolves and plans the spec (default $GCOMPILE, else "
                   "build/compiler/gcompile in the repository)")
    p.add_argument("--plan-json", default=None, metavar="FILE",
                   help="a saved `gcompile explain SPEC --json` of the resolved --spec-toml: gcompile is not run")
    p.add_argument("--steps", type=int, default=40, help="timed optimizer steps (default 40)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first, compilation included (default 10)")
    p.add_argument("--micro-batch", "--batch-override", dest="micro_batch", type=int, default=None,
                   help="override train.micro_batch (the number of micro-batches per step is kept)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a smoke test, no timing claims")
    p.add_argument("--ceiling-tflops", type=float, default=None,
                   help="use this bf16 GEMM ceiling instead of measuring it")
    p.add_argument("--no-ceiling", action="store_true", help="do not measure the GEMM ceiling")
    p.add_argument("--ceiling-only", action="store_true", help="only measure the bf16 GEMM ceiling and print it")
    p.add_argument("--compile-mode", default="default",
                   help="torch.compile mode: default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs")
    p.add_argument("--no-compile", action="store_true", help="eager mode (debugging)")
    p.add_argument("--sdpa-backend", choices=["flash", "auto"], default="flash",
                   help="flash: allow only the flash backend (default); auto: let PyTorch choose")
    p.add_argument("--tf32", action="store_true", help="allow TF32 matmuls (affects fp32 specs only)")
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args(argv)
    if not args.ceiling_only and not args.spec_toml:
        p.error("--spec-toml is required (or --ceiling-only)")
    if args.steps < 1 or args.warmup < 1:
        p.error("--steps and --warmup must be >= 1 (the first step compiles)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.ceiling_only:
        try:
            import torch
        except ModuleNotFoundError:
            print("torch_baseline: error: PyTorch is not installed for this python3", file=sys.stderr)
            return 1
        if not torch.cuda.is_available():
            print("torch_baseline: error: torch sees no CUDA device", file=sys.stderr)
            return 1
        out = {"gemm_ceiling_tflops": measure_gemm_ceiling(torch, torch.device("cuda")), "gemm_n": GEMM_N,
               **device_info(torch)}
        print(json.dumps(out), flush=True)
        return 0
    try:
        cfg = read_config(args.spec_toml, args.micro_batch, args.gcompile, args.plan_json)
    except SpecError as e:
        print(f"torch_baseline: error: {args.spec_toml}: {e}", file=sys.stderr)
        return 1
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError:
        print("torch_baseline: error: PyTorch is not installed for this python3", file=sys.stderr)
        return 1
    print(f"torch_baseline: {cfg.name}: {cfg.param_count:,} parameters, micro-batch {cfg.micro_batch} x "
          f"{cfg.seq_len} tokens, {cfg.grad_accum} micro-batch(es) per step, {cfg.precision}", file=sys.stderr)
    try:
        result = run_benchmark(args, cfg)
    except RuntimeError as e:  # CUDA OOM, no flash kernel, compile failures surface as RuntimeError
        print(f"torch_baseline: error: {cfg.name}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
