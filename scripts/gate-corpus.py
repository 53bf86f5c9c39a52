#!/usr/bin/env python3
"""Builds the gate verifier's corpus: data/gate/raw/*.tsv -> data/gate/{train,dev,test}.tsv.

The raw files are written by people (see data/gate/WRITING.md), one file a writer or an
adversarial round. This script checks every row (seven fields, a 0/1 label, a category that
belongs to the label), drops exact duplicates, and splits **by topic**: every row of a topic
goes to one split, and topics that share a query (after lower-casing and squeezing spaces) are
one topic, so no awaited event is seen in two splits. The split is a function of the topic's
name (sha256), so adding a new raw file never moves an old topic from one split to another.

The seed's pairs (tests/data/gate-dev.tsv, the same file as ../shared/gate-dev.tsv) measure
the gate and are never trained on: a topic that asks one of their queries, or has a memory
that copies one of their memories (60 % of its word 4-grams or more), is held out of every
split, and the script says how many rows that drops. Earlier rounds had written seven such
topic groups (the seed's own "invoice 1031 is overdue and unpaid", "training loss converged after
40 epochs", ...), so a model could score that file by memory.

Standard library only: it runs in CI without the training environment.

A new raw file can still move an old row: a new topic that reuses an old query and whose name
sorts first renames the old topic's group, and so its split. Writing refuses that (exit 2,
naming the rows) unless --allow-moves: a row that moves out of test or dev was measured on and
would now be trained on, so the fix is to rename or drop the new topic.

Usage: scripts/gate-corpus.py [--check] [--allow-moves]   (--check: exit 1 if the split files are stale)
"""

import argparse
import collections
import hashlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RAW = ROOT / "data" / "gate" / "raw"
SEED = ROOT / "tests" / "data" / "gate-dev.tsv"
OUT = ROOT / "data" / "gate"
COLUMNS = ["query", "memory", "label", "category", "domain", "style", "topic"]
TRUE = {"plain", "paraphrase", "structured", "noise", "double_negative"}
FALSE = {
    "negation", "failure", "pending", "wrong_entity", "partial", "question",
    "hypothetical", "refusal", "other_step", "unrelated",
}
# Percent of topics per split, by the first byte pair of sha256(topic).
TEST_PCT, DEV_PCT = 10, 10


def norm(text):
    return " ".join(text.lower().split())


def read_raw():
    rows, errors = [], []
    for path in sorted(RAW.glob("*.tsv")):
        lines = path.read_text(encoding="utf-8").splitlines()
        if not lines or lines[0].split("\t") != COLUMNS:
            errors.append(f"{path.name}:1: header must be {' '.join(COLUMNS)}")
            continue
        for n, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            f = line.split("\t")
            where = f"{path.name}:{n}"
            if len(f) != len(COLUMNS):
                errors.append(f"{where}: {len(f)} fields, want {len(COLUMNS)}")
                continue
            row = dict(zip(COLUMNS, (x.strip() for x in f)))
            if not row["query"] or not row["memory"] or not row["topic"]:
                errors.append(f"{where}: empty query, memory or topic")
                continue
            if row["label"] not in ("0", "1"):
                errors.append(f"{where}: label {row['label']!r} must be 0 or 1")
                continue
            allowed = TRUE if row["label"] == "1" else FALSE
            if row["category"] not in allowed:
                errors.append(f"{where}: category {row['category']!r} is not one of label {row['label']}'s")
                continue
            # Topics are per file: two writers' "deploys-3" are different events.
            row["topic"] = f"{path.stem}/{row['topic']}"
            rows.append(row)
    return rows, errors


def words(text):
    return re.findall(r"[a-z0-9]+", text.lower())


def grams(text, n=4):
    w = words(text)
    return {" ".join(w[i : i + n]) for i in range(len(w) - n + 1)}


def seed_pairs():
    """(queries, memories' 4-gram sets) of the seed's pairs, which no split may contain."""
    lines = SEED.read_text(encoding="utf-8").splitlines()[1:]
    pairs = [line.split("\t") for line in lines if line.strip()]
    return {" ".join(words(p[0])) for p in pairs}, [g for p in pairs if (g := grams(p[1]))]


