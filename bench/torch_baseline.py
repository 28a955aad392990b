#!/usr/bin/env python3
"""PyTorch baseline for gcompile's GPU benchmark (bench/gpu_vs_torch).

The same Llama-style decoder as a gcompile spec describes: the project's one
PyTorch definition of the model (compiler/export/python/gcompile_decoder.py),
executed as a fast PyTorch training loop executes it (bench/torch_model.py:
SDPA, RoPE tables once, torch._grouped_mm experts), trained on random tokens
and timed, once per SDPA backend setting ("rows"), and profiled.

Everything that describes the spec comes from gcompile itself; this script
re-implements none of the spec's semantics:

  - `gcompile resolve SPEC` (the spec with its extends chain, preset and
    defaults merged in; a tree's spec.resolved.toml is the same text) gives
    the model's sizes and switches, the batch sizes, precision and AdamW's
    lr, betas, eps and grad_clip;
  - `gcompile explain SPEC --json` (the plan) gives every parameter tensor
    (name, shape, init distribution and std, lr multiplier, weight decay), the
    embedding / attention / logit scales, the parameter count and the FLOPs
    per token (docs/architecture.md, "Counting conventions").

Without gcompile on the machine (a GPU kit's trees), pass the plan saved
earlier with --plan-json and the tree's spec.resolved.toml as --spec-toml.

Training: torch.compile(model) (the loss is inside the compiled forward),
F.scaled_dot_product_attention(is_causal=True), bf16 autocast with fp32
parameters (train.precision = "bf16"), AdamW(fused=True) with the plan's
per-tensor lr multipliers and weight decay, global grad-norm clipping
(foreach), gradient accumulation global_batch / micro_batch,
zero_grad(set_to_none=True).

Rows (--sdpa-backends, default auto,flash,cudnn): one process runs every row
on the same token batches and the same initial weights (re-seeded), each with
a fresh model, optimizer and torch.compile (torch._dynamo.reset() between
rows; Inductor's on-disk caches make the later rows' compilation cheaper).
"auto" is PyTorch's own choice (no sdpa_kernel context) and the row reports
which backend that was (torch._fused_sdp_choice on the model's q, k, v, then
the SDPA op the profiled step actually ran); flash, cudnn, efficient and math
allow only that backend (torch.nn.attention.sdpa_kernel). A backend that cannot
run these inputs gives a row with the reason, and the other rows still run.
On the CPU (--device cpu, a smoke test) SDPA backends are a CUDA notion: one
"auto" row runs.

Timing: CUDA events around every optimizer step; the first --warmup steps
(compilation, autotuning, AdamW state allocation) are left out and the median
of the rest is reported. Peak memory is torch.cuda.max_memory_allocated() over
the timed steps (the counter is reset after the warm-up), and also over the
row's whole run. MFU = tokens/s * FLOP/token / peak, against the H100 SXM
datasheet's dense bf16 989 TFLOP/s and against a measured bf16 GEMM ceiling
(median of timed 8192^3 torch.matmul on random data).

Profile (--profile-steps N, default 3; 0 = off): N more steps of each row
under torch.profiler, every kernel grouped into gcompile's profile categories
(bench/torch_profile.py says how), written in gcompile's profile.json schema
into the row ("profile") and, with --profile-dir DIR, to
DIR/profile_torch_<backend>.json; bench/profile_compare.py puts it beside
`train --profile`'s.

Output: one JSON line on stdout: the first row's fields at the top level (as
before rows existed), "rows" (one object per backend: sdpa_backend,
sdpa_backend_used, step_ms_median, tokens_per_s_median, mfu_989, mfu_ceiling,
peak_device_bytes, profile, or error) and "fastest" (the row with the lowest
median step time). Progress and warnings on stderr. Exit status 0 when at least
one row was timed.

  python3 bench/torch_baseline.py --spec-toml generated/NAME/spec.resolved.toml --steps 40 --warmup 10
  python3 bench/torch_baseline.py --spec-toml generated/NAME/spec.resolved.toml --plan-json PLAN.json ...
  python3 bench/torch_baseline.py --spec-toml ... --sdpa-backends auto --profile-steps 0   # one row, no profile
  python3 bench/torch_baseline.py --ceiling-only

Standard library and torch only (the GPU machine's python3 has nothing of this
project); runs from any directory. The spec reading (read_config) imports
without torch, so bench/gpu_vs_torch reuses it for its own rows.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

try:
    import tomllib  # Python >= 3.11
except ModuleNotFoundError:  # pragma: no cover - older Pythons
    try:
        import tomli as tomllib  # type: ignore[no-redef]
    except ModuleNotFoundError:
        tomllib = None  # type: ignore[assignment]

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START = time.monotonic()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # torch_rows, torch_model, torch_profile

import torch_rows  # noqa: E402  (standard library at import; torch is imported by the functions that need it)
from torch_rows import GEMM_N, H100_BF16_DENSE_TFLOPS  # noqa: E402,F401  (bench/gpu_vs_torch reads them here)


class SpecError(Exception):
    """A spec that gcompile rejects or that this baseline does not support."""


# --------------------------------------------------------------------------
# The spec, as gcompile resolves and plans it (pure Python)
# --------------------------------------------------------------------------


def find_gcompile(path: str | None = None) -> str:
    """path, else $GCOMPILE, else build/compiler/gcompile in the repository."""
    path = path or os.environ.get("GCOMPILE") or os.path.join(REPO_ROOT, "build", "compiler", "gcompile")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise SpecError(f"gcompile not found at {path} (build it, pass --gcompile PATH or set $GCOMPILE; "
                        "or pass a saved plan with --plan-json)")
    return path


def run_gcompile(gcompile: str, *args: str) -> str:
    """gcompile's stdout; its stderr (warnings) only when it fails."""
    cmd = [gcompile, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SpecError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}):\n{proc.stderr.rstrip()}")
    return proc.stdout


