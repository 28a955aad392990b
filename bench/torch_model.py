"""The PyTorch model of bench/torch_baseline.py: the Llama-style decoder a gcompile spec describes
(dense, or mixture of experts through bench/torch_moe.py),
written with plain PyTorch modules the way a user would write it, its parameters named, shaped and
initialized as gcompile's plan says, and the AdamW groups of the plan.

Standard library at import; torch is passed in (the caller imports it), so bench/gpu_vs_torch can
import bench/torch_baseline.py on a machine without torch. `cfg` is torch_baseline.Config.
"""

from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_moe import is_moe_layer, moe_block  # noqa: E402  (the MoE layers' block)


def build_model(cfg, torch, use_sdpa: bool, use_sdpa_gqa: bool):
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
        def __init__(self, d_ff: int = 0, out_norm: bool = True):
            super().__init__()
            d_ff = d_ff or cfg.d_ff
            self.gate_proj = nn.Linear(cfg.d_model, d_ff, bias=False)
            self.up_proj = nn.Linear(cfg.d_model, d_ff, bias=False)
            self.down_proj = nn.Linear(d_ff, cfg.d_model, bias=False)
            if cfg.norm_placement == "sandwich" and out_norm:
                self.out_norm = RMSNorm(cfg.d_model, cfg.norm_eps)

        def forward(self, x):
            m = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
            return self.out_norm(m) if hasattr(self, "out_norm") else m

    class Block(nn.Module):
        def __init__(self, layer: int):
            super().__init__()
            self.input_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)
            self.self_attn = Attention()
            self.post_attention_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)
            self.mlp = moe_block(cfg, torch, MLP) if is_moe_layer(cfg, layer) else MLP()

        def forward(self, h, cos, sin):
            h = h + self.self_attn(self.input_layernorm(h), cos, sin)
            return h + self.mlp(self.post_attention_layernorm(h))

    class Body(nn.Module):  # Hugging Face's LlamaModel layout: the plan's "model." names
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
            if cfg.embedding_norm:
                self.embed_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
            self.layers = nn.ModuleList(Block(i) for i in range(cfg.n_layers))
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
            loss = F.cross_entropy(logits.view(-1, cfg.vocab_size), targets.reshape(-1))
            for layer in m.layers:  # the MoE layers' balancing losses of this forward
                aux = getattr(layer.mlp, "aux_loss", None)
                if aux is not None:
                    loss = loss + aux
            return loss

    model = Decoder()
    with torch.no_grad():
        for p, entry in plan_tensors(model, cfg):
            init_tensor(torch, p, entry["init"])
    return model


def plan_tensors(model, cfg) -> list:
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


def optimizer_groups(cfg, model) -> list:
    """AdamW param groups keyed by the plan's (lr multiplier, weight decay)."""
    groups: dict = {}
    for p, entry in plan_tensors(model, cfg):
        groups.setdefault((float(entry["lr_mult"]), float(entry["weight_decay"])), []).append(p)
    return [{"params": ps, "lr": cfg.lr * mult, "weight_decay": decay} for (mult, decay), ps in groups.items()]

