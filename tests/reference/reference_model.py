#!/usr/bin/python3
"""Independent PyTorch reference for a gcompile tree's Llama-style model (dense or MoE).

    /usr/bin/python3 tests/reference/reference_model.py TREE PROBE.safetensors

TREE is a generated tree (its spec.resolved.toml gives the architecture);
PROBE.safetensors is what TREE/probe wrote: the initial parameters, the batch
(tokens, targets), and the C++ model's logits, loss and gradients. This script
rebuilds the model from the spec's description with plain torch ops, runs
forward and backward with autograd in float64 and in float32 on the same
parameters and batch, and compares

    relative error = ||ours - ref|| / ||ref||

for the logits, the loss and every gradient. The check passes when every error
against the float32 reference is below --tol (default 1e-5); the float64 column
is reported alongside (it is the error of the C++ fp32 model against exact
arithmetic). Exit status: 0 pass, 1 mismatch, 2 bad input.

The model (written from the spec language's description, not from the C++):
  e   = embedding_scale * E[tokens];  e = RMSNorm(e) if embedding_norm
  per layer, pre-norm (sandwich adds RMSNorm on each sublayer output):
    a = RMSNorm(h);  q, k, v = a Wq^T, a Wk^T, a Wv^T  (split into heads)
    q, k = RMSNorm over head_dim (shared gain) if qk_norm
    RoPE, HF rotate_half pairing (i with i + hd/2), base rope_theta, positions 0..T-1
    o = softmax(attn_scale * q k^T + causal mask) v, query head h reads kv head h // (H/KV)
    o = sigmoid(a Wg^T) * o   (headwise: one gate per head; elementwise: per channel)
    h = h + [RMSNorm](o Wo^T)
    b = RMSNorm(h);  h = h + [RMSNorm](MLP(b))
    dense layer: MLP(b) = (silu(b Wgate^T) * (b Wup^T)) Wdown^T
  logits = logit_scale * RMSNorm(h) W_lm^T   (W_lm = E when tied);  loss = mean CE
  RMSNorm(x) = g * x / sqrt(mean(x^2) + eps)

Mixture of experts (model.arch = "moe", settings in [moe]):
  layer l is MoE iff l >= n_dense_layers and (l - n_dense_layers) % layer_interval == 0;
  the other layers are dense with MLP width dense_d_ff. In an MoE layer, per token t
  (the rows of b over batch and time, N of them):
    r_t = b_t Wrouter^T (E logits);  s_t = softmax(r_t) or sigmoid(r_t) (router_scoring)
    e_1..e_k = the k largest s_t[e] (ties to the lower index; the aux_free selection
      bias is zero at step 0, which is what the probe holds, so it is left out)
    w_tj = s_t[e_j], divided by sum_j s_t[e_j] if norm_topk_prob
    MLP(b_t) = sum_j w_tj * Expert_{e_j}(b_t) + Shared(b_t)
    Expert_e(x) = (silu(x G_e^T) * (x U_e^T)) Dn_e^T; Shared is one SwiGLU MLP of width
      n_shared_experts * shared_d_ff (absent when n_shared_experts = 0)
  Gradients flow through w (so into the router) and the experts, not through the
  selection. The selection is made once from the float64 scores and reused for the
  float32 run. With load_balance = "aux_loss" the loss adds, per MoE layer,
    coef * E * sum_e f_e * P_e,  f_e = (assignments to e) / (N k) (a constant),
    P_e = mean_t p_t[e],  p_t = s_t (softmax) or s_t / sum_e s_t[e] (sigmoid).
  With seq_aux_loss > 0 it adds the same form over each sequence's T tokens, averaged over
  the B sequences (DeepSeek-V3 eqs. 17-20):
    seq_aux_loss * mean_b [E * sum_e f_be * P_be];
  with z_loss > 0 the router z-loss (ST-MoE eq. 5): z_loss * mean_t logsumexp(r_t)^2.
  With capacity_factor > 0 each expert keeps, per sequence, its first
  C = ceil(capacity_factor * T * k / E) assignments in (token, rank) order; the others add
  nothing (no renormalization); the balancing losses still count every selection.
"""

