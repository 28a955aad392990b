#!/usr/bin/env python3
"""bench/cpu_vs_torch's PyTorch rows compute the same thing: the plain row's model
(bench/torch_model.py's modules, bench/cpu_torch_plain.py) against the oracle rows' model
(tests/reference/reference_model.py's functions) on tiny shapes, without gcompile or a tree:

  - equal weights and tokens give the same step-0 loss and gradients (fp32, eager), for the
    elementwise / headwise / no gate, tied embeddings, QK-norm, sandwich norm and embedding norm;
  - the oracle with its RoPE tables built once (the plain row of a MoE tree) gives the same loss;
  - two training steps of the bench's old torch.compile row and of the plain row (compiled,
    AdamW(fused=True)) from equal weights on equal tokens give the same losses, so fused AdamW
    and the compiled modules are the same training;
  - with CPU_VS_TORCH_TREE=generated/tiny (a built tree) also bench/cpu_vs_torch itself, a
    2-step run: every row present, the fastest PyTorch row named, the JSON keys.

    .venv/bin/python tests/bench/cpu_vs_torch_test.py

Skipped, saying so, where torch is not installed.
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import cpu_torch_plain as ctp  # noqa: E402

try:
    import torch
except ModuleNotFoundError:  # pragma: no cover - the venv has torch
    torch = None

BASE = dict(V=96, d=32, L=2, H=4, K=2, hd=8, ff=80, T=12, B=2, gate="elementwise", tied=False, qk=False,
            placement="pre", emb_norm=True, eps=1e-6, theta=10000.0, emb_scale=1.0, logit_scale=1.0)


def write_tree(directory, **over):
    """DIR/spec.resolved.toml, DIR/src/config.hpp (the oracle's scales) and DIR/plan.json (the
    plain model's plan): what gcompile writes into a tree, for the fields the two models read."""
    c = dict(BASE, **over)
    V, d, L, H, K, hd, ff = c["V"], c["d"], c["L"], c["H"], c["K"], c["hd"], c["ff"]
    attn_scale = 1.0 / math.sqrt(hd)
    gate_dim = {"none": 0, "headwise": H, "elementwise": H * hd}[c["gate"]]
    shapes = [("model.embed_tokens.weight", [V, d], "embedding")]
    if c["emb_norm"]:
        shapes.append(("model.embed_norm.weight", [d], "norm"))
    for i in range(L):
        p = f"model.layers.{i}."
        shapes += [(p + "input_layernorm.weight", [d], "norm"), (p + "self_attn.q_proj.weight", [H * hd, d], "attn_q"),
                   (p + "self_attn.k_proj.weight", [K * hd, d], "attn_k"),
                   (p + "self_attn.v_proj.weight", [K * hd, d], "attn_v"),
                   (p + "self_attn.o_proj.weight", [d, H * hd], "attn_o"),
                   (p + "post_attention_layernorm.weight", [d], "norm"),
                   (p + "mlp.gate_proj.weight", [ff, d], "mlp_gate"), (p + "mlp.up_proj.weight", [ff, d], "mlp_up"),
                   (p + "mlp.down_proj.weight", [d, ff], "mlp_down")]
        if gate_dim:
            shapes.append((p + "self_attn.gate_proj.weight", [gate_dim, d], "attn_gate"))
        if c["qk"]:
            shapes += [(p + "self_attn.q_norm.weight", [hd], "norm"), (p + "self_attn.k_norm.weight", [hd], "norm")]
        if c["placement"] == "sandwich":
            shapes += [(p + "self_attn.out_norm.weight", [d], "norm"), (p + "mlp.out_norm.weight", [d], "norm")]
    shapes.append(("model.norm.weight", [d], "norm"))
    if not c["tied"]:
        shapes.append(("lm_head.weight", [V, d], "lm_head"))
    params = [{"name": n, "class": cls, "shape": s,
               "init": {"kind": "constant", "value": 1.0} if cls == "norm" else {"kind": "normal", "std": 0.05},
               "lr_mult": 1.0, "weight_decay": 0.0 if cls == "norm" else 0.1} for n, s, cls in shapes]
    total = sum(math.prod(s) for _, s, _ in shapes)
    matmul = sum(math.prod(s) for _, s, cls in shapes if cls not in ("norm", "embedding"))
    plan = {"experiment": {"name": "fixture"}, "params": params, "counts": {"total": total},
            "scales": {"embedding": c["emb_scale"], "attention": attn_scale, "logits": c["logit_scale"]},
            "flops": {"matmul_params": matmul, "per_token": 6.0 * matmul + 12.0 * L * H * hd * c["T"]}}
    b = lambda v: "true" if v else "false"  # noqa: E731
    toml = f"""[experiment]
name = "fixture"
seed = 7

[model]
arch = "dense"
activation = "swiglu"
vocab_size = {V}
d_model = {d}
n_layers = {L}
n_heads = {H}
n_kv_heads = {K}
head_dim = {hd}
d_ff = {ff}
norm_eps = {c["eps"]}
norm_placement = "{c["placement"]}"
embedding_norm = {b(c["emb_norm"])}
qk_norm = {b(c["qk"])}
tie_embeddings = {b(c["tied"])}
gated_attention = "{c["gate"]}"
rope_theta = {c["theta"]}

[train]
seq_len = {c["T"]}
micro_batch = {c["B"]}
global_batch = {c["B"]}
precision = "fp32"

[optim]
lr = 0.003
betas = [0.9, 0.95]
eps = 1e-8
weight_decay = 0.1
no_decay = ["norm"]
grad_clip = 1.0
"""
    d_ = Path(directory)
    (d_ / "src").mkdir(parents=True, exist_ok=True)
    (d_ / "spec.resolved.toml").write_text(toml)
    (d_ / "plan.json").write_text(json.dumps(plan))
    (d_ / "src" / "config.hpp").write_text(
        f"inline constexpr float kEmbeddingScale = {c['emb_scale']!r}f;\n"
        f"inline constexpr float kAttnScale = {attn_scale!r}f;\n"
        f"inline constexpr float kLogitScale = {c['logit_scale']!r}f;\n")
    return c


def read_spec(tree):
    import tomllib
    return tomllib.loads((Path(tree) / "spec.resolved.toml").read_text())


def rel(a, b):
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def models(tree, spec):
    """(oracle Model, plain Model) with equal weights: unit-variance activations (matrices
    N(0, 1/fan_in), gains 1 + N(0, 0.1^2)), so that every part of the model moves the loss, copied
    into both."""
    torch.manual_seed(0)
    oracle = ctp.oracle_model(torch, tree, spec, sdpa=True, logits_out=False)
    plain = ctp.plain_model(torch, tree, spec)
    with torch.no_grad():
        for w in oracle.module.values():
            w.copy_(1 + 0.1 * torch.randn(w.shape) if w.dim() == 1 else torch.randn(w.shape) / math.sqrt(w.shape[-1]))
        named = dict(plain.module.named_parameters())
        if set(named) != set(oracle.module):
            raise AssertionError(f"parameter names differ: {sorted(set(named) ^ set(oracle.module))}")
        for name, p in named.items():
            p.copy_(oracle.module[name])
    return oracle, plain


@unittest.skipIf(torch is None, "torch is not installed for this python")
class SameLoss(unittest.TestCase):
    CASES = {
        "elementwise gate, GQA, embedding norm": {},
        "headwise gate, tied, QK-norm": dict(gate="headwise", tied=True, qk=True),
        "no gate, sandwich, scales": dict(gate="none", placement="sandwich", emb_norm=False, K=4,
                                          emb_scale=2.5, logit_scale=0.5),
    }

    def test_step0_loss_and_gradients(self):
        for name, over in self.CASES.items():
            with self.subTest(name), tempfile.TemporaryDirectory() as tree:
                c = write_tree(tree, **over)
                spec = read_spec(tree)
                oracle, plain = models(tree, spec)
                self.assertEqual(plain.kind, "modules")
                torch.manual_seed(1)
                tokens = torch.randint(0, c["V"], (c["B"], c["T"]))
                targets = torch.randint(0, c["V"], (c["B"], c["T"]))
                lo, lp = oracle.loss_fn(tokens, targets), plain.loss_fn(tokens, targets)
                self.assertLess(abs(lo.item() - lp.item()), 1e-5 * lo.item(), f"{lo.item()} vs {lp.item()}")
                lo.backward()
                lp.backward()
                named = dict(plain.module.named_parameters())
                for pname, w in oracle.module.items():
                    self.assertLess(rel(named[pname].grad, w.grad), 1e-4, pname)

    def test_rope_tables_built_once(self):
        with tempfile.TemporaryDirectory() as tree:
            c = write_tree(tree)
            spec = read_spec(tree)
            torch.manual_seed(0)
            a = ctp.oracle_model(torch, tree, spec, sdpa=True, logits_out=False)
            torch.manual_seed(0)
            b = ctp.oracle_model(torch, tree, spec, sdpa=True, logits_out=False, hoist_rope=True)
            tokens = torch.randint(0, c["V"], (c["B"], c["T"]))
            self.assertEqual(a.loss_fn(tokens, tokens).item(), b.loss_fn(tokens, tokens).item())

    def test_two_compiled_steps(self):
        """The bench's old torch.compile row and the plain row, from equal weights on equal tokens."""
        with tempfile.TemporaryDirectory() as tree:
            write_tree(tree)
            spec = read_spec(tree)
            oracle, plain = models(tree, spec)
            old = ctp.Runner(torch, spec, oracle, compile_=True, fused_adamw=None, label="compile")
            new = ctp.Runner(torch, spec, plain, compile_=True, fused_adamw=True, label="plain")
            for runner in (old, new):
                torch.manual_seed(5)  # the same random tokens for both
                runner.warm_up(2)
            for step, (a, b) in enumerate(zip(old.losses, new.losses)):
                self.assertLess(abs(a - b), 1e-5 * a, f"step {step}: old {a}, plain {b}")
            self.assertEqual(len(old.losses), 2)


@unittest.skipIf(torch is None or not os.environ.get("CPU_VS_TORCH_TREE"),
                 "set CPU_VS_TORCH_TREE to a built tree (e.g. generated/tiny) to run bench/cpu_vs_torch")
class Cli(unittest.TestCase):
    def test_short_run(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "r.json"
            p = subprocess.run([sys.executable, str(ROOT / "bench" / "cpu_vs_torch"), "--tree",
                                os.environ["CPU_VS_TORCH_TREE"], "--steps", "2", "--warmup", "1",
                                "--rounds", "2", "--json", str(out)],
                               capture_output=True, text=True, cwd=ROOT)
            self.assertEqual(p.returncode, 0, p.stderr[-3000:])
            for label in ("gcompile CPU, metrics off", "PyTorch torch.compile + SDPA (oracle)",
                          "PyTorch torch.compile, plain + fused AdamW", "fastest PyTorch row (*):", "vs fastest"):
                self.assertIn(label, p.stdout)
            r = json.loads(out.read_text())
            for key in ("pytorch_eager", "pytorch_sdpa", "pytorch_compile", "pytorch_plain", "ratio_vs_compile",
                        "fastest_torch", "ratio_vs_fastest_torch"):
                self.assertIn(key, r)
            self.assertIn(r["fastest_torch"], ("eager", "sdpa", "compile", "plain"))
            self.assertEqual(r["pytorch_plain"]["parameters"], r["gcompile_metrics_off"]["parameters"])


if __name__ == "__main__":
    unittest.main()
