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
# scripts/schemathesis.toml (and scripts/schemathesis_hooks.py).
#
# Then the GraphQL routes, over the same engine and gateway, from their own
# schemas: POST /v1/graphql (route 7; its schema read by introspection, every
# root query and mutation field an operation) with not_a_server_error (no
# 5xx, and no error in the 200 body classified as the server's),
# response_schema_conformance and negative_data_rejection;
# POST /v1/graphql/bounded (route 6; its schema the
# SDL GET /v1/graphql/schema exports) with not_a_server_error. Configuration
# in scripts/schemathesis-graphql.toml and
# scripts/schemathesis_graphql_hooks.py. docs/api.md, "Fuzzing".
#
#   bash scripts/fuzz-api.sh [max-examples] [graphql-max-examples]      (default 40 and 100)
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_VERSION=4.32.5
SEED=20261123
TOKEN=fuzz-token
max_examples="${1:-40}"
# per operation of route 7 (one per root field: 12 with the data below);
# route 6 is one operation and gets three times as many
graphql_examples="${2:-100}"
bounded_examples="$((graphql_examples * 3))"
GRAPHQL_CHECKS=not_a_server_error,response_schema_conformance,negative_data_rejection
work="$(mktemp -d)"
pids=()
urls=()
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
    if [ -n "$url" ]; then
      urls+=("$url")
      return 0
    fi
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

# graphql <schema: URL or file> <checks> [schemathesis args...]
graphql() {
  HYPOTHESIS_STORAGE_DIRECTORY="$work/hypothesis" "$work/venv/bin/schemathesis" --config-file scripts/schemathesis-graphql.toml run "$1" \
    --checks "$2" \
    --seed "$SEED" \
    --workers 1 \
    --no-color \
    "${@:3}"
}

# bounded_sdl <base url> [curl args...]: the SDL of route 6, as route 1
# exports it (route 6 refuses introspection), written to $work/bounded.graphql
bounded_sdl() {
  curl -fsS "${@:2}" "$1/v1/graphql/schema" \
    | node -e 'let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => process.stdout.write(JSON.parse(s).schema))' \
    > "$work/bounded.graphql"
}

# seed <engine url>: some data and a snapshot, so that reads, queries and
# restores reach the engine's real paths (the names in the dictionaries of
# scripts/schemathesis.toml and scripts/schemathesis-graphql.toml)
seed() {
  curl -fsS -o /dev/null -X POST "$1/v1/records/put-batch" -H 'content-type: application/json' -d '{"records": [
    {"table": "docs", "tenant_id": "acme", "id": "d1", "fields": {"title": "solar panels on the roof", "lang": "en", "year": 2024, "embedding": [0.1, 0.2, 0.3], "links": ["d2"]}},
    {"table": "docs", "tenant_id": "acme", "id": "d2", "fields": {"title": "wind and water", "lang": "de", "year": 2023, "embedding": [0.3, 0.2, 0.1], "links": ["d1"]}}
  ]}'
  curl -fsS -o /dev/null -X POST "$1/v1/admin/snapshot" -H 'content-type: application/json' -d '{"target": "fuzz_snap"}'
}

# start_gateway <engine url>: a gateway requiring $TOKEN in front of it, with
# its limiters off: a fuzzer's burst of requests and of wrong tokens would
# otherwise be answered 429, which is right but checks nothing
start_gateway() {
  start "$work/gateway-${#pids[@]}.log" gateway --engine "$1" --token "$TOKEN" --rate-limit 0 --auth-failure-limit 0
}

start "$work/engine.log" serve --data-dir "$work/data"
engine="$url"
seed "$engine"
echo "==> the engine, without tokens: $engine"
fuzz "$engine"

start_gateway "$engine"
gateway="$url"
echo "==> a gateway requiring a bearer token, in front of the engine: $gateway"
fuzz "$gateway" -H "Authorization: Bearer $TOKEN"

# GraphQL on an engine of its own with only the seed data: route 7's schema
# has a search and a record field per table, and the passes above leave
# tables of generated names behind (each would be two more operations to
# fuzz); and its mutations write, snapshot and restore at random
start "$work/engine-graphql.log" serve --data-dir "$work/data-graphql"
engine="$url"
seed "$engine"
start_gateway "$engine"
gateway="$url"

echo "==> GraphQL route 7 on the engine, its schema by introspection: $engine/v1/graphql"
graphql "$engine/v1/graphql" "$GRAPHQL_CHECKS" --max-examples "$graphql_examples"
echo "==> GraphQL route 6 on the engine, its schema the SDL of GET /v1/graphql/schema: $engine/v1/graphql/bounded"
bounded_sdl "$engine"
graphql "$work/bounded.graphql" not_a_server_error --url "$engine/v1/graphql/bounded" --max-examples "$bounded_examples"

echo "==> GraphQL route 7 through a gateway, with the bearer token: $gateway/v1/graphql"
graphql "$gateway/v1/graphql" "$GRAPHQL_CHECKS" --max-examples "$graphql_examples" -H "Authorization: Bearer $TOKEN"
echo "==> GraphQL route 6 through a gateway, with the bearer token: $gateway/v1/graphql/bounded"
bounded_sdl "$gateway" -H "Authorization: Bearer $TOKEN"
graphql "$work/bounded.graphql" not_a_server_error --url "$gateway/v1/graphql/bounded" --max-examples "$bounded_examples" -H "Authorization: Bearer $TOKEN"

# every engine and gateway is still up and answering after all of it
for u in "${urls[@]}"; do
  curl -fsS -o /dev/null -H "Authorization: Bearer $TOKEN" "$u/v1/ready"
done
echo "fuzz-api: every check passed; the engines and the gateways still answer"
