#!/usr/bin/env python3
"""Helpers of scripts/gpu_kit: the kit's trees, its manifest, the checks' verdicts and the summary.

Standard library only: the same file runs here (prepare) and on the GPU machine (run), whose
python3 has none of this project's packages. Each subcommand prints what the shell script needs
and exits 0 (PASS), 1 (FAIL) or 2 (bad input).
"""
import json
import math
import os
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_kit.d"))
import kit_data  # noqa: E402  (the store of the trees' shared files)
import kit_report  # noqa: E402  (the profile row, the bench row's report, the summary's sections)
from kit_report import read_jsonl  # noqa: E402
import kit_moe  # noqa: E402  (the moe_3b, moe_experts and moe_route rows' verdicts)

# The kit's trees: name, spec, what the run does with it (the build targets follow from it), and
# whose token files it trains on ("" = its own). One table, read by both halves of the kit.
TREES = [
    ("tiny", "specs/tiny.toml", "train", ""),
    ("tiny_bf16", "tests/cuda/specs/tiny_bf16.toml", "train", "tiny"),
    ("moe_tiny", "specs/moe_tiny.toml", "train", ""),
    ("parity_plain", "tests/cuda/specs/parity_plain.toml", "parity", ""),
    ("parity_headwise", "tests/cuda/specs/parity_headwise.toml", "parity", ""),
    ("parity_elementwise", "tests/cuda/specs/parity_elementwise.toml", "parity", ""),
    ("parity_moe", "tests/cuda/specs/parity_moe.toml", "parity", ""),
    ("parity_hd128", "tests/cuda/specs/parity_hd128.toml", "parity", ""),
    # bf16 on Hopper's wgmma kernels (run.sh: parity --attention wgmma, and --experts wgmma for the
    # MoE, at bf16's tolerance).
    ("parity_wgmma_hd64", "tests/cuda/specs/parity_wgmma_hd64.toml", "parity", ""),
    ("parity_wgmma_hd128", "tests/cuda/specs/parity_wgmma_hd128.toml", "parity", ""),
    ("parity_wgmma_moe", "tests/cuda/specs/parity_wgmma_moe.toml", "parity", ""),  # and --experts wgmma
    # On a GPU only (an emulated kit runs the row on tiny: a 0.1B step takes minutes there).
    ("metrics_0.1b", "tests/cuda/specs/metrics_0.1b.toml", "metrics", ""),
    # The committed moe_3b with 4 micro-batches a step (57 GiB of model state: a GPU only), on the
    # 0.1B bench tree's synthetic tokens (its own synthetic file is 64 MiB, over the kit's size;
    # any ids below the vocabulary do for timing).
    ("moe_3b", "tests/cuda/specs/moe_3b_kit.toml", "moe_3b", "bench_dense_0.1b_g1_eps1e-12"),
]
GPU_ONLY_ROLES = ("metrics", "moe_3b")
# bench/gpu_vs_torch's specs on a GPU (0.1B and 1.5B, no gate); under emulation the tiny tree's.
BENCH_SPECS = ["specs/paper/seed000/dense_0.1b_g1_eps1e-12.toml", "specs/paper/seed000/dense_1.5b_g1_eps1e-12.toml"]
# The moe_bench row's (a GPU only): the committed moe_3b against its PyTorch peer (bench/torch_moe.py).
MOE_BENCH_SPECS = ["specs/moe_3b.toml"]

# Steps of the runs, on a GPU and under the emulator (small shapes there: see EMULATED_TRAIN).
STEPS = {"gpu": {"tiny": 200, "moe_tiny": 30, "memcheck": 3, "metrics": 100, "moe_3b": 10},
         "emulated": {"tiny": 4, "moe_tiny": 3, "memcheck": 2, "metrics": 4}}
EMULATED_TRAIN = {"seq_len": 32, "micro_batch": 2, "global_batch": 2, "eval_every": 0, "eval_batches": 1,
                  "log_every": 1}
