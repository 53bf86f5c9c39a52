#!/usr/bin/env python3
"""Writes data/gate/augment/anchors.tsv: two kinds of train pair the written corpus has too few of.

Round 10's model broke two things no dev figure showed: it gave a memory identical to its
query 0.79 (a gate on "migration 0 of the orders database completed" could not pass on that
very sentence), and it passed another topic's completed news ("review complete: PR #42 is
approved") for "deploy finished". Both are rules, not phrasings, so they are anchored here
for every query of the train split (never dev or test):

- **identity** (label 1): the query itself as the memory, as an agent would write it (as is,
  capitalised with a full stop, or after "done:" / "update:"). A memory that says exactly
  what the gate asks has happened is the plainest true signal there is.
- **unrelated** (label 0): a true signal of a topic from another domain, that is a completed
  event that is not the one asked about. Another domain, so the pair cannot be the same event
  worded apart; and no content word shared with the query, so the model must read the event,
  not the word "completed".

Seeded and standard library only: the same train.tsv always gives the same file.
Usage: scripts/gate-anchor.py [--out FILE]   (pass the output to train-verifier.py with --extra;
default data/gate/augment/anchors.tsv, the file round 12 was trained with)
"""

import argparse
import random
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "data" / "gate" / "train.tsv"
OUT = ROOT / "data" / "gate" / "augment" / "anchors.tsv"
SEED = 20261207
STOP = {"the", "a", "an", "of", "to", "for", "in", "on", "and", "is", "was", "has", "been", "be", "by", "with", "at", "from", "as", "it"}


def words(text):
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP and len(w) > 1}


def surface(r, query):
    q = query.strip()
    return r.choice([q, q[:1].upper() + q[1:] + ".", "done: " + q, "update: " + q, q])


def main():
    ap = argparse.ArgumentParser(description="derive anchor pairs from the train split")
    ap.add_argument("--out", type=Path, default=OUT)
    out_path = ap.parse_args().out
    lines = TRAIN.read_text(encoding="utf-8").splitlines()
    header, rows = lines[0], [l.split("\t") for l in lines[1:] if l.strip()]
    cols = header.split("\t")
    Q, M, L, C, D, S, T = (cols.index(k) for k in ("query", "memory", "label", "category", "domain", "style", "topic"))
    r = random.Random(SEED)
    by_query = {}
    for x in rows:
        by_query.setdefault(x[Q], x)
    signals = [x for x in rows if x[L] == "1" and x[C] in ("plain", "paraphrase", "structured")]
    out = [header]
    for q in sorted(by_query):
        base = by_query[q]
        ident = list(base)
        ident[M], ident[L], ident[C], ident[S], ident[T] = surface(r, q), "1", "plain", "identity", base[T] + "-anchor"
        out.append("\t".join(ident))
        qw = words(q)
        for _ in range(50):
            other = r.choice(signals)
            if other[D] != base[D] and not (qw & words(other[M])) and not (qw & words(other[Q])):
                neg = list(base)
                neg[M], neg[L], neg[C], neg[S], neg[T] = other[M], "0", "unrelated", other[S], base[T] + "-anchor"
                out.append("\t".join(neg))
                break
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text("\n".join(out) + "\n", encoding="utf-8")
    print(f"gate-anchor: wrote {len(out) - 1} pairs to {out_path}")


if __name__ == "__main__":
    main()
