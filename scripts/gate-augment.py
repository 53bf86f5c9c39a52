#!/usr/bin/env python3
"""Writes data/gate/augment/identifiers.tsv: train-split pairs with identifiers added.

Round 4's model learnt that a memory naming an identifier the query does not name (a
version, a build number, a host, a ticket) is about another entity: it gave "v2.3 is
deployed to production, all pods healthy" 0.01 for "deployed to production", and "shard 3
is done" 0.5 for "shard done". An extra identifier changes nothing when the query names
none. This script takes pairs of the train split (never dev or test) whose query has no
digit, and adds one realistic decoration to the memory (a prefix such as "[build 4471]" or
a suffix such as "(ticket OPS-1182)"), keeping the label: as many near misses as true
signals, so a decoration never signals the label by itself.

Seeded and standard library only: the same train.tsv always gives the same file.
Usage: scripts/gate-augment.py [--per-label N]   (default 1500)
"""

import argparse
import random
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "data" / "gate" / "train.tsv"
OUT = ROOT / "data" / "gate" / "augment" / "identifiers.tsv"
SEED = 20261202
HOSTS = ["web-3", "ip-10-0-4-17", "db-02", "runner-7", "eu-node-12", "k8s-worker-5", "build-host-2", "api-1a"]
NAMES = ["maria", "jdoe", "priya.k", "tom", "alex-ops", "chen", "sam_r", "olga"]
KEYS = ["OPS", "INFRA", "PAY", "DATA", "SEC", "REL", "SUP", "ML"]
CUSTOMERS = ["Acme", "Globex", "Initech", "Umbrella", "Hooli", "Stark Ltd", "Wayne Co"]


def hexid(r, n=7):
    return "".join(r.choice("0123456789abcdef") for _ in range(n))


def prefix(r):
    n = r.randint(12, 9999)
    return r.choice([
        f"[build {n}] ", f"#{n}: ", f"job {n}: ", f"run {hexid(r, 6)}: ", f"v{r.randint(1, 9)}.{r.randint(0, 20)}.{r.randint(0, 9)}: ",
        f"[{r.choice(HOSTS)}] ", f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d} ", f"({r.choice(KEYS)}-{n}) ",
        f"2026-{r.randint(1, 12):02d}-{r.randint(1, 28):02d} ", f"@{r.choice(NAMES)}: ", f"pipeline #{n} · ",
    ])


def suffix(r):
    n = r.randint(12, 9999)
    return r.choice([
        f" (build {n})", f" (ticket {r.choice(KEYS)}-{n})", f" in {r.randint(2, 900)}s", f" at {r.randint(0, 23):02d}:{r.randint(0, 59):02d} UTC",
        f" on {r.choice(HOSTS)}", f" by @{r.choice(NAMES)}", f" [{hexid(r)}]", f", run id {hexid(r, 8)}", f" (v{r.randint(1, 9)}.{r.randint(0, 20)})",
        f" for {r.choice(CUSTOMERS)}", f" ({r.randint(2, 90_000)} rows)", f" ({r.randint(1, 900)} MB)", f" — commit {hexid(r)}",
        f" (attempt {r.randint(1, 4)})", f" · {r.randint(1, 60)} min", f" [job {n}]",
    ])


def decorate(r, memory, style):
    if style == "kv":
        return memory + r.choice([f" id={r.randint(100, 99999)}", f" host={r.choice(HOSTS)}", f" build={r.randint(100, 9999)}", f" sha={hexid(r)}"])
    if r.random() < 0.5:
        p = prefix(r)
        return p + memory
    m = memory.rstrip()
    end = m[-1] if m and m[-1] in ".!" else ""
    return (m[:-1] if end else m) + suffix(r) + end


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-label", type=int, default=1500)
    a = ap.parse_args()
    lines = TRAIN.read_text(encoding="utf-8").splitlines()
    header, rows = lines[0], [l.split("\t") for l in lines[1:] if l.strip()]
    cols = header.split("\t")
    q, m, lab, sty = cols.index("query"), cols.index("memory"), cols.index("label"), cols.index("style")
    r = random.Random(SEED)
    # Queries naming a number or an identifier-like token could conflict with the decoration.
    ok = [x for x in rows if not re.search(r"\d|#", x[q]) and x[sty] != "json"]
    out = [header]
    for label in ("1", "0"):
        pool = [x for x in ok if x[lab] == label]
        r.shuffle(pool)
        for x in pool[: a.per_label]:
            y = list(x)
            y[m] = decorate(r, x[m], x[sty])
            y[cols.index("topic")] = x[cols.index("topic")] + "-aug"
            out.append("\t".join(y))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(out) + "\n", encoding="utf-8")
    print(f"{OUT.relative_to(ROOT)}: {len(out) - 1} rows")


if __name__ == "__main__":
    main()
