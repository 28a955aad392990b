"""The gcompile decoder in PyTorch, written once from the spec language's math (docs/spec.md), not
from the C++ model. Three users share it:
  - `gcompile export` writes this file beside modeling_gcompile.py, which wraps it for transformers;
  - the bench trains it (bench/torch_model.py: SDPA attention, bench/torch_moe.py's torch._grouped_mm
    experts, RoPE tables built once);
  - the tests run it as their oracle (tests/reference/reference_model.py: float64 and float32, plain
    attention, one expert at a time, against the C++ model's logits and gradients).
torch only (no transformers; torch 1.13 is enough for everything but `Execution(sdpa=True)`).

The model:
  e   = embedding_scale * E[tokens];  e = RMSNorm(e) if embedding_norm
  per layer, pre-norm (sandwich adds RMSNorm on each sublayer output):
    a = RMSNorm(h);  q, k, v = a Wq^T, a Wk^T, a Wv^T  (split into heads)
    q, k = RMSNorm over head_dim (shared gain) if qk_norm
    RoPE, rotate_half pairing (channel i with i + hd/2), base rope_theta, angles in float64
    o = softmax(attn_scale * q k^T + causal mask) v, query head h reads kv head h // (H/KV)
    o = sigmoid(a Wg^T) * o   (headwise: one gate per head; elementwise: per channel)
    h = h + [RMSNorm](o Wo^T)
    b = RMSNorm(h);  h = h + [RMSNorm](MLP(b))
    dense layer: MLP(b) = (silu(b Wgate^T) * (b Wup^T)) Wdown^T
  logits = logit_scale * RMSNorm(h) W_lm^T   (W_lm = E when tied);  loss = mean CE + balancing losses
  RMSNorm(x) = g * x / sqrt(mean(x^2) + eps), in float32 at least

Mixture of experts (MoeShape): in an MoE layer, per token t (the N rows of b over batch and time):
    r_t = b_t Wrouter^T (E logits);  s_t = softmax(r_t) or sigmoid(r_t) (router_scoring)
    e_1..e_k = the k largest s_t[e] + bias[e] (ties to the lower index; bias: aux_free's selection
      bias, a buffer that chooses experts and never weights them)
    w_tj = s_t[e_j], divided by sum_j s_t[e_j] if norm_topk_prob
    MLP(b_t) = sum_j w_tj * Expert_{e_j}(b_t) + Shared(b_t)
    Expert_e(x) = (silu(x G_e^T) * (x U_e^T)) Dn_e^T; Shared: one SwiGLU MLP of width shared_d_ff
  Gradients flow through w (so into the router) and the experts, not through the selection.
  load_balance = "aux_loss" adds, per MoE layer, coef * E * sum_e f_e * P_e with
    f_e = (assignments to e) / (N k) (a constant), P_e = mean_t p_t[e],
    p_t = s_t (softmax) or s_t / sum_e s_t[e] (sigmoid);
  seq_aux_loss > 0 adds the same form over each sequence's T tokens, averaged over the B sequences
    (DeepSeek-V3 eqs. 17-20): seq_aux_loss * mean_b [E * sum_e f_be * P_be];
  z_loss > 0 adds the router z-loss (ST-MoE eq. 5): z_loss * mean_t logsumexp(r_t)^2.
  capacity > 0: each expert keeps, per sequence, its first `capacity` assignments in (token, rank)
    order; the others add nothing (no renormalization); the balancing losses count every selection.

Tensors are named as gcompile's plan and checkpoints name them (Hugging Face's Llama layout). The
functions reach them through an accessor: Named (a mapping from names to tensors: the oracle's probe)
or Modules (a module's submodules, each called, so that whatever wraps them sees every use:
accelerate's offload and device maps, adapters such as LoRA, quantized linears; the bench, the export).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn


@dataclasses.dataclass(frozen=True)
class MoeShape:
    layers: frozenset  # the MoE layers' indices (moe_layer_indices)
    n_experts: int
    top_k: int
    expert_d_ff: int
    shared_d_ff: int = 0  # the shared experts' total width (n_shared_experts x shared_d_ff); 0: none
    router_scoring: str = "softmax"  # softmax | sigmoid
    norm_topk_prob: bool = False
    selection_bias: bool = False  # aux_free balancing's buffer
    load_balance: str = "none"  # none | aux_loss | aux_free
    load_balance_coef: float = 0.0
    seq_aux_loss: float = 0.0
    z_loss: float = 0.0
    capacity: int = 0  # assignments kept per expert and sequence; 0: dropless

    def __post_init__(self):
        if self.router_scoring not in ("softmax", "sigmoid"):
            raise ValueError(f"router_scoring must be softmax or sigmoid, not {self.router_scoring!r}")
        if self.load_balance not in ("none", "aux_loss", "aux_free"):
            raise ValueError(f"load_balance must be none, aux_loss or aux_free, not {self.load_balance!r}")
        if not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"need 1 <= top_k <= n_experts, have top_k {self.top_k}, {self.n_experts} experts")


@dataclasses.dataclass(frozen=True)
class DecoderShape:
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int  # the dense layers' MLP width
    norm_eps: float
    norm_placement: str = "pre"  # pre | sandwich
    embedding_norm: bool = False
    qk_norm: bool = False
    tie_embeddings: bool = False
    gated_attention: str = "none"  # none | headwise | elementwise
    rope_theta: float = 10000.0
    embedding_scale: float = 1.0
    attn_scale: float = 0.0  # 0: head_dim^-1/2
    logit_scale: float = 1.0
    moe: Optional[MoeShape] = None

    def __post_init__(self):
        if self.norm_placement not in ("pre", "sandwich"):
            raise ValueError(f"norm_placement must be pre or sandwich, not {self.norm_placement!r}")
        if self.gated_attention not in ("none", "headwise", "elementwise"):
            raise ValueError(f"gated_attention must be none, headwise or elementwise, not {self.gated_attention!r}")
        if self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim ({self.head_dim}) must be even (RoPE pairs channels)")
        if self.attn_scale == 0.0:
            object.__setattr__(self, "attn_scale", self.head_dim**-0.5)

    @property
    def sandwich(self) -> bool:
        return self.norm_placement == "sandwich"

    @property
    def gate_width(self) -> int:
        return {"none": 0, "headwise": self.n_heads, "elementwise": self.n_heads * self.head_dim}[self.gated_attention]

    def is_moe(self, layer: int) -> bool:
        return self.moe is not None and layer in self.moe.layers


def moe_layer_indices(n_layers: int, n_dense_layers: int, layer_interval: int) -> frozenset:
    """gcompile's rule: layer l is MoE iff l >= n_dense_layers and (l - n_dense_layers) % interval == 0."""
    if layer_interval < 1:
        raise ValueError(f"moe.layer_interval must be >= 1, not {layer_interval}")
    return frozenset(l for l in range(n_dense_layers, n_layers) if (l - n_dense_layers) % layer_interval == 0)


