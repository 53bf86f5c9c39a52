#!/usr/bin/env bash
# Whole-process figures for large stores (issue #12): import with precomputed embeddings,
# the first search of a store without derived files (catch-up), then warm `slm recall`,
# `slm loop run` lap 1 and an `slm mcp` restart's first recall, long-lived servers' recall
# time and memory at steady state (one, and three on one data root), plus `slm index verify`
# (the search against brute force). Medians of RUNS fresh processes, peak RSS from
# /usr/bin/time.
#
# usage: scripts/bench-scale.sh [N ...]      default N = 20000 (CI's short mode)
#        scripts/bench-scale.sh 100000 1000000   (by hand; 1M needs ~8 GB of disk, more with GRAPH=1)
# env:   SLM_BIN (default target/release/slm), RUNS (default 10), VERIFY (queries, default 100),
#        KEEP=1 keeps the generated stores (their folder is printed by the first line of errors),
#        GRAPH=1 also builds and saves the HNSW graph (`slm index rebuild`; slow) and times a
#        server restart that reloads it
set -euo pipefail
export LC_ALL=C # $EPOCHREALTIME and awk agree on the decimal point
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=$(realpath "${SLM_BIN:-target/release/slm}")
RUNS=${RUNS:-10}
VERIFY=${VERIFY:-100}
PY=python3
[ -x target/pyenv/bin/python ] && PY=target/pyenv/bin/python
SIZES=("$@")
[ ${#SIZES[@]} -eq 0 ] && SIZES=(20000)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/slm-scale.XXXXXX")
[ -n "${KEEP:-}" ] || trap 'rm -rf "$WORK"' EXIT

# Seed texts embedded by the real model: the generated vectors are noisy copies of these.
$PY - "$WORK/seed.jsonl" <<'PYEOF'
import json, sys, itertools
subj = ["the build", "PR #42", "the release", "the deploy", "the migration", "the review", "the test suite",
        "the nightly job", "the cache", "the API", "the dashboard", "the importer", "the payment service",
        "the search index", "the login page", "the docs"]
verb = ["passed", "failed", "is approved", "was rolled back", "is blocked", "finished", "needs a rerun",
        "timed out", "is green", "was merged", "is waiting for review", "regressed"]
ctx = ["on main", "on staging", "after the hotfix", "for customer A", "in CI", "last night", "on ARM",
       "with the new schema", "behind the flag"]
with open(sys.argv[1], "w") as f:
    for s, v, c in itertools.product(subj, verb, ctx):
        f.write(json.dumps({"content": f"{s} {v} {c}"}) + "\n")
PYEOF
"$BIN" --data-dir "$WORK/seed" import "$WORK/seed.jsonl" >/dev/null

QUERIES=("is the release approved" "did the nightly job fail on ARM" "payment service rolled back"
         "login page tests green" "docs merged after the hotfix")

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# Prints "seconds peak-KB"; exit codes 0 and 3 (a loop ended on a bound) are fine.
# (Wall time from bash's clock, to the millisecond; /usr/bin/time's is in hundredths.)
timed() {
  local rc=0 t0=$EPOCHREALTIME t1
  /usr/bin/time -f "%M" -o "$WORK/time" "$@" >/dev/null 2>"$WORK/err" || rc=$?
  t1=$EPOCHREALTIME
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then cat "$WORK/err" >&2; echo "bench-scale: $* exited $rc" >&2; exit 1; fi
  echo "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}') $(tail -1 "$WORK/time")"
}

printf '%-10s %-34s %s\n' size measure value
for N in "${SIZES[@]}"; do
  D="$WORK/s$N"
  $PY scripts/gen-store.py "$WORK/seed/slm.db" "$N" "$WORK/$N.jsonl"
  sync # the generated file (4 GB at 1M) is on disk before the import is timed, not written meanwhile
  read -r secs kb < <(timed "$BIN" --data-dir "$D" import "$WORK/$N.jsonl")
  printf '%-10s %-34s %s\n' "$N" "import (memories/s)" "$(awk -v n="$N" -v s="$secs" -v kb="$kb" 'BEGIN {printf "%.0f (%.2f s, %d MB)", n/s, s, kb/1024}')"
  read -r secs kb < <(timed "$BIN" --data-dir "$D" recall "${QUERIES[0]}")
  printf '%-10s %-34s %s\n' "$N" "first recall (builds files)" "$secs s, $((kb / 1024)) MB"
  # A new query (its text differs every run) loads the model and embeds it; a repeated one
  # reads its vector from the query cache. `measure LABEL ARGS...` runs `slm ARGS` RUNS times
  # ({i} in ARGS becomes the run's number) and prints the median wall and largest peak RSS.
  measure() {
    local label=$1 i secs kb
    shift
    walls=(); rss=()
    for i in $(seq "$RUNS"); do
      read -r secs kb < <(timed "$BIN" --data-dir "$D" "${@//\{i\}/$i}")
      walls+=("$secs"); rss+=("$kb")
    done
    printf '%-10s %-34s %s\n' "$N" "$label" "$(printf '%s\n' "${walls[@]}" | median) s, $(( $(printf '%s\n' "${rss[@]}" | sort -n | tail -1) / 1024 )) MB"
  }
  GATE=(--gate-min-score 0.999 --max-iterations 1)
  measure "recall, new query" recall "${QUERIES[4]} (run {i})"
  measure "recall, repeated query" recall "${QUERIES[0]}"
  measure "loop run 1 lap, new gate query" loop run --name "scale{i}" --gate-query "${QUERIES[1]} (run {i})" "${GATE[@]}"
  # Embeds the gate query once: every run of the next measure finds it seen.
  timed "$BIN" --data-dir "$D" loop run --name seen0 --gate-query "${QUERIES[1]}" "${GATE[@]}" >/dev/null
  measure "loop run 1 lap, seen gate query" loop run --name "seen{i}" --gate-query "${QUERIES[1]}" "${GATE[@]}"
  walls=()
  for i in 1 2 3; do
    walls+=("$($PY - "$BIN" "$D" "${QUERIES[2]}" <<'PYEOF'
import json, subprocess, sys, time
t0 = time.monotonic()
p = subprocess.Popen([sys.argv[1], "--data-dir", sys.argv[2], "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
def send(m): p.stdin.write(json.dumps(m) + "\n"); p.stdin.flush()
send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}})
p.stdout.readline()
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "recall", "arguments": {"query": sys.argv[3]}}})
while True:
    m = json.loads(p.stdout.readline())
    if m.get("id") == 2:
        break