TOLERANCES = {"parity": 1e-5, "parity_bf16": 3e-2, "cpu_cuda": 1e-3, "bf16": 0.02}
KIT_LIMIT_BYTES = 56 << 20  # the device call carries at most 64 MiB
COMMAND_LIMIT = 2000


def fail(message, code=1):
    print(message)
    sys.exit(code)


# ---------------------------------------------------------------------------------------------
# prepare
# ---------------------------------------------------------------------------------------------
def kit_trees(mode):
    """TREES of a kit of this mode: an emulated kit has no "metrics" tree (its row runs on tiny) and
    no moe_3b (its model state alone is 57 GiB)."""
    return [t for t in TREES if mode == "gpu" or t[2] not in GPU_ONLY_ROLES]


def trees(mode="gpu"):
    """One line per tree of a kit of MODE: NAME SPEC ROLE DATA_FROM ('-' for its own)."""
    for name, spec, role, data_from in kit_trees(mode):
        print(name, spec, role, data_from or "-")


def bench_specs(kit, key="bench_specs"):
    """The specs of the kit's bench trees (KEY: bench_specs, the bench row's, or moe_bench_specs),
    one a line (bench/gpu_vs_torch names a tree after its spec)."""
    for spec in json.load(open(os.path.join(kit, "kit.json"))).get(key, []):
        print(spec)


def bench_trees(kit, key="bench_specs"):
    """The names of those specs' trees under KIT/trees, one a line."""
    for spec in json.load(open(os.path.join(kit, "kit.json"))).get(key, []):
        print(bench_tree_name(spec))


def overlay(spec, out_path, name):
    """Writes an emulation-sized spec that extends SPEC: the model unchanged, short sequences and
    batches, so the CUDA emulator runs a step in about a second."""
    rel = os.path.relpath(os.path.abspath(spec), os.path.dirname(os.path.abspath(out_path)))
    lines = ["# Written by scripts/gpu_kit prepare --emulate: the model of the base spec, small batches.",
             "[experiment]", f'extends = "{rel}"', f'name = "{name}"', "", "[train]"]
    lines += [f"{k} = {v}" for k, v in EMULATED_TRAIN.items()]
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")


def baked_data(tree):
    """The token files a generated tree trains on: the plan.train_data / plan.val_data knobs,
    literals in src/experiment.cpp (src/config.hpp in trees of before 2026-11)."""
    for source in ("experiment.cpp", "config.hpp"):
        try:
            text = open(os.path.join(tree, "src", source)).read()
        except OSError:
            continue
        found = {}
        for key in ("kTrainData", "kValData"):
            m = re.search(key + r'\s*=\s*((?:"(?:[^"\\]|\\.)*"\s*)+);', text)
            if m:
                found[key] = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1)))
        if found:
            return found
    return {}


def copy_data(tree):
    """Copies the tree's token files into TREE/data/ (train.bin, val.bin); fails naming what is
    missing, so that no tree travels without its tokens."""
    paths = baked_data(tree)
    if not paths.get("kTrainData"):
        fail(f"{tree}/src/experiment.cpp names no training data (kTrainData)")
    os.makedirs(os.path.join(tree, "data"), exist_ok=True)
    for key, name in (("kTrainData", "train.bin"), ("kValData", "val.bin")):
        path = paths.get(key, "")
        if not path:
            continue
        if not os.path.isfile(path):
            fail(f"{tree}: the token file {path} ({key}) does not exist")
        shutil.copyfile(path, os.path.join(tree, "data", name))
    print(" ".join(sorted(os.listdir(os.path.join(tree, "data")))))


def losses(path):
    """step -> loss of a run's metrics.jsonl (training records only)."""
    return {int(r["step"]): r["loss"] for r in read_jsonl(path)
            if "event" not in r and "step" in r and "lr" in r and isinstance(r.get("loss"), (int, float))}


