#!/usr/bin/env python3
"""Writes a JSON Lines import file of N memories with precomputed embeddings, for
scripts/bench-scale.sh.

The vectors are realistic rather than uniform: SEED_DB is a small slm data root whose
memories were embedded by the real model; every generated vector is one of those real
vectors plus Gaussian noise (renormalised), so a text query meets dense clusters of close
scores, the hard case for a quantised first pass. Uses numpy when it is importable (the test
environment has it), else the standard library (slower).

usage: gen-store.py SEED_DB N OUT.jsonl [NOISE]
"""
import json
import random
import sqlite3
import struct
import sys


def main():
    seed_db, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    noise = float(sys.argv[4]) if len(sys.argv) > 4 else 0.6
    con = sqlite3.connect(f"file:{seed_db}?mode=ro", uri=True)
    rows = con.execute("SELECT content, embedding FROM memories WHERE kind = 'memory' AND length(embedding) = 1536").fetchall()
    if not rows:
        sys.exit("gen-store: the seed store has no embedded memories")
    seeds = [(c, struct.unpack("<384f", e)) for c, e in rows]
    try:
        import numpy as np
    except ImportError:
        np = None
    rng = random.Random(42)
    with open(out, "w") as f:
        if np is not None:
            base = np.array([s[1] for s in seeds], dtype=np.float32)
            g = np.random.default_rng(42)
            done = 0
            while done < n:
                m = min(20000, n - done)
                pick = g.integers(0, len(seeds), m)
                v = base[pick] + g.normal(0, noise / 19.6, (m, 384)).astype(np.float32)
                v /= np.linalg.norm(v, axis=1, keepdims=True)
                for j in range(m):
                    i = done + j
                    emb = ",".join(f"{x:.6g}" for x in v[j].tolist())
                    f.write('{"content":%s,"tags":["bench","t%d"],"embedding":[%s]}\n'
                            % (json.dumps(f"{seeds[pick[j]][0]} #{i}"), i % 100, emb))
                done += m
        else:
            for i in range(n):
                c, e = seeds[rng.randrange(len(seeds))]
                v = [x + rng.gauss(0, noise / 19.6) for x in e]
                norm = sum(x * x for x in v) ** 0.5
                emb = ",".join(f"{x / norm:.6g}" for x in v)
                f.write('{"content":%s,"tags":["bench","t%d"],"embedding":[%s]}\n'
                        % (json.dumps(f"{c} #{i}"), i % 100, emb))


if __name__ == "__main__":
    main()
