#!/usr/bin/env bash
# GPT-2-small greedy decoding, tc vs ONNX Runtime and PyTorch eager on the
# same weights and threads, in one run (issues #16, #15): TOKENS (default
# 256) tokens after an 8-token prompt, at 1 and 2 threads, ROUNDS rounds
# (default 3) with the systems in a rotating order. Prints the median
# tokens/s over rounds, tc's ratio to each peer, and tc's kernel compile
# count (bounded: no compile per step). Prefill is each system's pass over
# the prompt after an untimed warm-up pass (ONNX Runtime, PyTorch: one;
# tc: the first call, which loads the kernels, then a pass that packs and
# keeps the weights, as ONNX Runtime prepacks at session creation); tc's
# first call and its warm-up pass get their own columns. Makes models/gpt2-seed0
# (scripts/fetch-gpt2.sh) and the Python peers' environment
# (scripts/py-torch-env.sh, about 3 GB on first use). The ONNX Runtime side runs an export of one
# decoding step with the KV cache as inputs and outputs
# (benches/peers/gpt2_decode.py, checked against GPT2LMHeadModel when it is
# made), plain and through the transformer optimizer
# (benches/peers/ort_fuse.py, model type gpt2, 12 heads, hidden 768); the
# table's ONNX Runtime column is the faster of the two per thread count,
# named. Its column is left out if onnxruntime or the export is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
TOKENS=${TOKENS:-256}
ROUNDS=${ROUNDS:-3}
bash scripts/fetch-gpt2.sh
# PyTorch, transformers, onnx and onnxruntime, pinned, in target/py-torch
# (never the system Python).
PY="$(scripts/py-torch-env.sh)"
onnx=target/peers/gpt2_decode.onnx
mkdir -p target/peers
[ -f "$onnx" ] || "$PY" benches/peers/gpt2_decode.py export models/gpt2-seed0 "$onnx" 2>/dev/null || true
fused=target/peers/gpt2_decode_fused.onnx
[ ! -f "$onnx" ] || [ -f "$fused" ] || "$PY" benches/peers/ort_fuse.py "$onnx" "$fused" gpt2 12 768 || true
cargo build --release --example gpt2_decode
# The RESULT lines of this run, kept for benches/peers/gpt2_decode_table.py.
out=target/peers/gpt2-decode-results.txt
: >"$out"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs"
for r in $(seq 1 "$ROUNDS"); do
  for t in 1 2; do
    run_tc() { RAYON_NUM_THREADS=$t target/release/examples/gpt2_decode "$TOKENS" | grep '^RESULT' >>"$out"; }
    run_pt() { "$PY" scripts/gpt2_torch_bench.py "$TOKENS" "$t" 2>/dev/null | grep '^RESULT' >>"$out"; }
    ort() { [ -f "$1" ] && "$PY" benches/peers/gpt2_decode.py ort "$1" "$TOKENS" "$t" "$2" | grep '^RESULT' >>"$out" || true; }
    run_ort() { ort "$onnx" ort; }
    run_ortf() { ort "$fused" ort-fused; }
    systems=(run_tc run_ort run_ortf run_pt)
    k=$(( (r + t) % 4 ))
    for i in 0 1 2 3; do "${systems[(k + i) % 4]}"; done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 benches/peers/gpt2_decode_table.py "$out"