import argparse
import json
import math
import re
import struct
import sys
import tomllib
from pathlib import Path

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def read_safetensors(path):
    """Returns ({name: numpy array}, metadata) from a safetensors file."""
    raw = Path(path).read_bytes()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    data = raw[8 + n :]
    metadata = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, entry in header.items():
        dtype = DTYPES.get(entry["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: tensor '{name}': unsupported dtype {entry['dtype']}")
        begin, end = entry["data_offsets"]
        shape = tuple(entry["shape"])
        arr = np.frombuffer(data[begin:end], dtype=np.dtype(dtype).newbyteorder("<"))
        if arr.size != math.prod(shape):
            raise ValueError(f"{path}: tensor '{name}': {arr.size} values for shape {list(shape)}")
        tensors[name] = arr.reshape(shape).copy()
    return tensors, metadata


def config_scale(tree, knob):
    """A forward scale from the generated src/config.hpp (when the probe has no metadata)."""
    text = (Path(tree) / "src" / "config.hpp").read_text()
    m = re.search(rf"\b{knob}\s*=\s*([-+0-9.eE]+)f?\s*;", text)
    if not m:
        raise ValueError(f"{tree}/src/config.hpp: no value for {knob}")
    return float(np.float32(float(m.group(1).rstrip("f"))))


class Config:
    def __init__(self, tree, metadata):
        spec = tomllib.loads((Path(tree) / "spec.resolved.toml").read_text())
        m = spec["model"]
        self.arch = m.get("arch", "dense")
        if self.arch not in ("dense", "moe"):
            raise ValueError(f"unsupported model.arch {self.arch!r}")
        if m.get("activation", "swiglu") != "swiglu":
            raise ValueError(f"unsupported activation {m['activation']}")
        self.V = int(m["vocab_size"])
        self.D = int(m["d_model"])
        self.L = int(m["n_layers"])
        self.H = int(m["n_heads"])
        self.KV = int(m.get("n_kv_heads", self.H))
        self.hd = int(m.get("head_dim", self.D // self.H))
        self.F = int(m["d_ff"])  # the MLP width of the dense layers
        self.eps = float(m["norm_eps"])
        self.sandwich = m.get("norm_placement", "pre") == "sandwich"
        self.embedding_norm = bool(m.get("embedding_norm", False))
        self.qk_norm = bool(m.get("qk_norm", False))
        self.tied = bool(m.get("tie_embeddings", False))
        self.theta = float(m.get("rope_theta", 10000.0))
        self.gate = m.get("gated_attention", "none")
        if self.gate not in ("none", "headwise", "elementwise"):
            raise ValueError(f"unknown gated_attention {self.gate!r}")
        # The forward scales are formulas in the spec; the probe records the values the
        # C++ model uses (float knobs), else read them from the generated config.hpp.
        knobs = {"embedding_scale": "kEmbeddingScale", "attn_scale": "kAttnScale", "logit_scale": "kLogitScale"}
        for key, knob in knobs.items():
            value = float(metadata[key]) if key in metadata else config_scale(tree, knob)
            setattr(self, key, value)
        self.seed = spec.get("experiment", {}).get("seed")
        self.moe_layers = set()
        if self.arch == "moe":
            mo = spec.get("moe", {})
            self.n_dense_layers = int(mo.get("n_dense_layers", 0))
            self.layer_interval = int(mo.get("layer_interval", 1))
            self.n_experts = int(mo["n_experts"])
            self.top_k = int(mo["top_k"])
            self.n_shared = int(mo.get("n_shared_experts", 0))
            self.Fe = int(mo["expert_d_ff"])
            self.shared_d_ff = int(mo.get("shared_d_ff", self.Fe))
            self.F = int(mo.get("dense_d_ff", self.F))
            self.scoring = mo.get("router_scoring", "softmax")
            self.balance = mo.get("load_balance", "aux_loss")
            self.coef = float(mo.get("load_balance_coef", 0.01))
            self.norm_topk = bool(mo.get("norm_topk_prob", False))
            self.seq_aux = float(mo.get("seq_aux_loss", 0.0))
            self.z_loss = float(mo.get("z_loss", 0.0))
            # Per expert and sequence, from the spec's train.seq_len (compiler/plan's moe_capacity).
            factor = float(mo.get("capacity_factor", 0.0))
            seq_len = int(spec.get("train", {}).get("seq_len", 0))
            if factor > 0 and seq_len <= 0:
                raise ValueError("moe.capacity_factor needs train.seq_len in the spec")
            self.capacity = (max(1, math.ceil(factor * seq_len * self.top_k / self.n_experts - 1e-9))
                             if factor > 0 else 0)
            if self.scoring not in ("softmax", "sigmoid"):
                raise ValueError(f"unknown moe.router_scoring {self.scoring!r}")
            if self.balance not in ("none", "aux_loss", "aux_free"):
                raise ValueError(f"unknown moe.load_balance {self.balance!r}")
            if self.layer_interval < 1 or not 1 <= self.top_k <= self.n_experts:
                raise ValueError("moe: need layer_interval >= 1 and 1 <= top_k <= n_experts")
            self.moe_layers = {l for l in range(self.L) if l >= self.n_dense_layers
                               and (l - self.n_dense_layers) % self.layer_interval == 0}

    def is_moe(self, l):
        return l in self.moe_layers

    def moe_text(self):
        """The MoE settings for the report's header line ("" for a dense model)."""
        if self.arch != "moe":
            return ""
        layers = ",".join(str(l) for l in sorted(self.moe_layers))
        return (f" moe_layers=[{layers}] experts={self.n_experts} top_k={self.top_k} Fe={self.Fe} "
                f"shared={self.n_shared}x{self.shared_d_ff} scoring={self.scoring} balance={self.balance} "
                f"coef={self.coef:g} norm_topk={self.norm_topk}")

    def expected_shapes(self):
        D, V, H, KV, hd, F = self.D, self.V, self.H, self.KV, self.hd, self.F
        shapes = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,)}
        if self.embedding_norm:
            shapes["model.embed_norm.weight"] = (D,)
        if not self.tied:
            shapes["lm_head.weight"] = (V, D)
        for l in range(self.L):
            p = f"model.layers.{l}."
            shapes[p + "input_layernorm.weight"] = (D,)
            shapes[p + "self_attn.q_proj.weight"] = (H * hd, D)
            shapes[p + "self_attn.k_proj.weight"] = (KV * hd, D)
            shapes[p + "self_attn.v_proj.weight"] = (KV * hd, D)
            shapes[p + "self_attn.o_proj.weight"] = (D, H * hd)
            if self.qk_norm:
                shapes[p + "self_attn.q_norm.weight"] = (hd,)
                shapes[p + "self_attn.k_norm.weight"] = (hd,)
            if self.gate != "none":
                shapes[p + "self_attn.gate_proj.weight"] = (H if self.gate == "headwise" else H * hd, D)
            if self.sandwich:
                shapes[p + "self_attn.out_norm.weight"] = (D,)
                shapes[p + "mlp.out_norm.weight"] = (D,)
            shapes[p + "post_attention_layernorm.weight"] = (D,)
            if self.is_moe(l):
                E, Fe = self.n_experts, self.Fe
                shapes[p + "mlp.router.weight"] = (E, D)
                shapes[p + "mlp.experts.gate_proj.weight"] = (E, Fe, D)
                shapes[p + "mlp.experts.up_proj.weight"] = (E, Fe, D)
                shapes[p + "mlp.experts.down_proj.weight"] = (E, D, Fe)
                if self.n_shared > 0:
                    S = self.n_shared * self.shared_d_ff
                    shapes[p + "mlp.shared_experts.gate_proj.weight"] = (S, D)
                    shapes[p + "mlp.shared_experts.up_proj.weight"] = (S, D)
                    shapes[p + "mlp.shared_experts.down_proj.weight"] = (D, S)
            else:
                shapes[p + "mlp.gate_proj.weight"] = (F, D)
                shapes[p + "mlp.up_proj.weight"] = (F, D)
                shapes[p + "mlp.down_proj.weight"] = (D, F)
        return shapes


def rms_norm(x, gain, eps):
    return gain * (x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps))


