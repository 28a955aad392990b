#!/usr/bin/env python3
"""bench/torch_baseline.py, bench/torch_profile.py and bench/profile_compare.py without a GPU:
the GEMM shape classification, the grouping of a (synthetic) trace into gcompile's profile
schema with its idle time, the side-by-side table, the SDPA backend list and its error rows, and
one real CPU run of the baseline on a tiny model (eager, 1 warm-up + 2 timed + 1 profiled step).

    .venv/bin/python tests/bench/torch_baseline_test.py            # the tests
    python3 tests/bench/torch_baseline_test.py --write-fixture DIR [tiny|0.1b|1.5b]
        # a resolved spec and plan.json a machine without gcompile can give the baseline

The CPU run uses a resolved spec and plan written here (what `gcompile resolve` and `gcompile
explain --json` give for such a model, for the fields the baseline reads); with a built gcompile
(build/compiler/gcompile or $GCOMPILE) it also runs on specs/tiny.toml through gcompile itself.
It is skipped, saying so, where torch is not installed.
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import unittest
from types import SimpleNamespace

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import profile_compare  # noqa: E402
import torch_profile as tp  # noqa: E402
import torch_rows  # noqa: E402

PRESETS = {  # name: (vocab, d, layers, heads, kv heads, head dim, d_ff, seq, micro-batch, gate, precision)
    "tiny": (256, 64, 2, 4, 2, 16, 160, 40, 2, "elementwise", "fp32"),  # 80 tokens a micro-batch
    "0.1b": (60416, 768, 12, 12, 12, 64, 2304, 2048, 8, "none", "bf16"),
    "1.5b": (60416, 2048, 24, 24, 24, 128, 5460, 2048, 8, "none", "bf16"),
}


def write_fixture(directory, preset="tiny"):
    """DIR/spec.resolved.toml and DIR/plan.json of a dense model (the fields the baseline reads)."""
    V, d, L, H, K, hd, ff, T, B, gate, precision = PRESETS[preset]
    name = f"fixture_{preset.replace('.', '_')}"
    q, kv = H * hd, K * hd
    gdim = {"none": 0, "headwise": H, "elementwise": q}[gate]
    shapes = [("model.embed_tokens.weight", [V, d], "embedding")]
    for i in range(L):
        p = f"model.layers.{i}."
        shapes += [(p + "input_layernorm.weight", [d], "norm"), (p + "self_attn.q_proj.weight", [q, d], "attn"),
                   (p + "self_attn.k_proj.weight", [kv, d], "attn"), (p + "self_attn.v_proj.weight", [kv, d], "attn"),
                   (p + "self_attn.o_proj.weight", [d, q], "attn"), (p + "post_attention_layernorm.weight", [d], "norm"),
                   (p + "mlp.gate_proj.weight", [ff, d], "mlp"), (p + "mlp.up_proj.weight", [ff, d], "mlp"),
                   (p + "mlp.down_proj.weight", [d, ff], "mlp")]
        if gdim:
            shapes.append((p + "self_attn.gate_proj.weight", [gdim, d], "attn"))
    shapes += [("model.norm.weight", [d], "norm"), ("lm_head.weight", [V, d], "head")]
    params, total, matmul = [], 0, 0
    for pname, shape, cls in shapes:
        n = math.prod(shape)
        total += n
        matmul += n if cls != "norm" and cls != "embedding" else 0
        init = {"kind": "constant", "value": 1.0} if cls == "norm" else {"kind": "normal", "std": 0.02}
        params.append({"name": pname, "class": cls, "shape": shape, "init": init, "lr_mult": 1.0,
                       "weight_decay": 0.0 if cls == "norm" else 0.1})
    plan = {"experiment": {"name": name}, "params": params, "counts": {"total": total},
            "scales": {"embedding": 1.0, "attention": 1.0 / math.sqrt(hd), "logits": 1.0},
            "flops": {"matmul_params": matmul, "per_token": 6.0 * matmul + 12.0 * L * H * hd * T}}
    toml = f"""[experiment]
name = "{name}"

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
norm_eps = 1e-6
norm_placement = "pre"
embedding_norm = false
qk_norm = false
tie_embeddings = false
gated_attention = "{gate}"
rope_theta = 10000.0

[train]
seq_len = {T}
micro_batch = {B}
global_batch = {B}
precision = "{precision}"

