#!/usr/bin/env bash
# Load test of tc-serve's embeddings endpoint on loopback with wrk.
#
#   scripts/loadtest.sh            # 20 s per scenario
#   DURATION=60 scripts/loadtest.sh
#
# Builds the release server, starts it on 127.0.0.1:$PORT (default 18080)
# with --warmup (kernels for every length bucket compiled before traffic),
# then runs three bounded wrk scenarios against POST /v1/embeddings:
#   single      1 connection, one short sentence per request
#   concurrent  $CONNS connections (default 8), one short sentence per request
#   concurrent32 32 connections, one short sentence per request
#   batch       $CONNS connections, 8 sentences per request
# and prints one SUMMARY line per scenario (requests, throughput, p50/p90/p99
# latency, errors), a sentences/s table with the single / batched ratios
# (issue #13's goal: >= 0.85), then the server's kernel-cache, batch and
# forward-pass metrics.
# Extra server flags can be passed in SERVER_ARGS (e.g. "--buckets none").
# Traffic goes to 127.0.0.1 only; the server is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT=${PORT:-18080}
DURATION=${DURATION:-20}
CONNS=${CONNS:-8}
THREADS=${THREADS:-2}
TIMEOUT=${TIMEOUT:-120}
SERVER_ARGS=${SERVER_ARGS:-}

if ! command -v wrk >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk >/dev/null || {
      apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk >/dev/null
    }
  else
    echo "wrk not found: apt-get install wrk" >&2
    exit 1
  fi
fi

cargo build --release -p tc-serve
bash scripts/fetch-minilm.sh
target_dir=${CARGO_TARGET_DIR:-target}
bin="$target_dir/release/tc-serve"

work=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# shellcheck disable=SC2086
"$bin" --model models/all-MiniLM-L6-v2 --port "$PORT" --warmup $SERVER_ARGS >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 600); do
  if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$server_pid" 2>/dev/null; then cat "$work/server.log" >&2; exit 1; fi
  sleep 1
done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null
cat "$work/server.log"

write_lua() { # $1: file, $2: JSON body
  cat >"$1" <<EOF
wrk.method = "POST"
wrk.path = "/v1/embeddings"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [[$2]]
done = function(summary, latency, requests)
  local e = summary.errors
  local secs = summary.duration / 1e6
  io.write(string.format(
    "SUMMARY requests=%d seconds=%.1f req_per_s=%.3f p50_ms=%.1f p90_ms=%.1f p99_ms=%.1f max_ms=%.1f socket_errors=%d non_2xx=%d\n",
    summary.requests, secs, summary.requests / secs,
    latency:percentile(50) / 1e3, latency:percentile(90) / 1e3, latency:percentile(99) / 1e3,
    latency.max / 1e3, e.connect + e.read + e.write + e.timeout, e.status))
end
EOF
}
write_lua "$work/single.lua" '{"input": "A man is eating food.", "model": "all-MiniLM-L6-v2"}'
write_lua "$work/batch.lua" '{"input": ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.", "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.", "A man is riding a white horse on an enclosed ground.", "A monkey is playing drums."], "model": "all-MiniLM-L6-v2"}'

url="http://127.0.0.1:$PORT"
declare -A sents
run() { # $1: name, $2: threads, $3: connections, $4: script, $5: sentences per request
  echo "== $1: wrk -t$2 -c$3 -d${DURATION}s ($4)"
  wrk -t"$2" -c"$3" -d"${DURATION}s" --timeout "${TIMEOUT}s" --latency -s "$work/$4" "$url" \
    | tee "$work/$1.out" | sed 's/^/   /'
  local rps
  rps=$(sed -n 's/^SUMMARY .*req_per_s=\([0-9.]*\).*/\1/p' "$work/$1.out")
  sents[$1]=$(awk -v r="${rps:-0}" -v k="$5" 'BEGIN { printf "%.1f", r * k }')
}
run single 1 1 single.lua 1
run concurrent "$THREADS" "$CONNS" single.lua 1
run concurrent32 "$THREADS" 32 single.lua 1
run batch "$THREADS" "$CONNS" batch.lua 8

echo "== sentences/s (single-sentence requests are merged by the server's batcher)"
printf '   %-34s %10s\n' "scenario" "sentences/s"
printf '   %-34s %10s\n' "single, 1 connection" "${sents[single]}"
printf '   %-34s %10s\n' "single, $CONNS connections" "${sents[concurrent]}"
printf '   %-34s %10s\n' "single, 32 connections" "${sents[concurrent32]}"
printf '   %-34s %10s\n' "batched (8 per request), $CONNS conn." "${sents[batch]}"
awk -v a="${sents[concurrent]}" -v b="${sents[concurrent32]}" -v c="${sents[batch]}" 'BEGIN {
  if (c > 0) printf "   ratio single-%s / batched: %.2f; single-32 / batched: %.2f\n", "'"$CONNS"'", a / c, b / c }'

echo "== server metrics"
curl -sf "$url/metrics" | grep -E '^tc_(kernel_cache|model_forward|embedding|http_requests_total|batch)' | sed 's/^/   /'
