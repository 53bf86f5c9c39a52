"""Drives `slm mcp` with the official MCP Python SDK (the `mcp` package from PyPI).

Run by tests/it/mcp_python.rs as: python mcp_client.py SCENARIO SLM_BINARY DATA_DIR
Each scenario asserts what it needs and prints one JSON line of facts; exit 0 = pass.
"""

import json
import os
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

SCENARIO, SLM, DATA = sys.argv[1], sys.argv[2], sys.argv[3]


def params(profile=None):
    args = ["--data-dir", DATA, "mcp"]
    if profile:
        args += ["--profile", profile]
    # The SDK hands a server only a few variables unless told; SLM_STORE (the tests' PostgreSQL
    # runs) and the rest of this environment reach it.
    return StdioServerParameters(command=SLM, args=args, env=dict(os.environ))


async def session_for(stack, profile=None):
    read, write = await stack.enter_async_context(stdio_client(params(profile)))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    return session


def structured(result):
    assert result.structured_content is not None, result
    return result.structured_content


def error(result):
    """The {kind, field, message} of a failed call; its message is the text the user sees."""
    body = (result.meta or {}).get("slm/error")
    assert body is not None, result
    assert result.content[0].text == body["message"], result
    return body


async def scenario_profiles():
    facts = {}
    for profile in ["core", "code", "full", "power", "whole"]:
        async with _Stack() as stack:
            s = await session_for(stack, profile)
            tools = await s.list_tools()
            facts[profile] = sorted(t.name for t in tools.tools)
            for t in tools.tools:
                assert t.description, t.name
                assert t.output_schema is not None, t.name
                for name, prop in (t.input_schema.get("properties") or {}).items():
                    assert prop.get("description"), f"{t.name}.{name} has no description"
            ro = {t.name for t in tools.tools if t.annotations and t.annotations.read_only_hint}
            assert "recall" in ro and "status" in ro and "remember" not in ro, ro
    names = ["core", "code", "full", "power", "whole"]
    for small, big in zip(names, names[1:]):
        assert set(facts[small]) < set(facts[big]), (small, big)
    assert not any(n.startswith("slm_loop") for n in facts["core"])
    assert {"slm_loop_run", "slm_loop_history", "slm_loop_show", "slm_loop_cancel"} <= set(facts["code"])
    return facts


class _Stack:
    """contextlib.AsyncExitStack under another name (anyio does not export one)."""

    def __init__(self):
        import contextlib

        self._s = contextlib.AsyncExitStack()

    async def __aenter__(self):
        return await self._s.__aenter__()

    async def __aexit__(self, *exc):
        return await self._s.__aexit__(*exc)


async def scenario_memory():
    async with _Stack() as stack:
        s = await session_for(stack)
        r = structured(await s.call_tool("remember", {"content": "review complete: PR #42 is approved", "tags": ["pr-42"]}))
        assert r["deduped"] is False
        again = structured(await s.call_tool("remember", {"content": "review complete: PR #42 is approved", "tags": ["pr-42"]}))
        assert again == {"id": r["id"], "deduped": True}, again
        await s.call_tool("remember", {"content": "the weather is nice"})
        hits = structured(await s.call_tool("recall", {"query": "PR 42 approved", "limit": 5}))
        assert hits["hits"][0]["id"] == r["id"], hits
        assert abs(hits["hits"][0]["score"] - 0.834) < 0.01, hits
        listed = structured(await s.call_tool("list_memories", {"tags": ["pr-42"]}))
        assert [m["id"] for m in listed["memories"]] == [r["id"]]
        status = structured(await s.call_tool("status", {}))
        assert status["memories"] == 2, status
        # A malformed argument: isError, and the server stays up.
        bad = await s.call_tool("recall", {"query": "x", "limit": "lots"})
        assert bad.is_error, bad
        # slm's errors: the message as text, {kind, field, message} under _meta["slm/error"], and
        # no structuredContent (it must match the success output schema, which an error does not).
        bad2 = await s.call_tool("recall", {"query": "x", "min_score": 7})
        assert bad2.is_error and bad2.structured_content is None, bad2
        assert error(bad2)["field"] == "min_score"
        assert bad2.content[0].text.startswith("invalid min_score: 7 ("), bad2
        bad3 = await s.call_tool("slm_loop_run", {"name": "bad name", "gate_query": "q"})
        assert bad3.is_error and error(bad3)["field"] == "name"
        gone = await s.call_tool("forget", {"ids": [999999]})
        assert gone.is_error and error(gone)["kind"] == "not_found"
        assert gone.content[0].text == "memory not found: 999999", gone
        status = structured(await s.call_tool("status", {}))
        assert status["memories"] == 2
        return {"id": r["id"], "score": hits["hits"][0]["score"]}


