#!/usr/bin/env python3
"""bench/gpu_vs_torch's helpers (standard library, bench/torch_baseline.py's spec reading and
scripts/gpu_kit.py's file readers; no torch): the bench specs, the trees' data, and the table of a
results directory (RESULTS/order.txt, RESULTS/env.json, RESULTS/<spec>/...).

    python3 bench/gpu_vs_torch_table.py bench-spec SPEC OUT NAME STEPS [MICRO_BATCH]
    python3 bench/gpu_vs_torch_table.py copy-data TREE | tree-steps TREE
    python3 bench/gpu_vs_torch_table.py env PATH GPU DRIVER NVCC CEILING_JSON
    python3 bench/gpu_vs_torch_table.py table RESULTS STEPS WARMUP MARKDOWN_FILE JSON_FILE

The table: per spec a gcompile row and one torch.compile row per SDPA backend (torch.json's
"rows"; an older torch.json with one result is one row), which backend "auto" picked, the fastest
torch row and ours / fastest; rows.json holds the rows and, per spec ("specs"), torch_rows,
sdpa_backend_auto_picked, fastest_torch and ratio_vs_fastest. Each spec's profile_compare.md
(gcompile's step profile beside torch's) is printed after the table.
"""

import json
import math
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "scripts"))
import gpu_kit  # noqa: E402  (the data paths baked into a tree, metrics.jsonl reading)
import torch_baseline as tb  # noqa: E402

METRICS = ["sink_score", "residual_flow", "rmsnorm_factor", "cosine_similarity", "stable_rank",
           "embedding_cosine", "param_norm", "grad_norm", "update_ratio", "activation_rms",
           "attention_entropy", "logit_std", "initial_loss"]
GIB = float(1 << 30)


def bench_spec(spec, out_path, name, steps, micro_batch="0"):
    """Writes the bench spec that extends `spec`."""
    cfg = tb.read_config(spec, int(micro_batch) or None)
    rel = os.path.relpath(os.path.abspath(spec), os.path.dirname(os.path.abspath(out_path)))
    lines = [
        "# Written by bench/gpu_vs_torch: the model and optimizer of the base spec, one",
        "# micro-batch per optimizer step, synthetic data, no in-loop metrics (the bench passes --log-every).",
        "[experiment]", f'extends = "{rel}"', f'name = "{name}"', "",
        "[train]", f"global_batch = {cfg.micro_batch}", f"micro_batch = {cfg.micro_batch}",
        f"steps = {steps}", "eval_every = 0", "eval_batches = 1", "checkpoint_every = 0", "log_every = 1", "",
        "[data]", 'format = "synthetic"', "",
    ]
    for m in METRICS + (["moe_routing"] if cfg.moe else []):
        lines += [f"[metrics.{m}]", "enabled = false", ""]
    text = "\n".join(lines)
    old = open(out_path).read() if os.path.exists(out_path) else None
    if old != text:  # unchanged specs keep their trees' time stamps
        with open(out_path, "w") as f:
            f.write(text)


def copy_data(tree):
    """Copies the tree's data files into TREE/data/ (so the tree travels whole)."""
    paths = gpu_kit.baked_data(tree)
    os.makedirs(os.path.join(tree, "data"), exist_ok=True)
    copied = []
    for key, name in (("kTrainData", "train.bin"), ("kValData", "val.bin")):
        p = paths.get(key, "")
        if p and os.path.isfile(p):
            shutil.copyfile(p, os.path.join(tree, "data", name))
            copied.append(name)
    print(" ".join(copied))


def tree_steps(tree):
    try:
        doc = tb.read_toml(os.path.join(tree, "spec.resolved.toml"))
        print(int(doc.get("train", {}).get("steps", 0)))
    except (tb.SpecError, ValueError, TypeError):
        print(0)


def num(x):
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def summarize_ours(metrics_path, tokens_per_step, warmup):
    """Median over the records after the warm-up steps. A record's step time is
    tokens_per_step / tokens_per_s (train's mean over the steps since its previous
    record, which ran without a host wait); where that field is missing, the difference
    of consecutive elapsed_s values."""
    recs = gpu_kit.read_jsonl(metrics_path)
    train = [r for r in recs if "event" not in r and "loss" in r and "step" in r]
    train.sort(key=lambda r: r["step"])
    summary = next((r for r in reversed(recs) if r.get("event") == "summary"), {})
    step_ms = []
    prev = None
    for r in train:
        tps, el = num(r.get("tokens_per_s")), num(r.get("elapsed_s"))
        if r["step"] > warmup:
            if tps and tps > 0:
                step_ms.append(1e3 * tokens_per_step / tps)
            elif el is not None and prev is not None:
                step_ms.append(1e3 * (el - prev[1]) / (r["step"] - prev[0]))
        prev = (r["step"], el)
    ms = tb.median(step_ms)
    return {
        "timed_records": len(step_ms),  # each the mean of the steps since the previous record
        "step_ms_median": ms,
        "tokens_per_s_median": (tokens_per_step / (ms * 1e-3)) if ms else None,
        "peak_device_bytes": num(summary.get("peak_device_bytes")),
        "planned_device_bytes": num(summary.get("planned_device_bytes")),
        "flops_per_token_reported": num(summary.get("flops_per_token")),
        "step_ms_median_reported": num(summary.get("step_ms_median")),
        "device": summary.get("device"),
        "loss_last": num(train[-1].get("loss")) if train else None,
        "steps_logged": len(train),
    }


