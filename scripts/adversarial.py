"""The adversarial checks of issue #15 at full size, against a built `slm` (tests/it/adversarial.rs
runs the same checks at CI size on every test run).

Usage: python3 scripts/adversarial.py [--seed N] [--only writers,import,fuzz,mcp]
       [--writers 8] [--per-writer 300] [--import-lines 3000] [--calls 300]
The binary is $SLM_BIN, or target/release/slm beside this script's repository (the model is
found from the binary's directory, or $SLM_MODEL_DIR). Python 3 standard library only. Prints
one line per check with its figures and exits 1 if any check failed:

- writers: N processes each run M `slm remember` on one fresh data root at once: exactly N*M
  memories, every call succeeds, `slm status --check` reports integrity ok;
- import: `kill -9` of `slm import` (a 3,000-line file) at several points: what is stored is
  always lines 1..L with L a multiple of the import's batch (256) or the whole file, tags
  included; re-running the same import ends with exactly the file's memories (dedup);
- fuzz: seeded random CLI calls (subcommands from `slm --help`, random flags and values: empty,
  huge, negative, NaN, inf, unicode, non-UTF-8, very long, unknown flags, missing values, bad
  import files, bad run ids): no panic or backtrace on stderr, every exit code in
  {0,1,2,3,130}, and on exit 2 every row of the store unchanged;
- mcp: malformed messages to `slm mcp` over stdio: every message with a readable id gets
  exactly one answer with that id (an unreadable one: one answer with id null; a notification:
  none), no panic, `ping` still answered after, nothing written.
"""

import argparse
import json
import os
import queue
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SLM = os.environ.get("SLM_BIN") or str(REPO / "target" / "release" / "slm")
BATCH = 256  # src/import/mod.rs: BATCH (lines embedded and committed together)
EXITS = {0, 1, 2, 3, 130}
# A panic reaches stderr as "slm: internal error: ... please report this" (src/main.rs's hook).
PANIC_MARKS = ("please report this", "panicked", "RUST_BACKTRACE", "stack backtrace", "memory allocation of")


def env():
    e = dict(os.environ)
    e.pop("SLM_DATA_DIR", None)
    e.pop("SLM_STORE", None)
    return e


def slm(root, *args, timeout=120, stdin=subprocess.DEVNULL):
    return subprocess.run([SLM, "--data-dir", str(root), *args], stdin=stdin, capture_output=True,
                          timeout=timeout, env=env())


def ro(db):
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    return c


def fingerprint(db):
    """Every row of every table but the vectors (a detached `slm embed-pending` fills those in
    after a run ends; no call that exits 2 reaches them)."""
    c = ro(db)
    out = []
    for q in ("SELECT id, kind, content, created_at, hex(dedup_key) FROM memories ORDER BY id",
              "SELECT memory_id, tag FROM memory_tags ORDER BY memory_id, tag",
              "SELECT * FROM loop_runs ORDER BY run_id",
              "SELECT * FROM loop_laps ORDER BY run_id, lap",
              "SELECT key, value FROM meta ORDER BY key",
              "SELECT name, seq FROM sqlite_sequence ORDER BY name"):
        out.append(repr(c.execute(q).fetchall()))
    c.close()
    return "\n".join(out)


def status_check(root):
    r = slm(root, "status", "--check", "--json")
    v = json.loads(r.stdout) if r.stdout else {}
    return r.returncode, v.get("memories"), v.get("integrity")


# ---------------------------------------------------------------------------------- writers