def read_toml(path: str) -> dict:
    if tomllib is None:
        raise SpecError("reading TOML needs Python >= 3.11 (tomllib) or the tomli package")
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: not valid TOML: {e}") from None


def read_json(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file") from None
    except json.JSONDecodeError as e:
        raise SpecError(f"{path}: not valid JSON: {e}") from None


def resolve_and_plan(spec: str, gcompile: str | None = None, plan_json: str | None = None) -> tuple:
    """(resolved spec, plan): `gcompile resolve` and `gcompile explain --json`
    of spec, or, with plan_json, spec read as a resolved spec and the saved plan."""
    if plan_json:
        resolved, plan = read_toml(spec), read_json(plan_json)
        names = resolved.get("experiment", {}).get("name"), plan.get("experiment", {}).get("name")
        if names[0] != names[1]:
            raise SpecError(f"{plan_json} plans experiment {names[1]!r}, {spec} is {names[0]!r}")
        return resolved, plan
    if not os.path.isfile(spec):
        raise SpecError(f"{spec}: no such file")
    gcompile = find_gcompile(gcompile)
    if tomllib is None:
        raise SpecError("reading TOML needs Python >= 3.11 (tomllib) or the tomli package")
    resolved, plan = run_gcompile(gcompile, "resolve", spec), run_gcompile(gcompile, "explain", spec, "--json")
    try:
        return tomllib.loads(resolved), json.loads(plan)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        raise SpecError(f"{gcompile} printed something unreadable for {spec}: {e}") from None


@dataclass
class Config:
    name: str
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    norm_eps: float
    norm_placement: str  # pre | sandwich
    embedding_norm: bool
    qk_norm: bool
    tie_embeddings: bool
    gated_attention: str  # none | headwise | elementwise
    rope_theta: float
    embedding_scale: float
    attn_scale: float
    logit_scale: float
    seq_len: int
    micro_batch: int
    global_batch: int
    precision: str  # bf16 | fp32
    lr: float
    betas: tuple
    adam_eps: float
    grad_clip: float
    params: list  # the plan's tensors: name, class, shape, init, lr_mult, weight_decay, ...
    param_count: int
    matmul_params: int
    flops_per_token: float
    moe: dict | None = None  # MoE settings (moe_config) or None for a dense model

    @property
    def grad_accum(self) -> int:
        return self.global_batch // self.micro_batch

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def gate_dim(self) -> int:
        return {"none": 0, "headwise": self.n_heads, "elementwise": self.q_dim}[self.gated_attention]


def _section(doc: dict, section: str):
    """need(key): doc[section][key], or a SpecError naming section.key."""
    table = doc.get(section, {})

    def need(key: str):
        if key not in table:
            raise SpecError(f"the resolved spec has no {section}.{key} (pass gcompile's resolve output)")
        return table[key]

    return need


def _batches(train, micro_batch_override: int | None) -> tuple:
    """(micro_batch, global_batch); an override keeps the micro-batches per step."""
    micro_batch, global_batch = int(train("micro_batch")), int(train("global_batch"))
    if micro_batch_override:
        global_batch = micro_batch_override * max(1, global_batch // micro_batch)
        micro_batch = micro_batch_override
    return micro_batch, global_batch


def config_from(resolved: dict, plan: dict, micro_batch_override: int | None = None) -> Config:
    exp, model, train, optim = (_section(resolved, s) for s in ("experiment", "model", "train", "optim"))
    moe = moe_config(resolved) if model("arch") == "moe" else None
    if model("arch") not in ("dense", "moe"):
        raise SpecError(f"model.arch = {model('arch')!r}: the baseline covers dense and moe models")
    if model("activation") != "swiglu":
        raise SpecError(f"model.activation = {model('activation')!r}: only swiglu is supported")
    if train("precision") not in ("bf16", "fp32"):
        raise SpecError(f"train.precision = {train('precision')!r} is not bf16 or fp32")
    micro_batch, global_batch = _batches(train, micro_batch_override)
    scales, flops = plan["scales"], plan["flops"]
    betas = optim("betas")
    return Config(
        name=str(exp("name")), vocab_size=int(model("vocab_size")), d_model=int(model("d_model")),
        n_layers=int(model("n_layers")), n_heads=int(model("n_heads")), n_kv_heads=int(model("n_kv_heads")),
        head_dim=int(model("head_dim")), d_ff=int(moe["dense_d_ff"] if moe else model("d_ff")),
        norm_eps=float(model("norm_eps")),
        norm_placement=str(model("norm_placement")), embedding_norm=bool(model("embedding_norm")),
        qk_norm=bool(model("qk_norm")), tie_embeddings=bool(model("tie_embeddings")),
        gated_attention=str(model("gated_attention")), rope_theta=float(model("rope_theta")),
        embedding_scale=float(scales["embedding"]), attn_scale=float(scales["attention"]),
        logit_scale=float(scales["logits"]),
        seq_len=int(train("seq_len")), micro_batch=micro_batch, global_batch=global_batch,
        precision=str(train("precision")), lr=float(optim("lr")), betas=(float(betas[0]), float(betas[1])),
        adam_eps=float(optim("eps")), grad_clip=float(optim("grad_clip")),
        params=list(plan["params"]), param_count=int(plan["counts"]["total"]),
        matmul_params=int(flops["matmul_params"]), flops_per_token=float(flops["per_token"]), moe=moe,
    )


def moe_config(resolved: dict) -> dict:
    """The [moe] settings the baseline trains (bench/torch_model.py); a SpecError names one it does not
    (aux_free needs the selection-bias update between steps, a capacity the dropped rows' policy: the
    baseline would train another model)."""
    moe = _section(resolved, "moe")
    unsupported = {"load_balance": ("aux_loss", "none"), "capacity_factor": (0, 0.0)}
    for key, allowed in unsupported.items():
        value = resolved.get("moe", {}).get(key, allowed[0])
        if value not in allowed:
            raise SpecError(f"moe.{key} = {value!r}: the PyTorch baseline implements {allowed}")
    optional = resolved.get("moe", {})
    return {"n_dense_layers": int(moe("n_dense_layers")), "layer_interval": int(moe("layer_interval")),
            "n_experts": int(moe("n_experts")), "top_k": int(moe("top_k")), "expert_d_ff": int(moe("expert_d_ff")),
            "shared_d_ff": int(moe("n_shared_experts")) * int(moe("shared_d_ff")),
            "dense_d_ff": int(moe("dense_d_ff")), "router_scoring": str(moe("router_scoring")),
            "norm_topk_prob": bool(moe("norm_topk_prob")), "load_balance": str(moe("load_balance")),
            "load_balance_coef": float(moe("load_balance_coef")),
            "seq_aux_loss": float(optional.get("seq_aux_loss", 0.0)), "z_loss": float(optional.get("z_loss", 0.0))}


def read_config(path: str, micro_batch_override: int | None = None, gcompile: str | None = None,
                plan_json: str | None = None) -> Config:
    """path: a spec file, a spec.resolved.toml or a generated tree directory;
    plan_json: a saved `gcompile explain --json` (then path must be resolved)."""
    if os.path.isdir(path):
        path = os.path.join(path, "spec.resolved.toml")
    resolved, plan = resolve_and_plan(path, gcompile, plan_json)
    try:
        return config_from(resolved, plan, micro_batch_override)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise SpecError(f"unexpected gcompile output ({type(e).__name__}: {e})") from None


def median(values):
    values = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(values) if values else None


# --------------------------------------------------------------------------
# The rows (need torch)
# --------------------------------------------------------------------------


def run_benchmark(args, cfg: Config) -> dict:
    import torch

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("torch_baseline: error: torch sees no CUDA device (torch.cuda.is_available() is False)")
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    use_sdpa = hasattr(torch.nn.functional, "scaled_dot_product_attention") and (major, minor) >= (2, 1)
    use_sdpa_gqa = use_sdpa and (major, minor) >= (2, 5)
    if cuda and not use_sdpa:
        raise SystemExit(f"torch_baseline: error: torch {torch.__version__} is too old (need >= 2.1 for SDPA with scale=)")
    if not args.no_compile and not hasattr(torch, "compile"):
        raise SystemExit("torch_baseline: error: this torch has no torch.compile (need >= 2.0; or --no-compile)")

    result = {"impl": "torch", "spec": cfg.name, **torch_rows.device_info(torch)}
    ceiling = args.ceiling_tflops
    if cuda and ceiling is None and not args.no_ceiling:
        ceiling = torch_rows.measure_gemm_ceiling(torch, device)
    result["gemm_ceiling_tflops"] = ceiling
    result.update({"precision": cfg.precision, "micro_batch": cfg.micro_batch, "grad_accum": cfg.grad_accum,
                   "seq_len": cfg.seq_len, "tokens_per_step": cfg.tokens_per_step, "params_total": cfg.param_count,
                   "matmul_params": cfg.matmul_params, "flops_per_token": cfg.flops_per_token,
                   "ln_vocab": math.log(cfg.vocab_size)})
    backends = args.backends
    notes = []
    if not cuda:
        if backends != ["auto"]:
            notes.append(f"SDPA backends are a CUDA notion: on the CPU one auto row runs (asked: {','.join(backends)})")
        backends = ["auto"]

    # Random token batches, generated on the device up front and rotated; shared by every row.
    gen = torch.Generator(device=device).manual_seed(args.seed)
    data = [torch.randint(0, cfg.vocab_size, (cfg.micro_batch, cfg.seq_len + 1), device=device, generator=gen)
            for _ in range(4)]
    if not args.no_compile:
        no_graph_caches(torch)
    deadline = (START + args.budget_s) if args.budget_s else None
    sh = torch_rows.Shared(torch, args, cfg, device, data, ceiling, use_sdpa, use_sdpa_gqa, major, deadline)
    rows = run_rows(sh, backends)
    timed = [r for r in rows if r.get("step_ms_median")]
    fastest = min(timed, key=lambda r: r["step_ms_median"]) if timed else None
    first = {k: v for k, v in rows[0].items() if k != "profile"}
    result.update(first)  # the first row at the top level, as before rows existed
    result.update({"sdpa_backends": backends, "rows": rows, "notes": notes,
                   "fastest": fastest["sdpa_backend"] if fastest else None,
                   "fastest_used": fastest.get("sdpa_backend_used") if fastest else None,
                   "sdpa_backend_auto_picked": next((r.get("sdpa_backend_used") for r in rows
                                                     if r["sdpa_backend"] == "auto"), None)})
    return result


def no_graph_caches(torch):
    """Inductor's FX graph cache and AOTAutograd's cache key a compiled graph by the traced code,
    not by the SDPA backend allowed when it was traced: with them a forced-flash row reused the
    auto row's cuDNN graph (seen on an H200, torch 2.11). Off for every row; the kernel-level
    caches (Triton's compiled kernels) still make the later rows' compilation cheaper."""
    for module, attr in (("torch._inductor.config", "fx_graph_cache"),
                         ("torch._functorch.config", "enable_autograd_cache")):
        try:
            __import__(module)
            setattr(sys.modules[module], attr, False)
        except (ImportError, AttributeError):
            pass


def run_rows(sh, backends: list, runner=None) -> list:
    """Every row in turn (runner: torch_rows.run_row); a row that raises becomes an error row and
    the next one still runs; the compiled code, the freed memory and dynamo's caches are dropped
    between rows; each row's profile goes to --profile-dir."""
    import gc

    args, torch, runner = sh.args, sh.torch, runner or torch_rows.run_row
    rows = []
    for i, backend in enumerate(backends):
        warmup = args.warmup if i == 0 else (args.extra_row_warmup or args.warmup)
        steps = args.steps if i == 0 else (args.extra_row_steps or args.steps)
        auto = next((r for r in rows if r["sdpa_backend"] == "auto" and r.get("step_ms_median")), None)
        if auto and auto.get("sdpa_backend_used") == backend and not args.rerun_auto_pick:
            # Forcing the backend auto ran compiles the same graph: auto's row is this row's measurement.
            row = {k: v for k, v in auto.items() if k != "profile"}
            row.update({"sdpa_backend": backend, "same_as": "auto",
                        "sdpa_backend_note": f"not compiled again: PyTorch's own choice (auto) ran {backend}, so "
                                             "this row is auto's measurement (--rerun-auto-pick runs it)"})
        elif sh.over_budget():
            row = torch_rows.error_row(backend, f"skipped: --budget-s {args.budget_s:g} reached before this row")
        else:
            torch_rows.log(f"row {i + 1}/{len(backends)}: sdpa {backend}, {warmup} warm-up + {steps} timed steps")
            try:
                row = runner(sh, backend, warmup, steps)
            except Exception as e:  # noqa: BLE001 - one row's failure (OOM, no kernel, compile error) is its row's
                msg = " ".join(str(e).split())
                row = torch_rows.error_row(backend, f"{type(e).__name__}: {msg[:700]}")
        if row.get("error"):
            torch_rows.log(f"row {backend}: {row['error']}")
        if not sh.cuda:
            row["sdpa_backend_note"] = "CPU smoke row: PyTorch's own SDPA choice on the CPU, no backend forced"
        rows.append(row)
        if row.get("same_as"):
            continue
        gc.collect()
        if sh.cuda:
            torch.cuda.empty_cache()
        if hasattr(torch, "_dynamo"):
            torch._dynamo.reset()
        if args.profile_dir and row.get("profile"):
            os.makedirs(args.profile_dir, exist_ok=True)
            with open(os.path.join(args.profile_dir, f"profile_torch_{backend}.json"), "w") as f:
                json.dump(row["profile"], f, indent=1)
    return rows


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="PyTorch baseline of a gcompile spec: times training steps on random "
                                "tokens, one row per SDPA backend, profiles them, and prints one JSON line.")
    p.add_argument("--spec-toml", help="a tree's spec.resolved.toml (or the tree directory, or a spec file)")
    p.add_argument("--gcompile", default=None, metavar="PATH",
                   help="the gcompile that resolves and plans the spec (default $GCOMPILE, else "
                   "build/compiler/gcompile in the repository)")
    p.add_argument("--plan-json", default=None, metavar="FILE",
                   help="a saved `gcompile explain SPEC --json` of the resolved --spec-toml: gcompile is not run")
    p.add_argument("--steps", type=int, default=40, help="timed optimizer steps (default 40)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first, compilation included (default 10)")
    p.add_argument("--extra-row-steps", type=int, default=0, metavar="N",
                   help="timed steps of the rows after the first (default: --steps)")
    p.add_argument("--extra-row-warmup", type=int, default=0, metavar="N",
                   help="warm-up steps of the rows after the first (default: --warmup)")
    p.add_argument("--micro-batch", "--batch-override", dest="micro_batch", type=int, default=None,
                   help="override train.micro_batch (the number of micro-batches per step is kept)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a smoke test, no timing claims")
    p.add_argument("--ceiling-tflops", type=float, default=None,
                   help="use this bf16 GEMM ceiling instead of measuring it")
    p.add_argument("--no-ceiling", action="store_true", help="do not measure the GEMM ceiling")
    p.add_argument("--ceiling-only", action="store_true", help="only measure the bf16 GEMM ceiling and print it")
    p.add_argument("--compile-mode", default="default",
                   help="torch.compile mode: default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs")
    p.add_argument("--no-compile", action="store_true", help="eager mode (debugging)")
    p.add_argument("--sdpa-backends", default=None, metavar="LIST",
                   help="rows, comma-separated, from " + ",".join(torch_rows.SDPA_BACKENDS) +
                   f" (default {torch_rows.DEFAULT_SDPA_BACKENDS}); auto: PyTorch's own choice, reported")
    p.add_argument("--sdpa-backend", dest="sdpa_backend", default=None, choices=torch_rows.SDPA_BACKENDS,
                   help="one row with this backend (the same as --sdpa-backends X)")
    p.add_argument("--rerun-auto-pick", action="store_true",
                   help="also compile and time a forced row whose backend is the one auto ran (by default that "
                   "row repeats auto's measurement)")
    p.add_argument("--profile-steps", type=int, default=3, metavar="N",
                   help="profile N more steps of each row (default 3; 0: no profile)")
    p.add_argument("--profile-dir", default=None, metavar="DIR",
                   help="also write each row's profile to DIR/profile_torch_<backend>.json")
    p.add_argument("--budget-s", type=float, default=0, metavar="S",
                   help="start no row or profile after S seconds (default 0: no limit); skipped rows are error rows")
    p.add_argument("--tf32", action="store_true", help="allow TF32 matmuls (affects fp32 specs only)")
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args(argv)
    if not args.ceiling_only and not args.spec_toml:
        p.error("--spec-toml is required (or --ceiling-only)")
    if args.steps < 1 or args.warmup < 1:
        p.error("--steps and --warmup must be >= 1 (the first step compiles)")
    if args.extra_row_steps < 0 or args.extra_row_warmup < 0 or args.profile_steps < 0:
        p.error("--extra-row-steps, --extra-row-warmup and --profile-steps must be >= 0")
    if args.sdpa_backend and args.sdpa_backends:
        p.error("give --sdpa-backends or --sdpa-backend, not both")
    try:
        args.backends = torch_rows.parse_backends(args.sdpa_backend or args.sdpa_backends
                                                  or torch_rows.DEFAULT_SDPA_BACKENDS)
    except ValueError as e:
        p.error(f"--sdpa-backends: {e}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.ceiling_only:
        try:
            import torch
        except ModuleNotFoundError:
            print("torch_baseline: error: PyTorch is not installed for this python3", file=sys.stderr)
            return 1
        if not torch.cuda.is_available():
            print("torch_baseline: error: torch sees no CUDA device", file=sys.stderr)
            return 1
        out = {"gemm_ceiling_tflops": torch_rows.measure_gemm_ceiling(torch, torch.device("cuda")), "gemm_n": GEMM_N,
               **torch_rows.device_info(torch)}
        print(json.dumps(out), flush=True)
        return 0
    try:
        cfg = read_config(args.spec_toml, args.micro_batch, args.gcompile, args.plan_json)
    except SpecError as e:
        print(f"torch_baseline: error: {args.spec_toml}: {e}", file=sys.stderr)
        return 1
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError:
        print("torch_baseline: error: PyTorch is not installed for this python3", file=sys.stderr)
        return 1
    print(f"torch_baseline: {cfg.name}: {cfg.param_count:,} parameters, micro-batch {cfg.micro_batch} x "
          f"{cfg.seq_len} tokens, {cfg.grad_accum} micro-batch(es) per step, {cfg.precision}", file=sys.stderr)
    result = run_benchmark(args, cfg)
    print(json.dumps(result), flush=True)
    timed = [r for r in result["rows"] if r.get("step_ms_median")]
    if not timed:
        print(f"torch_baseline: error: {cfg.name}: no row could be timed", file=sys.stderr)
    return 0 if timed else 1


if __name__ == "__main__":
    sys.exit(main())
