// Drives `slm mcp` with the official MCP TypeScript SDK (@modelcontextprotocol/sdk, pinned in
// package.json) and checks every tool schema with Ajv 2020 in strict mode.
//
// Run by tests/it/mcp_ts.rs as: node client.mjs SLM_BINARY DATA_DIR
// Prints one JSON line of facts; exit 0 = pass. Any Ajv or SDK warning fails the run.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const [SLM, DATA] = process.argv.slice(2);
const PROFILES = ["core", "code", "full", "power", "whole"];

// The SDK compiles output schemas with Ajv and reports unknown formats and the like through
// console.warn: a warning anywhere is a failure.
const warnings = [];
for (const level of ["warn", "error"]) {
  const orig = console[level];
  console[level] = (...args) => {
    warnings.push(args.map(String).join(" "));
    orig(...args);
  };
}

function fail(msg) {
  throw new Error(msg);
}

function assert(cond, msg) {
  if (!cond) fail(msg);
}

/** A strict Ajv 2020 (every strict option on) whose log calls are collected. */
function strictAjv(log) {
  const logger = { log: (...a) => log.push(a.join(" ")), warn: (...a) => log.push(a.join(" ")), error: (...a) => log.push(a.join(" ")) };
  const ajv = new Ajv2020({ strict: true, strictRequired: true, allErrors: true, logger });
  addFormats(ajv);
  return ajv;
}