def reference(metrics, out_path, steps):
    """Keeps a CPU run's losses (the reference the GPU's curves are compared with)."""
    curve = losses(metrics)
    steps = int(steps)
    if steps not in curve:
        fail(f"{metrics}: the CPU run did not reach step {steps} (last {max(curve, default=0)})")
    with open(out_path, "w") as f:
        json.dump({"steps": steps, "loss": {str(k): v for k, v in sorted(curve.items())}}, f, indent=0)
    print(f"{len(curve)} losses, step {steps}: {curve[steps]:.6f}")


def manifest(kit, mode, commit):
    """kit.json: what the kit holds and how its run must go."""
    doc = {"mode": mode, "created": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "git_commit": commit,
           "trees": [{"name": n, "spec": s, "role": r, "data_from": d or n} for n, s, r, d in kit_trees(mode)],
           "bench_specs": BENCH_SPECS if mode == "gpu" else [os.path.join(kit, "specs", "tiny.toml")],
           "moe_bench_specs": MOE_BENCH_SPECS if mode == "gpu" else [],
           "steps": STEPS[mode], "tolerances": TOLERANCES}
    with open(os.path.join(kit, "kit.json"), "w") as f:
        json.dump(doc, f, indent=1)


def kit_value(kit, key):
    """Prints one value of kit.json (steps.NAME, tolerances.NAME or mode)."""
    try:
        doc = json.load(open(os.path.join(kit, "kit.json")))
    except (OSError, json.JSONDecodeError) as e:
        fail(f"{kit}/kit.json: {e}; run scripts/gpu_kit prepare", 2)
    v = doc
    for part in key.split("."):
        if not isinstance(v, dict) or part not in v:
            fail(f"{kit}/kit.json has no {key}; run scripts/gpu_kit prepare again", 2)
        v = v[part]
    print(v)


def bench_tree_name(spec):
    """bench/gpu_vs_torch's name for a spec's bench tree (its bench_name_of)."""
    label = os.path.basename(spec)[:-5].lower()
    return "bench_" + re.sub(r"[^a-z0-9_.\n-]", "_", label)