def parameter_shapes(shape: DecoderShape) -> dict:
    """name -> shape of every parameter, in the plan's names (buffers such as the selection bias
    excluded): the modules' own, built on the meta device (no memory; torch 1.13, which cannot,
    builds them on the CPU: the oracle's models are small)."""
    try:
        with torch.device("meta"):
            model = Decoder(shape)
    except (AttributeError, TypeError):  # torch < 2.0: a device is no context manager
        model = Decoder(shape)
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


# --------------------------------------------------------------------------
# The math, over a mapping W of named tensors
# --------------------------------------------------------------------------


def wide(x):
    """x in float32 at least: norms, softmax, router scores and logits of a bf16 model."""
    return x.float() if x.element_size() < 4 else x


def rms_norm(x, gain, eps: float):
    xf = wide(x)
    return (gain * (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps))).to(x.dtype)


def rope_tables(positions, head_dim: int, theta: float, dtype):
    """cos, sin [..., T, head_dim] for integer positions [..., T]: angles p * theta^(-2i/hd) in float64,
    channel i and i + hd/2 sharing one, then rounded to dtype."""
    i = torch.arange(head_dim // 2, dtype=torch.float64, device=positions.device)
    inv_freq = theta ** (-2.0 * i / head_dim)
    angles = positions.to(torch.float64)[..., None] * inv_freq
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x, cos, sin):
    """x [B, T, heads, hd]; cos, sin [T, hd] or [B, T, hd]."""
    cos, sin = cos[..., None, :].to(x.dtype), sin[..., None, :].to(x.dtype)
    return x * cos + rotate_half(x) * sin


