"""The GPU kit's profile row and the bench row's report (used by scripts/gpu_kit.py).

- profile_check: train --profile's profile.json ("gcompile-profile-1") and the table it printed.
- bench_specs / bench_detail: bench/gpu_vs_torch's rows.json per spec: gcompile's tokens/s and
  MFU, one torch.compile row per SDPA backend (which backend "auto" picked), the ratio against
  the fastest torch row. Older rows.json (one "torch" row per spec, no backends) read as well.
- sections: what summary.md shows after the rows' table (the bench per spec, each spec's
  profile_compare.md, the kit's own profile) and the same for summary.json.

Standard library only: it runs on the GPU machine.
"""
import json
import math
import os
import re

PROFILE_SCHEMA = "gcompile-profile-1"
CATEGORIES = ["attention", "gemm.qkv", "gemm.attn_out", "gemm.attn_gate", "gemm.mlp_in", "gemm.mlp_down",
              "gemm.router", "gemm.experts", "gemm.other", "lm_head_ce", "norm", "rope", "swiglu", "gate",
              "embedding", "moe_routing", "optimizer", "communication", "measuring", "other", "idle"]
SUM_TOLERANCE = 0.05  # the categories (idle included) against step_ms
TABLE_SHARE = 0.10  # every category with at least this share must be named in the printed table


def _num(x):
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _read(path):
    with open(path, errors="replace") as f:
        return f.read()


def read_jsonl(path):
    """Every JSON object line of PATH (other lines, an unreadable file: skipped)."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass
    except OSError:
        pass
    return out


def _load(path):
    try:
        with open(path) as f:
            return json.load(f), None
    except OSError as e:
        return None, f"no {os.path.basename(path)} ({e.strerror})"
    except json.JSONDecodeError as e:
        return None, f"{os.path.basename(path)} does not parse ({e.msg}, line {e.lineno})"


# ---------------------------------------------------------------------------------------------
# profile: train --profile N
# ---------------------------------------------------------------------------------------------
def category_ms(doc):
    """{category: ms per step} of a profile, idle included (from idle_ms where the categories lack it)."""
    cats = {}
    for name, c in (doc.get("categories") or {}).items():
        ms = _num(c.get("ms_per_step")) if isinstance(c, dict) else _num(c)
        if ms is not None:
            cats[name] = ms
    if "idle" not in cats and _num(doc.get("idle_ms")) is not None:
        cats["idle"] = _num(doc["idle_ms"])
    return cats


def profile_check(profile_json, log="", label="tiny fp32"):
    """(ok, detail): profile.json parses, is of the schema, step_ms > 0, its categories (idle
    included) sum to step_ms within 5 %, and the printed table (LOG) names every category of at
    least 10 %."""
    doc, err = _load(profile_json)
    if doc is None:
        return False, err
    if not isinstance(doc, dict):
        return False, "profile.json is not an object"
    problems = []
    if doc.get("schema") != PROFILE_SCHEMA:
        problems.append(f"schema {doc.get('schema')!r}, expected {PROFILE_SCHEMA}")
    step = _num(doc.get("step_ms"))
    if not step or step <= 0:
        return False, f"step_ms {doc.get('step_ms')!r} (must be > 0)" + ("; " + "; ".join(problems) if problems else "")
    cats = category_ms(doc)
    if not cats:
        return False, f"step {step:.3f} ms but no categories"
    unknown = sorted(set(cats) - set(CATEGORIES))
    if unknown:
        problems.append("categories not in the schema: " + ", ".join(unknown))
    total = sum(cats.values())
    off = abs(total - step) / step
    if off > SUM_TOLERANCE:
        problems.append(f"categories sum to {total:.3f} ms, {100 * off:.1f}% off step_ms (at most {100 * SUM_TOLERANCE:.0f}%)")
    negative = [k for k, v in cats.items() if v < 0]
    if negative:
        problems.append("negative times: " + ", ".join(negative))
    top = sorted(((v, k) for k, v in cats.items() if k != "idle"), reverse=True)
    try:  # train's output; the kit's "$ command" lines are not
        printed = "".join(l for l in _read(log).splitlines(True) if not l.startswith("$ ")) if log else ""
    except OSError:
        printed = ""
    if log:
        must = [k for v, k in top if v >= TABLE_SHARE * step] or [k for _, k in top[:1]]
        missing = [k for k in must if not re.search(r"(^|[\s|])" + re.escape(k) + r"([\s|:]|$)", printed, re.M)]
        if missing:
            problems.append("the printed table lacks " + ", ".join(missing))
    ops = doc.get("ops")
    detail = (f"{label}: step {step:.3f} ms = ops {sum(v for k, v in cats.items() if k != 'idle'):.3f} + idle "
              f"{cats.get('idle', 0.0):.3f} ms ({100 * cats.get('idle', 0.0) / step:.0f}%); "
              + ", ".join(f"{k} {100 * v / step:.0f}%" for v, k in top[:5])
              + f"; categories within {100 * off:.1f}% of the step"
              + (f"; {len(ops)} ops" if isinstance(ops, list) else "")
              + (f"; clock: {doc['clock']}" if isinstance(doc.get("clock"), str) else ""))
    if problems:
        return False, detail + "; " + "; ".join(problems)
    return True, detail + ("; table printed" if log else "")


def find_profile(run_dir):
    """RUN/profile.json, else the one profile*.json train wrote under RUN ("" if none)."""
    path = os.path.join(run_dir, "profile.json")
    if os.path.isfile(path):
        return path
    for root, _, files in os.walk(run_dir):
        for name in sorted(files):
            if name.startswith("profile") and name.endswith(".json"):
                return os.path.join(root, name)
    return ""


# ---------------------------------------------------------------------------------------------
# bench: rows.json per spec
# ---------------------------------------------------------------------------------------------
SPEC_KEYS = ("torch_rows", "sdpa_backend_auto_picked", "fastest_torch", "fastest_torch_label", "ratio_vs_fastest")


def _tps(r):
    for k in ("tokens_per_s", "tokens_per_s_median"):
        v = _num(r.get(k))
        if v and v > 0:
            return v
    return None


def _backend(r):
    """(requested, used) SDPA backend of a torch row; the row's impl names it in older forms."""
    b = r.get("sdpa_backend")
    req = r.get("sdpa_backend_requested") or r.get("requested") or r.get("backend")
    used = r.get("sdpa_backend_used") or r.get("used")
    if isinstance(b, dict):
        req, used = req or b.get("requested"), used or b.get("used")
    elif isinstance(b, str):
        req = req or b
    impl = str(r.get("impl", ""))
    if not req and impl.startswith("torch") and len(impl) > 6:
        req = impl[6:]
    return (str(req) if req else "default"), (str(used) if used else None)


