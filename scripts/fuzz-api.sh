#!/usr/bin/env bash
# Fuzzes a real engine over HTTP from its own OpenAPI document with
# schemathesis (PyPI, pinned; installed into a throwaway virtualenv): every
# route of /v1/openapi.json, GraphQL included, with a fixed seed and a
# bounded number of examples, checking that no request gets a 5xx (readiness'
# 503 for a missing branch excepted, see scripts/schemathesis.toml).
#
#   bash scripts/fuzz-api.sh [max-examples]      (default 40)
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_VERSION=4.32.5
max_examples="${1:-40}"
work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==${SCHEMATHESIS_VERSION}"

# the engine on a free port of the loopback, on a temp data dir
BRAID_LOG_LEVEL=error node bin/braid.js serve --host 127.0.0.1 --port 0 --data-dir "$work/data" > "$work/server.log" 2>&1 &
server_pid=$!
url=""
for _ in $(seq 1 100); do
  url="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$work/server.log" | head -n 1 || true)"
  [ -n "$url" ] && break
  sleep 0.1
done
if [ -z "$url" ]; then
  cat "$work/server.log"
  echo "the engine did not start" >&2
  exit 1
fi

# some data, so that reads and queries reach the engine's real paths
curl -fsS -o /dev/null -X POST "$url/v1/records/put-batch" -H 'content-type: application/json' -d '{"records": [
  {"table": "docs", "tenant_id": "acme", "id": "d1", "fields": {"title": "solar panels on the roof", "lang": "en", "year": 2024, "embedding": [0.1, 0.2, 0.3], "links": ["d2"]}},
  {"table": "docs", "tenant_id": "acme", "id": "d2", "fields": {"title": "wind and water", "lang": "de", "year": 2023, "embedding": [0.3, 0.2, 0.1], "links": ["d1"]}}
]}'

"$work/venv/bin/schemathesis" --config-file scripts/schemathesis.toml run "$url/v1/openapi.json" \
  --checks not_a_server_error \
  --seed 20261123 \
  --max-examples "$max_examples" \
  --workers 1 \
  --no-color

# the engine is still up and answering after all of it
curl -fsS -o /dev/null "$url/v1/ready"
echo "fuzz-api: no server errors; the engine still answers"
