"""Many loops waiting in one `slm mcp` (issue #11): server CPU while idle, then the time from
one matching `slm remember` in another process until every loop has answered.

Usage: target/pyenv/bin/python scripts/bench-waiting.py SLM_BINARY DATA_DIR [LOOPS] [IDLE_S]
Prints one JSON line of figures. Uses the official MCP Python SDK (installed by scripts/test.sh).
The idle window starts once every loop has recorded its first lap (read from the store), so
start-up is not counted as idle; `start_s` says how long starting them all took.
With SLM_BENCH_PERF=FILE, `perf record -g` samples the server during the idle window; with
SLM_BENCH_PERF_CONVERGE=FILE, during the 2 s from the matching write. The server inherits this
environment, so SLM_LOG=slm=debug shows the ledger writer's batch and fold timings.
"""

import json
import os
import sqlite3
import subprocess
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

SLM, DATA = sys.argv[1], sys.argv[2]
LOOPS = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
IDLE_S = float(sys.argv[4]) if len(sys.argv) > 4 else 10.0
QUERY = "the nightly release build 7 passed every test"
# SLM_BENCH_VERIFY=guard (comma-separated) runs the loops with that chain instead of the default.
VERIFY = {"gate_verify": os.environ["SLM_BENCH_VERIFY"].split(",")} if os.environ.get("SLM_BENCH_VERIFY") else {}


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def server_pid():
    out = subprocess.run(["pgrep", "-f", f"{SLM} --data-dir {DATA} mcp"], capture_output=True, text=True).stdout.split()
    return int(out[0])


def started_runs():
    """Runs whose first lap is recorded."""
    try:
        db = sqlite3.connect(f"file:{DATA}/slm.db?mode=ro", uri=True, timeout=1)
        try:
            return db.execute("SELECT count(DISTINCT run_id) FROM loop_laps").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return 0


async def main():
    params = StdioServerParameters(command=SLM, args=["--data-dir", DATA, "mcp"], env=dict(os.environ))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        await s.call_tool("status", {})
        pid = server_pid()
        done = []

        async def one(i):
            r = await s.call_tool("slm_loop_run", {
                "name": f"wait-{i}", "gate_query": QUERY, "gate_min_score": 0.8, **VERIFY,
                "poll_interval_s": 1.0, "max_wallclock_s": 60, "max_iterations": 200,
            })
            done.append((time.monotonic(), r.structured_content["status"], r.structured_content["laps"]))

        async with anyio.create_task_group() as tg:
            for i in range(LOOPS):
                tg.start_soon(one, i)
            started = time.monotonic()
            while started_runs() < LOOPS and time.monotonic() - started < 120:
                await anyio.sleep(0.2)
            start_s = time.monotonic() - started
            await anyio.sleep(1.5)  # every loop is past lap 1 and waiting
            perf = None
            if os.environ.get("SLM_BENCH_PERF"):
                perf = subprocess.Popen(["perf", "record", "-F", "999", "-g", "-p", str(pid), "-o",
                                         os.environ["SLM_BENCH_PERF"], "--", "sleep", str(IDLE_S)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            t0, c0 = time.monotonic(), cpu_ticks(pid)
            await anyio.sleep(IDLE_S)
            idle_cpu = (cpu_ticks(pid) - c0) / os.sysconf("SC_CLK_TCK") / (time.monotonic() - t0)
            rss = rss_mb(pid)
            if perf:
                perf.wait()
            conv = None
            if os.environ.get("SLM_BENCH_PERF_CONVERGE"):
                conv = subprocess.Popen(["perf", "record", "-F", "999", "-g", "-p", str(pid), "-o",
                                         os.environ["SLM_BENCH_PERF_CONVERGE"], "--", "sleep", "2"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                await anyio.sleep(0.3)  # perf is attached
            subprocess.run([SLM, "--data-dir", DATA, "remember", "the nightly release build 7 passed every test"], check=True,
                           capture_output=True)
            written = time.monotonic()
            if conv:
                await anyio.to_thread.run_sync(conv.wait)
        last = max(t for t, _, _ in done)
        after = sorted(t - written for t, _, _ in done)
        db = sqlite3.connect(f"file:{DATA}/slm.db?mode=ro", uri=True)
        # Server side: from the matching memory's commit to the last run's end in the store.
        spread = db.execute("SELECT (julianday(max(r.ended_at)) - julianday(m.created_at)) * 86400 FROM loop_runs r, "
                            "(SELECT created_at FROM memories WHERE kind = 'memory' ORDER BY id DESC LIMIT 1) m").fetchone()[0]
        # Each run's own converging lap, in its ledger.
        lap_recorded = db.execute("SELECT count(*) FROM loop_runs r JOIN loop_laps l ON l.run_id = r.run_id "
                                  "AND l.lap = r.laps WHERE r.status = 'converged' AND l.decision = 'converged'").fetchone()[0]
        converged = sum(1 for _, st, _ in done if st == "converged")
        print(json.dumps({"loops": LOOPS, "idle_cpu_of_one_core": round(idle_cpu, 3), "rss_mb": round(rss, 1),
                          "start_s": round(start_s, 2), "converged": converged, "all_answered_after_write_s": round(last - written, 3),
                          "median_answer_after_write_s": round(after[len(after) // 2], 3),
                          "all_ended_in_store_after_commit_s": round(spread, 3),
                          "converging_laps_recorded": lap_recorded}))


anyio.run(main)
