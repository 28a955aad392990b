#!/usr/bin/env python3
"""The GPU kit's Python parts without a build or a GPU (ctest GpuKit.Units): the store of the
trees' shared files (scripts/gpu_kit.d/kit_data.py), the profile row's checker and the bench
row's report (kit_report.py), the MoE rows' verdicts (kit_moe.py) and summary.md's sections, on
synthetic files.

    python3 tests/gpu_kit/kit_units_test.py
"""
import contextlib
import io
import json
import os
import re
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gpu_kit  # noqa: E402
import kit_data  # noqa: E402  (gpu_kit puts scripts/gpu_kit.d on the path)
import kit_moe  # noqa: E402
import kit_report  # noqa: E402


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def read(path):
    with open(path) as f:
        return f.read()


def fake_kit(root):
    """Two trees on the same tokens, a shared source, a tree's own file and a third tree's tokens."""
    tokens, other = os.urandom(50000), os.urandom(3000)
    shared = "// the same runtime source in every tree\n" * 100
    for t in ("tiny", "moe_tiny"):
        write(f"{root}/trees/{t}/data/train.bin", tokens)
        write(f"{root}/trees/{t}/data/val.bin", tokens[:5000])
        write(f"{root}/trees/{t}/runtime/shared.hpp", shared)
        write(f"{root}/trees/{t}/CMakeLists.txt", f"project({t})\n")
        write(f"{root}/trees/{t}/small.hpp", "#pragma once\n")  # shared but small: stays
    write(f"{root}/trees/bench_x/data/train.bin", other)  # a token file of its own: stored too
    return tokens


class Store(unittest.TestCase):
    def test_gpu_kit_travels_without_duplicates_or_links_and_the_run_links_them_back(self):
        with tempfile.TemporaryDirectory() as kit:
            tokens = fake_kit(kit)
            before = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(kit) for f in fs)
            kit_data.store(kit, "gpu")
            after = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(kit) for f in fs)
            self.assertLess(after, before - len(tokens) + 2000)
            self.assertFalse(os.path.exists(f"{kit}/trees/tiny/data/train.bin"))
            self.assertFalse(os.path.exists(f"{kit}/trees/bench_x/data/train.bin"))
            self.assertTrue(os.path.exists(f"{kit}/trees/tiny/small.hpp"))
            self.assertTrue(os.path.exists(f"{kit}/trees/tiny/CMakeLists.txt"))
            links = [f for r, ds, fs in os.walk(kit) for f in fs + ds if os.path.islink(os.path.join(r, f))]
            self.assertEqual(links, [])
            stored = kit_data.stored_paths(kit)
            self.assertIn("trees/moe_tiny/runtime/shared.hpp", stored)
            self.assertEqual(len(os.listdir(f"{kit}/store")), 5)  # train, val, shared, bench tokens, index

            created = os.path.join(kit, "..", os.path.basename(kit) + ".created")
            self.assertEqual(kit_data.materialize(kit, created), 0)
            with open(f"{kit}/trees/moe_tiny/data/train.bin", "rb") as f:
                self.assertEqual(f.read(), tokens)
            a, b = os.stat(f"{kit}/trees/tiny/data/train.bin"), os.stat(f"{kit}/trees/moe_tiny/data/train.bin")
            self.assertEqual((a.st_ino, a.st_dev), (b.st_ino, b.st_dev))  # hard links, no copies
            self.assertEqual(kit_data.materialize(kit, ""), 0)  # a second run finds them there
            kit_data.unmaterialize(kit, created)
            os.remove(created)
            self.assertFalse(os.path.exists(f"{kit}/trees/tiny/data/train.bin"))
            self.assertTrue(os.path.exists(f"{kit}/trees/tiny/small.hpp"))

            sha = next(s for s, e in kit_data.load_index(kit).items() if "trees/bench_x/data/train.bin" in e["paths"])
            write(f"{kit}/store/{sha}", b"x" * 3000)  # damaged in transit: same size, other bytes
            self.assertEqual(kit_data.materialize(kit, ""), 1)

    def test_emulated_kit_links_at_once(self):
        with tempfile.TemporaryDirectory() as kit:
            tokens = fake_kit(kit)
            kit_data.store(kit, "emulated")
            self.assertTrue(os.path.islink(f"{kit}/trees/tiny/data/train.bin"))
            with open(f"{kit}/trees/moe_tiny/data/train.bin", "rb") as f:
                self.assertEqual(f.read(), tokens)
            self.assertFalse(os.path.isabs(os.readlink(f"{kit}/trees/tiny/data/train.bin")))
            self.assertEqual(kit_data.materialize(kit, ""), 0)
            self.assertEqual(kit_data.sizes(kit), 0)


