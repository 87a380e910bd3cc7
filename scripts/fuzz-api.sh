#!/usr/bin/env bash
# Fuzzes the API over HTTP from its own OpenAPI document with schemathesis
# (PyPI, pinned; installed into a throwaway virtualenv), with every check
# schemathesis has (`--checks all`: no 5xx, every status, content type,
# header and body as documented, documented-valid requests accepted and
# documented-invalid ones refused, 405 for undeclared methods, auth
# enforced where declared, ...), a fixed seed and a bounded number of
# examples. Two passes over one engine on a temp data dir:
#
#   1. the engine itself, without tokens (its document declares no auth);
#   2. a gateway in front of it, which requires a bearer token (its document
#      declares one, so missing and wrong tokens are checked too).
#
# What a check cannot know is configured per operation, with the reason, in
# scripts/schemathesis.toml (and scripts/schemathesis_hooks.py); docs/api.md,
# "Fuzzing".
#
#   bash scripts/fuzz-api.sh [max-examples]      (default 40)
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_VERSION=4.32.5
SEED=20261123
TOKEN=fuzz-token
max_examples="${1:-40}"
work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==${SCHEMATHESIS_VERSION}"

# start <log> <braid args...>: runs bin/braid.js on a free loopback port and
# sets $url to the address it listens on
start() {
  local log="$1"
  shift
  BRAID_LOG_LEVEL=error node bin/braid.js "$@" --host 127.0.0.1 --port 0 > "$log" 2>&1 &
  pids+=($!)
  url=""
  for _ in $(seq 1 100); do
    url="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$log" | head -n 1 || true)"
    [ -n "$url" ] && return 0
    sleep 0.1
  done
  cat "$log" >&2
  echo "braid $1 did not start" >&2
  return 1
}

fuzz() {
  # Hypothesis keeps its caches under the temp dir, not in the repository
  HYPOTHESIS_STORAGE_DIRECTORY="$work/hypothesis" "$work/venv/bin/schemathesis" --config-file scripts/schemathesis.toml run "$1/v1/openapi.json" \
    --checks all \
    --seed "$SEED" \
    --max-examples "$max_examples" \
    --workers 1 \
    --no-color \
    "${@:2}"
}

start "$work/engine.log" serve --data-dir "$work/data"
engine="$url"

# some data and a snapshot, so that reads, queries and restores reach the
# engine's real paths (the names in scripts/schemathesis.toml's dictionaries)
curl -fsS -o /dev/null -X POST "$engine/v1/records/put-batch" -H 'content-type: application/json' -d '{"records": [
  {"table": "docs", "tenant_id": "acme", "id": "d1", "fields": {"title": "solar panels on the roof", "lang": "en", "year": 2024, "embedding": [0.1, 0.2, 0.3], "links": ["d2"]}},
  {"table": "docs", "tenant_id": "acme", "id": "d2", "fields": {"title": "wind and water", "lang": "de", "year": 2023, "embedding": [0.3, 0.2, 0.1], "links": ["d1"]}}
]}'
curl -fsS -o /dev/null -X POST "$engine/v1/admin/snapshot" -H 'content-type: application/json' -d '{"target": "fuzz_snap"}'

echo "==> the engine, without tokens: $engine"
fuzz "$engine"

# The gateway's limiters are off: a fuzzer's burst of requests and of wrong
# tokens would otherwise be answered 429, which is right but checks nothing.
start "$work/gateway.log" gateway --engine "$engine" --token "$TOKEN" --rate-limit 0 --auth-failure-limit 0
gateway="$url"
echo "==> a gateway requiring a bearer token, in front of the engine: $gateway"
fuzz "$gateway" -H "Authorization: Bearer $TOKEN"

# both are still up and answering after all of it
curl -fsS -o /dev/null "$engine/v1/ready"
curl -fsS -o /dev/null -H "Authorization: Bearer $TOKEN" "$gateway/v1/ready"
echo "fuzz-api: every check passed; the engine and the gateway still answer"
