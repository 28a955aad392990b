"""The PyTorch model of bench/torch_baseline.py: gcompile's decoder as
compiler/export/python/gcompile_decoder.py defines it (the one PyTorch definition, shared with the
export and the test oracle), run the way a fast PyTorch training loop runs it: SDPA attention, the
RoPE tables built once, the mixture-of-experts layers' experts through torch._grouped_mm
(bench/torch_moe.py), top-k by torch.topk; its parameters named, shaped and initialized as
gcompile's plan says, and the AdamW groups of the plan.

Standard library at import; torch is passed in (the caller imports it), so bench/gpu_vs_torch can
import bench/torch_baseline.py on a machine without torch. `cfg` is torch_baseline.Config.
"""

from __future__ import annotations

import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
DECODER_DIR = os.path.join(os.path.dirname(HERE), "compiler", "export", "python")


def decoder_module():
    """compiler/export/python/gcompile_decoder.py (imports torch)."""
    if DECODER_DIR not in sys.path:
        sys.path.insert(0, DECODER_DIR)
    import gcompile_decoder

    return gcompile_decoder


def decoder_shape(cfg, gd):
    """The gcompile_decoder shape of a torch_baseline.Config, whose fields (and moe_config's keys)
    carry the shape's names: each shape field is read by its name."""
    import dataclasses

    moe = None
    if cfg.moe:
        m = cfg.moe
        named = {f.name: m[f.name] for f in dataclasses.fields(gd.MoeShape) if f.name in m}
        moe = gd.MoeShape(layers=gd.moe_layer_indices(cfg.n_layers, m["n_dense_layers"], m["layer_interval"]), **named)
    named = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(gd.DecoderShape) if f.name != "moe"}
    return gd.DecoderShape(moe=moe, **named)


def build_model(cfg, torch, use_sdpa: bool, use_sdpa_gqa: bool):
    """The decoder, its parameters named as the plan names them and initialized as it says.
    use_sdpa: F.scaled_dot_product_attention with scale= (torch >= 2.1); use_sdpa_gqa: its
    enable_gqa= (torch >= 2.5), else K/V are repeated. forward(tokens, targets) -> loss."""
    from torch_moe import grouped_experts

    gd = decoder_module()
    run = gd.Execution(sdpa=use_sdpa, gqa_native=use_sdpa_gqa, experts=grouped_experts(torch), exact_ties=False)
    model = gd.Decoder(decoder_shape(cfg, gd), run, rope_cache=cfg.seq_len)
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