def swiglu(x, gate_w, up_w, down_w):
    return F.linear(F.silu(F.linear(x, gate_w)) * F.linear(x, up_w), down_w)


def padded_causal_mask(key_mask, T: int):
    """[B, 1, T, T] allowed (query, key) pairs: causal, no query attends to a padded key (key_mask 0),
    and every position sees itself, so a padded row stays finite (and is ignored)."""
    eye = torch.eye(T, dtype=torch.bool, device=key_mask.device)
    causal = torch.ones(T, T, dtype=torch.bool, device=key_mask.device).tril()
    return causal[None, None] & (key_mask.bool()[:, None, None, :] | eye[None, None])


class Named:
    """The tensors as a mapping W from the plan's names; prefix: the names' common start (a layer's)."""

    def __init__(self, W, prefix: str = ""):
        self.W, self.prefix = W, prefix

    def weight(self, name: str):
        return self.W[self.prefix + name + ".weight"]

    def linear(self, name: str, x):
        return F.linear(x, self.weight(name))

    def norm(self, name: str, x, eps: float):
        return rms_norm(x, self.weight(name), eps)

    def embedding(self, name: str, tokens):
        return F.embedding(tokens, self.weight(name))

    def router(self, x):
        """(router logits, the aux_free selection bias or None)."""
        return self.linear("mlp.router", x), self.W.get(self.prefix + "mlp.router.selection_bias")

    def experts(self):
        """The routed experts' stacked weights: gate, up [E, F, D], down [E, D, F]."""
        return tuple(self.weight("mlp.experts." + n) for n in ("gate_proj", "up_proj", "down_proj"))


class Modules:
    """The same through a module's submodules (names relative to it), each called."""

    def __init__(self, module: nn.Module):
        self.module = module

    def sub(self, name: str) -> nn.Module:
        m = self.module
        for part in name.split("."):
            m = getattr(m, part)
        return m

    def linear(self, name: str, x):
        return self.sub(name)(x)

    def norm(self, name: str, x, eps: float):
        return self.sub(name)(x)  # an RMSNorm of the same eps

    def embedding(self, name: str, tokens):
        return self.sub(name)(tokens)

    def router(self, x):
        return self.sub("mlp.router")(x)

    def experts(self):
        return self.sub("mlp.experts")()


def swiglu_of(P, prefix: str, x):
    """The SwiGLU MLP whose projections are prefix + gate_proj, up_proj, down_proj."""
    return P.linear(prefix + "down_proj", F.silu(P.linear(prefix + "gate_proj", x)) * P.linear(prefix + "up_proj", x))


def loop_experts(x, sel, w, keep, gate, up, down):
    """The routed experts one at a time: y_t = sum over t's kept slots j of w_tj Expert_{sel_tj}(x_t)."""
    y = torch.zeros_like(x)
    chosen = sel if keep is None else sel.masked_fill(~keep, -1)
    for e in range(gate.shape[0]):
        rows, slots = torch.nonzero(chosen == e, as_tuple=True)
        if rows.numel():
            y = y.index_add(0, rows, swiglu(x[rows], gate[e], up[e], down[e]) * w[rows, slots, None].to(x.dtype))
    return y