def last_line(path):
    try:
        lines = [l.strip() for l in open(path, errors="replace") if l.strip()]
    except OSError:
        return "no log"
    return ("log: " + lines[-1][:160]) if lines else "empty log"


def fmt(x, kind):
    if x is None:
        return "n/a"
    if kind == "int":
        return f"{x:,.0f}"
    if kind == "ms":
        return f"{x:.1f}"
    if kind == "pct":
        return f"{100 * x:.1f}%"
    if kind == "gib":
        return f"{x / GIB:.2f}"
    if kind == "ratio":
        return f"{x:.2f}"
    return str(x)


def torch_rows_of(d):
    """(rows, note) of RESULTS/<spec>/torch.json: its "rows", or one row for an older single result."""
    recs = gpu_kit.read_jsonl(os.path.join(d, "torch.json"))
    t = recs[-1] if recs else {}
    if not t:
        return [], f"no result; {last_line(os.path.join(d, 'torch.log'))}"
    if isinstance(t.get("rows"), list) and t["rows"]:
        return t["rows"], None
    return [dict(t, sdpa_backend=t.get("sdpa_backend") or "flash")], None


def backend_label(r):
    """auto=cudnn (what auto ran), flash, cudnn (as auto) for a row that repeats auto's measurement."""
    req, used = r.get("sdpa_backend") or "?", r.get("sdpa_backend_used")
    if r.get("same_as"):
        return f"{req} (as {r['same_as']})"
    return f"auto={used}" if req == "auto" and used else str(req)