def copies_seed(row, seed_queries, seed_grams):
    """True when the row asks a seed query or its memory copies a seed memory."""
    if " ".join(words(row["query"])) in seed_queries:
        return True
    g = grams(row["memory"])
    return any(len(g & s) >= 0.6 * len(s) for s in seed_grams)


def split_of(group_name):
    h = int(hashlib.sha256(group_name.encode()).hexdigest()[:4], 16) % 100
    if h < TEST_PCT:
        return "test"
    if h < TEST_PCT + DEV_PCT:
        return "dev"
    return "train"


def groups(rows):
    """Topic -> group name: topics joined by a shared normalised query (union-find)."""
    parent = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    first_topic = {}
    for r in rows:
        q = norm(r["query"])
        t = r["topic"]
        find(t)
        if q in first_topic:
            a, b = find(first_topic[q]), find(t)
            if a != b:
                parent[max(a, b)] = min(a, b)
        else:
            first_topic[q] = t
    return {t: find(t) for t in parent}


def render(rows):
    out = ["\t".join(COLUMNS)]
    out += ["\t".join(r[c] for c in COLUMNS) for r in rows]
    return "\n".join(out) + "\n"


def moves(splits):
    """Rows of the split files on disk that the new split puts in another split."""
    old = {}
    for name in ("train", "dev", "test"):
        path = OUT / f"{name}.tsv"
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines()[1:]:
                f = line.split("\t")
                if len(f) == len(COLUMNS):
                    old[(norm(f[0]), norm(f[1]))] = name
    out = []
    for name, rows in splits.items():
        for r in rows:
            was = old.get((norm(r["query"]), norm(r["memory"])))
            if was and was != name:
                out.append(f"moves from {was} to {name}: {r['query']!r} / {r['memory']!r} ({r['topic']})")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if the split files are not what the raw files give")
    ap.add_argument("--allow-moves", action="store_true", help="write even when old rows change split")
    args = ap.parse_args()
    rows, errors = read_raw()
    for e in errors:
        print(f"gate-corpus: {e}", file=sys.stderr)
    if errors:
        sys.exit(2)
    seen, unique, conflicts = {}, [], 0
    for r in rows:
        key = (norm(r["query"]), norm(r["memory"]))
        if key in seen:
            if seen[key] != r["label"]:
                conflicts += 1
                print(f"gate-corpus: conflicting labels for {r['query']!r} / {r['memory']!r}", file=sys.stderr)
            continue
        seen[key] = r["label"]
        unique.append(r)
    if conflicts:
        sys.exit(2)
    group = groups(unique)
    seed_queries, seed_grams = seed_pairs()
    held = {group[r["topic"]] for r in unique if copies_seed(r, seed_queries, seed_grams)}
    kept = [r for r in unique if group[r["topic"]] not in held]
    splits = collections.defaultdict(list)
    for r in kept:
        splits[split_of(group[r["topic"]])].append(r)
    moved = moves(splits)
    for m in moved[:20]:
        print(f"gate-corpus: {m}", file=sys.stderr)
    if moved and not args.check and not args.allow_moves:
        print(f"gate-corpus: {len(moved)} rows would change split; nothing written (see --allow-moves)", file=sys.stderr)
        sys.exit(2)
    stale = []
    for name in ("train", "dev", "test"):
        text = render(splits[name])
        path = OUT / f"{name}.tsv"
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
        else:
            path.write_text(text, encoding="utf-8")
        pos = sum(r["label"] == "1" for r in splits[name])
        topics = len({r["topic"] for r in splits[name]})
        print(f"{name}: {len(splits[name])} pairs ({pos} true), {topics} topics")
    domains = {r["domain"] for r in kept}
    print(f"total: {len(kept)} pairs, {len(domains)} domains, {len(rows) - len(unique)} duplicates dropped")
    print(
        f"held out: {len(unique) - len(kept)} pairs of {len(held)} topics that ask a query of, or copy a memory"
        f" of, {SEED.relative_to(ROOT)}: {', '.join(sorted(held))}"
    )
    if stale:
        print(f"gate-corpus: stale split files: {', '.join(stale)} (run scripts/gate-corpus.py)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
