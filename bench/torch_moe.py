"""The experts of bench/torch_model.py's mixture-of-experts layers, computed as current PyTorch MoE
training code computes them (torchtitan's MoE: experts stacked [E, out, in], torch._grouped_mm
over the assignments sorted by expert, each expert's group padded to a multiple of 16 rows, every
shape static so torch.compile takes the whole block). The router, the shared experts and the
balancing losses are the model's own (compiler/export/python/gcompile_decoder.py); this is an
Execution.experts for it, the same sum as its loop_experts.

Standard library at import; torch is passed in (bench/torch_model.py's convention).
"""

from __future__ import annotations

GROUP_ALIGN = 16  # rows: each expert's group starts at a multiple of 16 (torch._grouped_mm, CUTLASS)


def grouped_matmul(torch):
    """mm(a [rows, in], w [E, out, in], offs) -> [rows, out]: group e's rows times w[e]^T."""
    if hasattr(torch, "_grouped_mm"):
        def mm(a, w, offs):
            # Autocast does not cover _grouped_mm and its CUDA kernel takes bf16 only: under
            # autocast the operands are cast as mixed-precision training code casts them.
            if torch.is_autocast_enabled(a.device.type):
                low = torch.get_autocast_dtype(a.device.type)
                a, w = a.to(low), w.to(low)
            return torch._grouped_mm(a, w.transpose(-2, -1), offs=offs)
    else:  # torch without _grouped_mm (CPU smoke tests only): the same products, per expert
        def mm(a, w, offs):
            out, start = [], 0
            for e, end in enumerate(offs.tolist()):
                out.append(a[start:end] @ w[e].t())
                start = end
            out.append(a.new_zeros(a.shape[0] - start, w.shape[1]))
            return torch.cat(out)
    return mm


def grouped_experts(torch):
    """experts(x [N, d], sel [N, k], w [N, k], keep [N, k] or None, gate, up, down) -> y [N, d]:
    y_t = sum over t's kept slots j of w_tj SwiGLU_{sel_tj}(x_t), three grouped GEMMs."""
    F = torch.nn.functional
    mm = grouped_matmul(torch)

    def experts(x, sel, w, keep, gate, up, down):
        N, d = x.shape
        E, k = gate.shape[0], sel.shape[1]
        weights = w if keep is None else w * keep  # a dropped assignment adds nothing
        flat = sel.reshape(-1)  # assignment a = token * k + slot
        counts = torch.zeros(E, dtype=torch.long, device=x.device).scatter_add_(0, flat, torch.ones_like(flat))
        # Sort the assignments by expert; expert e's rows start at a multiple of GROUP_ALIGN.
        order = torch.argsort(flat, stable=True)
        padded = (counts + GROUP_ALIGN - 1) // GROUP_ALIGN * GROUP_ALIGN
        start, padded_start = torch.cumsum(counts, 0) - counts, torch.cumsum(padded, 0) - padded
        sorted_expert = flat[order]
        dest = padded_start[sorted_expert] + torch.arange(flat.numel(), device=x.device) - start[sorted_expert]
        rows = flat.numel() + E * (GROUP_ALIGN - 1)  # every padding fits: a static shape
        xs = x.new_zeros(rows, d).index_copy(0, dest, x[order // k])
        offs = torch.cumsum(padded, 0).to(torch.int32)
        ys = mm(F.silu(mm(xs, gate, offs)) * mm(xs, up, offs), down, offs)[dest].to(x.dtype)
        ys = ys * weights.reshape(-1)[order].unsqueeze(-1).to(ys.dtype)
        return x.new_zeros(N, d).index_add(0, order // k, ys)

    return experts
