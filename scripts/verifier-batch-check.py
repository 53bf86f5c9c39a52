#!/usr/bin/env python3
"""Measures how much the verifier's verdicts depend on the other pairs of their batch.

The shipped int8 model (models/verifier/model.onnx) was quantised dynamically: ONNX Runtime
computes one activation scale per batch, so a pair's probability moves with the pairs run
beside it. slm batches a lap's candidates (and `slm gate eval` a query's pairs), so the same
(query, memory, model) can pass in one lap and be blocked in another. Found 2026-12-07: round 12
flips 55 of dev's 3,302 verdicts at 0.8 between one pair at a time and the pairs of one query
together (up to 0.97 apart). This script prints those figures for a model folder, so a fix
(static activation scales, weight-only int8, or one pair a run) can be checked.

A development tool: it runs in the training venv (scripts/train-env.sh) and reuses
train-verifier.py's tokenisation and symbol table.
Usage: "$(bash scripts/train-env.sh)" scripts/verifier-batch-check.py MODEL_DIR THRESHOLD FILE.tsv
"""

import collections
import importlib.util
import sys
from pathlib import Path

import numpy as np
from transformers import PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("train_verifier", ROOT / "scripts" / "train-verifier.py")
tv = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tv)


def main():
    model_dir, thr, path = Path(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3])
    tok = PreTrainedTokenizerFast(tokenizer_file=str(model_dir / "tokenizer.json"), pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", unk_token="[UNK]")
    tok.model_input_names = ["input_ids", "token_type_ids", "attention_mask"]
    rows = tv.read_tsv(path)
    single = tv.onnx_predict(model_dir / "model.onnx", tok, rows, size=1)
    groups = collections.defaultdict(list)
    for i, r in enumerate(rows):
        groups[r["query"]].append(i)
    grouped = [0.0] * len(rows)
    for idx in groups.values():
        for i, p in zip(idx, tv.onnx_predict(model_dir / "model.onnx", tok, [rows[i] for i in idx], size=64)):
            grouped[i] = p
    label = lambda r: (r.get("label") or r.get("should_pass")) in ("1", "true")
    d = np.abs(np.array(single) - np.array(grouped))
    flips = [i for i in range(len(rows)) if (single[i] >= thr) != (grouped[i] >= thr)]
    right = lambda ps: sum((ps[i] >= thr) == label(r) for i, r in enumerate(rows))
    print(f"{model_dir} on {path} at {thr}: {len(rows)} pairs; |difference| median {np.median(d):.4f}, "
          f"95th percentile {np.percentile(d, 95):.3f}, max {d.max():.3f}; verdicts that flip {len(flips)}; "
          f"model alone right: one pair a run {right(single)}, a query's pairs together {right(grouped)}")
    for i in flips:
        print(f"  {single[i]:.2f} alone / {grouped[i]:.2f} together  {rows[i]['query']!r} <- {rows[i]['memory']!r}")


if __name__ == "__main__":
    main()
