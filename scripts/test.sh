#!/usr/bin/env bash
# The project's test command (README, .ci/run): installs what a fresh machine needs, then
# lint, a short benchmark run, and the whole test suite against the real model and binary.
#
#   scripts/test.sh            everything
#   SLM_SKIP_BENCH=1 ...       skip the short benchmark run
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# `stage NAME`: prints the previous stage's duration, then NAME.
stage_name="" stage_t0=$SECONDS
stage() {
  [ -z "$stage_name" ] || echo "   ($stage_name: $((SECONDS - stage_t0)) s)"
  stage_name=$1 stage_t0=$SECONDS
  [ -z "$1" ] || echo "== $1"
}

stage "setup and test dependencies"
bash scripts/setup.sh --no-build

# The official MCP Python SDK, pinned, for the interoperability tests (tests/it/mcp_python.rs).
MCP_SDK="mcp==2.3.0"
if ! target/pyenv/bin/python -c 'import importlib.metadata as m, sys; sys.exit(m.version("mcp") != "2.3.0")' 2>/dev/null; then
  echo "== installing the MCP Python SDK ($MCP_SDK) into target/pyenv"
  mkdir -p target
  python3 -m venv target/pyenv
  target/pyenv/bin/pip install --quiet --disable-pip-version-check "$MCP_SDK"
fi

# The `onnx` package, pinned, to build the tiny NLI test model (scripts/make-nli-test-model.py,
# tests/it/nli.rs).
ONNX_PKG="onnx==1.23.2"
if ! target/pyenv/bin/python -c 'import importlib.metadata as m, sys; sys.exit(m.version("onnx") != "1.23.2")' 2>/dev/null; then
  echo "== installing $ONNX_PKG into target/pyenv"
  mkdir -p target
  [ -x target/pyenv/bin/python ] || python3 -m venv target/pyenv
  target/pyenv/bin/pip install --quiet --disable-pip-version-check "$ONNX_PKG"
fi

# A PostgreSQL server (Debian's `postgresql`) for the shared-store tests (tests/it/pg.rs starts a
# private cluster from its initdb and pg_ctl).
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "== installing Debian's postgresql (server binaries for tests/it/pg_store.rs)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
fi

# The `openssl` CLI makes the throwaway CA and server certificate of the TLS tests
# (tests/it/pg_tls.rs).
if ! command -v openssl >/dev/null 2>&1; then
  echo "== installing Debian's openssl (certificates for tests/it/pg_tls.rs)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openssl >/dev/null
fi

# Debian's Chromium and playwright-core (no browser download) for the dashboard browser test.
if ! command -v chromium >/dev/null 2>&1; then
  echo "== installing Debian's chromium"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
if [ ! -d tests/browser/node_modules/playwright-core ]; then
  echo "== installing playwright-core (npm ci)"
  (cd tests/browser && npm ci --no-audit --no-fund --silent)
fi

# The official MCP TypeScript SDK and Ajv, pinned, for tests/it/mcp_ts.rs.
if [ ! -d tests/mcp-ts/node_modules/@modelcontextprotocol/sdk ]; then
  echo "== installing the MCP TypeScript SDK and Ajv (npm ci in tests/mcp-ts)"
  (cd tests/mcp-ts && npm ci --no-audit --no-fund --silent)
fi

# Claude Code, pinned, for `claude plugin validate` (tests/it/plugin.rs). It is large and asks
# for a newer Node than some machines have: when it does not install, the test says so and skips.
if [ ! -x tests/claude-code/node_modules/.bin/claude ]; then
  echo "== installing Claude Code (npm ci in tests/claude-code) for claude plugin validate"
  rm -f tests/claude-code/node_modules.install-failed
  if ! (cd tests/claude-code && npm ci --no-audit --no-fund --silent) 2>/tmp/slm-claude-npm.log; then
    echo "warning: Claude Code did not install; claude plugin validate is skipped" >&2
    { echo "npm ci failed:"; tail -5 /tmp/slm-claude-npm.log; } > tests/claude-code/node_modules.install-failed
  fi
fi

stage "build"
cargo build --release --locked
target/release/slm prepare-model >/dev/null

# The gate verifier (models/verifier/README.md): the shipped files match their checksums, the
# corpus' split files are what data/gate/raw/ gives, and the training script still runs (one
# step on 16 rows, exported to a temporary folder; CI never trains the shipped model). The
# training environment (torch, a few GB) is installed under target/trainenv when missing.
stage "gate verifier: checksums, corpus split, training smoke run"
(cd models/verifier && sha256sum --check --quiet SHA256SUMS) || { echo "models/verifier: checksum mismatch" >&2; exit 1; }
python3 scripts/gate-corpus.py --check
trainpy="$(bash scripts/train-env.sh)"
smoke_log="$(mktemp)"
if "$trainpy" scripts/train-verifier.py --smoke >"$smoke_log" 2>&1; then
  tail -n 1 "$smoke_log"
