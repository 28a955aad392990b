"""A gcompile model for `transformers` (written by `gcompile export`; load with trust_remote_code=True).

The Llama-style decoder gcompile trains, with the features plain Llama lacks:
gated attention (headwise or elementwise sigmoid gate on the attention output),
an RMSNorm on the embeddings, QK-norm, sandwich norms, forward scales, and
mixture-of-experts layers (softmax or sigmoid router, top-k, optional
renormalization, aux_free selection biases, shared experts). Tensor names are
the training checkpoint's. Self-contained: torch and transformers only.

    h = embedding_scale * E[ids];  h = RMSNorm(h) if embedding_norm
    per layer:  a = RMSNorm(h);  o = gate * Attention(a);  h = h + [RMSNorm](o Wo^T)
                b = RMSNorm(h);  h = h + [RMSNorm](MLP(b))      ([.]: sandwich only)
    logits = logit_scale * RMSNorm(h) W_lm^T

No key/value cache: generation recomputes the prefix each step (fine for
evaluation; lm-evaluation-harness scores log-likelihoods in one pass).
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_gcompile import GcompileConfig


class GcompileRMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_cos_sin(positions, head_dim, theta, dtype):
    """cos, sin [B, T, head_dim]: channel i pairs with i + head_dim/2 (rotate_half)."""
    i = torch.arange(head_dim // 2, dtype=torch.float64, device=positions.device)
    inv_freq = theta ** (-2.0 * i / head_dim)
    angles = positions.to(torch.float64)[..., None] * inv_freq
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class GcompileSwiGLU(nn.Module):
    def __init__(self, hidden, width):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, width, bias=False)
        self.up_proj = nn.Linear(hidden, width, bias=False)
        self.down_proj = nn.Linear(width, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class GcompileAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        c = config
        self.H, self.KV, self.hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.scale, self.theta, self.gate_mode = c.attn_scale, c.rope_theta, c.gated_attention
        self.q_proj = nn.Linear(c.hidden_size, self.H * self.hd, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, self.KV * self.hd, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, self.KV * self.hd, bias=False)
        self.o_proj = nn.Linear(self.H * self.hd, c.hidden_size, bias=False)
        if c.qk_norm:
            self.q_norm = GcompileRMSNorm(self.hd, c.rms_norm_eps)
            self.k_norm = GcompileRMSNorm(self.hd, c.rms_norm_eps)
        if self.gate_mode != "none":
            self.gate_proj = nn.Linear(c.hidden_size, self.H if self.gate_mode == "headwise" else self.H * self.hd,
                                       bias=False)

    def forward(self, a, positions, mask):
        B, T, _ = a.shape
        q = self.q_proj(a).view(B, T, self.H, self.hd)
        k = self.k_proj(a).view(B, T, self.KV, self.hd)
        v = self.v_proj(a).view(B, T, self.KV, self.hd)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        cos, sin = rope_cos_sin(positions, self.hd, self.theta, q.dtype)
        cos, sin = cos[:, None], sin[:, None]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = self.H // self.KV  # query head h reads kv head h // group
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = (q @ k.transpose(-1, -2)).float() * self.scale
        scores = scores.masked_fill(~mask, float("-inf"))
        o = (torch.softmax(scores, dim=-1).to(v.dtype) @ v).transpose(1, 2)  # [B, T, H, hd]
        if self.gate_mode == "headwise":
            o = torch.sigmoid(self.gate_proj(a))[..., None] * o
        elif self.gate_mode == "elementwise":
            o = torch.sigmoid(self.gate_proj(a)).view(B, T, self.H, self.hd) * o
        return self.o_proj(o.reshape(B, T, self.H * self.hd))


class GcompileExperts(nn.Module):
    """E SwiGLU experts stored stacked: gate/up [E, F, D], down [E, D, F]."""

    def __init__(self, n, hidden, width):
        super().__init__()
        self.gate_proj = nn.Module()
        self.up_proj = nn.Module()
        self.down_proj = nn.Module()
        self.gate_proj.weight = nn.Parameter(torch.empty(n, width, hidden))
        self.up_proj.weight = nn.Parameter(torch.empty(n, width, hidden))
        self.down_proj.weight = nn.Parameter(torch.empty(n, hidden, width))

    def forward(self, e, x):
        h = F.silu(x @ self.gate_proj.weight[e].T) * (x @ self.up_proj.weight[e].T)
        return h @ self.down_proj.weight[e].T


class GcompileMoE(nn.Module):
    def __init__(self, config):
        super().__init__()
        c = config
        self.E, self.k, self.scoring, self.norm_topk = (c.num_experts, c.num_experts_per_tok, c.router_scoring,
                                                        c.norm_topk_prob)
        self.router = nn.Linear(c.hidden_size, self.E, bias=False)
        if c.selection_bias:
            # aux_free balancing: added to the scores to choose experts, never to weight them.
            self.router.register_buffer("selection_bias", torch.zeros(self.E))
        self.experts = GcompileExperts(self.E, c.hidden_size, c.moe_intermediate_size)
        if c.num_shared_experts > 0:
            self.shared_experts = GcompileSwiGLU(c.hidden_size, c.num_shared_experts * c.shared_intermediate_size)

    def forward(self, b):
        B, T, D = b.shape
        x = b.reshape(B * T, D)
        r = self.router(x).float()
        s = torch.softmax(r, dim=-1) if self.scoring == "softmax" else torch.sigmoid(r)
        choice = s + self.router.selection_bias.float() if hasattr(self.router, "selection_bias") else s
        # The k largest, ties to the lower index (a stable sort of the negated scores).
        top = torch.sort(-choice, dim=-1, stable=True).indices[:, : self.k]
        w = torch.gather(s, 1, top)
        if self.norm_topk:
            w = w / w.sum(dim=-1, keepdim=True)
        y = torch.zeros_like(x)
        for e in range(self.E):
            rows, slots = torch.nonzero(top == e, as_tuple=True)
            if rows.numel():
                y = y.index_add(0, rows, self.experts(e, x[rows]) * w[rows, slots, None].to(x.dtype))
        if hasattr(self, "shared_experts"):
            y = y + self.shared_experts(x)
        return y.view(B, T, D)


class GcompileDecoderLayer(nn.Module):
    def __init__(self, config, index):
        super().__init__()
        c = config
        self.input_layernorm = GcompileRMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = GcompileAttention(c)
        self.post_attention_layernorm = GcompileRMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = GcompileMoE(c) if index in c.moe_layers else GcompileSwiGLU(c.hidden_size, c.intermediate_size)
        self.sandwich = c.norm_placement == "sandwich"
        if self.sandwich:
            self.self_attn.out_norm = GcompileRMSNorm(c.hidden_size, c.rms_norm_eps)
            self.mlp.out_norm = GcompileRMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, h, positions, mask):
        o = self.self_attn(self.input_layernorm(h), positions, mask)
        h = h + (self.self_attn.out_norm(o) if self.sandwich else o)
        m = self.mlp(self.post_attention_layernorm(h))
        return h + (self.mlp.out_norm(m) if self.sandwich else m)


class GcompilePreTrainedModel(PreTrainedModel):
    config_class = GcompileConfig
    base_model_prefix = "model"
    _no_split_modules = ["GcompileDecoderLayer"]

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(0.0, self.config.initializer_range)


class GcompileModel(GcompilePreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        if config.embedding_norm:
            self.embed_norm = GcompileRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.layers = nn.ModuleList(GcompileDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = GcompileRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        B, T = input_ids.shape
        h = self.embed_tokens(input_ids) * self.config.embedding_scale
        if hasattr(self, "embed_norm"):
            h = self.embed_norm(h)
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device).expand(B, T)
        mask = torch.ones(T, T, dtype=torch.bool, device=input_ids.device).tril()[None, None]
        if attention_mask is not None:
            # Padding: no query attends to a padded key, but every position sees
            # itself, so a padded row stays finite (and is ignored).
            keys = attention_mask.bool()[:, None, None, :]
            mask = mask & (keys | torch.eye(T, dtype=torch.bool, device=input_ids.device)[None, None])
        for layer in self.layers:
            h = layer(h, position_ids, mask)
        return self.norm(h)


class GcompileForCausalLM(GcompilePreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}  # transformers 5: target -> source

    def __init__(self, config):
        super().__init__(config)
        self.model = GcompileModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, labels=None, return_dict=None,
                **kwargs):
        h = self.model(input_ids, attention_mask, position_ids)
        logits = (self.lm_head(h) * self.config.logit_scale).float()
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                                   ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        position_ids = None
        if attention_mask is not None:  # left padding: positions count real tokens only
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