async def scenario_loop():
    """A loop in one server converges when a second, separate server remembers the memory."""
    progress = []

    async def on_progress(p, total, message):
        progress.append((p, total, message))

    async with _Stack() as stack:
        waiter = await session_for(stack, "code")
        writer = await session_for(stack, "core")
        result = {}

        async def run():
            r = await waiter.call_tool(
                "slm_loop_run",
                {"name": "pr-42", "gate_query": "PR 42 approved", "gate_min_score": 0.75,
                 "max_wallclock_s": 60, "poll_interval_s": 0.25, "max_iterations": 200, "gate_tags": ["pr-42"]},
                progress_callback=on_progress,
            )
            result["r"] = r

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await anyio.sleep(1.5)
            # Served while the loop waits, on the waiter's own connection too.
            st = structured(await waiter.call_tool("status", {}))
            assert st["memories"] == 0
            mem = structured(await writer.call_tool("remember", {"content": "review complete: PR #42 is approved", "tags": ["pr-42"]}))
        r = structured(result["r"])
        assert not result["r"].is_error
        assert r["ok"] is True and r["status"] == "converged", r
        assert r["match"]["id"] == mem["id"], r
        assert len(progress) == r["laps"], (progress, r["laps"])
        assert [p for p, _, _ in progress] == list(range(1, r["laps"] + 1)), progress
        shown = structured(await waiter.call_tool("slm_loop_show", {"run_id": r["run_id"]}))
        assert len(shown["laps"]) == r["laps"]
        hist = structured(await waiter.call_tool("slm_loop_history", {"name": "pr-42"}))
        assert hist["runs"][0]["laps"] == r["laps"] and hist["runs"][0]["final_status"] == "converged"
        return {"laps": r["laps"], "progress": len(progress)}


async def scenario_cancel():
    async with _Stack() as stack:
        s = await session_for(stack, "code")
        with anyio.move_on_after(1.5):
            await s.call_tool(
                "slm_loop_run",
                {"name": "waiter", "gate_query": "never happens", "gate_min_score": 0.99, "max_wallclock_s": 60},
            )
            raise AssertionError("the loop should still be waiting")
        # The abandoned call sent notifications/cancelled; the run ends cancelled.
        deadline = time.monotonic() + 30
        while True:
            hist = structured(await s.call_tool("slm_loop_history", {"name": "waiter"}))
            status = hist["runs"][0]["final_status"] if hist["runs"] else None
            if status == "cancelled":
                break
            assert time.monotonic() < deadline, hist
            await anyio.sleep(0.05)
        # The server is still up.
        structured(await s.call_tool("status", {}))
        return {"status": status}


