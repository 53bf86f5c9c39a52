#!/usr/bin/env bash
# Whole-process figures of the PostgreSQL store against SQLite (issue #13), on a private
# cluster started here (initdb in a temporary directory, as `postgres` when run as root;
# Unix socket and loopback TCP, `ssl = on` with a throwaway certificate from the openssl CLI):
#  - `slm remember`, median of REMEMBERS (default 20) fresh processes: SQLite; PostgreSQL on
#    the Unix socket, on TCP in plain text (sslmode=disable) and on TCP with TLS (require);
#  - `slm recall` at N memories (default 100000; 0 skips) with warm derived files, median of
#    RUNS (default 10): SQLite and PostgreSQL (Unix socket), both filled by `slm import` of the
#    same generated file with precomputed embeddings (scripts/gen-store.py).
#
# usage: scripts/bench-pg.sh [N]
# env:   SLM_BIN (default target/release/slm), REMEMBERS, RUNS
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=$(realpath "${SLM_BIN:-target/release/slm}")
N=${1:-100000}
REMEMBERS=${REMEMBERS:-20}
RUNS=${RUNS:-10}
PY=python3
[ -x target/pyenv/bin/python ] && PY=target/pyenv/bin/python
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
[ -x "$PGBIN/initdb" ] || { echo "bench-pg: no PostgreSQL server binaries (apt-get install postgresql)" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/slm-bench-pg.XXXXXX")
chmod 755 "$WORK"
AS=()
if [ "$(id -u)" = 0 ]; then AS=(runuser -u postgres --); fi
PORT=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
PG="$WORK/pg"
mkdir "$PG"
[ ${#AS[@]} -eq 0 ] || chown postgres "$PG"
cleanup() { "${AS[@]}" "$PGBIN/pg_ctl" -D "$PG/data" -m immediate -w stop >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT

"${AS[@]}" "$PGBIN/initdb" -D "$PG/data" -U slm --auth=trust -E UTF8 --no-sync >/dev/null
printf 'local all all trust\nhost all all 127.0.0.1/32 trust\n' > "$WORK/hba"
cp "$WORK/hba" "$PG/data/pg_hba.conf"
(cd "$WORK" && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key \
  -out server.crt -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null)
cp "$WORK/server.crt" "$WORK/server.key" "$PG/data/"
chmod 600 "$PG/data/server.key"
[ ${#AS[@]} -eq 0 ] || chown postgres "$PG/data/pg_hba.conf" "$PG/data/server.crt" "$PG/data/server.key"
"${AS[@]}" "$PGBIN/pg_ctl" -D "$PG/data" -l "$PG/log" -w start \
  -o "-k $PG -c listen_addresses=127.0.0.1 -p $PORT -c fsync=off -c ssl=on -c max_connections=200" >/dev/null
psql() { "$PGBIN/psql" -X -q -h "$PG" -p "$PORT" -U slm "$@"; }
psql -d postgres -c 'CREATE DATABASE remember_sock' -c 'CREATE DATABASE remember_tcp' \
  -c 'CREATE DATABASE remember_tls' -c 'CREATE DATABASE recall'
SOCK="postgres://slm@localhost/remember_sock?host=$PG&port=$PORT"
TCP="postgres://slm@127.0.0.1:$PORT/remember_tcp?sslmode=disable"
TLS="postgres://slm@127.0.0.1:$PORT/remember_tls?sslmode=require"
RECALL_PG="postgres://slm@localhost/recall?host=$PG&port=$PORT"

# medians RUNS LABEL ARGV [LABEL ARGV ...], each ARGV one string of words: runs the commands
# round-robin (so a busy machine slows them alike), RUNS times after one warm-up each, `{i}`
# replaced by the run's number; prints each label's median wall time in ms.
medians() {
  $PY - "$@" <<'PYEOF'
import shlex, statistics, subprocess, sys, time
runs, specs = int(sys.argv[1]), sys.argv[2:]
cases = [(specs[k], shlex.split(specs[k + 1])) for k in range(0, len(specs), 2)]
walls = {label: [] for label, _ in cases}
for i in range(runs + 1):
    for label, argv in cases:
        args = [a.replace("{i}", str(i)) for a in argv]
        t0 = time.perf_counter()
        p = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wall = (time.perf_counter() - t0) * 1000
        if p.returncode != 0:
            sys.exit(f"bench-pg: {label}: exit {p.returncode}: {p.stderr.decode()}")
        if i > 0:
            walls[label].append(wall)
for label, w in walls.items():
    print(f"{label:<44} {statistics.median(w):8.1f} ms  (min {min(w):.1f}, max {max(w):.1f})")
PYEOF
}

echo "slm remember, whole process, median of $REMEMBERS"
NOTE='remember "bench note {i} about the build"'
medians "$REMEMBERS" \
  "SQLite" "$BIN --data-dir $WORK/r-sqlite $NOTE" \
  "PostgreSQL, Unix socket" "env SLM_STORE='$SOCK' $BIN --data-dir $WORK/r-sock $NOTE" \
  "PostgreSQL, loopback TCP, plain" "env SLM_STORE='$TCP' $BIN --data-dir $WORK/r-tcp $NOTE" \
  "PostgreSQL, loopback TCP, TLS (require)" "env SLM_STORE='$TLS' $BIN --data-dir $WORK/r-tls $NOTE"
[ "$N" -gt 0 ] || exit 0
echo "slm recall at $N memories, warm derived files, median of $RUNS"
$PY - "$WORK/seed.jsonl" <<'PYEOF'
import json, sys, itertools
subj = ["the build", "PR #42", "the release", "the deploy", "the migration", "the review", "the test suite",
        "the nightly job", "the cache", "the API", "the dashboard", "the importer"]
verb = ["passed", "failed", "is approved", "was rolled back", "is blocked", "finished", "needs a rerun", "timed out"]
ctx = ["on main", "on staging", "after the hotfix", "in CI", "last night", "on ARM"]
with open(sys.argv[1], "w") as f:
    for s, v, c in itertools.product(subj, verb, ctx):
        f.write(json.dumps({"content": f"{s} {v} {c}"}) + "\n")
PYEOF
"$BIN" --data-dir "$WORK/seed" import "$WORK/seed.jsonl" >/dev/null
$PY scripts/gen-store.py "$WORK/seed/slm.db" "$N" "$WORK/gen.jsonl"
"$BIN" --data-dir "$WORK/q-sqlite" import "$WORK/gen.jsonl" >/dev/null
SLM_STORE="$RECALL_PG" "$BIN" --data-dir "$WORK/q-pg" import "$WORK/gen.jsonl" >/dev/null
rm -f "$WORK/gen.jsonl"
# A store in use has been vacuumed and analysed; one just filled by a 100k import is not, and
# autovacuum would do it during the timed runs below (seconds of server CPU on 2 cores).
psql -d recall -c 'VACUUM ANALYZE'
sync
# The first recall of each root builds its derived files (the warm-up round).
# A repeated query reads its vector from the query cache (no model load); a new query (its
# text changes every run) loads the model, as the first recall of a text does.
Q='recall "did the nightly job fail on ARM"'
NEWQ='recall "did the nightly job {i} fail on ARM"'
medians "$RUNS" \
  "recall, new query, SQLite" "$BIN --data-dir $WORK/q-sqlite $NEWQ" \
  "recall, new query, PostgreSQL (Unix socket)" "env SLM_STORE='$RECALL_PG' $BIN --data-dir $WORK/q-pg $NEWQ" \
  "recall, repeated query, SQLite" "$BIN --data-dir $WORK/q-sqlite $Q" \
  "recall, repeated query, PostgreSQL (Unix socket)" "env SLM_STORE='$RECALL_PG' $BIN --data-dir $WORK/q-pg $Q"