def build_rows(results, warmup):
    """(env, rows, notes, specs) from a results directory (order.txt lists the specs)."""
    env = {}
    try:
        env = json.load(open(os.path.join(results, "env.json")))
    except (OSError, json.JSONDecodeError):
        pass
    ceiling = num(env.get("gemm_ceiling_tflops"))
    order = [l.strip() for l in open(os.path.join(results, "order.txt")) if l.strip()] \
        if os.path.exists(os.path.join(results, "order.txt")) else sorted(os.listdir(results))
    rows, notes, specs = [], [], {}
    for label in order:
        d = os.path.join(results, label)
        if not os.path.isdir(d):
            continue
        spec_file = os.path.join(d, "spec.resolved.toml")
        if not os.path.exists(spec_file) and os.path.exists(os.path.join(d, "spec_path")):
            spec_file = open(os.path.join(d, "spec_path")).read().strip()
        plan = os.path.join(d, "plan.json")
        try:
            cfg = tb.read_config(spec_file, plan_json=plan if os.path.exists(plan) else None)
        except tb.SpecError as e:
            notes.append(f"{label}: {e}")
            continue
        fpt = cfg.flops_per_token

        def mfu(tps):
            return (tps * fpt / (tb.H100_BF16_DENSE_TFLOPS * 1e12) if tps else None,
                    tps * fpt / (ceiling * 1e12) if (tps and ceiling) else None)

        ours = None
        if os.path.exists(os.path.join(d, "ours.ran")):
            ours = summarize_ours(os.path.join(d, "metrics.jsonl"), cfg.tokens_per_step, warmup)
            if not ours["timed_records"]:
                notes.append(f"{label}: gcompile: no timed steps in metrics.jsonl; {last_line(os.path.join(d, 'ours.log'))}")
            rep = ours["flops_per_token_reported"]
            if rep and abs(rep - fpt) > 1e-6 * fpt:
                notes.append(f"{label}: train reports {rep:.4g} FLOP/token, gcompile explain {fpt:.4g}")
        ours_tps = ours["tokens_per_s_median"] if ours else None
        torch_list = []
        if os.path.exists(os.path.join(d, "torch.ran")):
            trows, why = torch_rows_of(d)
            if why:
                notes.append(f"{label}: torch: {why}")
                trows = [{"sdpa_backend": "auto", "error": why}]
            for r in trows:
                tps = num(r.get("tokens_per_s_median"))
                torch_list.append({
                    "sdpa_backend": r.get("sdpa_backend"), "sdpa_backend_used": r.get("sdpa_backend_used"),
                    "label": backend_label(r), "tokens_per_s": tps, "step_ms": num(r.get("step_ms_median")),
                    "mfu_989": mfu(tps)[0], "peak_bytes": num(r.get("peak_device_bytes")),
                    "first_step_s": num(r.get("first_step_s")), "error": r.get("error")})
                if r.get("error") and not why:
                    notes.append(f"{label}: torch {r.get('sdpa_backend')}: {r['error']}")
        timed = [t for t in torch_list if t["tokens_per_s"]]
        fastest = max(timed, key=lambda t: t["tokens_per_s"]) if timed else None
        auto = next((t["sdpa_backend_used"] for t in torch_list if t["sdpa_backend"] == "auto"), None)
        vs_fastest = ours_tps / fastest["tokens_per_s"] if (ours_tps and fastest) else None
        compare = os.path.join(d, "profile_compare.md")
        specs[label] = {"torch_rows": torch_list, "sdpa_backend_auto_picked": auto,
                        "fastest_torch": fastest["sdpa_backend"] if fastest else None,
                        "fastest_torch_label": fastest["label"] if fastest else None, "ratio_vs_fastest": vs_fastest,
                        "profile_compare": os.path.relpath(compare, results) if os.path.exists(compare) else None}
        if ours is not None:
            m = mfu(ours_tps)
            rows.append({"spec": label, "impl": "gcompile", "sdpa": "ours", "tokens_per_s": ours_tps,
                         "step_ms": ours["step_ms_median"], "mfu_989": m[0], "mfu_ceiling": m[1],
                         "peak_bytes": ours["peak_device_bytes"], "plan_bytes": ours["planned_device_bytes"],
                         "ratio": vs_fastest, "flops_per_token": fpt, **{k: v for k, v in specs[label].items()
                                                                         if k != "profile_compare"}})
        # Ours again on other attention kernels (gpu_vs_torch --attention-rows: ours_attention_K.log and
        # metrics_attention_K.jsonl); a run that stopped before writing metrics (e.g. its kernels
        # refused this GPU) is a note.
        ran = sorted({n[len(pre):-len(ext)] for n in os.listdir(d)
                      for pre, ext in (("ours_attention_", ".log"), ("metrics_attention_", ".jsonl"))
                      if n.startswith(pre) and n.endswith(ext)})
        for kernels in ran:
            log, metrics = (os.path.join(d, f"ours_attention_{kernels}.log"),
                            os.path.join(d, f"metrics_attention_{kernels}.jsonl"))
            if not os.path.exists(metrics):
                notes.append(f"{label}: gcompile --attention {kernels}: no metrics; {last_line(log)}")
                continue
            alt = summarize_ours(metrics, cfg.tokens_per_step, warmup)
            tps = alt["tokens_per_s_median"]
            if not alt["timed_records"]:
                notes.append(f"{label}: gcompile --attention {kernels}: no timed steps; {last_line(log)}")
            m = mfu(tps)
            rows.append({"spec": label, "impl": f"gcompile_{kernels}", "sdpa": f"ours, {kernels} attention",
                         "attention": kernels, "tokens_per_s": tps, "step_ms": alt["step_ms_median"], "mfu_989": m[0],
                         "mfu_ceiling": m[1], "peak_bytes": alt["peak_device_bytes"],
                         "plan_bytes": alt["planned_device_bytes"],
                         "ratio": tps / fastest["tokens_per_s"] if (tps and fastest) else None,
                         "vs_default": tps / ours_tps if (tps and ours_tps) else None, "flops_per_token": fpt})
        for t in torch_list:
            m = mfu(t["tokens_per_s"])
            rows.append({"spec": label, "impl": "torch", "sdpa": t["label"], "sdpa_backend": t["sdpa_backend"],
                         "sdpa_backend_used": t["sdpa_backend_used"], "tokens_per_s": t["tokens_per_s"],
                         "step_ms": t["step_ms"], "mfu_989": m[0], "mfu_ceiling": m[1], "peak_bytes": t["peak_bytes"],
                         "plan_bytes": None, "ratio": ours_tps / t["tokens_per_s"] if (ours_tps and t["tokens_per_s"])
                         else None, "flops_per_token": fpt, "error": t["error"]})
    return env, rows, notes, specs


COLUMNS = [("spec", "spec", "str"), ("impl", "impl", "str"), ("sdpa", "sdpa", "str"),
           ("tokens/s", "tokens_per_s", "int"), ("step ms", "step_ms", "ms"), ("MFU@989", "mfu_989", "pct"),
           ("MFU@meas", "mfu_ceiling", "pct"), ("peak GiB", "peak_bytes", "gib"), ("plan GiB", "plan_bytes", "gib"),
           ("ours/torch", "ratio", "ratio")]