def rope_cos_sin(T, hd, theta, dtype):
    # Angles in float64, then rounded to the working precision.
    i = torch.arange(hd // 2, dtype=torch.float64)
    inv_freq = theta ** (-2.0 * i / hd)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]  # [T, hd/2]
    angles = torch.cat([angles, angles], dim=-1)  # [T, hd]: channel i and i + hd/2 share an angle
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x, cos, sin):
    # x: [B, heads, T, hd]; cos, sin: [T, hd]
    return x * cos + rotate_half(x) * sin


def swiglu(x, gate_w, up_w, down_w):
    return (torch.nn.functional.silu(x @ gate_w.T) * (x @ up_w.T)) @ down_w.T


def select_experts(scores, k):
    """The k largest scores per row, ties to the lower index: [N, k] int64 indices."""
    s = scores.detach().to(torch.float64).numpy()
    order = np.argsort(-s, axis=1, kind="stable")
    return torch.from_numpy(order[:, :k].copy())


def near_ties(scores, k):
    """Rows whose k-th and (k+1)-th largest scores are within 1e-6 relative."""
    s = np.sort(scores.detach().to(torch.float64).numpy(), axis=1)[:, ::-1]
    if k >= s.shape[1]:
        return []
    a, b = s[:, k - 1], s[:, k]
    return [int(t) for t in np.nonzero(a - b <= 1e-6 * np.abs(a))[0]]