async def scenario_gate():
    """The memory gate verifies candidates: guard by default, none on request, cmd: refused."""
    async with _Stack() as stack:
        s = await session_for(stack, "code")
        bad = structured(await s.call_tool("remember", {"content": "review of PR #42: NOT approved, changes requested"}))
        base = {"name": "pr-42", "gate_query": "PR #42 approved", "gate_min_score": 0.5,
                "max_wallclock_s": 2, "poll_interval_s": 0.5}

        # Default chain (guard:entities, model): the contradiction scores above 0.5 but never passes.
        res = await s.call_tool("slm_loop_run", base)
        assert not res.is_error, res
        r = structured(res)
        assert r["ok"] is True and r["status"] == "max_wallclock", r
        assert r.get("match") is None, r
        assert r["termination"]["rejected_candidates"] >= 1, r
        shown = structured(await s.call_tool("slm_loop_show", {"run_id": r["run_id"]}))
        rej = shown["laps"][0]["rejected"]
        assert rej[0]["id"] == bad["id"] and rej[0]["verifier"] == "model", rej
        assert rej[0]["rule"] == "model", rej

        # Plain cosine, asked for explicitly: converges on the contradiction.
        plain = structured(await s.call_tool("slm_loop_run", {**base, "gate_verify": ["none"]}))
        assert plain["status"] == "converged" and plain["match"]["id"] == bad["id"], plain
        assert plain["match"]["verified_by"] == [], plain

        # The approval converges under the default chain, verified by the model.
        good = structured(await s.call_tool("remember", {"content": "review complete: PR #42 is approved"}))
        ok = structured(await s.call_tool("slm_loop_run", base))
        assert ok["status"] == "converged" and ok["match"]["id"] == good["id"], ok
        assert ok["match"]["verified_by"] == ["guard:entities", "model"], ok

        # Invalid input: isError naming the field, and no run recorded.
        before = structured(await s.call_tool("slm_loop_history", {"name": "refused"}))
        cmd = await s.call_tool("slm_loop_run", {**base, "name": "refused", "gate_verify": ["cmd:true"]})
        assert cmd.is_error and error(cmd)["field"] == "gate_verify", cmd
        nli = await s.call_tool("slm_loop_run", {**base, "name": "refused", "gate_nli_min": 2})
        assert nli.is_error and error(nli)["field"] == "gate_nli_min", nli
        unknown = await s.call_tool("slm_loop_run", {**base, "name": "refused", "gate_verify": ["regex:x"]})
        assert unknown.is_error and error(unknown)["field"] == "gate_verify", unknown
        after = structured(await s.call_tool("slm_loop_history", {"name": "refused"}))
        assert before["runs"] == [] and after["runs"] == [], after
        return {"rejected": r["termination"]["rejected_candidates"], "rule": rej[0]["rule"],
                "verified_by": ok["match"]["verified_by"]}


async def scenario_many_loops():
    """50 loops in one server at the 0.25 s poll floor for 2 s: the ledger writer batches
    their laps, and every lap of every run is stored, numbered 1..n, with its lap memory."""
    async with _Stack() as stack:
        s = await session_for(stack, "code")
        results = {}

        async def run(i):
            r = await s.call_tool("slm_loop_run", {
                "name": f"many-{i}", "gate_query": f"the batch job {i} finished", "gate_min_score": 0.99,
                "poll_interval_s": 0.25, "max_wallclock_s": 2, "max_iterations": 200})
            results[i] = structured(r)

        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(run, i)
        total = 0
        for i, r in sorted(results.items()):
            assert r["status"] == "max_wallclock" and r["termination"]["ledger_errors"] == 0, r
            # 2 s at a 0.25 s poll: about 9 laps, fewer on a loaded machine. (Longer runs would leave
            # more than 512 laps for the ledger writer to fold, which it then does a second
            # after the ends, not before them: the recall below would come too early.)
            assert r["laps"] >= 2, r
            shown = structured(await s.call_tool("slm_loop_show", {"run_id": r["run_id"], "limit": 1000}))
            assert [lap["lap"] for lap in shown["laps"]] == list(range(1, r["laps"] + 1)), (r, shown["laps"])
            assert shown["laps"][-1]["decision"] == "max_wallclock", shown["laps"][-1]
            hist = structured(await s.call_tool("slm_loop_history", {"name": f"many-{i}"}))
            assert hist["runs"][0]["laps"] == r["laps"], hist
            total += r["laps"]
        for i in (0, 25, 49):
            hits = structured(await s.call_tool("recall", {"query": "batch job", "tags": [f"loop:many-{i}"], "limit": 100}))
            assert len(hits["hits"]) == results[i]["laps"], (i, len(hits["hits"]), results[i]["laps"])
        return {"runs": len(results), "laps": total}