def check_kit(kit):
    """Fails naming the first file a run needs that the kit lacks (on disk or in its store), a
    link in a GPU kit (it would travel as a link), or a kit over its size."""
    doc = json.load(open(os.path.join(kit, "kit.json")))
    need = [os.path.join(kit, "run"), os.path.join(kit, "bin", "gcompile_cuda_tests")]
    for t in doc["trees"]:
        tree = os.path.join(kit, "trees", t["name"])
        need += [os.path.join(tree, "CMakeLists.txt"), os.path.join(tree, "spec.resolved.toml")]
        data = os.path.join(kit, "trees", t["data_from"], "data")
        need += [os.path.join(data, "train.bin")]
        if t["role"] == "train" and t["data_from"] == t["name"]:
            need.append(os.path.join(kit, "reference", t["name"] + "_cpu.json"))
    for spec in doc["bench_specs"] + doc.get("moe_bench_specs", []):
        tree = os.path.join(kit, "trees", bench_tree_name(spec))
        need += [os.path.join(tree, "CMakeLists.txt"), os.path.join(tree, "data", "train.bin")]
    if doc["mode"] == "gpu":
        need += [os.path.join(kit, "bin", b) for b in ("attention_bench", "gemm_candidates", "expert_gemm_bench")]
    try:
        stored = kit_data.stored_paths(kit)
    except (OSError, ValueError, KeyError) as e:
        fail(f"the kit's store index: {e}")
    for rel, src in stored.items():
        if not os.path.isfile(src):
            fail(f"the kit's store lacks {src} (for {rel})")
    missing = [p for p in need if not os.path.exists(p) and os.path.relpath(p, kit) not in stored]
    if missing:
        fail(f"the kit lacks {missing[0]}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    for root, dirs, files in os.walk(os.path.join(kit, "trees")):
        if "build" in dirs:
            fail(f"{root}/build: a build directory in the kit (it would travel); delete it")
        for program in ("train", "parity"):
            if program in files and os.path.isfile(os.path.join(root, "CMakeLists.txt")):
                fail(f"{root}/{program}: a binary of this machine in the kit; delete it")
    if doc["mode"] == "gpu":
        links = [os.path.join(r, f) for r, ds, fs in os.walk(kit) for f in fs + ds if os.path.islink(os.path.join(r, f))]
        if links:
            fail(f"{links[0]}: a link in a GPU kit (it travels as a link, not as the file)")
    size = sum(os.lstat(os.path.join(r, f)).st_size for r, _, fs in os.walk(kit) for f in fs)
    if size > KIT_LIMIT_BYTES:
        fail(f"the kit is {size / 2**20:.1f} MiB, over its {KIT_LIMIT_BYTES >> 20} MiB")
    print(f"{size / 2**20:.1f} MiB")


def command(kit, budget_s, timeout_s):
    """command.txt: the one call to make on the GPU machine, and what travels with it."""
    rel = os.path.relpath(kit)
    cmd = f"bash {rel}/run --budget-s {budget_s} --out \"$OUT\""
    if len(cmd) > COMMAND_LIMIT:
        fail(f"the command is {len(cmd)} characters, over {COMMAND_LIMIT}")
    text = (
        "# The one call on a GPU machine (the device tool's run, from the repository root):\n"
        f"command: {cmd}\n"
        f"carry: [\"{rel}\"]\n"
        f"timeout_s: {timeout_s}\n"
        f"# {len(cmd)} of {COMMAND_LIMIT} characters. The run stays within --budget-s ({budget_s} s) and writes\n"
        "# $OUT/summary.md (the table, the bench per spec, the profiles), $OUT/summary.json and $OUT/results.tgz\n"
        "# (every log, metrics.jsonl and profile JSON).\n"
        "# Rerun only the failed rows: add --only ROW[,ROW...] (row names as in summary.md's first column).\n")
    with open(os.path.join(kit, "command.txt"), "w") as f:
        f.write(text)
    print(cmd)


# ---------------------------------------------------------------------------------------------
# run: the verdicts
# ---------------------------------------------------------------------------------------------
def json_objects(path):
    """Every JSON object in a file of mixed output."""
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return []
    dec, out, i = json.JSONDecoder(), [], text.find("{")
    while i >= 0:
        try:
            obj, end = dec.raw_decode(text, i)
            if isinstance(obj, dict):
                out.append(obj)
            i = text.find("{", end)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
    return out


def gtest(path, emulated="0"):
    """The kernel tests' JSON: every test passed and (on a GPU) none skipped."""
    try:
        doc = json.load(open(path))
    except (OSError, json.JSONDecodeError) as e:
        fail(f"no gtest JSON ({e.__class__.__name__})")
    passed, failed, skipped = 0, [], []
    for suite in doc.get("testsuites", []):
        for t in suite.get("testsuite", []):
            name = f"{suite.get('name')}.{t.get('name')}"
            if t.get("failures"):
                failed.append(name)
            elif t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
                skipped.append(name)
            else:
                passed += 1
    detail = f"{passed} passed, {len(failed)} failed, {len(skipped)} skipped"
    if failed:
        detail += "; failed: " + ", ".join(failed[:5]) + (" ..." if len(failed) > 5 else "")
    elif skipped:
        detail += " (a skip on a GPU fails); skipped: " + ", ".join(skipped[:3]) + (" ..." if len(skipped) > 3 else "")
    fail(detail) if (failed or not passed or (skipped and emulated != "1")) else print(detail)


def parity(path, tol, kernels=""):
    """parity's JSON within `tol`; `kernels`, a comma list of what its CUDA models must have run
    (e.g. "wgmma attention,wgmma experts"), each matched against the JSON's attention or experts."""
    tol = float(tol)
    r = next((x for x in reversed(json_objects(path)) if "max_rel_logits" in x), None)
    if r is None:
        fail("parity printed no JSON result")
    ran = {r.get("attention"), r.get("experts")}
    missing = [k for k in kernels.split(",") if k and k not in ran]
    if missing:
        fail(f"parity ran {r.get('attention', 'unnamed')}, {r.get('experts') or 'no experts'}, not {', '.join(missing)}")
    lg, row, gr = r.get("max_rel_logits"), r.get("worst_row_logits"), r.get("max_rel_grad")
    if not all(isinstance(v, (int, float)) for v in (lg, row, gr)):
        fail(f"bad result {r}")
    detail = (f"logits {lg:.2e} (worst row {row:.2e}), grads {gr:.2e} (worst {r.get('worst_tensor', '?')}), "
              f"loss cpu {r.get('loss_cpu')} cuda {r.get('loss_cuda')}, tol {tol:g}"
              + "".join(f", {r[k]}" for k in ("attention", "experts") if r.get(k)))
    ok = all(math.isfinite(v) and v < tol for v in (lg, row, gr))
    metrics, level = r.get("metrics_worst"), r.get("heatmap_worst_level")
    if isinstance(metrics, (int, float)):
        # Every metric computed on the device against the CPU's (engine/metrics_parity.cuh).
        detail += (f"; {r.get('metrics_compared', '?')} metric numbers, worst {metrics:.2e} "
                   f"({r.get('metrics_worst_at', '?')}), heatmap levels within {level}")
        ok = ok and math.isfinite(metrics) and metrics < tol and isinstance(level, (int, float)) and level <= 1
    ok = ok and r.get("pass", True) is True
    fail(detail) if not ok else print(detail)


def load_reference(path):
    doc = json.load(open(path))
    return {int(k): v for k, v in doc["loss"].items()}


def curve(ref_path, run_metrics, steps, tol):
    """A GPU run's losses against the carried CPU reference, at every step both logged."""
    a, b = load_reference(ref_path), losses(run_metrics)
    steps, tol = int(steps), float(tol)
    if steps not in b:
        fail(f"the run did not reach step {steps} (last logged {max(b, default=0)})")
    common = sorted(set(a) & set(b))
    if not all(math.isfinite(b[s]) for s in common):
        fail("non-finite loss")
    worst = max(common, key=lambda s: abs(a[s] - b[s]) / abs(a[s]))
    rel = abs(a[worst] - b[worst]) / abs(a[worst])
    detail = (f"max rel loss diff {rel:.2e} at step {worst} over {len(common)} steps "
              f"(cpu {a[steps]:.5f}, cuda {b[steps]:.5f} at {steps}), tol {tol:g}")
    fail(detail) if rel >= tol else print(detail)


def final_loss(ref_path, run_metrics, steps, tol):
    """bf16 against the fp32 CPU reference: the loss at the last step within tol (relative)."""
    a, b = load_reference(ref_path), losses(run_metrics)
    steps, tol = int(steps), float(tol)
    if steps not in b or steps not in a:
        fail(f"the run did not reach step {steps}")
    rel = abs(b[steps] - a[steps]) / abs(a[steps])
    detail = f"step {steps}: fp32 cpu {a[steps]:.4f}, bf16 cuda {b[steps]:.4f}, rel {rel:.2%}, tol {tol:.0%}"
    fail(detail) if not (math.isfinite(rel) and rel < tol) else print(detail)


def repeat(path1, path2, steps):
    a, b = losses(path1), losses(path2)
    steps = int(steps)
    if steps not in a or steps not in b:
        fail(f"a run did not reach step {steps}")
    diff = [s for s in sorted(set(a) | set(b)) if a.get(s) != b.get(s)]
    if diff:
        fail(f"{len(diff)} of {len(a)} logged losses differ, first at step {diff[0]}: "
             f"{a.get(diff[0])!r} vs {b.get(diff[0])!r}")
    print(f"{len(a)} logged losses bit-identical")


def bench_rows(rows_json):
    """gpu_vs_torch's rows.json: per spec ours and every torch.compile row (by SDPA backend),
    tokens/s, MFU, memory against plan, the ratio to the fastest torch row (kit_report)."""
    ok, detail = kit_report.bench_detail(rows_json)
    fail(detail) if not ok else print(detail)


def profile(run_dir, log, keep="", label="tiny fp32"):
    """The profile rows: RUN's profile.json (train --profile, copied to KEEP) and the table train
    printed to LOG."""
    path = kit_report.find_profile(run_dir)
    if not path:
        fail(f"train --profile wrote no profile.json in {run_dir}")
    if keep:
        shutil.copyfile(path, keep)
    ok, detail = kit_report.profile_check(path, log, label)
    fail(detail) if not ok else print(detail)


def metrics_overhead(on_jsonl, off_jsonl, target="0.05"):
    """The default [metrics] against --no-metrics on the same tree: the share of the run spent
    measuring (train's metrics_s over elapsed_s), the wall-clock difference, the median step
    times and what measuring copied from the GPU per measurement. Reported, not failed: the
    target (at most 5 % of the run) is stated met or missed."""
    on, off = read_jsonl(on_jsonl), read_jsonl(off_jsonl)
    logs_on = [r for r in on if "loss" in r and "elapsed_s" in r]
    s_on = next((r for r in reversed(on) if r.get("event") == "summary"), None)
    s_off = next((r for r in reversed(off) if r.get("event") == "summary"), None)
    if not logs_on or s_on is None or s_off is None:
        fail("a run has no summary record")
    measuring = s_on.get("metrics_s", logs_on[-1].get("metrics_s", 0.0))
    elapsed = s_on["elapsed_s"]
    share = measuring / elapsed if elapsed > 0 else float("nan")
    per = s_on.get("metrics_device_to_host_bytes", 0) / max(s_on.get("measurements", 1), 1)
    # The target holds for a run at the default intervals; a 100-step run is dominated by step 0's
    # one-off measurement, so the verdict reads the 500-step projection when the records allow it.
    m_on = [r for r in on if r.get("event") == "measurement"]
    m_off = [r for r in off if r.get("event") == "measurement"]
    projected = projected_share(m_on, m_off, s_on["step_ms_median"])
    judged = projected if projected is not None else share
    met = "met" if judged <= float(target) else "missed"
    print(f"measuring {100 * share:.2f}% of this run ({measuring:.2f} s of {elapsed:.1f} s, "
          f"{s_on.get('measurements', 0)} measurements, {per:,.0f} B copied per measurement); target "
          f"<= {100 * float(target):.0f}% {met} ({'500-step projection' if projected is not None else 'this run'}); wall {s_on['elapsed_s']:.1f} s vs {s_off['elapsed_s']:.1f} s "
          f"with --no-metrics ({100 * (s_on['elapsed_s'] / s_off['elapsed_s'] - 1):+.1f}%); median step "
          f"{s_on['step_ms_median']:.1f} vs {s_off['step_ms_median']:.1f} ms; device peak "
          f"{s_on.get('allocated_device_bytes_peak', 0) / 2**30:.2f} / plan {s_on.get('planned_device_bytes', 0) / 2**30:.2f} GiB"
          + measurement_parts(m_on, m_off, s_on["step_ms_median"]))


def measurement_parts(records, plain, step_ms):
    """What the measurements cost, by kind (train's "measurement" records): step 0's (every metric
    and the heatmaps), one with param_norm alone, one with the activation statistics, and from
    them the share over 500 steps at the default intervals (weights every 500, activations every
    100, param_norm every 10; step 0's weight cost standing for every weight measurement)."""
    if not records:
        return ""
    first = next((r for r in records if r["step"] == 0), None)
    _, act_s, norm_s = measurement_costs(records, plain)
    acts = [r for r in records if r["step"] > 0 and r.get("activation_metrics")]
    out = []
    if first:
        w = first.get("weights_parts", {})
        out.append(f"step 0 {first['seconds']:.3f} s (validation and activations {first['validation_s']:.3f}, "
                   f"weights {first['weights_s']:.3f}: stable rank {w.get('stable_rank_s', 0):.3f}, cosine "
                   f"{w.get('cosine_s', 0):.3f}, Σx² {w.get('frobenius_s', 0):.3f})")
    if norm_s is not None:
        out.append(f"param_norm alone {1e3 * norm_s:.1f} ms")
    if acts:
        parts = ", ".join(f"{k} {v:.3f}" for k, v in sorted(acts[-1].get("activation_parts", {}).items(),
                                                             key=lambda kv: -kv[1]))
        out.append(f"activations at step {acts[-1]['step']} {act_s:.3f} s over the plain validation"
                   + (f" ({parts})" if parts else ""))
    share = projected_share(records, plain, step_ms)
    if share is not None:
        out.append(f"over 500 steps at the default intervals {100 * share:.2f}% of the run")
    return "; " + "; ".join(out)


def measurement_costs(records, plain):
    """(step 0's weight metrics, the activation statistics of a later validation, param_norm
    alone) in seconds, or None where the records lack one. The activations' cost is that
    validation's time less the --no-metrics run's (`plain`) validation at the same step."""
    first = next((r for r in records if r["step"] == 0), None)
    norms = sorted(r["seconds"] for r in records
                   if r["step"] > 0 and r.get("param_norm") and not r.get("activation_metrics")
                   and not r.get("stable_rank") and not r.get("cosine_similarity"))
    acts = [r for r in records if r["step"] > 0 and r.get("activation_metrics")]
    act = None
    if acts:
        base = next((r["validation_s"] for r in plain if r["step"] == acts[-1]["step"]), 0.0)
        act = max(acts[-1]["validation_s"] - base, 0.0)
    return (first["weights_s"] if first else None, act, norms[len(norms) // 2] if norms else None)


def projected_share(records, plain, step_ms):
    """The share of 500 steps spent measuring at the default intervals: one weight measurement
    (step 0's cost, heatmaps included: an upper bound), 5 activation ones, 50 param_norm ones."""
    weights, acts, norm = measurement_costs(records, plain)
    if weights is None or acts is None:
        return None
    cost = weights + 5 * acts + 50 * (norm or 0.0)
    return cost / (cost + 500 * step_ms / 1e3)


# The wgmma kernels' outputs against the tensor-core kernels' at the bench shapes: both round P
# and dS to bf16, as the kernel tests' 1e-2 bound allows (attention_sm90_test.cu).
ATTENTION_CHECK_TOLERANCE = 1e-2


def attention_checks(rows):
    """The wgmma kernels' check lines (attention_bench's *_check rows): a detail per shape and
    whether every one agrees with the tensor-core kernels and repeats bit for bit (attention_bench
    writes one per shape, so none at all fails too)."""
    parts, ok = [], any("max_rel_error_vs_tensor_core" in r for r in rows)
    if not ok:
        parts.append("no wgmma check line (attention_bench's gcompile_sm90_wgmma_check)")
    for r in rows:
        if "max_rel_error_vs_tensor_core" not in r:
            continue
        err, bitwise = float(r["max_rel_error_vs_tensor_core"]), r.get("repeats_bitwise") is True
        good = err < ATTENTION_CHECK_TOLERANCE and bitwise
        ok = ok and good
        against = r.get("bitwise_against")  # absent: a rerun of the same kernels
        same, differ = (f"equals {against} bitwise", f"DIFFERS FROM {against}") if against else \
            ("repeats bitwise", "REPEATS DIFFER")
        parts.append(f"{r.get('shape')} {str(r.get('impl', '?')).removeprefix('gcompile_')}: "
                     f"{err:.2g} from tensor_core, " + (same if bitwise else differ) + ("" if good else " (FAIL)"))
    return parts, ok


def attention_rows(ours, torch_jsonl):
    """One detail line: each gcompile kernel's times and its speed against every SDPA backend that
    ran (flash, cuDNN, efficient), naming the fastest; a backend that could not run is a note; the
    wgmma kernels' agreement with the tensor-core kernels, which fails the row when off."""
    rows = read_jsonl(ours) + read_jsonl(torch_jsonl)
    if not rows:
        fail("no results")
    checks, checks_ok = attention_checks(rows)
    sdpa = {}  # shape -> {backend: fwd+bwd ms}
    for r in rows:
        if str(r.get("impl", "")).startswith("torch_sdpa_") and r.get("fwd_bwd_ms"):
            sdpa.setdefault(r["shape"], {})[r["impl"][len("torch_sdpa_"):]] = r["fwd_bwd_ms"]
    parts = []
    for r in rows:
        if str(r.get("impl", "")).startswith("torch_sdpa_") or not r.get("fwd_bwd_ms"):
            continue
        t = sdpa.get(r["shape"], {})
        best = min(t, key=t.get) if t else None
        ratio = "".join(f", {t[b] / r['fwd_bwd_ms']:.2f}x {b}" for b in ("flash", "cudnn", "efficient") if b in t)
        impl = r.get("impl", "?").removeprefix("gcompile_")
        parts.append(f"{r['shape']} {impl}: fwd {r['fwd_ms']:.3f} ms, fwd+bwd {r['fwd_bwd_ms']:.3f} ms{ratio}"
                     + (f" (fastest SDPA: {best})" if best else ""))
    errors = [f"{r.get('shape')} {r.get('impl')}: {r['error']}" for r in rows if r.get("error")]
    detail = "; ".join(parts + checks + [f"note: {e}" for e in errors])
    fail(detail or "no gcompile rows") if not parts or not sdpa or not checks_ok else print(detail)


# ---------------------------------------------------------------------------------------------
# The summary: $OUT/summary.md and summary.json, rewritten after every row.
# ---------------------------------------------------------------------------------------------
def summary(rows_tsv, out_dir, facts_json, results=""):
    """summary.md (the facts, the rows' table, then the bench per spec, the profile tables) and
    summary.json, from the rows so far and what RESULTS holds (kit_report.sections)."""
    rows = []
    try:
        with open(rows_tsv) as f:
            for line in f:
                name, result, secs, detail = (line.rstrip("\n").split("\t") + ["", "", "", ""])[:4]
                rows.append({"row": name, "result": result, "seconds": secs, "detail": detail})
    except OSError:
        pass
    try:
        facts = json.load(open(facts_json))
    except (OSError, json.JSONDecodeError):
        facts = {}
    counts = {k: sum(r["result"] == k for r in rows) for k in ("PASS", "FAIL", "SKIP")}
    lines = ["# GPU kit", ""]
    lines += [f"- {k}: {v}" for k, v in facts.items()]
    lines += [f"- rows: {counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['SKIP']} SKIP", "",
              "| row | result | s | detail |", "|---|---|---:|---|"]
    lines += [f"| {r['row']} | {r['result']} | {r['seconds']} | {r['detail'].replace('|', '/')} |" for r in rows]
    more_md, more_json = kit_report.sections(results) if results else ([], {})
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write("\n".join(lines + more_md) + "\n")
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump({"facts": facts, "rows": rows, "counts": counts, **more_json}, f, indent=1)


def facts(path, *pairs):
    doc = {}
    try:
        doc = json.load(open(path))
    except (OSError, json.JSONDecodeError):
        pass
    for p in pairs:
        k, _, v = p.partition("=")
        doc[k] = v
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


COMMANDS = {
    "trees": trees, "bench-specs": bench_specs, "bench-trees": bench_trees, "overlay": overlay, "copy-data": copy_data,
    "reference": reference, "manifest": manifest, "kit-value": kit_value, "check-kit": check_kit,
    "command": command, "gtest": gtest, "parity": parity, "curve": curve, "final-loss": final_loss,
    "repeat": repeat, "bench-rows": bench_rows, "attention-rows": attention_rows, "summary": summary,
    "metrics-overhead": metrics_overhead, "profile": profile, "facts": facts, **kit_moe.COMMANDS,
    "store": kit_data.store, "sizes": kit_data.sizes,
    "materialize": lambda *a: sys.exit(kit_data.materialize(*a)),
    "unmaterialize": lambda *a: sys.exit(kit_data.unmaterialize(*a)),
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        fail(f"usage: gpu_kit.py {{{','.join(COMMANDS)}}} ARGS...", 2)
    COMMANDS[sys.argv[1]](*sys.argv[2:])
