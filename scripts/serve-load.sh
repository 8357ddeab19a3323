#!/usr/bin/env bash
# Load test of tc-serve's generation: aggregate tokens/s and p50/p99
# inter-token latency at 1, 4, 16 and 32 concurrent streams
# (scripts/serve_load.py: streamed /v1/completions, 128 tokens per request,
# temperature 0, ignore_eos), SmolLM2-135M-Instruct Q4_1 on loopback.
#
#   scripts/serve-load.sh                       # tc-serve, release build
#   THREADS=2 STREAMS=1,4,16,32 TOKENS=128 scripts/serve-load.sh
#   NUMERICS=fast scripts/serve-load.sh         # 8-bit activations (default exact)
#   KV_CACHE=f16 scripts/serve-load.sh          # f16 KV cache, as llama.cpp's (default f32)
#   LLAMA_SERVER=path/to/llama-server scripts/serve-load.sh   # also llama.cpp's
#     (scripts/llm-peer-bench.sh builds one: target/peers/llama.cpp-build/bin/llama-server)
#
# With LLAMA_SERVER set, the same load runs against llama.cpp's server on
# the same GGUF and thread count (`-t $THREADS -np 32 -c 32768`).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
threads="${THREADS:-$(nproc)}"
streams="${STREAMS:-1,4,16,32}"
tokens="${TOKENS:-128}"
port="${PORT:-18090}"
numerics="${NUMERICS:-exact}"
kv_cache="${KV_CACHE:-f32}"
model="$root/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$model" ] || bash "$root/scripts/fetch-smollm2.sh" >&2
(cd "$root" && cargo build --release -p tc-serve >&2)

wait_up() {
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    kill -0 "$1" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

run() {
  local name="$1"; shift
  local log; log="$(mktemp)"
  "$@" 2>"$log" >/dev/null &
  local pid=$!
  if ! wait_up "$pid"; then cat "$log" >&2; kill "$pid" 2>/dev/null || true; return 1; fi
  echo "## $name (threads $threads, $tokens tokens per request)"
  python3 "$root/scripts/serve_load.py" "127.0.0.1:$port" --streams "$streams" --tokens "$tokens" | head -n -1
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
  rm -f "$log"
}

run "tc-serve, numerics $numerics, KV cache $kv_cache" "$root/target/release/tc-serve" --port "$port" --model "$model" --threads "$threads" \
  --max-running 64 --log-format text --numerics "$numerics" --kv-cache "$kv_cache"
if [ -n "${LLAMA_SERVER:-}" ]; then
  run "llama.cpp server, KV cache f16" "$LLAMA_SERVER" -m "$model" --port "$port" -t "$threads" -np 32 -c 32768
fi