@dataclasses.dataclass(frozen=True)
class Execution:
    """How the math is computed; any choice gives the same model. The defaults are the oracle's
    (plain softmax attention, one expert at a time, ties to the lower index)."""

    sdpa: bool = False  # F.scaled_dot_product_attention (torch >= 2.1) when the mask is the causal one
    gqa_native: bool = True  # SDPA's enable_gqa= (torch >= 2.5), else K/V are repeated
    experts: Callable = loop_experts  # (x, sel, w, keep, gate, up, down) -> y
    exact_ties: bool = True  # a stable sort of the scores; False: torch.topk (ties in any order)
    on_route: Optional[Callable] = None  # called (layer, scores + selection bias) when a layer routes


PLAIN = Execution()


def attention(shape: DecoderShape, P, a, cos, sin, mask, run: Execution):
    """The attention sublayer's output (before the residual add) for a = RMSNorm(h) [B, T, D]."""
    B, T, _ = a.shape
    H, KV, hd = shape.n_heads, shape.n_kv_heads, shape.head_dim
    q = P.linear("self_attn.q_proj", a).view(B, T, H, hd)
    k = P.linear("self_attn.k_proj", a).view(B, T, KV, hd)
    v = P.linear("self_attn.v_proj", a).view(B, T, KV, hd)
    if shape.qk_norm:
        q = P.norm("self_attn.q_norm", q, shape.norm_eps)
        k = P.norm("self_attn.k_norm", k, shape.norm_eps)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, T, hd]
    group = H // KV  # query head h reads kv head h // group
    if run.sdpa and mask is None:
        if group > 1 and not run.gqa_native:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        kwargs = {"enable_gqa": True} if (group > 1 and run.gqa_native) else {}
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=shape.attn_scale, **kwargs)
    else:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = wide(q @ k.transpose(-1, -2)) * shape.attn_scale
        allowed = mask if mask is not None else torch.ones(T, T, dtype=torch.bool, device=a.device).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
        o = torch.softmax(scores, dim=-1).to(v.dtype) @ v
    o = o.transpose(1, 2)  # [B, T, H, hd]
    if shape.gated_attention == "headwise":
        o = torch.sigmoid(P.linear("self_attn.gate_proj", a))[..., None] * o
    elif shape.gated_attention == "elementwise":
        o = torch.sigmoid(P.linear("self_attn.gate_proj", a)).view(B, T, H, hd) * o
    o = P.linear("self_attn.o_proj", o.reshape(B, T, H * hd))
    return P.norm("self_attn.out_norm", o, shape.norm_eps) if shape.sandwich else o


def choose_experts(choice, k: int, exact_ties: bool):
    """[N, k] indices of the k largest choice scores per row; exact_ties: ties to the lower index."""
    if exact_ties:
        return torch.sort(-choice, dim=-1, stable=True).indices[:, :k]
    return choice.topk(k, dim=-1).indices


def capacity_keep(sel, B: int, T: int, n_experts: int, capacity: int):
    """[N, k] bool: the assignment is among its expert's first `capacity` in its sequence, in
    (token, rank) order."""
    k = sel.shape[1]
    one_hot = F.one_hot(sel.reshape(B, T * k), n_experts)  # [B, T k, E]
    rank = (one_hot.cumsum(dim=1) * one_hot).sum(dim=-1)  # 1-based rank within its expert and sequence
    return (rank <= capacity).reshape(B * T, k)


def balancing_loss(m: MoeShape, logits, scores, sel, B: int, T: int):
    """The layer's balancing losses (aux_loss, seq_aux_loss, z_loss); None when it has none."""
    N, E, k = B * T, m.n_experts, m.top_k
    prob = scores if m.router_scoring == "softmax" else scores / scores.sum(dim=-1, keepdim=True)
    terms = []
    if m.load_balance == "aux_loss":
        flat = sel.reshape(-1)
        counts = torch.zeros(E, dtype=scores.dtype, device=scores.device).scatter_add_(
            0, flat, torch.ones(flat.shape, dtype=scores.dtype, device=scores.device))
        terms.append(m.load_balance_coef * E * (counts / (N * k) * prob.mean(dim=0)).sum())
    if m.seq_aux_loss > 0:
        f = F.one_hot(sel.reshape(B, T * k), E).to(scores.dtype).sum(dim=1) / (T * k)  # [B, E], a constant
        P = prob.reshape(B, T, E).mean(dim=1)
        terms.append(m.seq_aux_loss * E * (f * P).sum(dim=-1).mean())
    if m.z_loss > 0:
        terms.append(m.z_loss * torch.logsumexp(logits, dim=-1).pow(2).mean())
    return sum(terms[1:], terms[0]) if terms else None