if "result" not in m or m["result"].get("isError"):
    sys.exit(f"bench-scale: recall over MCP failed: {m}")
print(f"{time.monotonic() - t0:.3f}")
p.stdin.close(); p.wait()
PYEOF
)")
  done
  printf '%-10s %-34s %s\n' "$N" "mcp start to first recall (median)" "$(printf '%s\n' "${walls[@]}" | median) s"
  if [ -n "${GRAPH:-}" ]; then
    # A saved graph: `slm index rebuild` builds and saves it (minutes at 100k, tens of them at
    # 1M); a restarted server then answers its first recall exactly from the mapped files
    # while it reloads the graph in the background, and searches through the graph after.
    read -r secs kb < <(timed env SLM_HNSW_MIN=1000 "$BIN" --data-dir "$D" index rebuild)
    printf '%-10s %-34s %s\n' "$N" "index rebuild (graph built, saved)" "$secs s, $((kb / 1024)) MB"
    $PY - "$BIN" "$D" "${QUERIES[3]}" "$N" <<'PYEOF'
import json, os, subprocess, sys, time
t0 = time.monotonic()
# A store below the default 60,000 memories (CI's 20k) would never use a graph.
env = dict(os.environ, SLM_HNSW_MIN="1000")
p = subprocess.Popen([sys.argv[1], "--data-dir", sys.argv[2], "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
def call(i, method, params):
    p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n"); p.stdin.flush()
    while True:
        m = json.loads(p.stdout.readline())
        if m.get("id") == i:
            return m
call(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}})
r = call(2, "tools/call", {"name": "recall", "arguments": {"query": sys.argv[3]}})
first = time.monotonic() - t0
i = 3
while True:
    s = call(i, "tools/call", {"name": "status", "arguments": {}})["result"]["structuredContent"]["index"]
    i += 1
    if s["mode"] == "hnsw":
        break
    if time.monotonic() - t0 > 600:
        sys.exit(f"bench-scale: the saved graph was not in use after 600 s: {s}")
    time.sleep(0.05)