def _is_ours(r):
    return str(r.get("impl", "")).lower() in ("gcompile", "ours")


def _is_ours_variant(r):
    """Ours on other attention kernels (gpu_vs_torch --attention-rows: impl gcompile_K)."""
    return str(r.get("impl", "")).lower().startswith("gcompile_")


def bench_specs(doc):
    """rows.json -> one dict per spec, in its order: ours, torch (one per backend), auto_picked,
    fastest (backend, tokens/s), ratio (ours / fastest torch)."""
    order, rows_of = [], {}
    for r in doc.get("rows", []) if isinstance(doc.get("rows"), list) else []:
        if isinstance(r, dict) and r.get("spec"):
            rows_of.setdefault(r["spec"], []).append(r)
            order += [r["spec"]] if r["spec"] not in order else []
    extra = doc.get("specs", doc.get("per_spec"))
    per_spec = {}
    if isinstance(extra, dict):
        per_spec = {k: v for k, v in extra.items() if isinstance(v, dict)}
    elif isinstance(extra, list):
        per_spec = {e.get("spec"): e for e in extra if isinstance(e, dict) and e.get("spec")}
    order += [k for k in per_spec if k not in order]
    out = []
    for label in order:
        rows = rows_of.get(label, [])
        fields = {}
        for src in [per_spec.get(label, {})] + [r for r in rows if not _is_ours(r)] + [r for r in rows if _is_ours(r)]:
            fields.update({k: src[k] for k in SPEC_KEYS if src.get(k) is not None})
        ours_row = next((r for r in rows if _is_ours(r)), None)
        torch_src = fields.get("torch_rows") if isinstance(fields.get("torch_rows"), list) else \
            [r for r in rows if not _is_ours(r) and not _is_ours_variant(r)]
        torch = []
        for r in torch_src:
            if isinstance(r, dict):
                req, used = _backend(r)
                torch.append({"backend": req, "used": used, "tokens_per_s": _tps(r),
                              "mfu": _num(r.get("mfu_989", r.get("mfu"))), "note": r.get("error") or r.get("note")})
        auto = fields.get("sdpa_backend_auto_picked")
        if not auto:
            auto = next((t["used"] for t in torch if t["backend"] == "auto" and t["used"]), None)
        timed = [t for t in torch if t["tokens_per_s"]]
        fastest = None
        f = fields.get("fastest_torch")
        if isinstance(f, dict):
            req, _ = _backend(f)
            fastest = {"backend": str(f.get("backend") or f.get("name") or req), "tokens_per_s": _tps(f)}
        elif isinstance(f, str):
            fastest = {"backend": f, "tokens_per_s": next((t["tokens_per_s"] for t in torch if t["backend"] == f), None)}
        if (fastest is None or not fastest["tokens_per_s"]) and timed:
            best = max(timed, key=lambda t: t["tokens_per_s"])
            fastest = {"backend": (fastest or {}).get("backend") or best["backend"], "tokens_per_s": best["tokens_per_s"]}
        if fastest:  # its name as the table gives it: auto with the backend it picked
            row = next((t for t in torch if t["backend"] == fastest["backend"]), {})
            fastest["label"] = str(fields.get("fastest_torch_label") or (
                f"auto={row['used']}" if fastest["backend"] == "auto" and row.get("used") else fastest["backend"]))
        ours = None
        if ours_row is not None:
            ours = {"tokens_per_s": _tps(ours_row), "mfu": _num(ours_row.get("mfu_989")),
                    "mfu_measured": _num(ours_row.get("mfu_ceiling")), "peak_bytes": _num(ours_row.get("peak_bytes")),
                    "plan_bytes": _num(ours_row.get("plan_bytes")), "step_ms": _num(ours_row.get("step_ms"))}
        ratio = _num(fields.get("ratio_vs_fastest"))
        if ratio is None and ours and ours["tokens_per_s"] and fastest and fastest["tokens_per_s"]:
            ratio = ours["tokens_per_s"] / fastest["tokens_per_s"]
        out.append({"spec": label, "ours": ours, "torch": torch, "auto_picked": auto, "fastest": fastest,
                    "ratio_vs_fastest": ratio, "variants": [r for r in rows if _is_ours_variant(r)]})
    return out