CATS = {"attention": 3.0, "gemm.qkv": 1.0, "gemm.mlp_in": 2.0, "lm_head_ce": 2.5, "norm": 0.4, "optimizer": 0.6}


def profile_doc(step=10.0, idle=0.5, cats=None, **extra):
    cats = dict(CATS if cats is None else cats)
    doc = {"schema": "gcompile-profile-1", "implementation": "gcompile", "step_ms": step,
           "ops_ms": sum(cats.values()), "idle_ms": idle,
           "categories": {k: {"ms_per_step": v, "share": v / step if step else 0.0} for k, v in cats.items()}, "ops": []}
    doc.update(extra)
    return doc


TABLE = "category      ms/step  share\nattention     3.000    30%\nlm_head_ce    2.500    25%\ngemm.mlp_in   2.000    20%\n" \
        "gemm.qkv      1.000    10%\n"


class Profile(unittest.TestCase):
    def check(self, doc, log_text=TABLE):
        with tempfile.TemporaryDirectory() as d:
            write(f"{d}/run/profile.json", doc if isinstance(doc, str) else json.dumps(doc))
            write(f"{d}/train.log", "$ train --profile 3 attention lm_head_ce\n" + log_text)
            return kit_report.profile_check(kit_report.find_profile(f"{d}/run"), f"{d}/train.log")

    def test_good_profile_passes(self):
        ok, detail = self.check(profile_doc())
        self.assertTrue(ok, detail)
        self.assertIn("attention 30%", detail)

    def test_idle_as_a_category_counts_once(self):
        doc = profile_doc()
        doc["categories"]["idle"] = {"ms_per_step": 0.5, "share": 0.05}
        self.assertTrue(self.check(doc)[0])

    def test_failures_name_the_problem(self):
        cases = [
            (profile_doc(step=12.0), "off step_ms"),
            (profile_doc(step=0.0), "step_ms"),
            (profile_doc(cats=dict(CATS, bogus=0.0)), "not in the schema"),
            (profile_doc(schema="other"), "schema"),
            ("{not json", "does not parse"),
        ]
        for doc, words in cases:
            ok, detail = self.check(doc)
            self.assertFalse(ok, detail)
            self.assertIn(words, detail)
        ok, detail = self.check(profile_doc(), log_text="loss 3.2 grad_norm 1.0\n")  # no table
        self.assertFalse(ok)
        self.assertIn("the printed table lacks attention", detail)

    def test_no_profile_json(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(kit_report.find_profile(f"{d}/missing"), "")


NEW_ROWS = {"rows": [
    {"spec": "dense_0.1b", "impl": "gcompile", "tokens_per_s": 400000.0, "mfu_989": 0.31, "peak_bytes": 2 << 30,
     "plan_bytes": 2 << 30, "torch_rows": [
         {"sdpa_backend": {"requested": "auto", "used": "cudnn"}, "tokens_per_s": 330000.0},
         {"sdpa_backend_requested": "flash", "sdpa_backend_used": "flash", "tokens_per_s": 300000.0},
         {"sdpa_backend_requested": "cudnn", "sdpa_backend_used": "cudnn", "tokens_per_s": 340000.0}],
     "sdpa_backend_auto_picked": "cudnn", "fastest_torch": "cudnn", "ratio_vs_fastest": 400000 / 340000},
    {"spec": "dense_0.1b", "impl": "torch", "tokens_per_s": 340000.0}]}
# bench/gpu_vs_torch_table.py's form: the per-spec fields under "specs", torch rows also in "rows".
SPECS_ROWS = {"rows": [
    {"spec": "dense_1.5b", "impl": "gcompile", "tokens_per_s": 60000.0, "mfu_989": 0.45},
    {"spec": "dense_1.5b", "impl": "torch", "sdpa": "auto=flash", "sdpa_backend": "auto", "tokens_per_s": 50000.0}],
    "specs": {"dense_1.5b": {"torch_rows": [
        {"sdpa_backend": "auto", "sdpa_backend_used": "flash", "label": "auto=flash", "tokens_per_s": 50000.0,
         "mfu_989": 0.37},
        {"sdpa_backend": "flash", "sdpa_backend_used": "flash", "label": "flash", "tokens_per_s": 49000.0},
        {"sdpa_backend": "cudnn", "sdpa_backend_used": None, "label": "cudnn", "tokens_per_s": None,
         "error": "cuDNN attention unavailable"}],
        "sdpa_backend_auto_picked": "flash", "fastest_torch": "auto", "fastest_torch_label": "auto=flash",
        "ratio_vs_fastest": 1.2, "profile_compare": "dense_1.5b/profile_compare.md"}},
    "notes": ["dense_1.5b: torch cudnn: cuDNN attention unavailable"]}
OLD_ROWS = {"rows": [{"spec": "dense_1.5b", "impl": "gcompile", "tokens_per_s": 50000.0, "mfu_989": 0.4, "ratio": 1.1},
                     {"spec": "dense_1.5b", "impl": "torch", "tokens_per_s": 45000.0}], "notes": ["a note"]}


class Bench(unittest.TestCase):
    def detail(self, doc):
        with tempfile.TemporaryDirectory() as d:
            write(f"{d}/rows.json", json.dumps(doc))
            return kit_report.bench_detail(f"{d}/rows.json")

    def test_backends_and_the_fastest(self):
        ok, detail = self.detail(NEW_ROWS)
        self.assertTrue(ok, detail)
        for words in ("ours 400,000 tok/s", "MFU 31.0%", "auto->cudnn 330,000", "flash 300,000", "cudnn 340,000",
                      "auto picked cudnn", "ours / fastest torch (cudnn) 1.18"):
            self.assertIn(words, detail)

    def test_computed_when_the_fields_are_absent(self):
        doc = json.loads(json.dumps(NEW_ROWS))
        for k in ("sdpa_backend_auto_picked", "fastest_torch", "ratio_vs_fastest"):
            del doc["rows"][0][k]
        ok, detail = self.detail(doc)
        self.assertTrue(ok, detail)
        self.assertIn("auto picked cudnn", detail)
        self.assertIn("fastest torch (cudnn) 1.18", detail)

    def test_ours_on_other_attention_kernels(self):
        doc = json.loads(json.dumps(NEW_ROWS))
        doc["rows"].insert(1, {"spec": "dense_0.1b", "impl": "gcompile_wgmma", "attention": "wgmma",
                               "tokens_per_s": 440000.0, "vs_default": 1.1, "ratio": 440000 / 340000})
        ok, detail = self.detail(doc)
        self.assertTrue(ok, detail)
        self.assertIn("ours / fastest torch (cudnn) 1.18", detail)  # the default's row still heads the spec
        self.assertIn("ours with wgmma attention 440,000 tok/s (1.10x the default, 1.29x fastest torch)", detail)
        self.assertNotIn("gcompile_wgmma 440", detail)  # not listed among the torch rows
        doc["rows"][1]["tokens_per_s"] = None
        ok, detail = self.detail(doc)
        self.assertTrue(ok, detail)  # a variant without time is named, not failed
        self.assertIn("ours with wgmma attention no time", detail)

    def test_per_spec_fields_under_specs(self):
        ok, detail = self.detail(SPECS_ROWS)
        self.assertTrue(ok, detail)  # cudnn did not run: listed, not failed
        for words in ("ours 60,000 tok/s, MFU 45.0%", "auto->flash 50,000 (MFU 37.0%)", "cudnn no time",
                      "auto picked flash", "ours / fastest torch (auto=flash) 1.20", "note: dense_1.5b: torch cudnn"):
            self.assertIn(words, detail)

    def test_older_rows_json(self):
        ok, detail = self.detail(OLD_ROWS)
        self.assertTrue(ok, detail)
        self.assertIn("torch default 45,000 tok/s", detail)
        self.assertIn("ours / fastest torch (default) 1.11", detail)
        self.assertIn("note: a note", detail)

    def test_gcompile_only_and_failures(self):
        self.assertTrue(self.detail({"rows": [{"spec": "t", "impl": "gcompile", "tokens_per_s": 10.0}]})[0])
        self.assertFalse(self.detail({"rows": [{"spec": "t", "impl": "gcompile", "tokens_per_s": None}]})[0])
        doc = json.loads(json.dumps(NEW_ROWS))
        for r in doc["rows"][0]["torch_rows"]:
            r["tokens_per_s"] = None
        doc["rows"] = doc["rows"][:1]
        self.assertFalse(self.detail(doc)[0])
        doc["rows"][0]["torch_rows"][1]["tokens_per_s"] = 1.0  # one backend timed: the others listed
        self.assertTrue(self.detail(doc)[0])
        self.assertFalse(self.detail({"rows": []})[0])
        with tempfile.TemporaryDirectory() as d:
            self.assertFalse(kit_report.bench_detail(f"{d}/rows.json")[0])


class Summary(unittest.TestCase):
    def test_sections_after_the_table(self):
        with tempfile.TemporaryDirectory() as d:
            res, out = f"{d}/results", f"{d}/out"
            os.makedirs(out)
            write(f"{res}/bench/rows.json", json.dumps(NEW_ROWS))
            write(f"{res}/bench/dense_0.1b/profile_compare.md", "# compare\n\n| category | ours ms | torch ms |\n"
                  "|---|---:|---:|\n| attention | 1.0 | 1.2 |\n")
            write(f"{res}/bench/dense_0.1b/profile_ours.json", json.dumps(profile_doc()))
            write(f"{res}/runs/profile.json", json.dumps(profile_doc()))
            write(f"{d}/rows.tsv", "env\tPASS\t0\tfacts\nbench\tPASS\t100\tdetail\nprofile\tFAIL\t3\tx\n")
            gpu_kit.summary(f"{d}/rows.tsv", out, f"{d}/missing.json", res)
            md = read(f"{out}/summary.md")
            self.assertIn("| dense_0.1b | torch.compile | cudnn (cudnn) (fastest) | 340,000 |", md)
            self.assertIn("\n### compare\n", md)
            self.assertIn("| attention | 1.0 | 1.2 |", md)
            self.assertIn("tiny fp32, step 10.000 ms", md)
            # The kit's test counts rows by these patterns: the sections add none.
            self.assertEqual(len(re.findall(r"^\| [a-z0-9_]+ \| (PASS|FAIL|SKIP) \|", md, re.M)), 3)
            js = json.loads(read(f"{out}/summary.json"))
            self.assertEqual(js["bench"][0]["fastest"]["backend"], "cudnn")
            self.assertIn("dense_0.1b", js["profile_compare"])
            self.assertEqual(js["profile_files"], ["bench/dense_0.1b/profile_ours.json"])
            gpu_kit.summary(f"{d}/rows.tsv", out, f"{d}/missing.json", f"{d}/none")  # nothing there: the table alone
            self.assertNotIn("## bench", read(f"{out}/summary.md"))


def verdict(fn, *args):
    """(exit code, printed line) of a verdict (kit_moe's, gpu_kit's): 0 when it passed."""
    out = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out):
        try:
            fn(*args)
        except SystemExit as e:
            code = e.code
    return code, out.getvalue().strip()


