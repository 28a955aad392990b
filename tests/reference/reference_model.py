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

The model is compiler/export/python/gcompile_decoder.py (the one PyTorch definition that the
export and the bench share, written from the spec language's math, not from the C++; its docstring
states the math), run here with its plain execution: softmax attention written out, one expert at a
time, ties to the lower index. This file reads the spec and the probe, and compares. MoE routing:
the float64 run chooses the experts and the float32 run reuses its choice; a near-tie between the
k-th and (k+1)-th scores is reported (the fp32 C++ model may route such a token differently).
The aux_free selection bias is zero at step 0, which is what a probe holds, so it is left out.
moe.capacity_factor f gives each expert C = max(1, ceil(f * seq_len * top_k / n_experts)) assignments per
sequence (compiler/plan's moe_capacity), seq_len being the spec's train.seq_len.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "compiler" / "export" / "python"))
import gcompile_decoder as gd  # noqa: E402  (the model)

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
            self.moe_layers = set(gd.moe_layer_indices(self.L, self.n_dense_layers, self.layer_interval))
        self.shape = self.decoder_shape()  # checks the settings (a ValueError names a bad one)

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

    def decoder_shape(self):
        """The model's shape for gcompile_decoder (the MoE layers at their plain execution)."""
        moe = None
        if self.arch == "moe":
            moe = gd.MoeShape(layers=frozenset(self.moe_layers), n_experts=self.n_experts, top_k=self.top_k,
                              expert_d_ff=self.Fe, shared_d_ff=self.n_shared * self.shared_d_ff,
                              router_scoring=self.scoring, norm_topk_prob=self.norm_topk,
                              load_balance=self.balance, load_balance_coef=self.coef, seq_aux_loss=self.seq_aux,
                              z_loss=self.z_loss, capacity=self.capacity)
        return gd.DecoderShape(vocab_size=self.V, d_model=self.D, n_layers=self.L, n_heads=self.H, n_kv_heads=self.KV,
                               head_dim=self.hd, d_ff=self.F, norm_eps=self.eps,
                               norm_placement="sandwich" if self.sandwich else "pre",
                               embedding_norm=self.embedding_norm, qk_norm=self.qk_norm, tie_embeddings=self.tied,
                               gated_attention=self.gate, rope_theta=self.theta, embedding_scale=self.embedding_scale,
                               attn_scale=self.attn_scale, logit_scale=self.logit_scale, moe=moe)

    def expected_shapes(self):
        return gd.parameter_shapes(self.shape)


def near_ties(scores, k):
    """Rows whose k-th and (k+1)-th largest scores are within 1e-6 relative."""
    s = np.sort(scores.detach().to(torch.float64).numpy(), axis=1)[:, ::-1]
    if k >= s.shape[1]:
        return []
    a, b = s[:, k - 1], s[:, k]
    return [int(t) for t in np.nonzero(a - b <= 1e-6 * np.abs(a))[0]]


def warn_near_ties(k):
    """An Execution.on_route that reports near-ties of float64 scores (the oracle routes from float64:
    main runs float64 first; a lone caller routing from float32 gets no check)."""

    def check(layer, scores):
        ties = near_ties(scores, k) if scores.dtype == torch.float64 else []
        if ties:
            print(f"reference_model: warning: layer {layer}: {len(ties)} token(s) (first {ties[0]}) have a near-tie "
                  f"between the {k}th and {k + 1}th expert scores; the fp32 C++ model may route differently",
                  file=sys.stderr)

    return check


def forward(cfg, W, tokens, targets, routes=None, extras=None, sdpa=False, cos_sin=None):
    """W: name -> tensor (leaf, requires_grad). Returns (logits [B*T, V], loss).

    MoE models: routes (layer -> expert indices) is filled by the first run and reused by later
    ones; extras, if given, receives "aux" (the balancing loss). sdpa: PyTorch 2's fused attention, as
    users write it (bench/cpu_vs_torch), not the oracle; cos_sin: RoPE tables built once by the caller."""
    run = gd.Execution(sdpa=sdpa, on_route=warn_near_ties(cfg.top_k) if cfg.arch == "moe" else None)
    z, aux = gd.forward(cfg.shape, W, tokens, routes if routes is not None else {}, run, cos_sin)
    loss = gd.training_loss(z, targets, aux)
    if extras is not None:
        extras["aux"] = float(aux) if aux is not None else 0.0
    return z.reshape(-1, cfg.V), loss


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