def moe_mlp(cfg, W, p, b, routes, l):
    """An MoE layer's output for b [B, T, D] and its balancing loss (0 unless aux_loss).

    routes: layer -> [N, k] expert indices. A layer missing from it is routed from
    this run's scores (the float64 run) and recorded, so a later run reuses it."""
    B, T, D = b.shape
    N, E, k = B * T, cfg.n_experts, cfg.top_k
    x = b.reshape(N, D)
    r = x @ W[p + "mlp.router.weight"].T  # [N, E]
    s = torch.softmax(r, dim=-1) if cfg.scoring == "softmax" else torch.sigmoid(r)
    if l not in routes:
        # The oracle routes from float64 scores (main runs float64 first); a lone caller
        # (bench/cpu_vs_torch) routes from its own dtype, without the near-tie check.
        ties = near_ties(s, k) if s.dtype == torch.float64 else []
        if ties:
            print(f"reference_model: warning: layer {l}: {len(ties)} token(s) (first {ties[0]}) have a near-tie "
                  f"between the {k}th and {k + 1}th expert scores; the fp32 C++ model may route differently",
                  file=sys.stderr)
        routes[l] = select_experts(s, k)
    sel = routes[l]  # [N, k]
    w = torch.gather(s, 1, sel)  # [N, k], differentiable through s
    if cfg.norm_topk:
        w = w / w.sum(dim=-1, keepdim=True)
    y = torch.zeros_like(x)
    G = W[p + "mlp.experts.gate_proj.weight"]
    U = W[p + "mlp.experts.up_proj.weight"]
    Dn = W[p + "mlp.experts.down_proj.weight"]
    keep = torch.ones_like(sel, dtype=torch.bool)
    if cfg.capacity > 0:
        one_hot = torch.nn.functional.one_hot(sel.reshape(B, T * k), E)  # [B, T k, E]
        rank = (one_hot.cumsum(dim=1) * one_hot).sum(dim=-1)  # 1-based rank within its expert and sequence
        keep = (rank <= cfg.capacity).reshape(N, k)
    for e in range(E):
        rows, slots = torch.nonzero((sel == e) & keep, as_tuple=True)
        if rows.numel() == 0:
            continue
        out = swiglu(x[rows], G[e], U[e], Dn[e]) * w[rows, slots].unsqueeze(-1)
        y = y.index_add(0, rows, out)
    if cfg.n_shared > 0:
        y = y + swiglu(x, W[p + "mlp.shared_experts.gate_proj.weight"], W[p + "mlp.shared_experts.up_proj.weight"],
                       W[p + "mlp.shared_experts.down_proj.weight"])
    aux = torch.zeros((), dtype=x.dtype)
    if cfg.balance == "aux_loss":
        counts = torch.bincount(sel.reshape(-1), minlength=E).to(x.dtype)
        f = counts / (N * k)  # a constant
        prob = s if cfg.scoring == "softmax" else s / s.sum(dim=-1, keepdim=True)
        P = prob.mean(dim=0)
        aux = cfg.coef * E * (f * P).sum()
    if cfg.seq_aux > 0:
        one_hot = torch.nn.functional.one_hot(sel.reshape(B, T * k), E).to(x.dtype)  # [B, T k, E]
        f = one_hot.sum(dim=1) / (T * k)  # [B, E], a constant
        prob = s if cfg.scoring == "softmax" else s / s.sum(dim=-1, keepdim=True)
        P = prob.reshape(B, T, E).mean(dim=1)
        aux = aux + cfg.seq_aux * E * (f * P).sum(dim=-1).mean()
    if cfg.z_loss > 0:
        aux = aux + cfg.z_loss * torch.logsumexp(r, dim=-1).pow(2).mean()
    return y.reshape(B, T, D), aux


