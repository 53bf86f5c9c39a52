"""Cross-process convergence (issue #11): from `slm remember` returning in one process to the
waiting loop answering in another, at a 1 s poll.

Usage: target/pyenv/bin/python scripts/bench-converge.py SLM_BINARY DATA_DIR [TRIALS] [--store URL]
With `--store postgres://…` (issue #13) it measures across two "hosts": `DATA_DIR/a` remembers,
`DATA_DIR/b` waits (two data roots with their own feed and derived files, one PostgreSQL
database), so only LISTEN/NOTIFY can wake the loop before its poll. Prints one JSON line: median and p95 in ms for `slm loop run` (process exit included) and
for `slm_loop_run` through `slm mcp` (the MCP Python SDK's answer), measured from `slm
remember` returning (as issue #11 states it; the loop may answer before the writer's process
has exited, hence negative figures) and from the commit itself (the memory's created_at).
"""

import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from datetime import datetime

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ARGS = sys.argv[1:]
STORE = None
if "--store" in ARGS:
    i = ARGS.index("--store")
    STORE = ARGS[i + 1]
    del ARGS[i:i + 2]
SLM, DATA = ARGS[0], ARGS[1]
TRIALS = int(ARGS[2]) if len(ARGS) > 2 else 20
# Texts differ between runs, so a store reused by another run (a shared database) never
# dedups a trial's memory into an old row.
NONCE = int(time.time())
# The writer's and the waiter's data roots: one on SQLite, two "hosts" on PostgreSQL.
WRITER, WAITER = (f"{DATA}/a", f"{DATA}/b") if STORE else (DATA, DATA)
ENV = dict(os.environ, SLM_STORE=STORE) if STORE else {k: v for k, v in os.environ.items() if k != "SLM_STORE"}


def slm(root, *args):
    return [SLM, "--data-dir", root, *args]


def laps_of(name):
    if STORE:
        out = subprocess.run(slm(WRITER, "loop", "history", "--name", name, "--json"), env=ENV, capture_output=True)
        runs = json.loads(out.stdout or b"{}").get("runs") or [{}]
        return runs[0].get("laps") or 0
    try:
        db = sqlite3.connect(f"file:{DATA}/slm.db?mode=ro", uri=True, timeout=1)
        try:
            # A running run's lap count is its last lap (the run row is updated at the end).
            row = db.execute("SELECT (SELECT max(lap) FROM loop_laps l WHERE l.run_id = r.run_id) FROM loop_runs r "
                             "WHERE name = ? ORDER BY rowid DESC LIMIT 1", (name,)).fetchone()
            return (row[0] or 0) if row else 0
        finally:
            db.close()
    except sqlite3.Error:
        return 0


def wait_first_lap(name):
    until = time.monotonic() + 60
    while laps_of(name) < 1:
        assert time.monotonic() < until, name
        time.sleep(0.01)
    time.sleep(0.05)  # past lap 1's ledger write and into the wait


def remember(text):
    subprocess.run(slm(WRITER, "remember", text), env=ENV, check=True, capture_output=True)
    return time.monotonic()


def since_commit(text, answered_wall):
    """Seconds from the memory's commit (its created_at, stamped just before) to the answer."""
    if STORE:
        out = subprocess.run(slm(WRITER, "list", "--limit", "50", "--json"), env=ENV, capture_output=True, check=True)
        created = next(m["created_at"] for m in json.loads(out.stdout)["memories"] if m["content"] == text)
        return answered_wall - datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
    db = sqlite3.connect(f"file:{DATA}/slm.db?mode=ro", uri=True, timeout=5)
    try:
        created = db.execute("SELECT created_at FROM memories WHERE content = ?", (text,)).fetchone()[0]
    finally:
        db.close()
    return answered_wall - datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]


def summary(xs):
    return {"median_ms": round(statistics.median(xs) * 1000, 1), "p95_ms": round(pct(xs, 0.95) * 1000, 1),
            "min_ms": round(min(xs) * 1000, 1), "trials": len(xs)}


def cli_trials():
    out, commit = [], []
    for i in range(TRIALS):
        name, text = f"cli-{i}", f"the release candidate {i}.{NONCE} of the billing service shipped"
        p = subprocess.Popen(slm(WAITER, "loop", "run", "--name", name, "--gate-query", text,
                                 "--gate-min-score", "0.8", "--poll-interval-s", "1", "--max-wallclock-s", "60", "--json"),
                             env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        wait_first_lap(name)
        written = remember(text)
        p.wait()
        out.append(time.monotonic() - written)
        commit.append(since_commit(text, time.time()))
        assert json.loads(p.stdout.read().decode().splitlines()[-1])["status"] == "converged"
    return out, commit


async def mcp_trials():
    out, commit = [], []
    params = StdioServerParameters(command=SLM, args=["--data-dir", WAITER, "mcp"], env=ENV)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        for i in range(TRIALS):
            name, text = f"mcp-{i}", f"the migration {i}.{NONCE} of the ledger database completed"
            done = {}

            async def run():
                r = await s.call_tool("slm_loop_run", {"name": name, "gate_query": text, "gate_min_score": 0.8,
                                                       "poll_interval_s": 1, "max_wallclock_s": 60})
                done["t"], done["wall"] = time.monotonic(), time.time()
                assert r.structured_content["status"] == "converged", r

            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                await anyio.to_thread.run_sync(wait_first_lap, name)
                done["w"] = await anyio.to_thread.run_sync(remember, text)
            out.append(done["t"] - done["w"])
            commit.append(since_commit(text, done["wall"]))
    return out, commit


for root in {WRITER, WAITER}:
    os.makedirs(root, exist_ok=True)
    subprocess.run(slm(root, "remember", "warm up the data root"), env=ENV, check=True, capture_output=True)
cli, cli_commit = cli_trials()
mcp, mcp_commit = anyio.run(mcp_trials)
print(json.dumps({"store": "postgres" if STORE else "sqlite", "load_average": os.getloadavg(),
                  "from_remember_returning": {"cli_loop_run": summary(cli), "mcp_slm_loop_run": summary(mcp)},
                  "from_commit": {"cli_loop_run": summary(cli_commit), "mcp_slm_loop_run": summary(mcp_commit)}}))