def moe(shape: DecoderShape, P, b, layer: int, routes, run: Execution):
    """An MoE layer's MLP output for b [B, T, D] and its balancing loss (or None).

    routes: None, or layer -> [N, k] expert indices: a layer found there reuses them, one missing
    is routed from its scores and recorded (the oracle routes its float32 run as its float64 run)."""
    m = shape.moe
    B, T, D = b.shape
    x = b.reshape(B * T, D)
    r, bias = P.router(x)
    r = wide(r)  # [N, E]
    s = torch.softmax(r, dim=-1) if m.router_scoring == "softmax" else torch.sigmoid(r)
    if routes is not None and layer in routes:
        sel = routes[layer]
    else:
        choice = s.detach() if bias is None else s.detach() + bias.to(s.dtype)
        if run.on_route is not None:
            run.on_route(layer, choice)
        sel = choose_experts(choice, m.top_k, run.exact_ties)
        if routes is not None:
            routes[layer] = sel
    w = torch.gather(s, 1, sel)  # [N, k], differentiable through s
    if m.norm_topk_prob:
        w = w / w.sum(dim=-1, keepdim=True)
    keep = capacity_keep(sel, B, T, m.n_experts, m.capacity) if m.capacity > 0 else None
    y = run.experts(x, sel, w, keep, *P.experts())
    if m.shared_d_ff:
        y = y + swiglu_of(P, "mlp.shared_experts.", x)
    return y.reshape(B, T, D), balancing_loss(m, r, s, sel, B, T)


def decoder_layer(shape: DecoderShape, P, layer: int, h, cos, sin, mask=None, routes=None, run: Execution = PLAIN):
    """One layer through accessor P (Named or Modules): (h after it, its balancing loss or None)."""
    eps = shape.norm_eps
    h = h + attention(shape, P, P.norm("input_layernorm", h, eps), cos, sin, mask, run)
    b = P.norm("post_attention_layernorm", h, eps)
    aux = None
    if shape.is_moe(layer):
        mlp, aux = moe(shape, P, b, layer, routes, run)
    else:
        mlp = swiglu_of(P, "mlp.", b)
    if shape.sandwich:
        mlp = P.norm("mlp.out_norm", mlp, eps)
    return h + mlp, aux


def embed(shape: DecoderShape, P, tokens):
    """The embedding rows of tokens (P: the body's accessor: embed_tokens, embed_norm)."""
    h = P.embedding("embed_tokens", tokens)
    if shape.embedding_scale != 1.0:
        h = h * shape.embedding_scale
    return P.norm("embed_norm", h, shape.norm_eps) if shape.embedding_norm else h


def scaled_logits(shape: DecoderShape, z):
    """logit_scale * z for the LM head's output z = h W_lm^T, in float32 at least."""
    return wide(z * shape.logit_scale if shape.logit_scale != 1.0 else z)


def add_aux(total, aux):
    return aux if total is None else (total if aux is None else total + aux)


def training_loss(z, targets, aux):
    """Mean cross-entropy over every position, plus the balancing losses."""
    loss = F.cross_entropy(z.reshape(-1, z.shape[-1]), targets.reshape(-1))
    return loss if aux is None else loss + aux


