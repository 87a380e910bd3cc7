#!/usr/bin/env bash
# Where a durable put's time goes on the server's core: `braid serve` on the
# release addon (target/bench-native) pinned to core 0, wrk on core 1 sending
# single-record puts from 32 connections (CONNS=n for another number; after
# 2 s of warm-up, from 32), then each
# server thread's CPU (ms a second, from /proc/<pid>/task/*/stat), its context
# switches, and the WAL's fsync and group-commit figures from /metrics.
# Needs wrk and taskset (apt-get install -y wrk); perf for the profile.
#
#   bash bench/put-probe.sh [seconds]                     # 8 by default
#   bash bench/put-probe.sh 8 perf                        # also perf record -g into $OUT/perf.data
#   NODEOPTS=--perf-basic-prof bash bench/put-probe.sh 8 perf   # with JavaScript frames named
#   RENICE=braid-commit bash bench/put-probe.sh           # that thread at nice -10 (root only; an experiment)
#   NODEARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" bash bench/put-probe.sh   # a V8 CPU profile, written as the server stops
#   NATIVE=<dir> bash bench/put-probe.sh                  # another build of the addon
#   FRESH=1 bash bench/put-probe.sh                       # new records (ids unused), not rewrites of the warm-up's
#   BUCKETS=group_commit_writes_bucket bash bench/put-probe.sh   # also the metrics lines matching that pattern
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-8}
PORT=${PORT:-7411}
OUT=$(mktemp -d /tmp/braid-put-probe.XXXX)
DATA=$OUT/data
cat > "$OUT/put.lua" <<'L'
wrk.method = "POST"
wrk.path = "/v1/records/put"
wrk.headers["Content-Type"] = "application/json"
-- FRESH=1: ids no earlier run wrote (new records); by default the timed run
-- rewrites the warm-up's records, as bench/http.mjs's runs do
local seq = (os.getenv("FRESH") or "") ~= "" and (os.time() % 100000) * 1000000 or 0
request = function()
  seq = seq + 1
  return wrk.format(nil, nil, nil, string.format([==[{"record":{"table":"bench","tenant_id":"t%d","id":"p-%d","fields":{"title":"record %d about solar wind and rain","n":%d}}}]==], seq % 4, seq, seq, seq % 100))
end
L
NODE_OPTIONS="${NODEOPTS:-}" BRAID_NATIVE_DIR=${NATIVE:-$PWD/target/bench-native} BRAID_DATA_DIR=$DATA BRAID_PORT=$PORT \
  BRAID_HOST=127.0.0.1 BRAID_LOG_LEVEL=error taskset -c 0 node ${NODEARGS:-} bin/braid.js serve > "$OUT/server.out" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$DATA"' EXIT
for _ in $(seq 100); do grep -q listening "$OUT/server.out" && break; sleep 0.2; done
taskset -c 1 wrk -t1 -c32 -d2s -s "$OUT/put.lua" "http://127.0.0.1:$PORT" | grep -E "requests in" | sed "s/^/warm-up: /"
sleep 1
cpu() { for t in /proc/$PID/task/*; do echo "$(tr ' ' _ < "$t/comm")-$(basename "$t") $(awk '{print $14+$15}' "$t/stat")"; done | sort; }
# each thread's time on the CPU and waiting on the run queue, in ns (/proc/.../schedstat)
sched() { for t in /proc/$PID/task/*; do echo "$(tr ' ' _ < "$t/comm")-$(basename "$t") $(awk '{print $1, $2}' "$t/schedstat")"; done | sort; }
switches() { for t in /proc/$PID/task/*; do echo "$(tr ' ' _ < "$t/comm")-$(basename "$t") $(awk '/ctxt_switches/ {printf "%s ", $2}' "$t/status")"; done | sort; }
if [ -n "${RENICE:-}" ]; then
  for t in /proc/$PID/task/*; do [ "$(cat "$t/comm")" = "$RENICE" ] && renice -n -10 -p "$(basename "$t")" > /dev/null && echo "reniced $RENICE"; done
fi
cpu > "$OUT/cpu.before"; switches > "$OUT/switches.before"; sched > "$OUT/sched.before"
PERF=
if [ "${2:-}" = perf ]; then perf record -F "${PFREQ:-2000}" -g -p $PID -o "$OUT/perf.data" -- sleep "$SECS" > /dev/null 2>&1 & PERF=$!; fi
taskset -c 1 wrk -t1 -c"${CONNS:-32}" -d"${SECS}s" -s "$OUT/put.lua" "http://127.0.0.1:$PORT" | grep -E "requests in|Requests/sec|Latency"
[ -n "$PERF" ] && wait $PERF
cpu > "$OUT/cpu.after"; switches > "$OUT/switches.after"; sched > "$OUT/sched.after"
echo "context switches (voluntary, involuntary):"
join "$OUT/switches.before" "$OUT/switches.after" | awk '{printf "  %-24s %8d %8d\n", $1, $4-$2, $5-$3}' | sort -k2 -nr | head -6
curl -s "http://127.0.0.1:$PORT/metrics" | grep -E "braid_branch_(wal_fsync_duration_seconds|group_commit_writes)_(sum|count)|${BUCKETS:-^$}"
echo "CPU by thread:"
join "$OUT/cpu.before" "$OUT/cpu.after" | awk -v s="$SECS" '{d=$3-$2; if (d>0) printf "  %-24s %6.0f ms/s\n", $1, d*10/s}' | sort -k2 -nr
echo "by thread, ms a second: on the CPU, runnable but waiting for it, asleep (blocked: I/O, locks, waiting for work):"
join "$OUT/sched.before" "$OUT/sched.after" | awk -v s="$SECS" '{r=($4-$2)/1e6/s; q=($5-$3)/1e6/s; if (r>1) printf "  %-24s %6.0f %6.0f %6.0f\n", $1, r, q, 1000-r-q}' | sort -k2 -nr | head -6
[ -n "$PERF" ] && echo "profile: $OUT/perf.data"