def jsonl(path, records):
    write(path, "".join(json.dumps(r) + "\n" for r in records))


MOE_SUMMARY = {"event": "summary", "steps": 10, "step_ms_median": 250.0, "tokens_per_s_median": 131072.0,
               "flops_per_token": 3.1e9, "allocated_device_bytes_peak": 60 << 30, "planned_device_bytes": 70 << 30}


class Moe(unittest.TestCase):
    def run_moe_3b(self, losses, summary=MOE_SUMMARY, steps=10):
        with tempfile.TemporaryDirectory() as d:
            records = [{"step": i, "loss": x} for i, x in enumerate(losses)]
            records.append({"step": 0, "metric": "moe_routing", "load": {"1": [1, 2], "2": [2, 1]},
                            "imbalance": {"1": 1.3, "2": 1.7}, "dropped": {"1": 0, "2": 3}})
            jsonl(f"{d}/m.jsonl", records + [summary])
            return verdict(kit_moe.moe_3b, f"{d}/m.jsonl", str(steps))

    def test_moe_3b_reports_speed_mfu_memory_and_routing(self):
        code, line = self.run_moe_3b([12.0] * 9 + [11.5])
        self.assertEqual(code, 0, line)
        self.assertIn("131,072 tokens/s", line)
        self.assertIn("MFU@989 41.1%", line)  # 131072 * 3.1e9 / 989e12
        self.assertIn("60.00 / plan 70.00 GiB", line)
        self.assertIn("worst max/mean load 1.70, 3 dropped", line)
        with_copies = dict(MOE_SUMMARY, device_to_host_copies_in_steps=9 * 72 + 18)
        self.assertIn("74 device->host copies a step", self.run_moe_3b([12.0] * 10, summary=with_copies)[1])
        quiet = dict(MOE_SUMMARY, device_to_host_copies_in_steps=6, unread_steps=7,
                     device_to_host_copies_in_unread_steps=0)
        code, line = self.run_moe_3b([12.0] * 10, summary=quiet)
        self.assertEqual(code, 0, line)
        self.assertIn("1 device->host copies a step (0 in the 7 steps that read nothing)", line)

    def test_moe_3b_fails_on_a_nonfinite_loss_a_short_run_or_memory_over_the_plan(self):
        self.assertEqual(self.run_moe_3b([12.0, float("nan")] + [12.0] * 8)[0], 1)
        self.assertEqual(self.run_moe_3b([12.0] * 4)[0], 1)
        copying = dict(MOE_SUMMARY, unread_steps=7, device_to_host_copies_in_unread_steps=7 * 72)
        code, line = self.run_moe_3b([12.0] * 10, summary=copying)
        self.assertEqual(code, 1)
        self.assertIn("a step that reads nothing copied from the device", line)
        over = dict(MOE_SUMMARY, allocated_device_bytes_peak=71 << 30)
        code, line = self.run_moe_3b([12.0] * 10, summary=over)
        self.assertEqual(code, 1)
        self.assertIn("allocated more than planned", line)

    def run_experts(self, ours, peer):
        with tempfile.TemporaryDirectory() as d:
            jsonl(f"{d}/ours.jsonl", ours)
            jsonl(f"{d}/torch.jsonl", peer)
            return verdict(kit_moe.moe_experts, f"{d}/ours.jsonl", f"{d}/torch.jsonl")

    SHAPE = {"rows": 73728, "max_rows": 768, "min_rows": 240}

    def ours(self, diff=1e-3, **shape):
        return [dict(self.SHAPE, impl="gcompile_grouped", fwd_ms=1.0, fwd_bwd_ms=3.0, fwd_tflops=174,
                     fwd_bwd_tflops=174, max_rel_diff_grouped_vs_cublaslt=diff, **shape),
                dict(self.SHAPE, impl="cublaslt_per_expert", fwd_ms=2.0, fwd_bwd_ms=6.0, fwd_tflops=87,
                     fwd_bwd_tflops=87, max_rel_diff_grouped_vs_cublaslt=diff)]

    def test_moe_experts_gives_each_ratio_to_grouped_mm(self):
        peer = [dict(self.SHAPE, impl="torch_grouped_mm", fwd_ms=0.5, fwd_bwd_ms=1.5, fwd_bwd_tflops=348)]
        code, line = self.run_experts(self.ours(), peer)
        self.assertEqual(code, 0, line)
        self.assertIn("gcompile_grouped: fwd 1.000 ms (174 TFLOP/s), fwd+bwd 3.000 ms (174 TFLOP/s) (0.50x / 0.50x torch)",
                      line)
        self.assertIn("cublaslt_per_expert: fwd 2.000 ms", line)

    def test_moe_experts_fails_without_a_peer_on_other_rows_or_on_disagreement(self):
        self.assertEqual(self.run_experts(self.ours(), [{"impl": "torch_grouped_mm", "error": "RuntimeError: x"}])[0], 1)
        peer = [dict(self.SHAPE, impl="torch_grouped_mm", fwd_ms=0.5, fwd_bwd_ms=1.5, fwd_bwd_tflops=348)]
        self.assertEqual(self.run_experts(self.ours(diff=0.1), peer)[0], 1)
        other = [dict(peer[0], rows=1000)]
        code, line = self.run_experts(self.ours(), other)
        self.assertEqual(code, 1)
        self.assertIn("different rows per expert", line)

    def test_moe_experts_reports_and_checks_the_sm90_forward(self):
        peer = [dict(self.SHAPE, impl="torch_grouped_mm", fwd_ms=0.5, fwd_bwd_ms=1.5, fwd_bwd_tflops=348)]

        def sm90(diff):
            return dict(self.SHAPE, impl="gcompile_grouped_sm90", fwd_ms=0.5, fwd_bwd_ms=2.5, fwd_tflops=348,
                        fwd_bwd_tflops=209, max_rel_diff_vs_grouped=diff)

        code, line = self.run_experts(self.ours() + [sm90(4e-3)], peer)
        self.assertEqual(code, 0, line)
        self.assertIn("gcompile_grouped_sm90: fwd 0.500 ms (348 TFLOP/s)", line)
        self.assertIn("sm90 kernels vs grouped max rel diff 0.004", line)
        code, line = self.run_experts(self.ours() + [sm90(0.3)], peer)
        self.assertEqual(code, 1)
        self.assertIn("the sm90 kernels disagree", line)

    def run_route(self, records):
        with tempfile.TemporaryDirectory() as d:
            jsonl(f"{d}/route.jsonl", records)
            return verdict(kit_moe.moe_route, f"{d}/route.jsonl")

    ROUTE_HEAD = {"device": "NVIDIA H100", "group": 8, "assignments": 73728, "slot_rows": 12084,
                  "received": 70000, "padding": 1.3112, "busy_ms": 1.0, "route_equal": True}

    def test_moe_route_reports_both_routes_and_the_padding(self):
        code, line = self.run_route([self.ROUTE_HEAD, {"impl": "slotted", "ms": 0.05},
                                     {"impl": "host_planned", "ms": 0.4}])
        self.assertEqual(code, 0, line)
        self.assertIn("slotted 0.050 ms", line)
        self.assertIn("8 slots of 12,084 rows, padding x1.31", line)
        self.assertIn("host-planned 0.400 ms", line)
        self.assertIn("host-planned / slotted 8.00x", line)

    def test_moe_route_fails_on_a_different_permutation_or_a_missing_time(self):
        code, line = self.run_route([dict(self.ROUTE_HEAD, route_equal=False), {"impl": "slotted", "ms": 0.05},
                                     {"impl": "host_planned", "ms": 0.4}])
        self.assertEqual(code, 1)
        self.assertIn("permutation differs", line)
        self.assertEqual(self.run_route([self.ROUTE_HEAD, {"impl": "slotted", "ms": 0.05}])[0], 1)


