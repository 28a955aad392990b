#!/usr/bin/env python3
"""bench/torch_moe.py, the PyTorch MoE peer of moe_3b, without a GPU: its block against the MoE
written token by token, its grouped GEMMs' operands under autocast (a torch whose _grouped_mm keeps
the CUDA kernel's bf16-only contract), and a CPU run of the baseline on specs/moe_tiny.toml through
gcompile's plan (skipped, saying so, without torch or a built gcompile).

    .venv/bin/python tests/bench/torch_moe_test.py
"""

import json
import math
import os
import tempfile
import unittest
from types import SimpleNamespace

from torch_baseline_test import ROOT, run_baseline  # also puts bench/ on the path


class MoeBlock(unittest.TestCase):
    """bench/torch_moe.py's block (sorted, padded groups, torch._grouped_mm) against the MoE written
    token by token: y_t = Σ over t's top-k experts of w · SwiGLU_e(x_t), plus the shared expert;
    L_aux = coef · E · Σ_e f_e · P_e."""

    def test_grouped_block_equals_the_token_by_token_sum(self):
        try:
            import torch
        except ImportError:
            self.skipTest("torch is not installed")
        import torch_moe
        F = torch.nn.functional
        for scoring, renorm in (("softmax", False), ("sigmoid", True)):
            moe = {"n_dense_layers": 0, "layer_interval": 1, "n_experts": 5, "top_k": 2, "expert_d_ff": 16,
                   "shared_d_ff": 8, "dense_d_ff": 0, "router_scoring": scoring, "norm_topk_prob": renorm,
                   "load_balance": "aux_loss", "load_balance_coef": 0.01}
            cfg = SimpleNamespace(d_model=8, moe=moe, norm_placement="pre")
            torch.manual_seed(0)

            class Shared(torch.nn.Module):  # bench/torch_model.py's MLP, as the block builds it
                def __init__(self, d_ff, out_norm=False):
                    super().__init__()
                    self.gate_proj = torch.nn.Linear(8, d_ff, bias=False)
                    self.up_proj = torch.nn.Linear(8, d_ff, bias=False)
                    self.down_proj = torch.nn.Linear(d_ff, 8, bias=False)

                def forward(self, x):
                    return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

            block = torch_moe.moe_block(cfg, torch, Shared)
            with torch.no_grad():
                for p in block.parameters():
                    p.normal_(0.0, 0.5)
            x = torch.randn(2, 7, 8)
            got = block(x)
            xf = x.reshape(14, 8)
            scores = F.linear(xf, block.router.weight)
            scores = torch.softmax(scores, -1) if scoring == "softmax" else torch.sigmoid(scores)
            want = block.shared_experts(xf).clone()
            counts = [0] * 5
            for t in range(14):
                w, chosen = scores[t].topk(2)
                if renorm:
                    w = w / w.sum()
                for weight, e in zip(w.tolist(), chosen.tolist()):
                    counts[e] += 1
                    ex = block.experts
                    h = F.silu(xf[t] @ ex.gate_proj.weight[e].t()) * (xf[t] @ ex.up_proj.weight[e].t())
                    want[t] += weight * (h @ ex.down_proj.weight[e].t())
            torch.testing.assert_close(got.reshape(14, 8), want, rtol=1e-5, atol=1e-5)
            aux = 0.01 * 5 * sum(counts[e] / 28.0 * scores[:, e].mean().item() for e in range(5))
            self.assertAlmostEqual(block.aux_loss.item(), aux, places=6)
            self.assertTrue(torch_moe.is_moe_layer(cfg, 0))

    def test_grouped_mm_gets_bf16_operands_under_autocast(self):
        """torch._grouped_mm's CUDA kernel refuses fp32 operands and autocast does not cast them (the
        first H200 run of the moe_bench row failed so, 2026-11-28): the block casts under autocast.
        Here a torch whose _grouped_mm refuses non-bf16 operands as the CUDA kernel does."""
        try:
            import torch
        except ImportError:
            self.skipTest("torch is not installed")
        if not hasattr(torch, "_grouped_mm"):
            self.skipTest("this torch has no _grouped_mm")
        import torch_moe
        seen = []

        def bf16_only_grouped_mm(a, b, offs):
            if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16:
                raise RuntimeError(f"Expected inputs of BF16 type but got {a.dtype} and {b.dtype}")
            seen.append(a.shape)
            return torch._grouped_mm(a, b, offs=offs)

        class CudaLikeTorch:  # torch, but _grouped_mm keeps the CUDA kernel's dtype contract
            def __getattr__(self, name):
                return bf16_only_grouped_mm if name == "_grouped_mm" else getattr(torch, name)

        moe = {"n_dense_layers": 0, "layer_interval": 1, "n_experts": 4, "top_k": 2, "expert_d_ff": 16,
               "shared_d_ff": 0, "dense_d_ff": 0, "router_scoring": "softmax", "norm_topk_prob": False,
               "load_balance": "none", "load_balance_coef": 0.0}
        cfg = SimpleNamespace(d_model=16, moe=moe, norm_placement="pre")
        torch.manual_seed(0)
        reference = torch_moe.moe_block(cfg, torch, None)  # fp32 throughout, outside autocast
        with torch.no_grad():
            for p in reference.parameters():
                p.normal_(0.0, 0.3)
        block = torch_moe.moe_block(cfg, CudaLikeTorch(), None)
        block.load_state_dict(reference.state_dict())
        x = torch.randn(2, 8, 16)
        want = reference(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = block(x)
        self.assertEqual(len(seen), 3)  # gate, up and down ran as bf16 grouped GEMMs
        self.assertEqual(got.dtype, x.dtype)
        torch.testing.assert_close(got, want, rtol=5e-2, atol=5e-2)

    def test_moe_tiny_spec_through_gcompile(self):  # the plan's tensors, names and shapes, and a step
        gcompile = os.environ.get("GCOMPILE") or os.path.join(ROOT, "build", "compiler", "gcompile")
        if not os.access(gcompile, os.X_OK):
            self.skipTest(f"no gcompile at {gcompile} (build it or set $GCOMPILE)")
        with tempfile.TemporaryDirectory() as d:
            out = run_baseline("--spec-toml", os.path.join(ROOT, "specs", "moe_tiny.toml"), "--gcompile", gcompile,
                               "--profile-dir", d)
            self.assertEqual(out.returncode, 0, out.stderr[-3000:])
            doc = json.loads(out.stdout.strip().splitlines()[-1])
            self.assertGreater(doc["step_ms_median"], 0)
            self.assertTrue(math.isfinite(doc["rows"][0]["loss_last"]))


if __name__ == "__main__":
    unittest.main()