async def scenario_burst():
    """500 unrelated writes while 10 loops wait (poll 1 s, 4 s): no loop gains laps from them."""
    async with _Stack() as stack:
        s = await session_for(stack, "code")
        results = {}

        async def run(i):
            r = await s.call_tool("slm_loop_run", {
                "name": f"burst-{i}", "gate_query": f"the security audit of release {i} signed off",
                "gate_min_score": 0.95, "poll_interval_s": 1, "max_wallclock_s": 4, "max_iterations": 6})
            results[i] = structured(r)

        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(run, i)
            await anyio.sleep(0.5)
            for n in range(500):
                await s.call_tool("remember", {"content": f"gardening tip number {n}: water the roses early"})
        for r in results.values():
            # 4 s at a 1 s poll: laps at about 0, 1, 2, 3 and the deadline lap at 4. With the
            # writes counted as laps, max_iterations (6) would end them first.
            assert r["status"] == "max_wallclock", r
            assert r["laps"] <= 6, r
        return {"laps": sorted(r["laps"] for r in results.values())}


async def scenario_coordination():
    """Issue #28 over MCP: since start / last, a barrier through `gates`, `any` over two
    gates, a tag-only gate, and the bad input these add (isError naming the field)."""
    async with _Stack() as stack:
        s = await session_for(stack, "code")
        wait = {"poll_interval_s": 30, "max_wallclock_s": 60, "max_iterations": 100}
        stale = structured(await s.call_tool("remember", {"content": "deploy of api finished"}))
        out = {}

        async def run(key, args):
            out[key] = structured(await s.call_tool("slm_loop_run", {**wait, **args}))

        async def first_lap(name):
            for _ in range(600):
                h = structured(await s.call_tool("slm_loop_history", {"name": name}))
                if h["runs"] and h["runs"][0]["laps"] >= 1:
                    return h["runs"][0]["run_id"]
                await anyio.sleep(0.05)
            raise AssertionError(f"{name} never recorded a lap")

        # since start: the stale memory is ignored, the fresh one ends the wait.
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "start", {"name": "deploy", "gate_query": "deploy of api finished", "since": "start"})
            await first_lap("deploy")
            fresh = structured(await s.call_tool("remember", {"content": "the api deploy has finished, all pods healthy"}))
        r = out["start"]
        assert r["status"] == "converged" and r["match"]["id"] == fresh["id"] != stale["id"], r
        assert r["matches"][0]["memories"][0]["id"] == fresh["id"], r
        # since last: the memory that ended that run (and the older one) are kept out.
        r = structured(await s.call_tool("slm_loop_run", {"name": "deploy", "gate_query": "deploy of api finished", "since": "last", "max_iterations": 1}))
        assert r["status"] == "max_iterations" and "older matches ignored (since last)" in r["reason"], r

        # A barrier of three through `gates`, and `any` over two gates.
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "barrier", {"name": "barrier", "since": "start", "gates": [
                {"query": "shard done", "tags": ["b1"], "count": 3, "verify": ["guard:entities"]}]})
            await first_lap("barrier")
            shards = [structured(await s.call_tool("remember", {"content": f"shard {k} done", "tags": ["b1"]}))["id"] for k in (1, 2, 3)]
        r = out["barrier"]
        assert r["status"] == "converged", r
        assert sorted(m["id"] for m in r["matches"][0]["memories"]) == sorted(shards), r
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "any", {"name": "either", "gate_mode": "any", "since": "start", "gates": [
                {"query": "tests green on main"}, {"query": "review of PR 7 approved"}]})
            await first_lap("either")
            review = structured(await s.call_tool("remember", {"content": "PR 7 review: approved"}))
        r = out["any"]
        assert r["status"] == "converged" and r["match"]["id"] == review["id"], r
        assert [g["passed"] for g in r["matches"]] == [False, True], r

        # A tag-only gate: no query, no score.
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "tags", {"name": "tags", "gate_tags": ["pr-9", "approved"]})
            await first_lap("tags")
            lgtm = structured(await s.call_tool("remember", {"content": "LGTM", "tags": ["approved", "pr-9"]}))
        r = out["tags"]
        assert r["status"] == "converged" and r["match"]["id"] == lgtm["id"], r
        assert r["termination"]["best_score"] is None, r

        # Expiry: an expired memory ends no loop, recall and list hide it unless asked,
        # forget expired removes it.
        lock = structured(await s.call_tool("remember", {"content": "the deploy lock is held by agent A", "ttl_s": 1}))
        await anyio.sleep(1.3)
        hits = structured(await s.call_tool("recall", {"query": "deploy lock held by agent A"}))
        assert lock["id"] not in [h["id"] for h in hits["hits"]], hits
        hits = structured(await s.call_tool("recall", {"query": "deploy lock held by agent A", "include_expired": True}))
        assert hits["hits"][0]["id"] == lock["id"] and hits["hits"][0]["expires_at"], hits
        listed = structured(await s.call_tool("list_memories", {"limit": 100}))
        assert lock["id"] not in [m["id"] for m in listed["memories"]], listed
        r = structured(await s.call_tool("slm_loop_run", {"name": "lock", "gate_query": "the deploy lock is held by agent A",
                                                          "gate_min_score": 0.95, "gate_verify": ["none"], "max_iterations": 1}))
        assert r["status"] == "max_iterations" and "1 expired memory not counted" in r["reason"], r
        gone = structured(await s.call_tool("forget", {"expired": True}))
        assert gone["forgotten"] == [lock["id"]], gone
        for args, field in [({"content": "x", "ttl_s": -5}, "ttl_s"), ({"content": "x", "ttl_s": 0}, "ttl_s"),
                            ({"content": "x", "expires_at": "2020-01-01T00:00:00Z"}, "expires_at"),
                            ({"content": "x", "ttl_s": 5, "expires_at": "2999-01-01T00:00:00Z"}, "expires_at")]:
            res = await s.call_tool("remember", args)
            assert res.is_error and error(res)["field"] == field, (args, res)

        # Bad input: isError naming the field, no run recorded.
        bad = {"name": "refused", "gate_query": "q"}
        cases = [({**bad, "since": "yesterday"}, "since"), ({**bad, "since": "2999-01-01T00:00:00Z"}, "since"),
                 ({**bad, "gate_count": 0}, "gate_count"), ({**bad, "gate_count": 1001}, "gate_count"),
                 ({**bad, "gates": [{"query": "a"}]}, "gates"),
                 ({"name": "refused", "gates": [{"query": f"q{i}"} for i in range(17)]}, "gates"),
                 ({"name": "refused", "gates": [{}]}, "gates"), ({"name": "refused"}, "gate_query"),
                 ({"name": "refused", "gate_tags": ["t"], "gate_verify": ["model"]}, "gate_verify")]
        for args, field in cases:
            res = await s.call_tool("slm_loop_run", args)
            assert res.is_error and error(res)["field"] == field, (args, res)
        h = structured(await s.call_tool("slm_loop_history", {"name": "refused"}))
        assert h["runs"] == [], h
        return {"cases": len(cases), "barrier": len(shards)}


async def scenario_installed():
    """The wheel's `slm mcp` (tests/it/wheel.rs): initialize, tools/list, remember, status."""
    async with _Stack() as stack:
        s = await session_for(stack)
        names = {t.name for t in (await s.list_tools()).tools}
        assert {"remember", "recall", "slm_loop_run"} <= names, names
        r = structured(await s.call_tool("remember", {"content": "the installed server remembers this", "tags": ["wheel"]}))
        assert r["deduped"] is False, r
        hits = structured(await s.call_tool("recall", {"query": "installed server remembers", "limit": 1}))
        assert hits["hits"][0]["id"] == r["id"], hits
        status = structured(await s.call_tool("status", {}))
        assert status["models_source"] == "installed package", status
        return {"tools": len(names), "id": r["id"]}


async def main():
    fn = globals()["scenario_" + SCENARIO]
    facts = await fn()
    print(json.dumps({"scenario": SCENARIO, "ok": True, "facts": facts}))


anyio.run(main)