def body(shape: DecoderShape, P, layers, tokens, cos_sin, mask=None, routes=None, run: Execution = PLAIN):
    """Embedding, layers, final RMSNorm: (last hidden state [B, T, D], summed balancing loss or None).
    P: the body's accessor (embed_tokens, embed_norm, norm); layers: callables
    (h, cos, sin, mask, routes, run) -> (h, aux), DecoderLayer modules or the functions over W."""
    h = embed(shape, P, tokens)
    aux = None
    for layer in layers:
        h, layer_aux = layer(h, *cos_sin, mask, routes, run)
        aux = add_aux(aux, layer_aux)
    return P.norm("norm", h, shape.norm_eps), aux


def forward(shape: DecoderShape, W, tokens, routes=None, run: Execution = PLAIN, cos_sin=None):
    """The model over W (name -> tensor): (logits [B, T, V], summed balancing loss or None);
    positions 0..T-1; cos_sin: RoPE tables [T, hd] computed once by the caller, else here."""
    B, T = tokens.shape
    table = W["model.embed_tokens.weight"]
    if cos_sin is None:
        cos_sin = rope_tables(torch.arange(T, device=tokens.device), shape.head_dim, shape.rope_theta, table.dtype)
    layers = [functools.partial(decoder_layer, shape, Named(W, f"model.layers.{l}."), l) for l in range(shape.n_layers)]
    h, aux = body(shape, Named(W, "model."), layers, tokens, cos_sin, routes=routes, run=run)
    return scaled_logits(shape, F.linear(h, table if shape.tie_embeddings else W["lm_head.weight"])), aux


# --------------------------------------------------------------------------
# The same model as modules: the parameters under the plan's names
# --------------------------------------------------------------------------


def tensors_of(module: nn.Module) -> dict:
    """name -> tensor of a module's parameters and buffers (a mapping for Named)."""
    return {**dict(module.named_parameters()), **dict(module.named_buffers())}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, width: int):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, width, bias=False)
        self.up_proj = nn.Linear(d_model, width, bias=False)
        self.down_proj = nn.Linear(width, d_model, bias=False)


class StackedWeight(nn.Module):  # E matrices [out, in] in one tensor: the plan's "...experts.X.weight"
    def __init__(self, n: int, out_features: int, in_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, out_features, in_features))

    def forward(self):  # called to be read, so that hooks on the module see the read
        return self.weight


class Experts(nn.Module):
    def __init__(self, n: int, d_model: int, width: int):
        super().__init__()
        self.gate_proj = StackedWeight(n, width, d_model)
        self.up_proj = StackedWeight(n, width, d_model)
        self.down_proj = StackedWeight(n, d_model, width)

    def forward(self):
        return self.gate_proj(), self.up_proj(), self.down_proj()


class Router(nn.Module):
    """The router's linear map, and aux_free's selection bias as its buffer (saved, never trained).
    Not an nn.Linear: tools that replace or wrap every linear layer (quantizers, adapters on
    "all-linear") leave it alone, as routers usually are."""

    def __init__(self, d_model: int, n_experts: int, selection_bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_experts, d_model))
        nn.init.normal_(self.weight, std=d_model**-0.5)
        if selection_bias:
            self.register_buffer("selection_bias", torch.zeros(n_experts))

    def forward(self, x):
        return F.linear(x, self.weight), getattr(self, "selection_bias", None)


class MoE(nn.Module):
    def __init__(self, shape: DecoderShape):
        super().__init__()
        m = shape.moe
        self.router = Router(shape.d_model, m.n_experts, m.selection_bias)
        self.experts = Experts(m.n_experts, shape.d_model, m.expert_d_ff)
        if m.shared_d_ff:
            self.shared_experts = SwiGLU(shape.d_model, m.shared_d_ff)


class Attention(nn.Module):
    def __init__(self, shape: DecoderShape):
        super().__init__()
        D, q_dim, kv_dim = shape.d_model, shape.n_heads * shape.head_dim, shape.n_kv_heads * shape.head_dim
        self.q_proj = nn.Linear(D, q_dim, bias=False)
        self.k_proj = nn.Linear(D, kv_dim, bias=False)
        self.v_proj = nn.Linear(D, kv_dim, bias=False)
        self.o_proj = nn.Linear(q_dim, D, bias=False)
        if shape.qk_norm:
            self.q_norm = RMSNorm(shape.head_dim, shape.norm_eps)
            self.k_norm = RMSNorm(shape.head_dim, shape.norm_eps)
        if shape.gate_width:
            self.gate_proj = nn.Linear(D, shape.gate_width, bias=False)


