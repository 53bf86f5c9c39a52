"""Issue #15 over MCP with the official Python SDK: a lap that fails ends its run `error`
(never `running` while the server lives), an unreachable wall-clock is noted in the result,
and `slm_loop_show` shows an agent-driven run's recorded gate directory and environment.

Run by tests/it/hard_edges_loops.rs as: python mcp_hard_edges.py SLM_BINARY DATA_DIR RUN_ID
(RUN_ID: a run started with `slm loop start` in the test's directory). Prints one JSON line
of facts; exit 0 = pass.
"""

import json
import os
import sqlite3
import sys
import time
from contextlib import AsyncExitStack

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

SLM, DATA, COMMAND_RUN = sys.argv[1], sys.argv[2], sys.argv[3]


def structured(result):
    assert not result.is_error and result.structured_content is not None, result
    return result.structured_content


def damage_store():
    """A memory row whose vector has the wrong length: the next lap that reads it fails."""
    conn = sqlite3.connect(os.path.join(DATA, "slm.db"), timeout=10)
    conn.execute(
        "INSERT INTO memories(kind, content, created_at, dedup_key, embedding) "
        "VALUES ('memory', 'damaged', '2026-01-01T00:00:00.000000Z', randomblob(32), x'0102')"
    )
    conn.commit()
    conn.close()


async def main():
    facts = {}
    async with AsyncExitStack() as stack:
        read, write = await stack.enter_async_context(
            stdio_client(StdioServerParameters(command=SLM, args=["--data-dir", DATA, "mcp"])))
        s = await stack.enter_async_context(ClientSession(read, write))
        await s.initialize()

        # The recorded gate of an agent-driven run.
        shown = structured(await s.call_tool("slm_loop_show", {"run_id": COMMAND_RUN}))
        assert shown["gate_cmd"] == "true" and "PATH" in shown["gate_env"]["vars"], shown
        facts["gate_cwd"] = shown["gate_env"]["cwd"]

        # A bound the laps cannot wait out is noted in the result.
        short = structured(await s.call_tool("slm_loop_run", {
            "name": "short", "gate_query": "never", "max_wallclock_s": 60, "poll_interval_s": 0.25,
            "max_iterations": 3}))
        assert short["status"] == "max_iterations", short
        facts["note_field"] = short["termination"]["notes"][0]["field"]

        # A lap that fails: the call is an error and the run ends `error`, not `running`.
        structured(await s.call_tool("remember", {"content": "the nightly build is still running"}))
        outcome = {}

        async def run():
            outcome["result"] = await s.call_tool("slm_loop_run", {
                "name": "breaks", "gate_query": "deploy of release 9 finished", "gate_min_score": 0.99,
                "max_wallclock_s": 60, "max_iterations": 200, "poll_interval_s": 0.25})

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            deadline = time.monotonic() + 30
            while True:
                hist = structured(await s.call_tool("slm_loop_history", {"name": "breaks"}))
                if hist["runs"] and hist["runs"][0]["laps"] >= 1:
                    break
                assert time.monotonic() < deadline, hist
                await anyio.sleep(0.05)
            damage_store()
        res = outcome["result"]
        assert res.is_error, res
        body = (res.meta or {}).get("slm/error")
        assert body and "stored vector" in body["message"], res
        hist = structured(await s.call_tool("slm_loop_history", {"name": "breaks"}))
        run = hist["runs"][0]
        assert run["final_status"] == "error" and "stored vector" in run["reason"], run
        cancel = structured(await s.call_tool("slm_loop_cancel", {"run_id": run["run_id"]}))
        assert cancel["requested"] is False and cancel["status"] == "error", cancel
        facts["status_after_error"] = run["final_status"]
    print(json.dumps(facts))


anyio.run(main)
