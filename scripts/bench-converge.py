"""Cross-process convergence (issue #11): from `slm remember` returning in one process to the
waiting loop answering in another, at a 1 s poll.

Usage: target/pyenv/bin/python scripts/bench-converge.py SLM_BINARY DATA_DIR [TRIALS]
Prints one JSON line: median and p95 in ms for `slm loop run` (process exit included) and
for `slm_loop_run` through `slm mcp` (the MCP Python SDK's answer), measured from `slm
remember` returning (as issue #11 states it; the loop may answer before the writer's process
has exited, hence negative figures) and from the commit itself (the memory's created_at).
"""

import json
import sqlite3
import statistics
import subprocess
import sys
import time
from datetime import datetime

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

SLM, DATA = sys.argv[1], sys.argv[2]
TRIALS = int(sys.argv[3]) if len(sys.argv) > 3 else 20


def laps_of(name):
    try:
        db = sqlite3.connect(f"file:{DATA}/slm.db?mode=ro", uri=True, timeout=1)
        try:
            row = db.execute("SELECT laps FROM loop_runs WHERE name = ? ORDER BY rowid DESC LIMIT 1", (name,)).fetchone()
            return row[0] if row else 0
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
    subprocess.run([SLM, "--data-dir", DATA, "remember", text], check=True, capture_output=True)
    return time.monotonic()


def since_commit(text, answered_wall):
    """Seconds from the memory's commit (its created_at, stamped just before) to the answer."""
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
        name, text = f"cli-{i}", f"the release candidate {i} of the billing service shipped"
        p = subprocess.Popen([SLM, "--data-dir", DATA, "loop", "run", "--name", name, "--gate-query", text,
                              "--gate-min-score", "0.8", "--poll-interval-s", "1", "--max-wallclock-s", "60", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        wait_first_lap(name)
        written = remember(text)
        p.wait()
        out.append(time.monotonic() - written)
        commit.append(since_commit(text, time.time()))
        assert json.loads(p.stdout.read().decode().splitlines()[-1])["status"] == "converged"
    return out, commit


async def mcp_trials():
    out, commit = [], []
    params = StdioServerParameters(command=SLM, args=["--data-dir", DATA, "mcp"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        for i in range(TRIALS):
            name, text = f"mcp-{i}", f"the migration {i} of the ledger database completed"
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


subprocess.run([SLM, "--data-dir", DATA, "remember", "warm up the data root"], check=True, capture_output=True)
cli, cli_commit = cli_trials()
mcp, mcp_commit = anyio.run(mcp_trials)
print(json.dumps({"from_remember_returning": {"cli_loop_run": summary(cli), "mcp_slm_loop_run": summary(mcp)},
                  "from_commit": {"cli_loop_run": summary(cli_commit), "mcp_slm_loop_run": summary(mcp_commit)}}))