ready = time.monotonic() - t0
t1 = time.monotonic()
call(i, "tools/call", {"name": "recall", "arguments": {"query": sys.argv[3] + " again"}})
via = time.monotonic() - t1
print(f"{sys.argv[4]:<10} {'mcp restart, saved graph':<34} first recall {first:.3f} s, graph loaded "
      f"(hnsw_loaded={s['hnsw_loaded']}) at {ready:.2f} s, a new query through it {via * 1000:.0f} ms")
p.stdin.close(); p.wait()
PYEOF
  fi
  # Long-lived servers at steady state (issue #26): one, then three on the same data root,
  # each recalling until its background graph work is over (a graph is used from
  # SLM_HNSW_MIN memories, default 60,000; the first server builds and saves it, the
  # others map it), then the median of 30 recalls of a repeated query (its vector comes
  # from the query cache) and the memory the server reports of itself.
  for K in 1 3; do
    $PY - "$BIN" "$D" "${QUERIES[0]}" "$N" "$K" <<'PYEOF'
import json, statistics, subprocess, sys, time
binary, data, query, size, k = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
class Server:
    def __init__(self):
        self.p = subprocess.Popen([binary, "--data-dir", data, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.i = 0
        self.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}})
    def call(self, method, params):
        self.i += 1
        self.p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.i, "method": method, "params": params}) + "\n"); self.p.stdin.flush()
        while True:
            m = json.loads(self.p.stdout.readline())
            if m.get("id") == self.i:
                if "result" not in m or m["result"].get("isError"):
                    sys.exit(f"bench-scale: {method} over MCP failed: {m}")
                return m["result"].get("structuredContent")
    def tool(self, name, args):
        return self.call("tools/call", {"name": name, "arguments": args})
servers = [Server() for _ in range(k)]
t0 = time.monotonic()
while True:
    states = []
    for s in servers:
        s.tool("recall", {"query": query})
        states.append(s.tool("status", {})["index"])
    if all(not st["hnsw_building"] and (st["mode"] == "hnsw" or st["hnsw_min_memories"] > int(size)) for st in states):
        break
    if time.monotonic() - t0 > 3600:
        sys.exit(f"bench-scale: no steady state after an hour: {states}")
    time.sleep(0.5)
settle = time.monotonic() - t0
walls, mems = [], []
for s in servers:
    for _ in range(30):
        t = time.monotonic(); s.tool("recall", {"query": query}); walls.append(time.monotonic() - t)
    mems.append(s.tool("status", {})["memory"])
mb = lambda b: f"{(b or 0) / 2**20:.0f}"
print(f"{size:<10} {'mcp x' + str(k) + ' steady recall (median)':<34} {statistics.median(walls) * 1000:.1f} ms, mode {states[0]['mode']}, settled in {settle:.0f} s")
for j, m in enumerate(mems):
    print(f"{size:<10} {'mcp x' + str(k) + ' server ' + str(j + 1) + ' memory':<34} RSS {mb(m['rss_bytes'])} MB: anon {mb(m['anon_bytes'])} MB, file {mb(m['file_bytes'])} MB (maps {mb(m['vectors_mapped_bytes'])} MB vectors, {mb(m['graph_mapped_bytes'])} MB graph)")
for s in servers:
    s.p.stdin.close(); s.p.wait()
PYEOF
  done
  out=$("$BIN" --data-dir "$D" --json index verify --queries "$VERIFY")
  printf '%-10s %-34s %s\n' "$N" "index verify vs brute force" "$out"
  echo "$out" | grep -q '"mismatches":0' || { echo "bench-scale: search differs from brute force" >&2; exit 1; }
  rm -f "$WORK/$N.jsonl"
done
