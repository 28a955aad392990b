#!/usr/bin/env python3
"""Writes python_docs_continuation.jsonl: a tiny offline multiple-choice task for
lm-evaluation-harness (docs/evaluation.md), from the Python tutorial that
Debian's python3.11-doc installs. Each item is the first two thirds of a
tutorial sentence (context) and four endings (lm-eval joins them with a space): its own (answer) and those of
three other sentences. Deterministic (fixed seed); run it to regenerate.

    python3 docs/eval/make_python_docs_task.py [SOURCES_DIR]
"""

import json
import random
import re
import sys
from pathlib import Path

src = Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/share/doc/python3.11/html/_sources/tutorial")
sentences = []
for path in sorted(src.glob("*.txt")):
    for paragraph in path.read_text(encoding="utf-8").split("\n\n"):
        text = " ".join(line.strip() for line in paragraph.splitlines())
        if not text or text[0] in ".:*=-#>" or "::" in text or "`" in text:
            continue
        for s in re.split(r"(?<=[.!?])\s+", text):
            words = s.split()
            if 12 <= len(words) <= 30 and s.endswith("."):
                sentences.append(words)
rng = random.Random(20261125)
rng.shuffle(sentences)
items = []
for i, words in enumerate(sentences[:40]):
    cut = (2 * len(words)) // 3
    ending = lambda w: " ".join(w[(2 * len(w)) // 3:])
    others = [ending(sentences[(i + k * 7) % len(sentences)]) for k in (1, 2, 3)]
    choices = others + [ending(words)]
    rng.shuffle(choices)
    items.append({"context": " ".join(words[:cut]), "choices": choices, "answer": choices.index(ending(words))})
out = Path(__file__).with_name("python_docs_continuation.jsonl")
out.write_text("".join(json.dumps(item) + "\n" for item in items))
print(f"{out}: {len(items)} items")