class ParityKernels(unittest.TestCase):
    """gpu_kit.py parity TOL KERNELS: the row fails when parity ran other kernels than asked."""
    RESULT = {"precision": "bf16", "attention": "wgmma attention", "experts": "mma.sync experts",
              "max_rel_logits": 3e-3, "worst_row_logits": 4e-3, "max_rel_grad": 7e-3, "pass": True}

    def verdict(self, kernels):
        with tempfile.TemporaryDirectory() as d:
            write(f"{d}/parity.log", "parity: building\n" + json.dumps(self.RESULT) + "\n")
            code, detail = verdict(gpu_kit.parity, f"{d}/parity.log", "3e-2", kernels)
            return code == 0, detail

    def test_the_kernels_asked_for(self):
        ok, detail = self.verdict("wgmma attention")
        self.assertTrue(ok, detail)
        self.assertIn("wgmma attention, mma.sync experts", detail)
        ok, detail = self.verdict("wgmma attention,wgmma experts")
        self.assertFalse(ok, detail)
        self.assertIn("not wgmma experts", detail)
        self.assertTrue(self.verdict("")[0])


class AttentionRows(unittest.TestCase):
    """gpu_kit.py attention-rows: times against SDPA, and the wgmma kernels' check against the
    tensor-core kernels (attention_bench's *_check lines), which fails the row when off."""
    OURS = [{"shape": "1.5b", "impl": "gcompile_tensor_core", "fwd_ms": 1.0, "fwd_bwd_ms": 4.0},
            {"shape": "1.5b", "impl": "gcompile_sm90_wgmma", "fwd_ms": 0.5, "fwd_bwd_ms": 2.0}]
    TORCH = [{"shape": "1.5b", "impl": "torch_sdpa_cudnn", "fwd_ms": 0.4, "fwd_bwd_ms": 1.8},
             {"shape": "1.5b", "impl": "torch_sdpa_flash", "fwd_ms": 0.7, "fwd_bwd_ms": 3.2}]

    def run_rows(self, *checks):
        with tempfile.TemporaryDirectory() as d:
            jsonl(f"{d}/ours.jsonl", self.OURS + list(checks))
            jsonl(f"{d}/torch.jsonl", self.TORCH)
            code, detail = verdict(gpu_kit.attention_rows, f"{d}/ours.jsonl", f"{d}/torch.jsonl")
            return code == 0, detail

    def test_agreeing_kernels_pass(self):
        ok, detail = self.run_rows({"shape": "1.5b", "impl": "gcompile_sm90_wgmma_check",
                                    "max_rel_error_vs_tensor_core": 0.003, "repeats_bitwise": True})
        self.assertTrue(ok, detail)
        for words in ("1.5b sm90_wgmma: fwd 0.500 ms, fwd+bwd 2.000 ms, 1.60x flash, 0.90x cudnn (fastest SDPA: cudnn)",
                      "1.5b sm90_wgmma_check: 0.003 from tensor_core, repeats bitwise"):
            self.assertIn(words, detail)
        self.assertNotIn("FAIL", detail)

    def test_no_check_line_fails_the_row(self):
        ok, detail = self.run_rows()
        self.assertFalse(ok, detail)
        self.assertIn("no wgmma check line", detail)

    def test_a_wrong_or_unrepeatable_kernel_fails_the_row(self):
        ok, detail = self.run_rows({"shape": "1.5b", "impl": "gcompile_sm90_wgmma_check",
                                    "max_rel_error_vs_tensor_core": 0.9, "repeats_bitwise": True})
        self.assertFalse(ok, detail)
        self.assertIn("0.9 from tensor_core, repeats bitwise (FAIL)", detail)
        ok, detail = self.run_rows({"shape": "1.5b", "impl": "gcompile_sm90_wgmma_check",
                                    "max_rel_error_vs_tensor_core": 0.003, "repeats_bitwise": False})
        self.assertFalse(ok, detail)
        self.assertIn("REPEATS DIFFER (FAIL)", detail)


if __name__ == "__main__":
    unittest.main(verbosity=1)
