#!/usr/bin/env python3
"""Loads a `gcompile export` directory with transformers and checks it against the tree.

    .venv/bin/python tests/export/check_export.py EXPORT PROBE.safetensors
        [--expect LlamaForCausalLM] [--tol 1e-4] [--corpus DIR] [--files N]

PROBE.safetensors is what the tree's `probe --checkpoint CKPT` wrote for the
exported checkpoint: its tokens and the C++ model's logits (after the logit
scale). The export must load with AutoModelForCausalLM (trust_remote_code for
custom code) with no missing, unexpected or mismatched tensors, and give the
same logits (a bf16 export computes in bf16): ||hf - ours|| / ||ours|| <= tol, and per row as well.

With --corpus, AutoTokenizer must load too, and on the first N text files of
DIR give the ids gcompile's data pipeline gives ([BOS] + SentencePiece ids of
the document, encoded with the export's own tokenizer.model), and decode back
to the text. Exit status 0 pass, 1 mismatch, 2 bad input.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def check_logits(export, probe, expect, tol):
    from transformers import AutoModelForCausalLM

    config = json.loads((Path(export) / "config.json").read_text())
    arch = config["architectures"][0]
    if expect and arch != expect:
        print(f"check_export: FAIL: architecture {arch}, expected {expect}")
        return False
    dtype = torch.bfloat16 if config.get("torch_dtype") == "bfloat16" else torch.float32
    model, info = AutoModelForCausalLM.from_pretrained(export, trust_remote_code=True, torch_dtype=dtype,
                                                       output_loading_info=True)
    problems = {k: v for k, v in info.items() if v and k != "error_msgs"}
    if problems or info.get("error_msgs"):
        print(f"check_export: FAIL: loading reported {problems or info['error_msgs']}")
        return False
    model = model.eval()  # a bf16 export computes in bf16, as a user would run it
    t = load_file(probe)
    tokens = torch.tensor(t["tokens"].astype(np.int64))
    ours = t["logits"].astype(np.float64)
    with torch.no_grad():
        theirs = model(tokens).logits.reshape(ours.shape).double().numpy()
    whole = rel(theirs, ours)
    rows = max(rel(theirs[i], ours[i]) for i in range(ours.shape[0]))
    ok = whole <= tol and rows <= tol
    print(f"check_export: {arch} ({config.get('torch_dtype')}) logits {list(ours.shape)}: relative error "
          f"{whole:.2e}, worst row {rows:.2e} (tolerance {tol:g}): {'ok' if ok else 'FAIL'}")
    return ok


def check_tokenizer(export, corpus, files):
    import sentencepiece as spm
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(export)
    sp = spm.SentencePieceProcessor(model_file=str(Path(export) / "tokenizer.model"))
    paths = sorted(p for p in Path(corpus).rglob("*.txt"))[:files]
    if not paths:
        print(f"check_export: error: no .txt files under {corpus}", file=sys.stderr)
        return None
    bad = 0
    count = 0
    for p in paths:
        text = p.read_text(encoding="utf-8")
        ours = [sp.bos_id()] + sp.encode(text)
        theirs = tok(text).input_ids
        count += len(ours)
        if theirs != ours:
            first = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
            print(f"check_export: FAIL: {p}: {type(tok).__name__} ids differ from gcompile's at position {first} "
                  f"(theirs {theirs[first:first + 5]}, ours {ours[first:first + 5]})")
            bad += 1
        elif tok.decode(theirs, skip_special_tokens=True) != text:
            print(f"check_export: FAIL: {p}: decoding the ids does not give the text back")
            bad += 1
    print(f"check_export: {type(tok).__name__}: {len(paths) - bad}/{len(paths)} documents ({count} tokens) "
          f"encode as gcompile's data pipeline does: {'ok' if bad == 0 else 'FAIL'}")
    return bad == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("export")
    ap.add_argument("probe")
    ap.add_argument("--expect", default="")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--corpus", default="")
    ap.add_argument("--files", type=int, default=20)
    args = ap.parse_args()
    if not (Path(args.export) / "config.json").exists() or not Path(args.probe).exists():
        print("check_export: error: need an export directory with config.json and a probe file", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    ok = check_logits(args.export, args.probe, args.expect, args.tol)
    if args.corpus:
        t = check_tokenizer(args.export, args.corpus, args.files)
        if t is None:
            return 2
        ok = ok and t
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