def header_lines(env, steps, warmup):
    ceiling = num(env.get("gemm_ceiling_tflops"))
    return [
        f"GPU: {env.get('gpu', 'n/a')}; driver {env.get('driver', 'n/a')}; CUDA (nvcc) {env.get('nvcc', 'n/a')}; "
        f"torch {env.get('torch', 'n/a')}",
        f"bf16 GEMM ceiling ({tb.GEMM_N}^3, median): "
        + (f"{ceiling:.0f} TFLOP/s" if ceiling else "n/a")
        + f"; MFU@989 against 989 TFLOP/s; {warmup} warm-up + {steps} timed steps, medians",
        "ours/torch: the gcompile row against the fastest torch row of its spec; a torch row: ours against it; "
        "a gcompile_K row (ours on attention kernels K, train --attention K) against the fastest torch row",
        f"date: {env.get('date', 'n/a')}",
    ]


def spec_lines(specs):
    out = []
    for label, s in specs.items():
        if not s["torch_rows"]:
            continue
        bits = [f"torch's auto picked {s['sdpa_backend_auto_picked'] or 'n/a'}",
                f"fastest torch row: {s['fastest_torch_label'] or 'none timed'}"]
        if s["ratio_vs_fastest"]:
            bits.append(f"ours/fastest {s['ratio_vs_fastest']:.2f}")
        out.append(f"{label}: " + "; ".join(bits))
    return out


def render(env, rows, notes, specs, steps, warmup, results):
    cells = [[fmt(r[k], kind) if kind != "str" else str(r[k]) for _, k, kind in COLUMNS] for r in rows]
    heads = [h for h, _, _ in COLUMNS]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(heads)]

    def line(vals):
        return "  ".join(v.ljust(w) if i < 3 else v.rjust(w) for i, (v, w) in enumerate(zip(vals, widths)))
    text = header_lines(env, steps, warmup) + ["", line(heads), line(["-" * w for w in widths])]
    text += [line(c) for c in cells] or ["(no rows)"]
    text += [""] + spec_lines(specs) + [f"note: {n}" for n in notes]
    md = ["## gcompile vs PyTorch", ""] + [f"- {h}" for h in header_lines(env, steps, warmup)] + [""]
    md += ["| " + " | ".join(heads) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(heads) - 3)) + "|"]
    md += ["| " + " | ".join(c) + " |" for c in cells]
    md += [""] + [f"- {l}" for l in spec_lines(specs)] + [f"- note: {n}" for n in notes]
    for label, s in specs.items():
        if s["profile_compare"]:
            compare = open(os.path.join(results, s["profile_compare"])).read().rstrip()
            text += ["", f"== {label}: where a step goes ==", compare]
            md += ["", f"### {label}: where a step goes", "", compare.replace("### ", "#### ")]
    return "\n".join(text), "\n".join(md) + "\n"


def table(results, steps, warmup, markdown, json_out):
    env, rows, notes, specs = build_rows(results, int(warmup))
    text, md = render(env, rows, notes, specs, int(steps), int(warmup), results)
    print(text)
    if markdown:
        with open(markdown, "w") as f:
            f.write(md)
    for path in [os.path.join(results, "rows.json")] + ([json_out] if json_out else []):
        with open(path, "w") as f:
            json.dump({"env": env, "steps": int(steps), "warmup": int(warmup), "rows": rows, "specs": specs,
                       "notes": notes}, f, indent=1)
    ours_ok = all(r["tokens_per_s"] for r in rows if r["impl"] == "gcompile")
    torch_ok = all(any(t["tokens_per_s"] for t in s["torch_rows"]) for s in specs.values() if s["torch_rows"])
    sys.exit(0 if (rows and ours_ok and torch_ok) else 1)

def env_json(path, gpu, driver, nvcc, ceiling_json):
    env = {"gpu": gpu or None, "driver": driver or None, "nvcc": nvcc or None,
           "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    try:
        c = json.loads(ceiling_json.strip().splitlines()[-1])
        env.update({"gemm_ceiling_tflops": c.get("gemm_ceiling_tflops"), "torch": c.get("torch"),
                    "torch_cuda": c.get("cuda_runtime")})
    except (json.JSONDecodeError, IndexError, AttributeError):
        pass
    with open(path, "w") as f:
        json.dump(env, f, indent=1)



def main(argv):
    cmd, args = argv[0], argv[1:]
    if cmd == "bench-spec":
        bench_spec(*args)
    elif cmd == "copy-data":
        copy_data(args[0])
    elif cmd == "tree-steps":
        tree_steps(args[0])
    elif cmd == "env":
        env_json(*args)
    elif cmd == "table":
        table(*args[:5])
    else:
        sys.exit(f"unknown helper command {cmd}")


if __name__ == "__main__":
    main(sys.argv[1:])