else
  tail -n 30 "$smoke_log" >&2
  echo "the training script's smoke run failed" >&2
  exit 1
fi
rm -f "$smoke_log"

stage "import graph, format, clippy, docs"
# No import circle among src/ files (the memory engine knows nothing of the loops above it).
python3 scripts/import-graph.py --check
# rustfmt.toml: max_width 140. A rustup toolchain ships rustfmt; one without it skips the check.
if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --check
else
  echo "== cargo fmt not installed: format not checked"
fi
cargo clippy --release --all-targets --locked -- -D warnings
# The API docs build without a warning (broken intra-doc links, private items named in public docs).
RUSTDOCFLAGS="-D warnings" cargo doc --release --no-deps --locked --quiet

# cargo-deny (deny.toml): licenses, banned crates, sources. It is run only when already
# installed: `cargo install --locked cargo-deny` (0.20.2) compiles 141 crates, measured at 8 min
# on the shared 2-core machine, longer than the rest of the setup; crates.io ships no prebuilt
# binary, and release downloads from elsewhere are not used here.
if cargo deny --version >/dev/null 2>&1; then
  echo "== cargo deny"
  cargo deny --locked check bans licenses sources
else
  echo "== cargo deny: skipped (not installed; install it with: cargo install --locked cargo-deny)"
fi

if [ -z "${SLM_BENCH_SKIP:-${SLM_SKIP_BENCH:-}}" ]; then
  stage "benchmarks (short run)"
  # grep hides criterion's chatter; a failing bench still fails the run (PIPESTATUS).
  SLM_BENCH_HNSW_N="${SLM_BENCH_HNSW_N:-20000}" \
    cargo bench --locked --bench recall --bench gate --bench mcp --bench dashboard --bench import --bench verifier -- --warm-up-time 0.5 --measurement-time 2 --sample-size 10 2>&1 \
    | grep -E '^[a-z_0-9.]+/|time:|thrpt:|^hnsw:|^process:|^embed:|^gate:|^mcp:|skipped' || true
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "benchmarks failed" >&2; exit 1; }
  stage "scale benchmark (short: 20k generated memories; by hand: scripts/bench-scale.sh 100000 1000000)"
  cargo build --release --locked --bin slm
  RUNS=5 VERIFY=100 bash scripts/bench-scale.sh 20000
fi

# The Python wheel (scripts/build-wheel.sh: maturin, auditwheel, at most 60 MB) that
# tests/it/wheel.rs installs into a fresh virtual environment, built last before the tests so
# it holds this build's code (the test checks it is newer than every source). maturin links a
# stripped copy of the binary to target/release/slm; the cargo build after it puts the tests'
# own back (no recompilation: cargo keeps both).
stage "wheel"
bash scripts/build-wheel.sh >/dev/null
cargo build --release --locked

stage "tests"
log="$(mktemp)"
set +e
cargo test --release --locked --no-fail-fast 2>&1 | tee "$log"
status="${PIPESTATUS[0]}"
# The shared behaviour tests again, each data root on a fresh database of a private PostgreSQL
# server (tests/it/common.rs: Root::new). Chosen by a rule, not a list: every test of a module
# whose header says "//! Stores: both", except tests named *_sqlite_only (tests of SQLite
# itself: a broken schema, the file's path, its write lock during an import). A renamed test
# stays in; a new module joins by saying so.
stage "shared behaviour tests on PostgreSQL (SLM_TEST_STORE=postgres)"
pg_mods="$(grep -l '^//! Stores: both' tests/it/*.rs | xargs -n1 basename | sed 's/\.rs$//' | tr '\n' ' ')"
pg_tests="$(cargo test --release --locked --test it -- --list 2>/dev/null | sed -n 's/: test$//p' \
  | awk -v mods="$pg_mods" 'BEGIN { n = split(mods, m, " "); for (i = 1; i <= n; i++) keep[m[i]] = 1 }
      { split($0, p, "::") } keep[p[1]] && $0 !~ /_sqlite_only$/')"
if [ -z "$pg_tests" ]; then
  echo "no test is marked for the PostgreSQL pass (\"//! Stores: both\" in tests/it/*.rs)" >&2
  status=1
else
  echo "   $(echo "$pg_tests" | grep -c .) tests of the modules: $pg_mods"
  # shellcheck disable=SC2086 # one argument per test name
  SLM_TEST_STORE=postgres cargo test --release --locked --no-fail-fast --test it -- --exact $pg_tests 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
set -e
passed=$(grep -Eo '[0-9]+ passed' "$log" | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' "$log" | awk '{s+=$1} END {print s+0}')
rm -f "$log"
stage ""
echo
echo "tests: ${passed} passed, ${failed} failed"
exit "$status"