def forward(cfg, W, tokens, targets, routes=None, extras=None, sdpa=False):
    """W: name -> tensor (leaf, requires_grad). Returns (logits [B*T, V], loss).

    MoE models: routes (layer -> expert indices) is filled by the first run and reused
    by later ones (see moe_mlp); extras, if given, receives "aux" (the balancing loss)."""
    if routes is None:
        routes = {}
    aux_total = None
    B, T = tokens.shape
    H, KV, hd = cfg.H, cfg.KV, cfg.hd
    dtype = W["model.embed_tokens.weight"].dtype
    E = W["model.embed_tokens.weight"]
    h = E[tokens] * cfg.embedding_scale  # [B, T, D]
    if cfg.embedding_norm:
        h = rms_norm(h, W["model.embed_norm.weight"], cfg.eps)
    cos, sin = rope_cos_sin(T, hd, cfg.theta, dtype)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(cfg.L):
        p = f"model.layers.{l}."
        a = rms_norm(h, W[p + "input_layernorm.weight"], cfg.eps)
        q = (a @ W[p + "self_attn.q_proj.weight"].T).view(B, T, H, hd)
        k = (a @ W[p + "self_attn.k_proj.weight"].T).view(B, T, KV, hd)
        v = (a @ W[p + "self_attn.v_proj.weight"].T).view(B, T, KV, hd)
        if cfg.qk_norm:
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], cfg.eps)
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], cfg.eps)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, heads, T, hd]
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        group = H // KV  # query heads per kv head: head h reads kv head h // group
        if sdpa:  # PyTorch 2's fused attention, as users write it (bench/cpu_vs_torch); not the oracle
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=cfg.attn_scale,
                                                                 enable_gqa=group > 1)
        else:
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
            scores = (q @ k.transpose(-1, -2)) * cfg.attn_scale
            scores = scores.masked_fill(~causal, float("-inf"))
            o = torch.softmax(scores, dim=-1) @ v  # [B, H, T, hd]
        o = o.transpose(1, 2)  # [B, T, H, hd]
        if cfg.gate != "none":
            z = a @ W[p + "self_attn.gate_proj.weight"].T
            if cfg.gate == "headwise":
                o = torch.sigmoid(z)[..., None] * o  # [B, T, H, 1] broadcast over hd
            else:
                o = torch.sigmoid(z).view(B, T, H, hd) * o
        o = o.reshape(B, T, H * hd)
        attn = o @ W[p + "self_attn.o_proj.weight"].T
        if cfg.sandwich:
            attn = rms_norm(attn, W[p + "self_attn.out_norm.weight"], cfg.eps)
        h = h + attn
        b = rms_norm(h, W[p + "post_attention_layernorm.weight"], cfg.eps)
        if cfg.is_moe(l):
            mlp, aux = moe_mlp(cfg, W, p, b, routes, l)
            aux_total = aux if aux_total is None else aux_total + aux
        else:
            mlp = swiglu(b, W[p + "mlp.gate_proj.weight"], W[p + "mlp.up_proj.weight"], W[p + "mlp.down_proj.weight"])
        if cfg.sandwich:
            mlp = rms_norm(mlp, W[p + "mlp.out_norm.weight"], cfg.eps)
        h = h + mlp
    f = rms_norm(h, W["model.norm.weight"], cfg.eps)
    head = E if cfg.tied else W["lm_head.weight"]
    logits = (f @ head.T).reshape(B * T, cfg.V) * cfg.logit_scale
    loss = torch.nn.functional.cross_entropy(logits, targets.reshape(-1), reduction="mean")
    if aux_total is not None:
        loss = loss + aux_total
    if extras is not None:
        extras["aux"] = float(aux_total) if aux_total is not None else 0.0
    return logits, loss


def run_reference(cfg, params, tokens, targets, dtype, routes, extras=None):
    W = {name: torch.tensor(arr, dtype=dtype, requires_grad=True) for name, arr in params.items()}
    logits, loss = forward(cfg, W, tokens, targets, routes, extras)
    loss.backward()
    grads = {name: (t.grad if t.grad is not None else torch.zeros_like(t)) for name, t in W.items()}
    return logits.detach(), loss.detach(), grads


