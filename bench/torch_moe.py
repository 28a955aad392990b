"""The mixture-of-experts block of bench/torch_model.py, written as current PyTorch MoE training
code writes it (torchtitan's MoE: experts stacked [E, out, in], torch._grouped_mm over the tokens
sorted by expert, each expert's group padded to a multiple of 16 rows, every shape static so
torch.compile takes the whole block): the router (softmax or sigmoid scores, top-k, optionally
renormalized), the routed experts (SwiGLU), the shared experts and the auxiliary balancing loss
L_aux = coef · E · Σ_e f_e · P_e (f_e: the share of the micro-batch's assignments to e, P_e: its
mean score), added to the model's loss. Parameter names and shapes are gcompile's plan's.

Standard library at import; torch is passed in (bench/torch_model.py's convention).
"""

from __future__ import annotations

GROUP_ALIGN = 16  # rows: each expert's group starts at a multiple of 16 (torch._grouped_mm, CUTLASS)


def is_moe_layer(cfg, layer: int) -> bool:
    """gcompile's rule (compiler/plan): MoE after the dense layers, every layer_interval-th."""
    moe = getattr(cfg, "moe", None)
    if not moe:
        return False
    first = moe["n_dense_layers"]
    return layer >= first and (layer - first) % moe["layer_interval"] == 0


def moe_block(cfg, torch, mlp_class):
    """The MoE module of one layer; mlp_class builds the shared experts (bench/torch_model.py's MLP)."""
    nn, F = torch.nn, torch.nn.functional
    moe = cfg.moe
    E, k, d, f = moe["n_experts"], moe["top_k"], cfg.d_model, moe["expert_d_ff"]

    class Stack(nn.Module):  # E weights [out, in] in one tensor: the plan's "….experts.X.weight"
        def __init__(self, out_features: int, in_features: int):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(E, out_features, in_features))

    class Experts(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj, self.up_proj, self.down_proj = Stack(f, d), Stack(f, d), Stack(d, f)

        def forward(self, xs, offs):
            if hasattr(torch, "_grouped_mm"):
                def mm(a, w):
                    # Autocast does not cover _grouped_mm and its CUDA kernel takes bf16 only: under
                    # autocast the operands are cast as mixed-precision training code casts them.
                    if torch.is_autocast_enabled(a.device.type):
                        low = torch.get_autocast_dtype(a.device.type)
                        a, w = a.to(low), w.to(low)
                    return torch._grouped_mm(a, w.transpose(-2, -1), offs=offs)
            else:  # torch without _grouped_mm (CPU smoke tests only): the same products, per expert
                def mm(a, w):
                    out, start = [], 0
                    for e, end in enumerate(offs.tolist()):
                        out.append(a[start:end] @ w[e].t())
                        start = end
                    out.append(a.new_zeros(a.shape[0] - start, w.shape[1]))
                    return torch.cat(out)
            gate, up, down = self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight
            return mm(F.silu(mm(xs, gate)) * mm(xs, up), down)

    class MoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.router = nn.Linear(d, E, bias=False)
            self.experts = Experts()
            if moe["shared_d_ff"] > 0:
                self.shared_experts = mlp_class(moe["shared_d_ff"], out_norm=False)
            self.aux_loss = None

        def forward(self, x):
            B, T, _ = x.shape
            xf = x.reshape(B * T, d)
            logits = self.router(xf).float()
            scores = torch.softmax(logits, dim=-1) if moe["router_scoring"] == "softmax" else torch.sigmoid(logits)
            weights, chosen = scores.topk(k, dim=-1)  # [N, k]
            if moe["norm_topk_prob"]:
                weights = weights / weights.sum(-1, keepdim=True)
            flat = chosen.reshape(-1)  # assignment a = token · k + slot
            counts = torch.zeros(E, dtype=torch.long, device=x.device).scatter_add_(0, flat, torch.ones_like(flat))
            if moe["load_balance"] == "aux_loss" and moe["load_balance_coef"] > 0:
                share = counts.float() / float(flat.numel())
                self.aux_loss = moe["load_balance_coef"] * E * (share * scores.mean(0)).sum()
            # Sort the assignments by expert; expert e's rows start at a multiple of GROUP_ALIGN.
            order = torch.argsort(flat, stable=True)
            padded = (counts + GROUP_ALIGN - 1) // GROUP_ALIGN * GROUP_ALIGN
            start, padded_start = torch.cumsum(counts, 0) - counts, torch.cumsum(padded, 0) - padded
            sorted_expert = flat[order]
            dest = padded_start[sorted_expert] + torch.arange(flat.numel(), device=x.device) - start[sorted_expert]
            rows = flat.numel() + E * (GROUP_ALIGN - 1)  # every padding fits: a static shape
            xs = xf.new_zeros(rows, d).index_copy(0, dest, xf[order // k])
            ys = self.experts(xs, torch.cumsum(padded, 0).to(torch.int32))[dest].to(xf.dtype)
            ys = ys * weights.reshape(-1)[order].unsqueeze(-1).to(ys.dtype)
            out = xf.new_zeros(B * T, d).index_add(0, order // k, ys)
            if hasattr(self, "shared_experts"):
                out = out + self.shared_experts(xf)
            return out.view(B, T, d)

    return MoE()
