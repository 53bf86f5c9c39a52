#!/usr/bin/env python3
"""Writes data/gate/augment/forms.tsv: train-split pairs with an identifier written another way.

Round 12's model read the form of an identifier, not its value: it gave "storefront 4.12 is
out in prod" ~0.1 for "storefront v4.12 deployed to production", because the train split
mostly spells an identifier the way its query does. The corpus rule (data/gate/WRITING.md) is
that "prod" = "production", "v4.12" = "4.12", "PR #42" = "pull request 42", "Q2" = "second
quarter", "db" = "database", "k8s" = "Kubernetes". A change of spelling never changes a label,
so this script takes pairs of the train split (never dev or test), rewrites one such
identifier in the memory (two pairs in three) or in the query (one in three) to an equivalent
form, and keeps the label: "v4.11 is live" stays a near miss for "v4.12 live" as "4.11 is
live", and "PR 42 merged" stays a true signal for "PR #42 merged" as "pull request 42 merged".
As many near misses as true signals, so a spelling never signals the label by itself.

Seeded and standard library only: the same train.tsv always gives the same file.
Usage: scripts/gate-forms.py [--per-label N] [--out FILE]   (default 1500 a label)
"""

import argparse
import random
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "data" / "gate" / "train.tsv"
OUT = ROOT / "data" / "gate" / "augment" / "forms.tsv"
SEED = 20261208
ORDINAL = {"1": "first", "2": "second", "3": "third", "4": "fourth"}
CARDINAL = {v: k for k, v in ORDINAL.items()}


def cap_like(old, new):
    """Keeps a capitalised word capitalised ("Production" -> "Prod")."""
    return new[:1].upper() + new[1:] if old[:1].isupper() and not old.isupper() else new


# Each rule: a pattern and a function from (match, rng) to an equivalent spelling. A word joined
# to a name by a hyphen ("k8s-staging", "web-prod-3", "db-02") is part of that name and is kept.
RULES = [
    (re.compile(r"(?<![\w-])production(?![\w-])", re.I), lambda m, r: cap_like(m[0], "prod")),
    (re.compile(r"(?<![\w-])prod(?![\w-])", re.I), lambda m, r: cap_like(m[0], "production")),
    (re.compile(r"\bv(\d+(?:\.\d+)+)\b"), lambda m, r: r.choice([m[1], "version " + m[1], "release " + m[1]])),
    (re.compile(r"\bversion (\d+(?:\.\d+)+)\b", re.I), lambda m, r: "v" + m[1]),
    (re.compile(r"\bPR ?#(\d+)\b"), lambda m, r: r.choice(["pull request " + m[1], "PR " + m[1], "#" + m[1]])),
    (re.compile(r"\bPR (\d+)\b"), lambda m, r: r.choice(["PR #" + m[1], "pull request #" + m[1]])),
    (re.compile(r"\bpull request #?(\d+)\b", re.I), lambda m, r: "PR #" + m[1]),
    (re.compile(r"\bQ([1-4])\b"), lambda m, r: ORDINAL[m[1]] + r.choice([" quarter", "-quarter"])),
    (re.compile(r"\b(first|second|third|fourth)[- ]quarter\b", re.I), lambda m, r: "Q" + CARDINAL[m[1].lower()]),
    (re.compile(r"(?<![\w-])database(?![\w-])", re.I), lambda m, r: cap_like(m[0], "db")),
    (re.compile(r"(?<![\w-])db(?![\w-])", re.I), lambda m, r: cap_like(m[0], "database")),
    (re.compile(r"(?<![\w-])k8s(?![\w-])", re.I), lambda m, r: "Kubernetes"),
    (re.compile(r"(?<![\w-])kubernetes(?![\w-])", re.I), lambda m, r: "k8s"),
]


def rewrite(text, r):
    """One identifier of `text` in another spelling, or None when it has none."""
    hits = [(pat, fn, m) for pat, fn in RULES for m in pat.finditer(text)]
    if not hits:
        return None
    pat, fn, m = r.choice(hits)
    new = text[: m.start()] + fn(m, r) + text[m.end():]
    return new if new != text else None


def main():
    ap = argparse.ArgumentParser(description="derive identifier-spelling pairs from the train split")
    ap.add_argument("--per-label", type=int, default=1500)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    lines = TRAIN.read_text(encoding="utf-8").splitlines()
    header, rows = lines[0], [l.split("\t") for l in lines[1:] if l.strip()]
    cols = header.split("\t")
    Q, M, L, T = (cols.index(k) for k in ("query", "memory", "label", "topic"))
    seen = {(x[Q], x[M]) for x in rows}
    r = random.Random(SEED)
    made = {"0": [], "1": []}
    for x in rows:
        first = Q if r.random() < 1 / 3 else M
        for side in (first, M if first == Q else Q):
            new = rewrite(x[side], r)
            if new is not None:
                break
        if new is None:
            continue
        y = list(x)
        y[side] = new
        y[T] = x[T] + "-forms"
        if (y[Q], y[M]) not in seen:
            seen.add((y[Q], y[M]))
            made[x[L]].append("\t".join(y))
    n = min(args.per_label, len(made["0"]), len(made["1"]))
    out = [header] + r.sample(made["1"], n) + r.sample(made["0"], n)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(out) + "\n", encoding="utf-8")
    print(f"gate-forms: {len(made['1'])} true and {len(made['0'])} near-miss rewrites; wrote {2 * n} pairs to {args.out}")


if __name__ == "__main__":
    main()
