#!/usr/bin/env python3
"""PyTorch baseline for gcompile's GPU benchmark (bench/gpu_vs_torch).

The same Llama-style decoder as a gcompile spec describes, written the way a
user would write it in PyTorch, trained on random tokens and timed:

  - architecture from a tree's spec.resolved.toml (or a spec file: its
    `extends` chain is merged here, derived defaults filled in): RMSNorm with
    the spec's eps (mean of squares in fp32), RoPE with rotate_half pairing
    (dimension i with i + head_dim/2), grouped-query attention, optional
    QK-norm (one gain per head dimension), optional sigmoid output gate
    (headwise: one scalar per head from x.W_g, W_g [H, d]; elementwise:
    [H*d_h, d]) multiplied into each head's attention output before W_O,
    SwiGLU MLP, tied or untied LM head, pre or sandwich norm, optional
    embedding norm, and the spec's embedding / attention / logit scales;
  - init normal(0, 0.02) for every matrix, ones for norm gains (init does
    not change the speed);
  - torch.compile(model) (the loss is inside the compiled forward),
    F.scaled_dot_product_attention(is_causal=True) restricted to the flash
    backend, bf16 autocast with fp32 parameters (train.precision = "bf16"),
    AdamW(fused=True) with the spec's betas, eps, weight decay (norm gains
    and optim.no_decay classes exempt) and per-class lr multipliers, global
    grad-norm clipping (optim.grad_clip, foreach), gradient accumulation
    global_batch / micro_batch, zero_grad(set_to_none=True);
  - timing with CUDA events around every optimizer step; the first --warmup
    steps (compilation, autotuning, AdamW state allocation) are left out and
    the median of the rest is reported. Peak memory is
    torch.cuda.max_memory_allocated() over the timed steps (the counter is
    reset after the warm-up), and also over the whole run.

FLOPs per token are counted exactly as gcompile's plan does
(compiler/plan/plan.cpp, count_flops; docs/architecture.md, "Counting
conventions"), the PaLM convention:

    FLOP/token = 6 * N_matmul + 12 * L * H * d_h * T

N_matmul = every weight matrix except norm gains and the embedding lookup,
plus the LM head matmul (V*d) also when the embedding is tied; L = n_layers,
H = n_heads, d_h = head_dim, T = train.seq_len; attention is counted without
a causal-mask discount. MFU = tokens/s * FLOP/token / peak, against the H100
SXM datasheet's dense bf16 989 TFLOP/s and against a measured bf16 GEMM
ceiling (median of timed 8192^3 torch.matmul on random data).

Output: one JSON line on stdout; progress and warnings on stderr.

  python3 bench/torch_baseline.py --spec-toml generated/NAME/spec.resolved.toml --steps 40 --warmup 10
  python3 bench/torch_baseline.py --ceiling-only

The pure-Python parts (spec reading, FLOP and parameter counts) import
without torch, so bench/gpu_vs_torch reuses them for its own rows.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field

try:
    import tomllib  # Python >= 3.11
except ModuleNotFoundError:  # pragma: no cover - older Pythons
    try:
        import tomli as tomllib  # type: ignore[no-redef]
    except ModuleNotFoundError:
        tomllib = None  # type: ignore[assignment]

H100_BF16_DENSE_TFLOPS = 989.0  # H100 SXM datasheet, dense bf16 (no sparsity)
GEMM_N = 8192


class SpecError(Exception):
    """A spec that this baseline cannot read or does not support."""


# --------------------------------------------------------------------------
# Spec reading (pure Python)
# --------------------------------------------------------------------------


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def load_spec_file(path: str, _seen: tuple = ()) -> dict:
    """Reads a TOML spec. A spec.resolved.toml is complete; a hand-written
    spec's `experiment.extends` chain is merged key by key (the child wins),
    as gcompile does. Presets are not merged (a warning says so)."""
    if tomllib is None:
        raise SpecError("reading TOML needs Python >= 3.11 (tomllib) or the tomli package")
    real = os.path.realpath(path)
    if real in _seen:
        raise SpecError("extends cycle: " + " -> ".join(_seen + (real,)))
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: not valid TOML: {e}") from None
    base_name = doc.get("experiment", {}).get("extends")
    if base_name:
        base_path = base_name if os.path.isabs(base_name) else os.path.join(os.path.dirname(path), base_name)
        base = load_spec_file(base_path, _seen + (real,))
        doc = _deep_merge(base, doc)
        doc["experiment"].pop("extends", None)
    return doc


_FUNCS = {"sqrt": math.sqrt, "min": min, "max": max}


def eval_formula(value, variables: dict) -> float:
    """Evaluates a gcompile formula (a number, or a string in the std-expression
    language: + - * / ^, parentheses, sqrt/min/max, named variables)."""
    if isinstance(value, bool):
        raise SpecError(f"expected a number or formula, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        raise SpecError(f"expected a number or formula, got {value!r}")
    try:
        tree = ast.parse(value.replace("^", "**"), mode="eval")
    except SyntaxError as e:
        raise SpecError(f"cannot parse formula {value!r}: {e.msg}") from None

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return float(node.value)
        if isinstance(node, ast.Name):
            if node.id not in variables:
                raise SpecError(f"formula {value!r}: unknown variable '{node.id}'")
            return float(variables[node.id])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            v = ev(node.operand)
            return v if isinstance(node.op, ast.UAdd) else -v
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            if isinstance(node.op, ast.Div):
                if b == 0:
                    raise SpecError(f"formula {value!r}: division by zero")
                return a / b
            return a**b
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS and not node.keywords:
            args = [ev(a) for a in node.args]
            if node.func.id == "sqrt":
                if len(args) != 1 or args[0] < 0:
                    raise SpecError(f"formula {value!r}: bad sqrt")
                return math.sqrt(args[0])
            if len(args) < 2:
                raise SpecError(f"formula {value!r}: {node.func.id} needs two or more arguments")
            return float(_FUNCS[node.func.id](args))
        raise SpecError(f"formula {value!r}: unsupported syntax")

    result = ev(tree)
    if not math.isfinite(result):
        raise SpecError(f"formula {value!r} is not finite")
    return result


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
    weight_decay: float
    no_decay: list
    grad_clip: float
    lr_mult: dict = field(default_factory=dict)  # class -> number or formula
    base_width: float = 0.0
    gamma: float = 0.5

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

    def variables(self) -> dict:
        return {
            "d_model": self.d_model,
            "n_layers": self.n_layers,
            "d_ff": self.d_ff,
            "head_dim": self.head_dim,
            "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads,
            "vocab": self.vocab_size,
            "width_mult": self.d_model / (self.base_width or self.d_model),
            "gamma": self.gamma,
        }


def config_from_spec(doc: dict, micro_batch_override: int | None = None) -> Config:
    exp, model, train = doc.get("experiment", {}), doc.get("model", {}), doc.get("train", {})
    optim, init = doc.get("optim", {}), doc.get("init", {})

    def need(table: dict, section: str, key: str):
        if key not in table:
            raise SpecError(f"the spec has no {section}.{key}")
        return table[key]

    if model.get("arch", "dense") != "dense":
        raise SpecError(f"model.arch = {model.get('arch')!r}: the baseline covers dense models only")
    if model.get("activation", "swiglu") != "swiglu":
        raise SpecError(f"model.activation = {model.get('activation')!r}: only swiglu is supported")
    if init.get("preset"):
        print(f"torch_baseline: warning: init.preset = {init['preset']!r} is not merged here; forward scales "
              "come from the spec's own keys (use the tree's spec.resolved.toml to get them)", file=sys.stderr)
    d_model = int(need(model, "model", "d_model"))
    n_heads = int(need(model, "model", "n_heads"))
    head_dim = int(model.get("head_dim", 0)) or (d_model // n_heads)
    if "head_dim" not in model and d_model % n_heads:
        raise SpecError("model.d_model is not divisible by model.n_heads and model.head_dim is unset")
    global_batch = int(need(train, "train", "global_batch"))
    micro_batch = int(train.get("micro_batch", global_batch))
    if micro_batch_override:
        # Keep the number of micro-batches per step; change their size.
        accum = max(1, global_batch // micro_batch)
        micro_batch = micro_batch_override
        global_batch = micro_batch * accum
    if global_batch % micro_batch:
        raise SpecError(f"train.global_batch ({global_batch}) is not a multiple of train.micro_batch ({micro_batch})")
    betas = optim.get("betas", [0.9, 0.95])
    cfg = Config(
        name=str(exp.get("name", "unnamed")),
        vocab_size=int(need(model, "model", "vocab_size")),
        d_model=d_model,
        n_layers=int(need(model, "model", "n_layers")),
        n_heads=n_heads,
        n_kv_heads=int(model.get("n_kv_heads", n_heads)),
        head_dim=head_dim,
        d_ff=int(need(model, "model", "d_ff")),
        norm_eps=float(model.get("norm_eps", 1e-5)),
        norm_placement=str(model.get("norm_placement", "pre")),
        embedding_norm=bool(model.get("embedding_norm", False)),
        qk_norm=bool(model.get("qk_norm", False)),
        tie_embeddings=bool(model.get("tie_embeddings", False)),
        gated_attention=str(model.get("gated_attention", "none")),
        rope_theta=float(model.get("rope_theta", 10000.0)),
        embedding_scale=1.0,
        attn_scale=1.0,
        logit_scale=1.0,
        seq_len=int(need(train, "train", "seq_len")),
        micro_batch=micro_batch,
        global_batch=global_batch,
        precision=str(train.get("precision", "bf16")),
        lr=float(need(optim, "optim", "lr")),
        betas=(float(betas[0]), float(betas[1])),
        adam_eps=float(optim.get("eps", 1e-8)),
        weight_decay=float(optim.get("weight_decay", 0.1)),
        no_decay=list(optim.get("no_decay", ["norm"])),
        grad_clip=float(optim.get("grad_clip", 1.0)),
        lr_mult=dict(optim.get("lr_mult", {})),
        base_width=float(init.get("base_width", 0.0) or 0.0),
        gamma=float(init.get("gamma", 0.5)),
    )
    if cfg.n_heads % cfg.n_kv_heads:
        raise SpecError(f"model.n_heads ({cfg.n_heads}) is not divisible by model.n_kv_heads ({cfg.n_kv_heads})")
    if cfg.head_dim % 2:
        raise SpecError(f"model.head_dim ({cfg.head_dim}) must be even for RoPE")
    if cfg.gated_attention not in ("none", "headwise", "elementwise"):
        raise SpecError(f"model.gated_attention = {cfg.gated_attention!r} is not none, headwise or elementwise")
    if cfg.norm_placement not in ("pre", "sandwich"):
        raise SpecError(f"model.norm_placement = {cfg.norm_placement!r} is not pre or sandwich")
    if cfg.precision not in ("bf16", "fp32"):
        raise SpecError(f"train.precision = {cfg.precision!r} is not bf16 or fp32")
    variables = cfg.variables()
    cfg.embedding_scale = eval_formula(model.get("embedding_scale", 1.0), variables)
    cfg.attn_scale = eval_formula(model.get("attn_scale", "1/sqrt(head_dim)"), variables)
    cfg.logit_scale = eval_formula(model.get("logit_scale", 1.0), variables)
    return cfg


def read_config(path: str, micro_batch_override: int | None = None) -> Config:
    """path: a spec.resolved.toml, a generated tree directory, or a spec file."""
    if os.path.isdir(path):
        path = os.path.join(path, "spec.resolved.toml")
    return config_from_spec(load_spec_file(path), micro_batch_override)


def param_shapes(cfg: Config) -> list:
    """(name, class, shape) of every tensor, in the layout of docs/spec.md
    ("Parameter classes and tensors"); matrices are [out, in]."""
    d, q, kv, f = cfg.d_model, cfg.q_dim, cfg.kv_dim, cfg.d_ff
    out = [("model.embed_tokens.weight", "embedding", (cfg.vocab_size, d))]
    if cfg.embedding_norm:
        out.append(("model.embed_norm.weight", "norm", (d,)))
    for i in range(cfg.n_layers):
        p = f"model.layers.{i}."
        out += [
            (p + "input_layernorm.weight", "norm", (d,)),
            (p + "self_attn.q_proj.weight", "attn_q", (q, d)),
            (p + "self_attn.k_proj.weight", "attn_k", (kv, d)),
            (p + "self_attn.v_proj.weight", "attn_v", (kv, d)),
        ]
        if cfg.qk_norm:
            out += [(p + "self_attn.q_norm.weight", "norm", (cfg.head_dim,)),
                    (p + "self_attn.k_norm.weight", "norm", (cfg.head_dim,))]
        if cfg.gate_dim:
            out.append((p + "self_attn.gate_proj.weight", "attn_gate", (cfg.gate_dim, d)))
        out.append((p + "self_attn.o_proj.weight", "attn_o", (d, q)))
        if cfg.norm_placement == "sandwich":
            out += [(p + "self_attn.out_norm.weight", "norm", (d,)), (p + "mlp.out_norm.weight", "norm", (d,))]
        out += [
            (p + "post_attention_layernorm.weight", "norm", (d,)),
            (p + "mlp.gate_proj.weight", "mlp_gate", (f, d)),
            (p + "mlp.up_proj.weight", "mlp_up", (f, d)),
            (p + "mlp.down_proj.weight", "mlp_down", (d, f)),
        ]
    out.append(("model.norm.weight", "norm", (d,)))
    if not cfg.tie_embeddings:
        out.append(("lm_head.weight", "lm_head", (cfg.vocab_size, d)))
    return out


def _numel(shape) -> int:
    return math.prod(shape)


def param_count(cfg: Config) -> int:
    return sum(_numel(s) for _, _, s in param_shapes(cfg))


def matmul_params(cfg: Config) -> int:
    """N_matmul of gcompile's plan: every tensor except norm gains and the
    embedding lookup, plus V*d for the LM head when the embedding is tied."""
    n = sum(_numel(s) for _, cls, s in param_shapes(cfg) if cls not in ("norm", "embedding"))
    if cfg.tie_embeddings:
        n += cfg.vocab_size * cfg.d_model
    return n


def flops_per_token(cfg: Config) -> float:
    """Training FLOPs per token (forward + backward), as gcompile's plan:
    6 * N_matmul + 12 * n_layers * n_heads * head_dim * seq_len."""
    return 6.0 * matmul_params(cfg) + 12.0 * cfg.n_layers * cfg.n_heads * cfg.head_dim * cfg.seq_len


def median(values):
    values = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(values) if values else None


# --------------------------------------------------------------------------
# The model and the timed training loop (need torch)
# --------------------------------------------------------------------------


def build_model(cfg: Config, torch, use_sdpa: bool, use_sdpa_gqa: bool):
    """use_sdpa: F.scaled_dot_product_attention with scale= (torch >= 2.1);
    use_sdpa_gqa: its enable_gqa= (torch >= 2.5), else K/V are repeated."""
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
            return self.o_proj(o.reshape(B, T, H * hd))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
            self.up_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
            self.down_proj = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)
            self.self_attn = Attention()
            self.post_attention_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)
            self.mlp = MLP()
            if cfg.norm_placement == "sandwich":
                self.attn_out_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
                self.mlp_out_norm = RMSNorm(cfg.d_model, cfg.norm_eps)

        def forward(self, h, cos, sin):
            a = self.self_attn(self.input_layernorm(h), cos, sin)
            if cfg.norm_placement == "sandwich":
                a = self.attn_out_norm(a)
            h = h + a
            m = self.mlp(self.post_attention_layernorm(h))
            if cfg.norm_placement == "sandwich":
                m = self.mlp_out_norm(m)
            return h + m

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
            if cfg.embedding_norm:
                self.embed_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
            self.layers = nn.ModuleList(Block() for _ in range(cfg.n_layers))
            self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
            if not cfg.tie_embeddings:
                self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
            inv_freq = cfg.rope_theta ** (-torch.arange(0, cfg.head_dim // 2, dtype=torch.float64) * 2.0 / cfg.head_dim)
            angles = torch.arange(cfg.seq_len, dtype=torch.float64)[:, None] * inv_freq[None, :]
            self.register_buffer("rope_cos", angles.cos().float(), persistent=False)
            self.register_buffer("rope_sin", angles.sin().float(), persistent=False)
            for p in self.parameters():
                if p.dim() >= 2:
                    nn.init.normal_(p, mean=0.0, std=0.02)

        def forward(self, tokens, targets):
            h = self.embed_tokens(tokens)
            if cfg.embedding_scale != 1.0:
                h = h * cfg.embedding_scale
            if cfg.embedding_norm:
                h = self.embed_norm(h)
            for layer in self.layers:
                h = layer(h, self.rope_cos, self.rope_sin)
            h = self.norm(h)
            head = self.embed_tokens.weight if cfg.tie_embeddings else self.lm_head.weight
            logits = F.linear(h, head)
            if cfg.logit_scale != 1.0:
                logits = logits * cfg.logit_scale
            if logits.element_size() < 4:
                logits = logits.float()
            return F.cross_entropy(logits.view(-1, cfg.vocab_size), targets.reshape(-1))

    return Decoder()


def param_class(name: str) -> str:
    table = [
        ("embed_tokens", "embedding"), ("lm_head", "lm_head"), ("norm", "norm"),
        ("self_attn.q_proj", "attn_q"), ("self_attn.k_proj", "attn_k"), ("self_attn.v_proj", "attn_v"),
        ("self_attn.gate_proj", "attn_gate"), ("self_attn.o_proj", "attn_o"),
        ("mlp.gate_proj", "mlp_gate"), ("mlp.up_proj", "mlp_up"), ("mlp.down_proj", "mlp_down"),
    ]
    for needle, cls in table:
        if needle in name:
            return cls
    return "other"


def optimizer_groups(cfg: Config, model) -> list:
    """Param groups keyed by (lr multiplier, weight decay), as the spec says."""
    groups: dict = {}
    for name, p in model.named_parameters():
        cls = param_class(name)
        decay = 0.0 if (cls in cfg.no_decay or p.dim() < 2) else cfg.weight_decay
        mult = 1.0
        if cls in cfg.lr_mult:
            shape = tuple(p.shape)
            variables = cfg.variables()
            variables.update({"fan_in": shape[-1], "fan_out": shape[0], "layer": 0})
            if ".layers." in name:
                variables["layer"] = int(name.split(".layers.")[1].split(".")[0])
            try:
                mult = eval_formula(cfg.lr_mult[cls], variables)
            except SpecError as e:
                print(f"torch_baseline: warning: optim.lr_mult.{cls}: {e}; using 1", file=sys.stderr)
        groups.setdefault((mult, decay), []).append(p)
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
    if n_params != param_count(cfg):
        raise RuntimeError(f"model has {n_params} parameters, the spec's table {param_count(cfg)}")
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
    fpt = flops_per_token(cfg)
    result.update({
        "precision": cfg.precision,
        "micro_batch": cfg.micro_batch,
        "grad_accum": cfg.grad_accum,
        "seq_len": cfg.seq_len,
        "tokens_per_step": cfg.tokens_per_step,
        "params_total": param_count(cfg),
        "matmul_params": matmul_params(cfg),
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
        cfg = read_config(args.spec_toml, args.micro_batch)
    except SpecError as e:
        print(f"torch_baseline: error: {args.spec_toml}: {e}", file=sys.stderr)
        return 1
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError:
        print("torch_baseline: error: PyTorch is not installed for this python3", file=sys.stderr)
        return 1
    print(f"torch_baseline: {cfg.name}: {param_count(cfg):,} parameters, micro-batch {cfg.micro_batch} x "
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