class DecoderLayer(nn.Module):
    def __init__(self, shape: DecoderShape, index: int):
        super().__init__()
        self.shape, self.index = shape, index
        self.input_layernorm = RMSNorm(shape.d_model, shape.norm_eps)
        self.self_attn = Attention(shape)
        self.post_attention_layernorm = RMSNorm(shape.d_model, shape.norm_eps)
        self.mlp = MoE(shape) if shape.is_moe(index) else SwiGLU(shape.d_model, shape.d_ff)
        if shape.sandwich:
            self.self_attn.out_norm = RMSNorm(shape.d_model, shape.norm_eps)
            self.mlp.out_norm = RMSNorm(shape.d_model, shape.norm_eps)

    def forward(self, h, cos, sin, mask=None, routes=None, run: Execution = PLAIN):
        return decoder_layer(self.shape, Modules(self), self.index, h, cos, sin, mask, routes, run)


def add_body(module: nn.Module, shape: DecoderShape):
    """Gives module the decoder's body (Hugging Face's LlamaModel layout: embed_tokens, embed_norm,
    layers, norm), so its parameters carry the plan's names under "model."."""
    module.embed_tokens = nn.Embedding(shape.vocab_size, shape.d_model)
    if shape.embedding_norm:
        module.embed_norm = RMSNorm(shape.d_model, shape.norm_eps)
    module.layers = nn.ModuleList(DecoderLayer(shape, i) for i in range(shape.n_layers))
    module.norm = RMSNorm(shape.d_model, shape.norm_eps)


def body_forward(module: nn.Module, shape: DecoderShape, tokens, cos_sin, mask=None, routes=None,
                 run: Execution = PLAIN):
    """A module given add_body: body() over its submodules, each layer a DecoderLayer call."""
    return body(shape, Modules(module), module.layers, tokens, cos_sin, mask, routes, run)


class Body(nn.Module):
    def __init__(self, shape: DecoderShape):
        super().__init__()
        add_body(self, shape)


class Decoder(nn.Module):
    """The whole model for training (the bench's): forward(tokens, targets) -> loss. rope_cache > 0
    builds the RoPE tables of positions 0..rope_cache-1 once (float32 buffers), else each forward
    builds them. A tied head reads the embedding's weight outside its module, so this model is not
    for accelerate's offload (the export's wrapper is: it calls lm_head)."""

    def __init__(self, shape: DecoderShape, run: Execution = PLAIN, rope_cache: int = 0):
        super().__init__()
        self.shape, self.run = shape, run
        self.model = Body(shape)
        if not shape.tie_embeddings:
            self.lm_head = nn.Linear(shape.d_model, shape.vocab_size, bias=False)
        if rope_cache > 0:
            cos, sin = rope_tables(torch.arange(rope_cache), shape.head_dim, shape.rope_theta, torch.float32)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

    def rope(self, T: int, device):
        if hasattr(self, "rope_cos") and T <= self.rope_cos.shape[0]:
            return self.rope_cos[:T], self.rope_sin[:T]
        return rope_tables(torch.arange(T, device=device), self.shape.head_dim, self.shape.rope_theta, torch.float32)

    def logits_and_aux(self, tokens, routes=None):
        h, aux = body_forward(self.model, self.shape, tokens, self.rope(tokens.shape[1], tokens.device),
                              routes=routes, run=self.run)
        z = F.linear(h, self.model.embed_tokens.weight) if self.shape.tie_embeddings else self.lm_head(h)
        return scaled_logits(self.shape, z), aux

    def forward(self, tokens, targets):
        z, aux = self.logits_and_aux(tokens)
        return training_loss(z, targets, aux)