async function connect(profile) {
  const transport = new StdioClientTransport({
    command: SLM,
    args: ["--data-dir", DATA, "mcp", "--profile", profile],
    env: { ...process.env },
    stderr: "inherit",
  });
  const client = new Client({ name: "slm-ts-sdk-test", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

/** Compiles every input and output schema of every profile; returns tool names per profile. */
async function schemas() {
  const names = {};
  let compiled = 0;
  for (const profile of PROFILES) {
    const client = await connect(profile);
    const { tools } = await client.listTools();
    names[profile] = tools.map((t) => t.name).sort();
    for (const t of tools) {
      assert(t.outputSchema, `${t.name} has no output schema`);
      for (const [which, schema] of [["input", t.inputSchema], ["output", t.outputSchema]]) {
        const log = [];
        try {
          strictAjv(log).compile(schema);
        } catch (e) {
          fail(`${profile}/${t.name} ${which} schema does not compile under strict Ajv: ${e.message}\n${JSON.stringify(schema)}`);
        }
        assert(log.length === 0, `${profile}/${t.name} ${which} schema: Ajv warned: ${log.join("; ")}`);
        compiled += 1;
      }
    }
    await client.close();
  }
  for (let i = 1; i < PROFILES.length; i++) {
    const small = names[PROFILES[i - 1]];
    const big = names[PROFILES[i]];
    assert(small.every((n) => big.includes(n)) && big.length > small.length, `${PROFILES[i - 1]} ⊄ ${PROFILES[i]}`);
  }
  return { names, compiled };
}

/** Every tool on its success path (the SDK validates structuredContent against the output schema). */
async function successes(client, outputSchemas) {
  const called = new Set();
  const ajv = strictAjv([]);
  async function ok(name, args) {
    const r = await client.callTool({ name, arguments: args });
    assert(!r.isError, `${name} ${JSON.stringify(args)} failed: ${JSON.stringify(r)}`);
    assert(r.structuredContent, `${name} returned no structuredContent`);
    const validate = ajv.compile(outputSchemas[name]);
    assert(validate(r.structuredContent), `${name}: result does not match its schema: ${ajv.errorsText(validate.errors)}`);
    called.add(name);
    return r.structuredContent;
  }
  const mem = await ok("remember", { content: "review complete: PR #42 is approved", tags: ["pr-42"] });
  const hits = await ok("recall", { query: "PR 42 approved", limit: 5 });
  assert(hits.hits[0].id === mem.id, `recall: ${JSON.stringify(hits)}`);
  await ok("list_memories", { tags: ["pr-42"] });
  const got = await ok("get_memories", { ids: [mem.id] });
  assert(got.memories.length === 1, JSON.stringify(got));
  const imp = await ok("import_memories", { items: [{ content: "the build is green", tags: ["ci"] }] });
  assert(imp.imported === 1, JSON.stringify(imp));
  const st = await ok("status", {});
  assert(st.memories === 2, JSON.stringify(st));
  const run = await ok("slm_loop_run", { name: "pr-42", gate_query: "PR 42 approved", gate_min_score: 0.5, gate_tags: ["pr-42"], max_wallclock_s: 30 });
  assert(run.status === "converged", JSON.stringify(run));
  const demo = await ok("slm_loop_demo", { iterations: 2 });
  assert(demo.status === "max_iterations", JSON.stringify(demo));
  const hist = await ok("slm_loop_history", { name: "pr-42" });
  assert(hist.runs.length === 1, JSON.stringify(hist));
  const shown = await ok("slm_loop_show", { run_id: run.run_id });
  assert(shown.laps.length === run.laps, JSON.stringify(shown));
  const cancel = await ok("slm_loop_cancel", { run_id: run.run_id });
  assert(cancel.requested === false, JSON.stringify(cancel));
  const gone = await ok("forget", { ids: [mem.id] });
  assert(gone.forgotten[0] === mem.id, JSON.stringify(gone));
  return [...called].sort();
}

// Each error path and the start of slm's own message for it. `status` takes no arguments and
// has no error path a client can provoke.
const ERRORS = [
  ["remember", { content: "" }, /^invalid content: "" \(/],
  ["recall", { query: "x", limit: 0 }, /^invalid limit: 0 \(must be between 1 and 1000\)$/],
  ["list_memories", { kind: "everything" }, /^invalid kind: everything \(/],
  ["forget", { ids: [999999] }, /^memory not found: 999999$/],
  ["get_memories", { ids: [] }, /^invalid ids: 0 \(must be between 1 and 1000\)$/],
  ["import_memories", { items: [] }, /^invalid items: 0 \(must be between 1 and 1000\)$/],
  ["slm_loop_run", { name: "bad name", gate_query: "q" }, /^invalid name: "bad name" \(/],
  ["slm_loop_run", { name: "x", gate_query: "q", gate_verify: ["cmd:true"] }, /^invalid gate_verify: cmd:true \(.*CLI-only/],
  ["slm_loop_history", { limit: 0 }, /^invalid limit: 0 \(/],
  ["slm_loop_show", { run_id: "nope" }, /^run not found: nope$/],
  ["slm_loop_cancel", { run_id: "nope" }, /^run not found: nope$/],
  ["slm_loop_demo", { iterations: 0 }, /^invalid iterations: 0 \(/],
];

/** Every error path: the SDK must surface slm's message, not a schema-validation error. */
async function errors(client) {
  const seen = {};
  for (const [name, args, expected] of ERRORS) {
    let r;
    try {
      r = await client.callTool({ name, arguments: args });
    } catch (e) {
      fail(`${name} ${JSON.stringify(args)}: the SDK threw instead of returning slm's error: ${e.message}`);
    }
    assert(r.isError === true, `${name} ${JSON.stringify(args)} should fail: ${JSON.stringify(r)}`);
    assert(r.structuredContent === undefined, `${name}: an error result carries structuredContent`);
    const text = r.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
    assert(expected.test(text), `${name} ${JSON.stringify(args)}: the SDK surfaced ${JSON.stringify(text)}, expected ${expected}`);
    const meta = r._meta?.["slm/error"];
    assert(meta && meta.message === text && typeof meta.kind === "string", `${name}: _meta["slm/error"] is ${JSON.stringify(meta)}`);
    seen[name] = text;
  }
  return seen;
}

async function main() {
  const { names, compiled } = await schemas();
  const client = await connect("whole");
  const { tools } = await client.listTools(); // also caches the SDK's output validators
  const outputSchemas = Object.fromEntries(tools.map((t) => [t.name, t.outputSchema]));
  const called = await successes(client, outputSchemas);
  const errored = await errors(client);
  await client.close();
  const all = names.whole;
  assert(JSON.stringify(called) === JSON.stringify(all), `success paths ${called} != tools ${all}`);
  const missing = all.filter((n) => n !== "status" && !(n in errored));
  assert(missing.length === 0, `no error path for ${missing}`);
  assert(warnings.length === 0, `warnings: ${warnings.join("; ")}`);
  console.log(JSON.stringify({ ok: true, facts: { profiles: Object.fromEntries(PROFILES.map((p) => [p, names[p].length])), compiled, called: called.length, errors: errored } }));
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stdout.write(`FAIL: ${e.stack || e}\n`);
    process.exit(1);
  },
);