def check_writers(tmp, writers, per):
    root = tmp / "writers"
    t0 = time.monotonic()
    failures = []

    def work(w):
        for i in range(per):
            r = slm(root, "remember", f"writer {w} finished task {i} of the adversarial run",
                    "--tag", f"writer-{w}", "--json")
            if r.returncode != 0:
                failures.append(r.stderr.decode(errors="replace").strip()[:200])

    ts = [threading.Thread(target=work, args=(w,)) for w in range(writers)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    secs = time.monotonic() - t0
    code, memories, integrity = status_check(root)
    per_tag = dict(ro(root / "slm.db").execute("SELECT tag, count(*) FROM memory_tags GROUP BY tag").fetchall())
    ok = (not failures and memories == writers * per and integrity == "ok" and code == 0
          and all(per_tag.get(f"writer-{w}") == per for w in range(writers)))
    print(f"writers: {writers} x {per} remember -> {memories} memories (expected {writers * per}), "
          f"{len(failures)} failed calls, per-writer tags {'exact' if ok else per_tag}, "
          f"status --check integrity {integrity}, {secs:.1f} s -> {'PASS' if ok else 'FAIL'}")
    if failures:
        print(f"  first failure: {failures[0]}")
    return ok


# ----------------------------------------------------------------------------------- import

def stored_lines(db):
    c = ro(db)
    rows = [r[0] for r in c.execute("SELECT content FROM memories WHERE kind = 'memory'")]
    tags = c.execute("SELECT count(*) FROM memory_tags WHERE tag = 'imported'").fetchone()[0]
    c.close()
    return sorted(int(r.split()[2]) for r in rows), tags


def whole_batches(nums, total):
    n = len(nums)
    return nums == list(range(1, n + 1)) and (n % BATCH == 0 or n == total)


def check_import(tmp, total, points):
    root = tmp / "import"
    path = tmp / "import.jsonl"
    with open(path, "w") as f:
        for i in range(1, total + 1):
            f.write(json.dumps({"content": f"imported line {i} says build {i * 7919 % 1000} passed on host {i % 17}",
                                "tags": ["imported"]}) + "\n")
    t0 = time.monotonic()
    ok = True
    kills = []
    db = root / "slm.db"
    for target in points:
        p = subprocess.Popen([SLM, "--data-dir", str(root), "import", str(path), "--json"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env())
        stored = 0
        while p.poll() is None:
            if db.exists():
                try:
                    stored = ro(db).execute("SELECT count(*) FROM memories").fetchone()[0]
                except sqlite3.Error:
                    stored = 0
                if stored >= target:
                    break
            time.sleep(0.01)
        finished = p.poll() is not None
        if not finished:
            os.kill(p.pid, signal.SIGKILL)
        p.wait()
        nums, tags = stored_lines(db)
        whole = whole_batches(nums, total) and tags == len(nums)
        ok &= whole and not finished
        kills.append(f"{len(nums)}{'' if whole else ' (NOT whole batches)'}{' (finished before the kill)' if finished else ''}")
    r = slm(root, "import", str(path), "--json")
    summary = json.loads(r.stdout) if r.stdout else {}
    nums, tags = stored_lines(db)
    code, memories, integrity = status_check(root)
    before = int(kills[-1].split()[0]) if kills else 0
    exact = (r.returncode == 0 and nums == list(range(1, total + 1)) and tags == total and memories == total
             and summary.get("imported") == total - before and summary.get("deduped") == before)
    ok &= exact and integrity == "ok"
    print(f"import: {total} lines, kill -9 after {len(points)} points left {', '.join(kills)} rows "
          f"(whole batches of {BATCH}), re-run imported {summary.get('imported')} + deduped "
          f"{summary.get('deduped')} -> {memories} memories (expected {total}), integrity {integrity}, "
          f"{time.monotonic() - t0:.1f} s -> {'PASS' if ok else 'FAIL'}")
    return ok


# ------------------------------------------------------------------------------------- fuzz

NASTY = ["", "0", "-1", "-0", "NaN", "nan", "inf", "-inf", "1e308", "1e309", "99999999999999999999999",
         "18446744073709551616", "9223372036854775808", "0x10", " 1 ", "١٢٣", "日本語", "🚀", "x" * 70000,
         "-", "--", "--json", "a,b", "has space", "\n", "'; DROP TABLE memories; --", "%s%n",
         "../../etc/passwd", b"\xff\xfeinvalid utf-8"]


class Fuzz:
    def __init__(self, tmp, rng):
        self.tmp, self.rng = tmp, rng
        self.root = tmp / "fuzz"
        self.db = self.root / "slm.db"
        files = tmp / "files"
        files.mkdir()
        emb = [0.05] * 384

        def w(name, body):
            p = files / name
            p.write_bytes(body if isinstance(body, bytes) else body.encode())
            return str(p)

        self.good_files = [w("valid.jsonl", "".join(json.dumps({"content": f"fuzz import {i}", "tags": ["imp"]}) + "\n" for i in range(3))),
                           w("given.jsonl", json.dumps({"content": "fuzz import with its vector", "embedding": emb}) + "\n"),
                           w("empty.jsonl", ""), "-"]
        self.bad_files = [w("truncated.jsonl", '{"content": "cut off'),
                          w("types.jsonl", '{"content": 5}\n{"content": "x", "tags": "notalist"}\n[1,2]\nnull\n'),
                          w("binary.jsonl", bytes(range(256)) * 4),
                          w("utf8.jsonl", b'{"content": "\xff\xfe"}\n'),
                          w("long.jsonl", json.dumps({"content": "x" * 70000}) + "\n"),
                          w("embed.jsonl", json.dumps({"content": "short vector", "embedding": [1, 2, 3]}) + "\n"
                            + '{"content": "nan vector", "embedding": [NaN]}\n'
                            + json.dumps({"content": "zero vector", "embedding": [0] * 384}) + "\n"),
                          w("fields.jsonl", json.dumps({"content": "x", "bogus": 1}) + "\n" + json.dumps({"content": "y", "kind": "other"}) + "\n"),
                          w("records.jsonl", json.dumps({"loop_run": {"name": "no id"}}) + "\n"
                            + json.dumps({"loop_lap": {"run_id": "nope", "lap": -1}}) + "\n"),
                          str(files), str(tmp / "missing.jsonl")]
        self.ids, self.run_ids = [], []
        self.out = 0

    def setup(self):
        for i, text in enumerate(["the deploy of release 9 finished", "nightly build failed on arm64",
                                  "review complete: PR #42 is approved", "日本語のメモ"]):
            r = slm(self.root, "remember", text, "--tag", f"t{i}", "--json")
            self.ids.append(str(json.loads(r.stdout)["id"]))
        r = slm(self.root, "loop", "run", "--name", "setup", "--gate-query", "deploy of release 9 finished",
                "--gate-min-score", "0.5", "--json")
        self.run_ids.append(json.loads(r.stdout)["run_id"])
        r = slm(self.root, "loop", "start", "--name", "agent", "--gate-cmd", "false", "--max-wallclock-s", "120", "--json")
        self.run_ids.append(json.loads(r.stdout)["run_id"])

    def value(self, kind):
        rng = self.rng
        # Bounds that keep a `loop run` short, and values a `dashboard` cannot serve with.
        safe = kind in ("small_int", "small_float", "port", "bind")
        if not safe and rng.random() < 0.35:
            return rng.choice(NASTY)
        good = {
            "text": ["the deploy finished", "nightly build failed on arm64", "日本語のメモ", "emoji 🚀 ok",
                     "x" * 2000, "y" * 2001, "is PR 42 approved?"],
            "tag": ["imp", "t0", "loop:setup", "a-b_c", "t" * 128, "t" * 129],
            "name": ["fuzz", "fuzz.loop:1", "setup", "agent", "n" * 129, "ü"],
            "int": ["1", "2", "5", "10", "0", "1000", "1001"],
            "small_int": ["1", "2", "3"],
            "float": ["0", "0.5", "-0.5", "1", "-1", "1.5", "0.25"],
            "small_float": ["0.25", "0.5", "1"],
            "id": self.ids + ["1", "99999"],
            "run": self.run_ids + ["00000000-0000-0000-0000-000000000000", "nope"],
            "file": self.good_files + self.bad_files,
            "out": [str(self.tmp / f"out-{rng.randrange(10 ** 6)}.jsonl"), "/nonexistent/dir/out.jsonl", str(self.tmp)],
            "shell": ["true", "false", "exit 3", "echo ok", "kill -9 $$", "cat /nonexistent", "exit 256"],
            "verify": ["guard", "none", "nli:/nonexistent", "cmd:true", "cmd:false", "cmd:", "bogus", "nli:"],
            "envspec": ["HOME", "X=1", "=1", "NOT_SET_ANYWHERE_15", "A B=1"],
            "kind": ["memory", "lap", "all", "everything"],
            "profile": ["core", "code", "full", "power", "whole", "bogus"],
            "shellname": ["bash", "zsh", "fish", "elvish", "powershell", "tcsh"],
            "port": ["abc", "-1", "70000", "NaN", "", "1e3"],
            "bind": ["not-an-address", "0.0.0.0", "999.1.1.1", "::", ""],
        }[kind]
        return rng.choice(good)

    # (words, positional kind or None, [(flag, value kind or None)], always-present flags)
    COMMANDS = [
        (["remember"], "text", [("--tag", "tag")], []),
        (["recall"], "text", [("--limit", "int"), ("--tag", "tag"), ("--min-score", "float"), ("--laps", None)], []),
        (["search"], "text", [("--limit", "int")], []),
        (["list"], None, [("--tag", "tag"), ("--limit", "int"), ("--kind", "kind"), ("--before", "id")], []),
        (["forget"], "ids", [], []),
        (["status"], None, [("--check", None)], []),
        (["import"], "file", [], []),
        (["export"], None, [("--output", "out")], []),
        (["index"], None, [], []),
        (["index", "rebuild"], None, [], []),
        (["index", "verify"], None, [("--queries", "int")], []),
        (["plugin", "path"], None, [("--codex", None)], []),
        (["completions"], "shellname", [], []),
        (["man"], None, [], []),
        (["gate", "check"], None, [("--memory", "text"), ("--id", "id"), ("--gate-min-score", "float"),
                                   ("--gate-verify", "verify"), ("--gate-nli-min", "float")], [("--query", "text")]),
        (["loop", "demo"], None, [("--iterations", "int")], []),
        (["loop", "run"], None, [("--gate-min-score", "float"), ("--poll-interval-s", "small_float"), ("--max-tokens", "int"),
                                 ("--no-progress-window", "int"), ("--gate-tag", "tag"), ("--gate-verify", "verify"),
                                 ("--gate-nli-min", "float")],
         [("--name", "name"), ("--gate-query", "text"), ("--max-iterations", "small_int"), ("--max-wallclock-s", "small_float")]),
        (["loop", "start"], None, [("--gate-env", "envspec"), ("--max-iterations", "int"), ("--max-wallclock-s", "float"),
                                   ("--max-tokens", "int"), ("--no-progress-window", "int")],
         [("--name", "name"), ("--gate-cmd", "shell")]),
        (["loop", "step"], "run", [("--tokens", "int"), ("--note", "text")], []),
        (["loop", "history"], None, [("--name", "name"), ("--limit", "int")], []),
        (["loop", "show"], "run", [("--limit", "int")], []),
        (["loop", "cancel"], "run", [], []),
        (["embed-pending"], None, [], []),
        (["mcp"], None, [("--profile", "profile")], []),
        (["dashboard"], None, [("--bind", "bind"), ("--allow-remote", None), ("--allow-host", "name"),
                               ("--token-file", "file")], [("--port", "port")]),
        (["help"], None, [], []), (["loop"], None, [], []), (["gate"], None, [], []),
        (["frobnicate"], None, [], []), ([], None, [], []),
    ]

    def call(self):
        rng = self.rng
        words, pos, flags, always = rng.choice(self.COMMANDS)
        argv = []
        if rng.random() < 0.1:
            argv += rng.choice([["--data-dir", "/nonexistent/parent/x"], ["--data-dir", self.good_files[0]],
                                ["--store", "mysql://x"], ["--store", "postgres://"],
                                ["--store", "postgres://u@127.0.0.1:1/db"], ["-V"], ["--help"]])
        argv += words
        chosen = list(always) + rng.sample(flags, rng.randrange(min(3, len(flags)) + 1))
        rng.shuffle(chosen)
        for flag, kind in chosen:
            argv.append(flag)
            if kind:
                argv.append(self.value(kind))
        if pos and rng.random() < 0.9:
            if pos == "ids":
                argv += [self.value("id") for _ in range(rng.randrange(1, 4))]
            else:
                argv.append(self.value(pos))
        if rng.random() < 0.5:
            argv.append("--json")
        r = rng.random()
        if r < 0.08:
            argv.insert(rng.randrange(len(argv) + 1), rng.choice(["--bogus", "-z", "--limit=", "--tag", "--json=yes"]))
        elif r < 0.13 and argv:
            argv.pop()  # a flag loses its value, or a command its argument
        elif r < 0.17 and len(argv) >= 2:
            argv += argv[-2:]  # the last flag twice
        return argv

    def edges(self):
        """Calls every run makes first: the extremes of every numeric argument."""
        top, i63 = "18446744073709551615", "9223372036854775807"
        run = self.run_ids[1]
        return [["index", "verify", "--queries", top], ["index", "verify", "--queries", "9223372036854775808"],
                ["recall", "q", "--limit", top], ["list", "--before", i63], ["forget", i63], ["gate", "check", "--query", "x", "--id", i63],
                ["loop", "demo", "--iterations", top], ["loop", "show", run, "--limit", top], ["loop", "history", "--limit", top],
                ["loop", "start", "--name", "big", "--gate-cmd", "true", "--max-iterations", i63, "--max-wallclock-s", "1e308",
                 "--max-tokens", i63, "--no-progress-window", i63, "--json"],
                ["loop", "step", run, "--tokens", i63, "--json"], ["loop", "step", run, "--tokens", i63, "--json"],
                ["remember", "x" * 70000], ["recall", "x" * 70000], ["loop", "run", "--name", "n", "--gate-query", "q" * 2001]]

    def run(self, calls):
        self.setup()
        codes = Counter()
        problems = []
        writes_on_2 = 0
        t0 = time.monotonic()
        edges = self.edges()
        tokens = []
        for n in range(len(edges) + calls):
            argv = edges[n] if n < len(edges) else self.call()
            before = fingerprint(self.db)
            full = [SLM, "--data-dir", str(self.root)] + [a if isinstance(a, bytes) else a.encode() for a in argv]
            shown = " ".join(repr(a[:60]) if len(a) > 60 else repr(a) for a in argv)
            try:
                # In the temp dir: `export --output NaN` writes a file named NaN where it runs.
                r = subprocess.run(full, stdin=subprocess.DEVNULL, capture_output=True, timeout=120, env=env(), cwd=self.tmp)
            except subprocess.TimeoutExpired:
                problems.append(f"call {n}: hung 120 s: slm {shown}")
                continue
            code = r.returncode
            codes[code] += 1
            err = r.stderr.decode(errors="replace")
            if any(m in err for m in PANIC_MARKS):
                problems.append(f"call {n}: panic: slm {shown}: {err[:300]}")
            if code not in EXITS:
                problems.append(f"call {n}: exit {code}: slm {shown}: {err[:300]}")
            if argv[:2] == ["loop", "step"] and n < len(edges):
                tokens.append(json.loads(r.stdout)["budget"]["tokens_used"] if code == 0 else None)
            if code == 2 and fingerprint(self.db) != before:
                writes_on_2 += 1
                problems.append(f"call {n}: exit 2 but the store changed: slm {shown}: {err[:200]}")
        # Two steps of i64::MAX tokens each: the count saturates at u64::MAX, never wraps.
        if len(tokens) != 2 or tokens[1] != 2 ** 64 - 1:
            problems.append(f"tokens_used after two steps of {2 ** 63 - 1}: {tokens} (expected the second to be {2 ** 64 - 1})")
        calls += len(edges)
        secs = time.monotonic() - t0
        hist = ", ".join(f"{c}: {k}" for c, k in sorted(codes.items()))
        ok = not problems
        print(f"fuzz: {calls} CLI calls ({len(edges)} fixed extremes, then seed {SEED}) -> exit codes {{{hist}}}, "
              f"{sum('panic' in p for p in problems)} panics, {sum(' exit ' in p for p in problems)} codes outside "
              f"{{0,1,2,3,130}}, {writes_on_2} writes on exit 2, {secs:.1f} s "
              f"({secs / calls * 1000:.0f} ms/call) -> {'PASS' if ok else 'FAIL'}")
        for p in problems[:10]:
            print("  " + p)
        return ok


# -------------------------------------------------------------------------------------- mcp

def mcp_cases():
    """(line as bytes, ids expected in the answers: a readable id, None for id null, [] for a
    notification, or several for a batch, expect_error)."""
    cases = []

    def req(i, method, params=None, **extra):
        m = {"jsonrpc": "2.0", "id": i, "method": method}
        if params is not None:
            m["params"] = params
        m.update(extra)
        return m

    def add(msg, ids, err=True):
        line = msg if isinstance(msg, bytes) else (msg if isinstance(msg, str) else json.dumps(msg)).encode()
        cases.append((line, ids, err))

    # Not JSON, or not UTF-8: one parse error, id null.
    for raw in [b'{"jsonrpc":"2.0","id":1,"method":"ping"', b"not json", b"{", b"}", b"[1,2",
                b'{"jsonrpc":"2.0","id":2,"method":"ping"}}', b"\xef\xbb\xbf{}", b"\xff\xfe{\"a\"}",
                b'{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":1e999}}', b"nul\x00byte", b"'single'"]:
        add(raw, [None])
    # Invalid envelopes that still carry an id.
    add({"id": "e1", "method": "ping"}, ["e1"])
    add({"jsonrpc": "1.0", "id": "e2", "method": "ping"}, ["e2"])
    add({"jsonrpc": 2.0, "id": "e3", "method": "ping"}, ["e3"])
    add({"jsonrpc": None, "id": "e4", "method": "ping"}, ["e4"])
    for n, method in enumerate([5, None, [], {}, True]):
        add({"jsonrpc": "2.0", "id": f"m{n}", "method": method}, [f"m{n}"])
    add({"jsonrpc": "2.0", "id": "nom"}, ["nom"])
    for n, params in enumerate([[1], "x", 5, True, None]):
        add(req(f"p{n}", "tools/list", params) if params is not None else {"jsonrpc": "2.0", "id": f"p{n}", "method": "tools/list", "params": None}, [f"p{n}"])
    # Ids: types JSON-RPC does not allow, numbers rmcp cannot read, extremes it can.
    for n, bad in enumerate([True, {}, [], {"a": 1}]):
        add({"jsonrpc": "2.0", "id": bad, "method": "ping"}, [None])
    add('{"jsonrpc":"2.0","id":9223372036854775808,"method":"ping"}', [9223372036854775808])
    add('{"jsonrpc":"2.0","id":1.5,"method":"ping"}', [1.5])
    add('{"jsonrpc":"2.0","id":-9223372036854775808,"method":"ping"}', [-9223372036854775808], err=False)
    add('{"jsonrpc":"2.0","id":9223372036854775807,"method":"ping"}', [9223372036854775807], err=False)
    add(req("s" * 10000, "ping"), ["s" * 10000], err=False)
    add(req("🚀 id", "ping"), ["🚀 id"], err=False)
    add(req("", "ping"), [""], err=False)
    # Unknown methods, and methods slm does not serve.
    for n, method in enumerate(["foo/bar", "", "tools/unknown", "resources/list", "prompts/get", "rpc.discover", "x" * 5000]):
        add(req(f"u{n}", method), [f"u{n}"])
    # Notifications with bad params: never an answer (JSON-RPC), unless the envelope is invalid.
    add({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": {}}}, [], err=False)
    add({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "never-sent", "reason": 5}}, [], err=False)
    add({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": [], "progress": "x"}}, [], err=False)
    add({"jsonrpc": "2.0", "method": "notifications/bogus", "params": {"a": 1}}, [], err=False)
    add({"jsonrpc": "2.0", "method": "notifications/initialized", "params": [1]}, [None])
    # A response to a request the server never sent.
    add({"jsonrpc": "2.0", "id": 424242, "result": {}}, [], err=False)
    add({"jsonrpc": "2.0", "id": 424243, "error": {"code": 1, "message": "x"}}, [], err=False)
    # Batches (MCP has none since 2025-06-18): every member with an id is answered.
    add([], [None])
    add([req("b1", "ping"), req("b2", "tools/list")], ["b1", "b2"])
    add([1, 2], [None, None])
    add([req("b3", "ping"), {"jsonrpc": "2.0", "method": "notifications/initialized"}], ["b3", None])
    # tools/call: missing or bad params, unknown tools, bad arguments for every tool.
    add(req("c0", "tools/call"), ["c0"])
    add(req("c1", "tools/call", {"arguments": {}}), ["c1"])
    add(req("c2", "tools/call", {"name": 5}), ["c2"])
    add(req("c3", "tools/call", {"name": "status", "arguments": [1]}), ["c3"])
    add(req("c4", "tools/call", {"name": "nope", "arguments": {}}), ["c4"])
    bad_args = {
        "remember": [{}, {"content": 5}, {"content": ""}, {"content": "x" * 70000}, {"content": "x", "tags": ["has space"]},
                     {"content": "x", "tags": "t"}, {"content": "x", "bogus": 1}],
        "recall": [{}, {"query": 5}, {"query": "x", "limit": -1}, {"query": "x", "limit": 1e300}, {"query": "x", "min_score": "NaN"},
                   {"query": "x", "min_score": 2}, {"query": "x", "tags": [""]}],
        "list_memories": [{"limit": 0}, {"kind": "everything"}, {"before": "x"}, {"tags": [f"t{i}" for i in range(1001)]}],
        "forget": [{}, {"ids": []}, {"ids": ["a"]}, {"ids": [1.5]}],
        "get_memories": [{}, {"ids": "x"}, {"ids": [None]}],
        "import_memories": [{}, {"items": "x"}, {"items": [5]}],
        "slm_loop_run": [{}, {"name": "has space", "gate_query": "q"}, {"name": "x", "gate_query": "q", "max_wallclock_s": -1},
                         {"name": "x", "gate_query": "q", "max_iterations": 0}, {"name": "x", "gate_query": "q", "poll_interval_s": "fast"},
                         {"name": "x", "gate_query": "q", "gate_verify": ["bogus"]}, {"name": "x", "gate_query": ""}],
        "slm_loop_show": [{}, {"run_id": 5}, {"run_id": "x", "limit": -5}],
        "slm_loop_history": [{"limit": "ten"}, {"name": 5}, {"limit": 0}],
        "slm_loop_cancel": [{}, {"run_id": None}, {"run_id": ["x"]}],
        "slm_loop_demo": [{"iterations": 0}, {"iterations": -1}, {"iterations": "x"}],
        "status": [{"check": "yes please"}],
    }
    n = 0
    for tool, argsets in bad_args.items():
        for a in argsets:
            add(req(f"t{n}", "tools/call", {"name": tool, "arguments": a}), [f"t{n}"], err=tool != "status")
            n += 1
    # Very long lines.
    add(req("big", "tools/call", {"name": "remember", "arguments": {"content": "z" * 2_000_000}}), ["big"])
    add(b"{" * 100000, [None])
    add(b"[" * 100000, [None])
    return cases


def is_error(r):
    return "error" in r or (isinstance(r.get("result"), dict) and r["result"].get("isError") is True)


def check_mcp(tmp):
    root = tmp / "mcp"
    slm(root, "remember", "one memory so the store exists", "--json")
    db = root / "slm.db"
    before = fingerprint(db)
    t0 = time.monotonic()
    p = subprocess.Popen([SLM, "--data-dir", str(root), "mcp", "--profile", "whole"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env())
    replies = queue.Queue()
    errbuf = []
    threading.Thread(target=lambda: [replies.put(l) for l in p.stdout], daemon=True).start()
    threading.Thread(target=lambda: errbuf.append(p.stderr.read()), daemon=True).start()

    def send(b):
        p.stdin.write(b + b"\n")
        p.stdin.flush()

    def answers(line):
        v = json.loads(line)
        return v if isinstance(v, list) else [v]

    send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
                     "capabilities": {}, "clientInfo": {"name": "adversarial", "version": "0"}}}).encode())
    answers(replies.get(timeout=30))
    send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    problems = []
    cases = mcp_cases()
    with_id = sum(1 for _, expected, _ in cases for i in expected if i is not None)
    for n, (line, expected, err) in enumerate(cases):
        shown = line[:80].decode(errors="replace")
        sync = f"sync-{n}"
        try:
            send(line)
            send(json.dumps({"jsonrpc": "2.0", "id": sync, "method": "ping"}).encode())
        except BrokenPipeError:
            problems.append(f"case {n}: the server stopped reading after {shown}")
            break
        want = Counter(json.dumps(i) for i in expected)
        got = Counter()
        bad = []
        synced = False
        deadline = time.monotonic() + 30
        # Answers may come in any order (tool calls run concurrently): wait for the ping's and
        # for every expected id.
        while not synced or any(got[k] < v for k, v in want.items() if k != "null"):
            try:
                line_in = replies.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                problems.append(f"case {n}: no answer (waiting for {dict(want)}, got {dict(got)}): {shown}")
                break
            for a in answers(line_in):
                if a.get("id") == sync:
                    synced = True
                    continue
                got[json.dumps(a.get("id"))] += 1
                if err and not is_error(a):
                    bad.append(a)
        if got != want and not any(p.startswith(f"case {n}:") for p in problems):
            problems.append(f"case {n}: answers {dict(got)}, expected {dict(want)}: {shown}")
        if bad:
            problems.append(f"case {n}: not an error: {json.dumps(bad[0])[:200]}: {shown}")
    # The connection still works, and nothing came late.
    try:
        send(b'{"jsonrpc":"2.0","id":"final","method":"ping"}')
        final = answers(replies.get(timeout=30))
        ping_ok = any(a.get("id") == "final" for a in final)
    except (BrokenPipeError, queue.Empty):
        ping_ok = False
    time.sleep(0.5)
    late = []
    while not replies.empty():
        late += answers(replies.get())
    try:
        p.stdin.close()
    except BrokenPipeError:
        pass
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
    time.sleep(0.2)
    stderr = b"".join(errbuf).decode(errors="replace")
    panics = sum(stderr.count(m) for m in PANIC_MARKS)
    unchanged = fingerprint(db) == before
    ok = not problems and ping_ok and not late and not panics and unchanged and p.returncode == 0
    print(f"mcp: {len(cases)} malformed messages ({with_id} answers due with an id) -> "
          f"{len(cases) - len({p.split(':')[0] for p in problems})} answered as expected, ping after: "
          f"{'ok' if ping_ok else 'NO ANSWER'}, {len(late)} late answers, {panics} panics, store "
          f"{'unchanged' if unchanged else 'CHANGED'}, exit {p.returncode}, {time.monotonic() - t0:.1f} s "
          f"-> {'PASS' if ok else 'FAIL'}")
    for pr in problems[:10]:
        print("  " + pr)
    return ok


def main():
    global SEED
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--only", default="writers,import,fuzz,mcp")
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--per-writer", type=int, default=300)
    ap.add_argument("--import-lines", type=int, default=3000)
    ap.add_argument("--calls", type=int, default=300)
    a = ap.parse_args()
    SEED = a.seed
    if not os.access(SLM, os.X_OK):
        sys.exit(f"no slm binary at {SLM}: cargo build --release, or set SLM_BIN")
    only = set(a.only.split(","))
    ok = True
    with tempfile.TemporaryDirectory(prefix="slm-adversarial-") as t:
        tmp = Path(t)
        if "writers" in only:
            ok &= check_writers(tmp, a.writers, a.per_writer)
        if "import" in only:
            total = a.import_lines
            points = [1] + [total * k // 4 for k in (1, 2, 3)]
            ok &= check_import(tmp, total, points)
        if "fuzz" in only:
            ok &= Fuzz(tmp, random.Random(a.seed)).run(a.calls)
        if "mcp" in only:
            ok &= check_mcp(tmp)
    sys.exit(0 if ok else 1)


SEED = 15
if __name__ == "__main__":
    main()
