"""Many loops waiting in one `slm mcp` (issue #11): server CPU while idle, then the time from
one matching `slm remember` in another process until every loop has answered.

Usage: target/pyenv/bin/python scripts/bench-waiting.py SLM_BINARY DATA_DIR [LOOPS] [IDLE_S]
Prints one JSON line of figures. Uses the official MCP Python SDK (installed by scripts/test.sh).
"""

import json
import os
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


async def main():
    params = StdioServerParameters(command=SLM, args=["--data-dir", DATA, "mcp"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        await s.call_tool("status", {})
        pid = server_pid()
        done = []

        async def one(i):
            r = await s.call_tool("slm_loop_run", {
                "name": f"wait-{i}", "gate_query": QUERY, "gate_min_score": 0.8,
                "poll_interval_s": 1.0, "max_wallclock_s": 60, "max_iterations": 200,
            })
            done.append((time.monotonic(), r.structured_content["status"], r.structured_content["laps"]))

        async with anyio.create_task_group() as tg:
            for i in range(LOOPS):
                tg.start_soon(one, i)
            await anyio.sleep(5)  # let every loop start and record lap 1
            t0, c0 = time.monotonic(), cpu_ticks(pid)
            await anyio.sleep(IDLE_S)
            idle_cpu = (cpu_ticks(pid) - c0) / os.sysconf("SC_CLK_TCK") / (time.monotonic() - t0)
            rss = rss_mb(pid)
            subprocess.run([SLM, "--data-dir", DATA, "remember", "the nightly release build 7 passed every test"], check=True,
                           capture_output=True)
            written = time.monotonic()
        last = max(t for t, _, _ in done)
        converged = sum(1 for _, st, _ in done if st == "converged")
        print(json.dumps({"loops": LOOPS, "idle_cpu_of_one_core": round(idle_cpu, 3), "rss_mb": round(rss, 1),
                          "converged": converged, "all_answered_after_write_s": round(last - written, 3)}))


anyio.run(main)
