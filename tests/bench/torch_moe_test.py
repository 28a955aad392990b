"""bench/torch_moe.py, the grouped experts of the PyTorch MoE peer of moe_3b, without a GPU: the
shared model's MoE layer (compiler/export/python/gcompile_decoder.py) with them against the same
layer with its experts one at a time and against the MoE written token by token, its grouped GEMMs'
operands under autocast (a torch whose _grouped_mm keeps the CUDA kernel's bf16-only contract), and
a CPU run of the baseline on specs/moe_tiny.toml through gcompile's plan (skipped, saying so,
without torch or a built gcompile).

    .venv/bin/python tests/bench/torch_moe_test.py
"""

import json
import math
import os
import tempfile
import unittest

from torch_baseline_test import ROOT, run_baseline  # also puts bench/ on the path


def moe_layer(torch, n_experts, top_k, scoring, renorm, capacity=0, shared=8, d=8, seed=0):
    """(shape, W): one MoE layer of the shared model with random tensors (never zeros)."""
    import torch_model

    gd = torch_model.decoder_module()
    m = gd.MoeShape(layers=frozenset({0}), n_experts=n_experts, top_k=top_k, expert_d_ff=16, shared_d_ff=shared,
                    router_scoring=scoring, norm_topk_prob=renorm, load_balance="aux_loss", load_balance_coef=0.01,
                    capacity=capacity)
    shape = gd.DecoderShape(vocab_size=11, d_model=d, n_layers=1, n_heads=2, n_kv_heads=2, head_dim=4, d_ff=4,
                            norm_eps=1e-5, moe=m)
    g = torch.Generator().manual_seed(seed)
    W = {name[len("model.layers.0."):]: torch.randn(dims, generator=g) * 0.5
         for name, dims in gd.parameter_shapes(shape).items() if ".mlp." in name}
    return gd, shape, W


class MoeBlock(unittest.TestCase):
    """bench/torch_moe.py's experts (sorted, padded groups, torch._grouped_mm) in the shared model's
    MoE layer against its loop and against the MoE written token by token:
    y_t = sum over t's top-k experts of w * SwiGLU_e(x_t), plus the shared expert;
    L_aux = coef * E * sum_e f_e * P_e."""

    def test_grouped_experts_equal_the_token_by_token_sum(self):
        try:
            import torch
        except ImportError:
            self.skipTest("torch is not installed")
        import torch_moe
        F = torch.nn.functional
        for scoring, renorm in (("softmax", False), ("sigmoid", True)):
            gd, shape, W = moe_layer(torch, 5, 2, scoring, renorm)
            x = torch.randn(2, 7, 8, generator=torch.Generator().manual_seed(1))
            grouped = gd.Execution(experts=torch_moe.grouped_experts(torch))
            got, aux = gd.moe(shape, gd.Named(W), x, 0, None, grouped)
            loop, loop_aux = gd.moe(shape, gd.Named(W), x, 0, None, gd.PLAIN)
            torch.testing.assert_close(got, loop, rtol=1e-5, atol=1e-5)
            xf = x.reshape(14, 8)
            scores = F.linear(xf, W["mlp.router.weight"])
            scores = torch.softmax(scores, -1) if scoring == "softmax" else torch.sigmoid(scores)
            want = gd.swiglu(xf, W["mlp.shared_experts.gate_proj.weight"], W["mlp.shared_experts.up_proj.weight"],
                             W["mlp.shared_experts.down_proj.weight"])
            counts = [0] * 5
            for t in range(14):
                w, chosen = scores[t].topk(2)
                if renorm:
                    w = w / w.sum()
                for weight, e in zip(w.tolist(), chosen.tolist()):
                    counts[e] += 1
                    h = F.silu(xf[t] @ W["mlp.experts.gate_proj.weight"][e].t()) * (
                        xf[t] @ W["mlp.experts.up_proj.weight"][e].t())
                    want[t] += weight * (h @ W["mlp.experts.down_proj.weight"][e].t())
            torch.testing.assert_close(got.reshape(14, 8), want, rtol=1e-5, atol=1e-5)
            prob = scores if scoring == "softmax" else scores / scores.sum(-1, keepdim=True)
            expected = 0.01 * 5 * sum(counts[e] / 28.0 * prob[:, e].mean().item() for e in range(5))
            self.assertAlmostEqual(aux.item(), expected, places=6)
            self.assertAlmostEqual(loop_aux.item(), expected, places=6)

    def test_grouped_experts_drop_what_the_capacity_drops(self):
        try:
            import torch
        except ImportError:
            self.skipTest("torch is not installed")
        import torch_moe
        gd, shape, W = moe_layer(torch, 4, 3, "softmax", False, capacity=2, shared=0)
        x = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(2))
        got, _ = gd.moe(shape, gd.Named(W), x, 0, None, gd.Execution(experts=torch_moe.grouped_experts(torch)))
        want, _ = gd.moe(shape, gd.Named(W), x, 0, None, gd.PLAIN)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        dropless, _ = gd.moe(gd.DecoderShape(**{**shape.__dict__, "moe": gd.MoeShape(
            **{**shape.moe.__dict__, "capacity": 0})}), gd.Named(W), x, 0, None, gd.PLAIN)
        self.assertGreater(float((dropless - want).abs().max()), 1e-3)  # 18 assignments, 8 kept per sequence

    def test_grouped_mm_gets_bf16_operands_under_autocast(self):
        """torch._grouped_mm's CUDA kernel refuses fp32 operands and autocast does not cast them (the
        first H200 run of the moe_bench row failed so, 2026-11-28): the experts cast under autocast.
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

        gd, shape, W = moe_layer(torch, 4, 2, "softmax", False, shared=0, d=16)
        x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(3))
        want, _ = gd.moe(shape, gd.Named(W), x, 0, None, gd.PLAIN)  # fp32 throughout, outside autocast
        with torch.autocast("cpu", dtype=torch.bfloat16):
            grouped = gd.Execution(experts=torch_moe.grouped_experts(CudaLikeTorch()))
            got, _ = gd.moe(shape, gd.Named(W), x, 0, None, grouped)
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
