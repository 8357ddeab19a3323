#!/usr/bin/env bash
# Peer benchmark (issue #15): all-MiniLM-L6-v2 in tc against ONNX Runtime on
# the same weights, in one run.
#
#   scripts/peer-bench.sh                 # 5 rounds x 10 reps
#   ROUNDS=7 REPS=20 scripts/peer-bench.sh
#
# Installs the Python side with pip (onnx, onnxruntime, safetensors, numpy),
# exports the model to ONNX from the same model.safetensors without PyTorch
# (benches/peers/minilm_onnx.py: the same graph, erf GELU, finfo.min mask,
# mean pooling, L2 norm), builds examples/peer_bench.rs, then runs ROUNDS
# rounds; each round runs every system once per thread count (1 and 2) in a
# rotating order, each process a long-lived worker timing REPS calls per
# workload after warm-up. It prints the median over rounds of each
# process's median, tc's speed relative to ONNX Runtime (> 1: tc is
# faster), and the largest difference between the two systems' embeddings.
# candle and PyTorch are not in it yet (the issue's other peers).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
REPS=${REPS:-10}
out=target/peers
mkdir -p "$out"
python3 -m pip install --quiet onnx onnxruntime safetensors numpy
bash scripts/fetch-minilm.sh >/dev/null
model=models/all-MiniLM-L6-v2
[ -f "$out/minilm.onnx" ] || python3 benches/peers/minilm_onnx.py "$model" "$out/minilm.onnx"
cargo build --release --example peer_bench
tc=target/release/examples/peer_bench
results="$out/results.jsonl"
: >"$results"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs"
for r in $(seq 1 "$ROUNDS"); do
  for t in 1 2; do
    run_tc() { RAYON_NUM_THREADS=$t "$tc" "$REPS" >>"$results"; }
    run_ort() { python3 benches/peers/ort_bench.py "$out/minilm.onnx" "$t" "$REPS" >>"$results"; }
    if [ $(( (r + t) % 2 )) -eq 0 ]; then run_tc; run_ort; else run_ort; run_tc; fi
  done
  echo "round $r done"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
key = lambda r: (r["b"], r["s"], r["threads"])
by = {}
for r in rows:
    by.setdefault((key(r), r["system"]), []).append(r)
print("| MiniLM, ms per batch | threads | tc | ONNX Runtime | tc vs ORT | max |embedding diff| |")
print("|---|---|---|---|---|---|")
for k in sorted({key(r) for r in rows}):
    tc = by[(k, "tc")]; ort = by[(k, "ort")]
    mt = statistics.median(r["ms"] for r in tc)
    mo = statistics.median(r["ms"] for r in ort)
    diff = max(abs(a - b) for a, b in zip(tc[0]["emb"], ort[0]["emb"]))
    print(f"| {k[0]} x {k[1]} tokens | {k[2]} | {mt:.2f} | {mo:.2f} | {mo / mt:.2f}x | {diff:.1e} |")
PY
