#!/usr/bin/env python3
"""Reads a run's TensorBoard event file with tensorboard's EventAccumulator and
compares it with the run's metrics.jsonl.

    .venv/bin/python tests/export/check_tensorboard.py RUN [--truncate N]

Every number of every metrics.jsonl record must be a scalar at its step under
the tag docs/metrics.md defines (the record's metric or event name, then the
path to the number without the keys "value"/"values"), equal up to float32
rounding, and every cosine_image record an image. --truncate N first cuts the
last N bytes off a copy of the event file (a killed run): the copy must still
read, with every record but the torn last one. Exit 0 pass, 1 mismatch, 2 bad input.
"""

import argparse
import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def expected(run):
    """(tag -> [(step, value)], number of images) from metrics.jsonl."""
    scalars, images = {}, 0
    for line in (Path(run) / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        for pointer, name in r.pop("nonfinite", {}).items():
            node = r
            keys = pointer.lstrip("/").split("/")
            for k in keys[:-1]:
                node = node[int(k)] if isinstance(node, list) else node[k]
            node[keys[-1] if isinstance(node, dict) else int(keys[-1])] = float(name)
        if r.get("metric") == "cosine_image":
            images += 1
            continue
        prefix = r.get("event", r.get("metric", ""))
        step = r.get("step", 0)

        def walk(v, tag):
            if isinstance(v, bool) or v is None or isinstance(v, str):
                return
            if isinstance(v, (int, float)):
                scalars.setdefault(tag, []).append((step, float(v)))
            elif isinstance(v, dict):
                for k, c in v.items():
                    walk(c, tag if k in ("value", "values") else (f"{tag}/{k}" if tag else k))
            elif isinstance(v, list):
                for i, c in enumerate(v):
                    walk(c, f"{tag}/{i}")

        for k, v in r.items():
            if k not in ("step", "metric", "event"):
                walk(v, prefix if k in ("value", "values") else (f"{prefix}/{k}" if prefix else k))
    return scalars, images


def same(a, b):
    a32 = float(np.float32(a))
    return (math.isnan(a32) and math.isnan(b)) or a32 == b


def read(tb_dir):
    acc = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0, "images": 0})
    acc.Reload()
    tags = acc.Tags()
    scalars = {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in tags["scalars"]}
    images = sum(len(acc.Images(t)) for t in tags["images"])
    return scalars, images


def compare(want, got, allow_missing_tail):
    problems = []
    for tag, points in want.items():
        have = got.get(tag, [])
        if allow_missing_tail and len(have) == len(points) - 1:
            points = points[:-1]
        if len(have) != len(points):
            problems.append(f"{tag}: {len(have)} points, metrics.jsonl has {len(points)}")
            continue
        for (s1, v1), (s2, v2) in zip(points, have):
            if s1 != s2 or not same(v1, v2):
                problems.append(f"{tag}: step {s2} value {v2} vs metrics.jsonl step {s1} value {v1}")
                break
    extra = sorted(set(got) - set(want))
    if extra:
        problems.append(f"tags not in metrics.jsonl: {extra[:5]}")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run")
    ap.add_argument("--truncate", type=int, default=0)
    args = ap.parse_args()
    tb = Path(args.run) / "tb"
    files = sorted(tb.glob("events.out.tfevents.*"))
    if len(files) != 1:
        print(f"check_tensorboard: error: expected one event file in {tb}, found {len(files)}", file=sys.stderr)
        return 2
    want, want_images = expected(args.run)
    got, got_images = read(tb)
    problems = compare(want, got, False)
    if got_images != want_images:
        problems.append(f"{got_images} images, metrics.jsonl has {want_images} cosine_image records")
    points = sum(len(v) for v in want.values())
    print(f"check_tensorboard: {len(want)} tags, {points} scalars, {got_images} images: "
          f"{'ok' if not problems else 'FAIL'}")
    if args.truncate:
        with tempfile.TemporaryDirectory() as tmp:
            cut = Path(tmp) / files[0].name
            shutil.copy(files[0], cut)
            with open(cut, "r+b") as f:
                f.truncate(max(cut.stat().st_size - args.truncate, 0))
            got_cut, _ = read(tmp)
            # The torn record is the last event: its scalars (one record's worth) may be gone.
            lost = compare(want, got_cut, True)
            if lost:
                problems += ["after truncation: " + p for p in lost]
            kept = sum(len(v) for v in got_cut.values())
            print(f"check_tensorboard: truncated by {args.truncate} bytes: {kept} scalars still read: "
                  f"{'ok' if not lost else 'FAIL'}")
    for p in problems[:20]:
        print(f"check_tensorboard: FAIL: {p}")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
