#!/usr/bin/env python3
"""Scores a multiple-choice task on a `gcompile export` the way
lm-evaluation-harness's `hf` model does, and checks every log-likelihood
against the reference model (tests/reference) run on the tree's spec.

    .venv/bin/python tests/export/loglikelihood.py EXPORT TREE TASK.jsonl [--tol 1e-4]

TASK.jsonl: {"context", "choices", "answer"} per line (docs/eval/). For each
choice, as lm-eval's HFLM with add_bos_token=True does it: the request is
(context, " " + choice); trailing spaces of the context move to the
continuation; context and context+continuation are encoded with the export's
AutoTokenizer (BOS first), the continuation is what the longer encoding adds;
the model sees (context + continuation)[-(max_length + 1):][:-1] and the
log-likelihood is the sum of the continuation tokens' log-softmax. acc picks
the largest log-likelihood, acc_norm the largest per byte of the choice.

The same token sequences then go through reference_model.forward with the
export's weights (the tensor names of Llama and custom-code exports are the
checkpoint's), and each log-likelihood must agree within tol relative. For a
Llama export that is transformers' own model against ours; a custom-code export
runs the same gcompile_decoder.py as the reference, so there it checks the
wrapper (configuration, masks, positions, the window), and check_export.py's
comparison with the C++ model's logits checks the model.
Exit 0 pass, 1 mismatch, 2 bad input.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reference"))
import reference_model as ref  # noqa: E402


def encode_pair(tok, context, continuation):
    spaces = len(context) - len(context.rstrip())
    if spaces:
        continuation = context[-spaces:] + continuation
        context = context[:-spaces]
    whole = tok(context + continuation, add_special_tokens=True).input_ids
    ctx = tok(context, add_special_tokens=True).input_ids
    return ctx, whole[len(ctx):]


def loglikelihood(logits_fn, ctx, cont, max_length):
    cont = cont[-max_length:]  # a continuation longer than the window: its last max_length tokens
    inp = (ctx + cont)[-(max_length + 1):][:-1]
    logprobs = torch.log_softmax(logits_fn(inp).double(), dim=-1)[-len(cont):]
    return float(logprobs[torch.arange(len(cont)), torch.tensor(cont)].sum())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("export")
    ap.add_argument("tree")
    ap.add_argument("task")
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = json.loads((Path(args.export) / "config.json").read_text())
    if config["model_type"] == "qwen2_moe":
        print("loglikelihood: error: Qwen2-MoE exports rename tensors; use a Llama or custom-code export",
              file=sys.stderr)
        return 2
    tok = AutoTokenizer.from_pretrained(args.export)
    model = AutoModelForCausalLM.from_pretrained(args.export, trust_remote_code=True,
                                                 torch_dtype=torch.float32).eval()
    max_length = int(config["max_position_embeddings"])
    cfg = ref.Config(args.tree, {})
    weights = {k: torch.tensor(v, dtype=torch.float64) for k, v in load_file(
        str(Path(args.export) / "model.safetensors")).items()}

    def hf_logits(ids):
        with torch.no_grad():
            return model(torch.tensor([ids])).logits[0]

    def ref_logits(ids):
        with torch.no_grad():
            t = torch.tensor([ids])
            logits, _ = ref.forward(cfg, weights, t, torch.zeros_like(t))
            return logits

    items = [json.loads(line) for line in Path(args.task).read_text().splitlines() if line.strip()]
    worst, acc, acc_norm = 0.0, 0, 0
    for item in items:
        ours, theirs = [], []
        for choice in item["choices"]:
            ctx, cont = encode_pair(tok, item["context"], " " + choice)
            theirs.append(loglikelihood(hf_logits, ctx, cont, max_length))
            ours.append(loglikelihood(ref_logits, ctx, cont, max_length))
            worst = max(worst, abs(theirs[-1] - ours[-1]) / max(abs(ours[-1]), 1e-9))
        acc += int(np.argmax(theirs) == item["answer"])
        per_byte = [ll / len((" " + c).encode()) for ll, c in zip(theirs, item["choices"])]
        acc_norm += int(np.argmax(per_byte) == item["answer"])
    ok = worst <= args.tol
    n = len(items)
    print(f"loglikelihood: {n} items, acc {acc / n:.3f}, acc_norm {acc_norm / n:.3f} (chance 0.25); worst relative "
          f"difference from the reference model {worst:.2e} (tolerance {args.tol:g}): {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