def rel_err(ours, ref):
    ours = np.asarray(ours, dtype=np.float64).ravel()
    ref = np.asarray(ref, dtype=np.float64).ravel()
    denom = np.linalg.norm(ref)
    diff = np.linalg.norm(ours - ref)
    if not np.isfinite(diff):
        return math.inf
    return diff / denom if denom > 0 else diff


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree")
    ap.add_argument("probe")
    ap.add_argument("--tol", type=float, default=1e-5, help="max relative error against the fp32 reference")
    args = ap.parse_args()
    torch.manual_seed(0)
    try:
        tensors, meta = read_safetensors(args.probe)
        cfg = Config(args.tree, meta)
    except (OSError, ValueError, KeyError, tomllib.TOMLDecodeError) as e:
        print(f"reference_model: error: {e}", file=sys.stderr)
        return 2

    problems = []
    if meta.get("format") != "pt":
        problems.append(f"metadata format is {meta.get('format')!r}, not 'pt'")
    shapes = cfg.expected_shapes()
    reserved = {"logits", "loss", "tokens", "targets"}
    for name in sorted(set(tensors) - reserved):
        base = name[len("grad.") :] if name.startswith("grad.") else name
        if base not in shapes:
            problems.append(f"unexpected tensor {name}")
    for name, shape in shapes.items():
        for n in (name, "grad." + name):
            if n not in tensors:
                problems.append(f"missing tensor {n}")
            elif tensors[n].shape != shape:
                problems.append(f"{n}: shape {list(tensors[n].shape)}, expected {list(shape)}")
    for n in sorted(reserved):
        if n not in tensors:
            problems.append(f"missing tensor {n}")
    if problems:
        for p in problems:
            print(f"reference_model: error: {p}", file=sys.stderr)
        return 2
    tokens = torch.tensor(tensors["tokens"].astype(np.int64))
    targets = torch.tensor(tensors["targets"].astype(np.int64))
    B, T = tokens.shape
    if tensors["logits"].shape != (B * T, cfg.V) or targets.shape != (B, T):
        print("reference_model: error: logits/targets do not match the batch", file=sys.stderr)
        return 2
    if int(tokens.min()) < 0 or int(tokens.max()) >= cfg.V or int(targets.min()) < 0 or int(targets.max()) >= cfg.V:
        print("reference_model: error: token ids outside the vocabulary", file=sys.stderr)
        return 2

    params = {name: tensors[name] for name in shapes}
    # float64 first: it makes the MoE expert selection, which the float32 run reuses.
    routes, extras = {}, {}
    ref = {torch.float64: run_reference(cfg, params, tokens, targets, torch.float64, routes, extras)}
    ref[torch.float32] = run_reference(cfg, params, tokens, targets, torch.float32, routes)

    our_loss = float(meta["loss"]) if "loss" in meta else float(tensors["loss"][0])
    rows = [("logits", list(tensors["logits"].shape), tensors["logits"], lambda r: r[0].numpy())]
    rows.append(("loss", [1], np.array([our_loss]), lambda r: np.array([float(r[1])])))
    for name in shapes:
        rows.append((
            "grad." + name, list(shapes[name]), tensors["grad." + name], lambda r, n=name: r[2][n].numpy()))

    print(f"reference: {args.tree}")
    print(f"  V={cfg.V} d={cfg.D} L={cfg.L} H={cfg.H} KV={cfg.KV} hd={cfg.hd} F={cfg.F} eps={cfg.eps:g} "
          f"sandwich={cfg.sandwich} emb_norm={cfg.embedding_norm} qk_norm={cfg.qk_norm} tied={cfg.tied} "
          f"gate={cfg.gate} theta={cfg.theta:g}{cfg.moe_text()}")
    aux_text = f" (aux {extras['aux']:.9f})" if cfg.arch == "moe" else ""
    print(f"  embedding_scale={cfg.embedding_scale:.9g} attn_scale={cfg.attn_scale:.9g} "
          f"logit_scale={cfg.logit_scale:.9g}; batch {B}x{T}; loss ours {our_loss:.9f} "
          f"fp64 ref {float(ref[torch.float64][1]):.9f}{aux_text}")
    print(f"  {'tensor':<52} {'shape':<12} {'|ref|':>10} {'rel fp32':>10} {'rel fp64':>10}")
    worst32 = worst64 = 0.0
    failed = []
    for name, shape, ours, get in rows:
        r32 = get(ref[torch.float32])
        r64 = get(ref[torch.float64])
        e32, e64 = rel_err(ours, r32), rel_err(ours, r64)
        worst32, worst64 = max(worst32, e32), max(worst64, e64)
        bad = not (e32 < args.tol)
        if bad:
            failed.append(name)
        shape_text = "x".join(str(s) for s in shape)
        print(f"  {name:<52} {shape_text:<12} {np.linalg.norm(r64):10.3e} {e32:10.2e} {e64:10.2e}"
              f"{'  FAIL' if bad else ''}")
    status = "ok" if not failed else f"FAILED ({len(failed)} tensors)"
    print(f"reference: worst relative error fp32 {worst32:.2e}, fp64 {worst64:.2e} (tolerance {args.tol:g} "
          f"vs fp32): {status}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