def _k(x):
    return f"{x:,.0f}" if x else "no time"


def _variant_text(v):
    """One ours-on-other-attention-kernels row: its speed, against ours and the fastest torch row."""
    text = f"ours with {v.get('attention', '?')} attention "
    if not _tps(v):
        return text + "no time"
    against = [f"{_num(v.get(k)):.2f}x {what}" for k, what in (("vs_default", "the default"), ("ratio", "fastest torch"))
               if _num(v.get(k))]
    return text + _k(_tps(v)) + " tok/s" + (f" ({', '.join(against)})" if against else "")


def bench_detail(rows_json):
    """(ok, detail) of the bench row: per spec ours and every torch row, the ratio to the fastest
    torch row. Fails when a spec's gcompile run, or every torch run of a spec that ran torch, has
    no time; a torch backend that did not run is listed, not failed."""
    doc, err = _load(rows_json)
    if not isinstance(doc, dict):
        return False, err or "rows.json is not an object"
    specs = bench_specs(doc)
    parts, ok = [], bool(specs)
    for s in specs:
        o = s["ours"]
        text = f"{s['spec']}: ours " + (_k(o["tokens_per_s"]) + " tok/s" if o else "not run")
        if o and o["mfu"]:
            text += f", MFU {100 * o['mfu']:.1f}%"
        if o and o["peak_bytes"] and o["plan_bytes"]:
            text += f", peak {o['peak_bytes'] / 2**30:.2f} / plan {o['plan_bytes'] / 2**30:.2f} GiB"
        ok = ok and bool(o and o["tokens_per_s"])
        if s["torch"]:
            rows = []
            for t in s["torch"]:
                name = t["backend"] + (f"->{t['used']}" if t["used"] and t["used"] != t["backend"] else "")
                rows.append(f"{name} {_k(t['tokens_per_s'])}" + (f" (MFU {100 * t['mfu']:.1f}%)" if t["mfu"] else ""))
            text += "; torch " + ", ".join(rows) + " tok/s"
            if s["auto_picked"]:
                text += f" (auto picked {s['auto_picked']})"
            ok = ok and any(t["tokens_per_s"] for t in s["torch"])
        if s["ratio_vs_fastest"] and s["fastest"]:
            text += f"; ours / fastest torch ({s['fastest']['label']}) {s['ratio_vs_fastest']:.2f}"
        text += "".join(f"; {_variant_text(v)}" for v in s["variants"])
        parts.append(text)
    notes = doc.get("notes") if isinstance(doc.get("notes"), list) else []
    return ok, "; ".join(parts + [f"note: {n}" for n in notes]) or "no rows"