[optim]
lr = 1e-3
betas = [0.9, 0.95]
eps = 1e-8
grad_clip = 1.0
"""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "spec.resolved.toml"), "w") as f:
        f.write(toml)
    with open(os.path.join(directory, "plan.json"), "w") as f:
        json.dump(plan, f)
    return os.path.join(directory, "spec.resolved.toml"), os.path.join(directory, "plan.json")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def read(path):
    with open(path) as f:
        return f.read()


def cfg_of(preset, gate=None):
    V, d, L, H, K, hd, ff, T, B, g, _ = PRESETS[preset]
    return SimpleNamespace(vocab_size=V, d_model=d, n_layers=L, n_heads=H, n_kv_heads=K, head_dim=hd, d_ff=ff,
                           seq_len=T, micro_batch=B, gated_attention=gate or g)


def cats(result):
    return {c: round(f, 4) for c, f in result[0]}


class GemmShapes(unittest.TestCase):
    def test_dense_0_1b(self):  # MHA, q = kv = d = 768: q, k, v and o are all 768 x 768
        s = tp.ModelShapes(cfg_of("0.1b"))
        n = 8 * 2048
        for dims in [(1, n, 768, 768), (1, 768, n, 768)]:  # forward / dX, and dW (contraction over tokens)
            got = tp.classify_gemm(dims, s)
            self.assertEqual(cats(got), {"gemm.qkv": 0.75, "gemm.attn_out": 0.25})
            self.assertIn("split by count", got[1])
        self.assertEqual(cats(tp.classify_gemm((1, n, 768, 2304), s)), {"gemm.mlp_in": 0.6667, "gemm.mlp_down": 0.3333})
        self.assertEqual(cats(tp.classify_gemm((1, 2304, n, 768), s)), {"gemm.mlp_in": 0.6667, "gemm.mlp_down": 0.3333})
        self.assertEqual(tp.classify_gemm((1, n, 768, 60416), s), ([("lm_head_ce", 1.0)], None))
        self.assertEqual(tp.classify_gemm((1, 60416, n, 768), s), ([("lm_head_ce", 1.0)], None))

    def test_dense_1_5b_and_gates(self):
        n = 8 * 2048
        s = tp.ModelShapes(cfg_of("1.5b"))
        self.assertEqual(cats(tp.classify_gemm((1, n, 2048, 3072), s)), {"gemm.qkv": 0.75, "gemm.attn_out": 0.25})
        s = tp.ModelShapes(cfg_of("1.5b", gate="elementwise"))  # the gate is 2048 -> 3072 too
        self.assertEqual(cats(tp.classify_gemm((1, n, 3072, 2048), s)),
                         {"gemm.qkv": 0.6, "gemm.attn_out": 0.2, "gemm.attn_gate": 0.2})
        s = tp.ModelShapes(cfg_of("1.5b", gate="headwise"))  # one scalar per head: 2048 -> 24
        self.assertEqual(tp.classify_gemm((1, n, 2048, 24), s), ([("gemm.attn_gate", 1.0)], None))
        # Inductor pads d_ff = 5460 to 5464 (seen on an H200); aligned dimensions are never padded.
        self.assertEqual(cats(tp.classify_gemm((1, 5464, n, 2048), s)), {"gemm.mlp_in": 0.6667, "gemm.mlp_down": 0.3333})
        self.assertEqual(cats(tp.classify_gemm((1, n, 2048, 5460), s)), {"gemm.mlp_in": 0.6667, "gemm.mlp_down": 0.3333})
        self.assertEqual(tp.classify_gemm((1, n, 2048, 3080), s), ([("gemm.other", 1.0)], None))

    def test_gqa_unambiguous(self):  # tiny: d 64, q 64, k/v 32, gate 64, d_ff 160, 80 tokens
        s = tp.ModelShapes(cfg_of("tiny"))
        self.assertEqual(tp.classify_gemm((1, 80, 64, 32), s), ([("gemm.qkv", 1.0)], None))
        self.assertEqual(cats(tp.classify_gemm((1, 80, 64, 64), s)),
                         {"gemm.qkv": 0.3333, "gemm.attn_out": 0.3333, "gemm.attn_gate": 0.3333})

    def test_other_and_attention(self):
        s = tp.ModelShapes(cfg_of("tiny"))
        self.assertEqual(tp.classify_gemm((1, 80, 64, 77), s), ([("gemm.other", 1.0)], None))  # no such projection
        self.assertEqual(tp.classify_gemm((1, 81, 64, 32), s), ([("gemm.other", 1.0)], None))  # no token dimension
        self.assertEqual(tp.classify_gemm((8, 40, 16, 40), s), ([("attention", 1.0)], None))  # math SDPA's q k^T

    def test_gemm_dims(self):
        self.assertEqual(tp.gemm_dims("aten::mm", [[80, 64], [64, 32], [80, 32]]), (1, 80, 64, 32))  # out=
        self.assertEqual(tp.gemm_dims("aten::addmm", [[32], [80, 64], [64, 32], [], []]), (1, 80, 64, 32))
        self.assertEqual(tp.gemm_dims("aten::bmm", [[8, 40, 16], [8, 16, 40]]), (8, 40, 16, 40))
        self.assertIsNone(tp.gemm_dims("aten::mm", [[80, 64]]))


class KernelNames(unittest.TestCase):
    def test_names(self):
        s, g = tp.ModelShapes(cfg_of("0.1b")), tp.ModelShapes(cfg_of("0.1b", gate="elementwise"))
        cases = [
            ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_3", [], s, "norm"),
            ("triton_poi_fused_mul_silu_5", [], s, "swiglu"),
            ("triton_poi_fused_mul_sigmoid_4", [], g, "gate"),
            ("triton_poi_fused_mul_sigmoid_4", [], s, "swiglu"),
            ("triton_poi_fused__to_copy_add_cat_mul_sub_2", [], s, "rope"),
            ("triton_red_fused__log_softmax_nll_loss_forward_7", [], s, "lm_head_ce"),
            ("triton_poi_fused_embedding_0", [], s, "embedding"),
            ("triton_poi_fused_embedding_dense_backward_1", [], s, "embedding"),
            ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>(Flash_fwd_params)", [], s,
             "attention"),
            ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3", [], s, "attention"),
            ("fmha_cutlassB_bf16_aligned_64x64_k64_sm80", [], s, "attention"),
            ("void at::native::elementwise_kernel<128, 2>(int)", ["aten::_scaled_dot_product_flash_attention"], s,
             "attention"),
            ("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>()", [], s, "optimizer"),
            ("void at::native::vectorized_elementwise_kernel<4>()", ["gc::step", "gc::optimizer", "aten::mul_"], s,
             "optimizer"),
            ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNN", [], s, "gemm.other"),
            ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", [], s, "communication"),
            ("triton_poi_fused__to_copy_0", [], s, "other"),
            ("triton_per_fused__to_copy_add_div_expand_mul_pow_sum_view_13", [], s, "norm"),  # RMSNorm backward
            ("triton_poi_fused__to_copy_add_mul_neg_slice_slice_backward_transpose_unsqueeze_12", [], s, "rope"),
            ("triton_poi_fused__unsafe_view_mm_mul_silu_silu_backward_view_6", [], s, "swiglu"),
            ("triton_red_fused__log_softmax__log_softmax_backward_data__to_copy_nll_loss_backward_0", [], s,
             "lm_head_ce"),
            ("cudnn::fusion::compute_dot_do_o_specialized<true, 128>", ["aten::_cudnn_attention_backward"], s,
             "attention"),
            ("Memset (Device)", [], s, "other"),
        ]
        for name, stack, shapes, want in cases:
            self.assertEqual(tp.classify_name(name, stack, shapes), want, name)

    def test_short_name(self):
        self.assertEqual(tp.short_name("void pytorch_flash::flash_fwd_kernel<T<64>>(Flash_fwd_params)"),
                         "pytorch_flash::flash_fwd_kernel<T<64>>")
        self.assertEqual(tp.short_name("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<A>(B)"),
                         "at::native::multi_tensor_apply_kernel<A>")


def synthetic_trace():
    """Two steps of a toy CUDA step: per step a qkv GEMM (0.1B shapes), a norm kernel, flash
    attention, a cast and the optimizer; each step takes 10 ms of which 6 ms are kernels."""
    ev, corr, ext = [], [0], [0]
    n = 8 * 2048

    def op(name, ts, dur, dims=None, cat="cpu_op", tid=1):
        ext[0] += 1
        args = {"External id": ext[0]}
        if dims:
            args["Input Dims"] = dims
        ev.append({"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid, "args": args})

    def kernel(name, launch_ts, dur, tid=1):
        corr[0] += 1
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": launch_ts, "dur": 1,
                   "tid": tid, "args": {"correlation": corr[0]}})
        ev.append({"ph": "X", "cat": "kernel", "name": name, "ts": launch_ts + 50, "dur": dur, "tid": 7,
                   "args": {"correlation": corr[0]}})

    for step in range(2):
        t = step * 10000.0
        op("gc::step", t, 9000, cat="user_annotation")
        op("aten::mm", t + 10, 100, [[n, 768], [768, 768], [n, 768]])
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", t + 20, 2000)  # 2 ms
        kernel("triton_red_fused_add_mean_mul_pow_rsqrt_1", t + 200, 500)
        op("aten::_scaled_dot_product_flash_attention", t + 300, 100)
        op("aten::_flash_attention_forward", t + 310, 50)
        kernel("void pytorch_flash::flash_fwd_kernel<X>(Flash_fwd_params)", t + 320, 1500)
        kernel("triton_poi_fused__to_copy_0", t + 500, 500)
        op("gc::optimizer", t + 600, 1000, cat="user_annotation")
        op("aten::_fused_adamw_", t + 700, 100)
        kernel("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>()", t + 710, 1500)
    # A kernel launched before the window (no launch record in the trace): the previous step's tail.
    ev.append({"ph": "X", "cat": "kernel", "name": "orphan_kernel", "ts": 1, "dur": 5000, "args": {"correlation": 999}})
    return {"traceEvents": ev}


class TraceGrouping(unittest.TestCase):
    def test_profile_from_cuda_trace(self):
        launches, info = tp.launches_from_trace(synthetic_trace())
        self.assertTrue(info["device_events"])
        self.assertEqual(info["orphans"], 1)
        self.assertEqual(tp.sdpa_backend_seen(info, launches), "flash")
        shapes = tp.ModelShapes(cfg_of("0.1b"))
        p = tp.build_profile(launches, shapes, [10.0, 10.0], {"implementation": "torch.compile", "spec": "x",
                                                              "tokens_per_step": 16384, "notes": ["n0"]})
        self.assertEqual(p["schema"], "gcompile-profile-1")
        self.assertEqual(p["profiled_steps"], 2)
        self.assertAlmostEqual(p["step_ms"], 10.0)
        self.assertAlmostEqual(p["ops_ms"], 6.0)
        self.assertAlmostEqual(p["idle_ms"], 4.0)
        c = {k: round(v["ms_per_step"], 6) for k, v in p["categories"].items()}
        self.assertEqual(c, {"gemm.qkv": 1.5, "gemm.attn_out": 0.5, "norm": 0.5, "attention": 1.5, "other": 0.5,
                             "optimizer": 1.5, "idle": 4.0})
        self.assertAlmostEqual(p["categories"]["idle"]["share"], 0.4)
        self.assertAlmostEqual(sum(v["ms_per_step"] for v in p["categories"].values()), p["step_ms"])
        qkv = next(o for o in p["ops"] if o["category"] == "gemm.qkv")
        self.assertEqual(qkv["calls_per_step"], 0.75)
        self.assertEqual(qkv["pass"], "forward")
        self.assertAlmostEqual(qkv["tflops"], 2 * 16384 * 768 * 768 / 2e-3 / 1e12)
        self.assertIn("[16384x768]x[768x768]", qkv["op"])
        self.assertTrue(any("ambiguous GEMM shape 768x768" in n for n in p["notes"]))
        self.assertEqual(p["notes"][0], "n0")
        self.assertLessEqual(len(p["top_kernels"]), 15)
        self.assertEqual(p["top_kernels"][0]["category"], "gemm.qkv 0.75+gemm.attn_out 0.25")
        self.assertEqual(next(o for o in p["ops"] if o["category"] == "optimizer")["pass"], "step")

    def test_overlap_clamps_idle(self):
        launches, _ = tp.launches_from_trace(synthetic_trace())
        p = tp.build_profile(launches, tp.ModelShapes(cfg_of("0.1b")), [5.0, 5.0], {})
        self.assertEqual(p["idle_ms"], 0.0)
        self.assertTrue(any("exceeds the step time" in n for n in p["notes"]))

    def test_cpu_trace_self_times(self):
        ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": 0, "dur": 100, "tid": 1, "args": {}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 80, "tid": 1,
               "args": {"Input Dims": [[80, 64], [64, 160]]}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::rsqrt", "ts": 200, "dur": 30, "tid": 1, "args": {}}]
        launches, info = tp.launches_from_trace({"traceEvents": ev})
        self.assertFalse(info["device_events"])
        got = {l["name"]: l["dur_us"] for l in launches}
        self.assertEqual(got, {"aten::linear": 20, "aten::mm": 80, "aten::rsqrt": 30})
        p = tp.build_profile(launches, tp.ModelShapes(cfg_of("tiny")), [0.2], {})
        c = {k: round(v["ms_per_step"], 6) for k, v in p["categories"].items()}
        self.assertEqual(c, {"gemm.mlp_in": 0.053333, "gemm.mlp_down": 0.026667, "norm": 0.03, "other": 0.02,
                             "idle": 0.07})


def profile(impl, backend, step, cats_ms, tokens=16384):
    ops = sum(cats_ms.values())
    c = {k: {"ms_per_step": v, "share": v / step} for k, v in cats_ms.items()}
    c["idle"] = {"ms_per_step": step - ops, "share": (step - ops) / step}
    return {"schema": "gcompile-profile-1", "implementation": impl, "sdpa_backend": backend, "device": "H200",
            "spec": "x", "profiled_steps": 3, "tokens_per_step": tokens, "step_ms": step, "ops_ms": ops,
            "idle_ms": step - ops, "categories": c, "ops": []}


class Compare(unittest.TestCase):
    def test_table(self):
        ours = profile("gcompile", None, 50.0, {"attention": 10.0, "gemm.qkv": 20.0, "measuring": 1.0})
        torch = profile("torch.compile", "auto=cudnn", 40.0, {"attention": 8.0, "gemm.qkv": 18.0, "rope": 2.0})
        text = profile_compare.compare([ours, torch])
        lines = text.splitlines()
        self.assertIn("| category | ours ms/step | share | torch(auto=cudnn) ms/step | share |", lines)
        self.assertIn("| attention | 10.000 | 20.0% | 8.000 | 20.0% |", lines)
        self.assertIn("| rope | 0.000 | 0.0% | 2.000 | 5.0% |", lines)  # only torch has it
        self.assertIn("| measuring | 1.000 | 2.0% | 0.000 | 0.0% |", lines)  # only ours has it
        self.assertIn("| idle | 19.000 | 38.0% | 12.000 | 30.0% |", lines)
        self.assertIn("| **step** | 50.000 | 100.0% | 40.000 | 100.0% |", lines)
        self.assertTrue(any(l.startswith("outside attention: ours 40.000 ms vs torch(auto=cudnn) 32.000 ms")
                            for l in lines), text)
        order = [l.split(" | ")[0][2:] for l in lines if l.startswith("| ") and "ms/step" not in l]
        self.assertEqual(order, ["attention", "gemm.qkv", "rope", "measuring", "idle", "**step**"])
        # torch's timed step (no profiler) is shown and used for the outside-attention line.
        torch.update({"step_ms_unprofiled": 36.0, "idle_ms_unprofiled": 8.0})
        lines = profile_compare.compare([ours, torch]).splitlines()
        self.assertIn("| step, timed without the profiler | - | - | 36.000 | idle 8.000 |", lines)
        self.assertTrue(any(l.startswith("outside attention: ours 40.000 ms vs torch(auto=cudnn) 28.000 ms")
                            for l in lines))

    def test_cli(self):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for i, doc in enumerate([profile("gcompile", None, 10.0, {"attention": 5.0}),
                                     profile("torch.compile", "flash", 12.0, {"attention": 4.0, "norm": 1.0}),
                                     profile("torch.compile", "cudnn", 11.0, {"norm": 1.0})]):
                paths.append(os.path.join(d, f"p{i}.json"))
                write(paths[-1], json.dumps(doc))
            md = os.path.join(d, "out.md")
            out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "profile_compare.py"), *paths,
                                  "--markdown", md], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(read(md).count("outside attention:"), 2)
            self.assertIn("torch(cudnn) 11.000 ms", out.stdout)
            bad = os.path.join(d, "bad.json")
            write(bad, "{")
            out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "profile_compare.py"), paths[0], bad],
                                 capture_output=True, text=True)
            self.assertEqual(out.returncode, 1)
            self.assertIn("not valid JSON", out.stderr)


try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ModuleNotFoundError:
    HAVE_TORCH = False


class Backends(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(torch_rows.parse_backends(torch_rows.DEFAULT_SDPA_BACKENDS), ["auto", "flash", "cudnn"])
        self.assertEqual(torch_rows.parse_backends(" flash,FLASH, mem_efficient,"), ["flash", "efficient"])
        for bad in ("flash,fa3", "", ","):
            with self.assertRaises(ValueError):
                torch_rows.parse_backends(bad)

    def test_flags(self):
        import torch_baseline as tb
        self.assertEqual(tb.parse_args(["--spec-toml", "x"]).backends, ["auto", "flash", "cudnn"])
        self.assertEqual(tb.parse_args(["--spec-toml", "x", "--sdpa-backend", "flash"]).backends, ["flash"])
        self.assertEqual(tb.parse_args(["--spec-toml", "x", "--sdpa-backends", "cudnn,auto"]).backends,
                         ["cudnn", "auto"])
        self.assertEqual(tb.parse_args(["--spec-toml", "x"]).profile_steps, 3)
        for bad in (["--sdpa-backend", "flash", "--sdpa-backends", "auto"], ["--sdpa-backends", "auto,fa3"],
                    ["--profile-steps", "-1"]):
            with self.assertRaises(SystemExit), open(os.devnull, "w") as null:
                stderr, sys.stderr = sys.stderr, null
                try:
                    tb.parse_args(["--spec-toml", "x", *bad])
                finally:
                    sys.stderr = stderr

    def test_a_failing_row_does_not_stop_the_others(self):
        import torch_baseline as tb
        calls = []
        fake_torch = SimpleNamespace(cuda=SimpleNamespace(empty_cache=lambda: calls.append("empty_cache")),
                                     _dynamo=SimpleNamespace(reset=lambda: calls.append("reset")))

        def runner(sh, backend, warmup, steps):
            calls.append((backend, warmup, steps))
            if backend == "cudnn":
                raise RuntimeError("No available kernel.\n  Aborting execution.")
            return {"sdpa_backend": backend, "step_ms_median": {"auto": 2.0, "flash": 1.5}[backend],
                    "profile": {"schema": tp.SCHEMA, "backend": backend}}

        with tempfile.TemporaryDirectory() as d:
            args = tb.parse_args(["--spec-toml", "x", "--steps", "15", "--warmup", "5", "--extra-row-steps", "8",
                                  "--extra-row-warmup", "2", "--profile-dir", d])
            sh = SimpleNamespace(args=args, torch=fake_torch, cuda=True, over_budget=lambda: False)
            rows = tb.run_rows(sh, ["auto", "cudnn", "flash"], runner)
            self.assertEqual(sorted(os.listdir(d)), ["profile_torch_auto.json", "profile_torch_flash.json"])
        self.assertEqual([r["sdpa_backend"] for r in rows], ["auto", "cudnn", "flash"])
        self.assertEqual(rows[1]["error"], "RuntimeError: No available kernel. Aborting execution.")
        self.assertIsNone(rows[1]["step_ms_median"])
        self.assertEqual([c for c in calls if isinstance(c, tuple)], [("auto", 5, 15), ("cudnn", 2, 8), ("flash", 2, 8)])
        self.assertEqual(calls.count("reset"), 3)
        # A forced row of the backend auto ran repeats auto's measurement (the same compiled graph).
        calls.clear()

        def runner2(sh, backend, warmup, steps):
            calls.append(backend)
            return {"sdpa_backend": backend, "sdpa_backend_used": "cudnn" if backend == "auto" else backend,
                    "step_ms_median": 2.0, "profile": {}}
        args.profile_dir = None
        rows = tb.run_rows(sh, ["auto", "flash", "cudnn"], runner2)
        self.assertEqual([c for c in calls if isinstance(c, str) and c in ("auto", "flash", "cudnn")], ["auto", "flash"])
        self.assertEqual(rows[2]["same_as"], "auto")
        self.assertEqual((rows[2]["sdpa_backend"], rows[2]["sdpa_backend_used"]), ("cudnn", "cudnn"))
        self.assertNotIn("profile", rows[2])
        args.rerun_auto_pick = True
        calls.clear()
        tb.run_rows(sh, ["auto", "cudnn"], runner2)
        self.assertEqual([c for c in calls if c in ("auto", "cudnn")], ["auto", "cudnn"])
        # Out of budget: the rows not started are error rows saying so.
        sh = SimpleNamespace(args=args, torch=fake_torch, cuda=False, over_budget=lambda: True)
        rows = tb.run_rows(sh, ["auto", "flash"], runner)
        self.assertTrue(all("skipped: --budget-s" in r["error"] for r in rows))

    @unittest.skipUnless(HAVE_TORCH, "torch is not installed")
    def test_probe_error(self):
        import torch
        cfg = SimpleNamespace(precision="fp32", micro_batch=2, seq_len=16, n_heads=4, n_kv_heads=2, head_dim=16,
                              attn_scale=0.25)
        self.assertEqual(torch_rows.sdpa_probe(torch, cfg, torch.device("cpu"), "auto", True)[1], None)
        label, err = torch_rows.sdpa_probe(torch, cfg, torch.device("cpu"), "cudnn", True)  # no cuDNN on the CPU
        self.assertIsNone(label)
        self.assertIn("No viable backend", err)


    @unittest.skipUnless(HAVE_TORCH, "torch is not installed")
    def test_check_backend_reads_the_step(self):  # the --profile-steps 0 path: the op the step ran
        import torch
        q = torch.randn(1, 2, 8, 4)
        row = {"sdpa_backend_used": "probe"}
        sh = SimpleNamespace(cuda=True)  # (the check itself only needs a profiler; the step runs here)
        torch_rows.check_backend(sh, row, 0, lambda step: torch.nn.functional.scaled_dot_product_attention(q, q, q))
        self.assertEqual(row["sdpa_backend_used"], "flash (CPU)")
        self.assertIn("_scaled_dot_product_flash_attention_for_cpu", row["sdpa_backend_used_from"])


def run_baseline(*args, timeout=300):
    cmd = [sys.executable, os.path.join(ROOT, "bench", "torch_baseline.py"), "--device", "cpu", "--no-compile",
           "--steps", "2", "--warmup", "1", "--profile-steps", "1", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tempfile.gettempdir())


@unittest.skipUnless(HAVE_TORCH, "torch is not installed: the CPU run of the baseline is skipped")
class CpuRun(unittest.TestCase):
    def check(self, out, profile_dir):
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        doc = json.loads(out.stdout.strip().splitlines()[-1])
        self.assertEqual(len(doc["rows"]), 1)
        row = doc["rows"][0]
        self.assertEqual(row["sdpa_backend"], "auto")
        self.assertIn("CPU", row["sdpa_backend_note"])
        self.assertIn("CUDA notion", doc["notes"][0])
        self.assertEqual(doc["fastest"], "auto")
        self.assertGreater(doc["step_ms_median"], 0)  # the first row's fields at the top level
        p = row["profile"]
        self.assertEqual(p["schema"], "gcompile-profile-1")
        self.assertEqual(p["profiled_steps"], 1)
        for c in ("attention", "gemm.qkv", "gemm.mlp_in", "gemm.mlp_down", "lm_head_ce", "optimizer", "idle"):
            self.assertIn(c, p["categories"], c)
        self.assertTrue(set(p["categories"]) <= set(tp.CATEGORIES), p["categories"].keys())
        total = sum(v["ms_per_step"] for v in p["categories"].values())
        self.assertAlmostEqual(total, p["step_ms"], delta=1e-6 * p["step_ms"] + 1e-9)
        saved = json.loads(read(os.path.join(profile_dir, "profile_torch_auto.json")))
        self.assertEqual(saved["categories"], p["categories"])
        return doc

    def test_fixture(self):
        with tempfile.TemporaryDirectory() as d:
            spec, plan = write_fixture(os.path.join(d, "fx"), "tiny")
            out = run_baseline("--spec-toml", spec, "--plan-json", plan, "--profile-dir", os.path.join(d, "prof"))
            doc = self.check(out, os.path.join(d, "prof"))
            self.assertTrue(doc["rows"][0]["sdpa_backend_used"].startswith(("flash", "math")))

    def test_tiny_spec_through_gcompile(self):
        gcompile = os.environ.get("GCOMPILE") or os.path.join(ROOT, "build", "compiler", "gcompile")
        if not os.access(gcompile, os.X_OK):
            self.skipTest(f"no gcompile at {gcompile} (build it or set $GCOMPILE); the fixture run covers the rest")
        with tempfile.TemporaryDirectory() as d:
            out = run_baseline("--spec-toml", os.path.join(ROOT, "specs", "tiny.toml"), "--gcompile", gcompile,
                               "--profile-dir", d)
            self.check(out, d)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--write-fixture":
        print(*write_fixture(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "tiny"))
        sys.exit(0)
    unittest.main()