# ---------------------------------------------------------------------------------------------
# summary.md's sections after the table, and summary.json's
# ---------------------------------------------------------------------------------------------
def _demote(text, top=3):
    """TEXT with its headings shifted so that the highest is of level TOP (under summary.md's ##)."""
    lines = text.strip().splitlines()
    levels = [len(l) - len(l.lstrip("#")) for l in lines if l.startswith("#")]
    shift = max(top - min(levels), 0) if levels else 0
    return "\n".join(("#" * shift + l) if l.startswith("#") else l for l in lines)


def _pct(x):
    return f"{100 * x:.1f}%" if x else "-"


def sections(results):
    """(markdown lines, json dict) from the results folder of a run (RESULTS/bench/rows.json and
    its per-spec folders, RESULTS/runs/profile.json); empty where those do not exist."""
    md, js = [], {}
    bench_dir = os.path.join(results, "bench")
    doc, _ = _load(os.path.join(bench_dir, "rows.json"))
    specs = bench_specs(doc) if isinstance(doc, dict) else []
    if specs:
        js["bench"] = specs
        md += ["", "## bench per spec", "",
               "| spec | implementation | SDPA backend (used) | tokens/s | MFU@989 | ours / this |",
               "|---|---|---|---:|---:|---:|"]
        for s in specs:
            o = s["ours"]
            if o:
                md.append(f"| {s['spec']} | gcompile | - | {_k(o['tokens_per_s'])} | {_pct(o['mfu'])} | - |")
            for t in s["torch"]:
                used = t["used"] or ("?" if t["backend"] == "auto" else t["backend"])
                mark = " (fastest)" if s["fastest"] and t["backend"] == s["fastest"]["backend"] else ""
                vs = (o["tokens_per_s"] / t["tokens_per_s"]) if (o and o["tokens_per_s"] and t["tokens_per_s"]) else None
                md.append(f"| {s['spec']} | torch.compile | {t['backend']} ({used}){mark} | {_k(t['tokens_per_s'])} | "
                          f"{_pct(t['mfu'])} | {f'{vs:.2f}' if vs else '-'} |")
        md.append("")
        for s in specs:
            bits = []
            if s["auto_picked"]:
                bits.append(f"SDPA auto picked {s['auto_picked']}")
            if s["fastest"] and s["ratio_vs_fastest"]:
                bits.append(f"ours / fastest torch ({s['fastest']['label']}): {s['ratio_vs_fastest']:.2f}")
            if bits:
                md.append(f"- {s['spec']}: " + "; ".join(bits))
    compare, files = {}, []
    if os.path.isdir(bench_dir):
        for label in sorted(os.listdir(bench_dir)):
            d = os.path.join(bench_dir, label)
            if not os.path.isdir(d):
                continue
            files += [f"bench/{label}/{n}" for n in sorted(os.listdir(d)) if n.startswith("profile") and n.endswith(".json")]
            try:
                compare[label] = _read(os.path.join(d, "profile_compare.md"))
            except OSError:
                pass
    order = [s["spec"] for s in specs] + sorted(k for k in compare if k not in [s["spec"] for s in specs])
    for label in order:
        if label in compare:
            md += ["", f"## profile: {label} (bench, gcompile against torch.compile)", "", _demote(compare[label])]
    if compare:
        js["profile_compare"] = compare
    if files:
        js["profile_files"] = files
    kit_profile = os.path.join(results, "runs", "profile.json")
    pdoc, _ = _load(kit_profile)
    if isinstance(pdoc, dict) and _num(pdoc.get("step_ms")):
        cats = category_ms(pdoc)
        step = _num(pdoc["step_ms"])
        js["profile"] = {"step_ms": step, "categories_ms": cats, "implementation": pdoc.get("implementation")}
        md += ["", f"## profile: the kit's profile row (tiny fp32, step {step:.3f} ms)", "",
               "| category | ms per step | share |", "|---|---:|---:|"]
        md += [f"| {k} | {v:.3f} | {100 * v / step:.1f}% |" for k, v in sorted(cats.items(), key=lambda kv: -kv[1]) if v]
    return md, js
