#!/usr/bin/env bash
# Peer benchmark (issues #15, #47): all-MiniLM-L6-v2 in tc against ONNX Runtime,
# PyTorch and candle on the same weights, and a GPT-2-small block in tc
# against PyTorch and ONNX Runtime, in one run.
#
#   scripts/peer-bench.sh                 # 5 rounds x 10 reps, both models
#   ROUNDS=7 REPS=20 scripts/peer-bench.sh
#   MODELS=gpt2-block scripts/peer-bench.sh   # one model (minilm, gpt2-block)
#   TC_BASE=/path/to/peer_bench scripts/peer-bench.sh
#
# TC_BASE names a peer_bench binary built from another commit (for example
# `git worktree add /tmp/base <commit>` and `CARGO_TARGET_DIR=/tmp/base-target
# cargo build --release --example peer_bench` there). It runs as one more
# system, "tc-base", in every round's rotation; the tables leave it out of
# the peers and add a table of tc against it, per round, so a change can be
# checked for a slowdown against the same peers in the same run.
#
# Runs the Python side (onnx, onnxruntime, safetensors, numpy, torch,
# transformers) in the pinned virtual environment target/py-torch, which
# scripts/py-torch-env.sh makes on first use (about 3 GB to download).
#
# ONNX Runtime runs MiniLM in four forms, each a process of its own in
# every round:
# - "hand-built": benches/peers/minilm_onnx.py's graph, made node by node
#   from the same model.safetensors without PyTorch (erf GELU, finfo.min
#   mask, mean pooling, L2 norm), which ORT's optimizer fuses only partly;
# - "standard": benches/peers/minilm_export.py's torch.onnx.export
#   (TorchScript exporter, opset 17) of transformers' AutoModel with mean
#   pooling and L2 norm;
# - "standard, optimized": that export through
#   onnxruntime.transformers.optimizer.optimize_model(model_type="bert",
#   num_heads=12, hidden_size=384) (Attention, BiasGelu,
#   SkipLayerNormalization, EmbedLayerNormalization fused);
# - "int8": the optimized export through quantize_dynamic (QInt8 weights,
#   per channel), a separate column (a peer for an int8 path, not for fp32);
#   its cosine to the fp32 export is measured once, at export.
# The table's "ONNX Runtime (best fp32)" is the fastest of the first three
# per row, named. The standard exports need torch; without it the
# hand-built graph runs alone.
#
# Also examples/peer_bench.rs (tc, tc's int8 model, `minilm-int8`: i8
# weights with a scale per output column quantized at load, activations
# quantized per row, 16 outlier channels per product in F32, and
# its BF16 model, `minilm-bf16`: weights and activations rounded to BF16,
# F32 accumulation; each its own table against ONNX Runtime's fp32 and
# int8) and the candle crate benches/peers/candle
# (candle-transformers' BertModel, CPU, f32; a crate of its own outside the
# workspace, built into target/peers/candle-target; the candle column is
# left out if it does not build), and PyTorch eager. Then ROUNDS rounds;
# each round runs every system once per thread count (1 and 2), in an
# order rotated each round, each process a long-lived worker timing REPS
# calls per workload after warm-up.
#
# Then the MiniLM cold start: process start to the first embedding (see
# below).
#
# The GPT-2 rows: block 0 of models/gpt2-seed0 (scripts/fetch-gpt2.sh makes
# it: tc's seeded generator, transformers' initialisation scheme), tc's examples/gpt2_block against
# transformers' GPT2Block (erf GELU, SDPA causal attention) in PyTorch and
# in ONNX Runtime (a TorchScript export of that block made by
# benches/peers/gpt2_block.py, plain and through the transformer optimizer,
# model type gpt2); candle has no GPT-2 block row.
#
# benches/peers/peer_table.py prints, per row and system, the median and
# [min–max] over rounds of each process's median; tc's speed ÷ the best
# peer's per round (> 1: tc is faster) with its range; "tc leads" or
# "<peer> leads" only when the two per-round ranges do not overlap; and the
# largest difference between tc's output values and an fp32 peer's.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
REPS=${REPS:-10}
out=target/peers
mkdir -p "$out"
# The Python peers run in target/py-torch (pinned; never the system Python).
PY="$(scripts/py-torch-env.sh)"
torch=1
"$PY" -c "import torch, transformers" 2>/dev/null || torch=0
MODELS=${MODELS:-minilm gpt2-block}
has() { [[ " $MODELS " == *" $1 "* ]]; }
bash scripts/fetch-minilm.sh >/dev/null
model=models/all-MiniLM-L6-v2
[ -f "$out/minilm.onnx" ] || "$PY" benches/peers/minilm_onnx.py "$model" "$out/minilm.onnx"
# The standard export, its optimized form and the int8 model, with the
# settings and int8 accuracy in minilm_export.json (made once; delete
# target/peers/minilm-std to remake them).
std="$out/minilm-std"
if has minilm && [ "$torch" = 1 ] && [ ! -f "$std/minilm_export.json" ]; then
  mkdir -p "$std"
  "$PY" benches/peers/minilm_export.py "$model" "$std" 2>"$std/export.log" ||
    echo "note: benches/peers/minilm_export.py failed (see $std/export.log); no standard-export columns"
fi
# The ORT transformer optimizer's fused form of the GPT-2 block export.
fuse() { [ -f "$2" ] || "$PY" benches/peers/ort_fuse.py "$1" "$2" "$3" "$4" "$5" || true; }
gpt2=models/gpt2-seed0
if has gpt2-block; then
  bash scripts/fetch-gpt2.sh
  [ "$torch" = 1 ] && [ ! -f "$out/gpt2_block.onnx" ] &&
    "$PY" benches/peers/gpt2_block.py export "$gpt2" "$out/gpt2_block.onnx" 2>/dev/null
  [ -f "$out/gpt2_block.onnx" ] && fuse "$out/gpt2_block.onnx" "$out/gpt2_block_fused.onnx" gpt2 12 768
fi
cargo build --release --example peer_bench
tc=target/release/examples/peer_bench
candle=1
CARGO_TARGET_DIR=target/peers/candle-target \
  cargo build --release --manifest-path benches/peers/candle/Cargo.toml || {
  candle=0
  echo "note: benches/peers/candle did not build; no candle column"
}
candle_bin=target/peers/candle-target/release/candle-peer-bench
results="$out/results.jsonl"
: >"$results"
# Runs the systems given after the round and thread count, starting at a
# position rotated by r + t: over as many rounds as systems, every system
# runs once in each position at each thread count.
rotate() {
  local r=$1 t=$2
  shift 2
  local s=("$@") n=$#
  for ((i = 0; i < n; i++)); do "${s[(r + t + i) % n]}"; done
}
# The baseline binary's lines, renamed so the tables tell it from tc.
as_base() { sed 's/"system": *"tc"/"system": "tc-base"/'; }
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs"
for r in $(seq 1 "$ROUNDS"); do
  echo "{\"round\": $r}" >>"$results"
  for t in 1 2; do
    if has minilm; then
      run_tc() { RAYON_NUM_THREADS=$t "$tc" "$REPS" minilm >>"$results"; }
      run_tc8() { RAYON_NUM_THREADS=$t "$tc" "$REPS" minilm-int8 >>"$results"; }
      run_tcb() { RAYON_NUM_THREADS=$t "$tc" "$REPS" minilm-bf16 >>"$results"; }
      run_ort() { "$PY" benches/peers/ort_bench.py "$out/minilm.onnx" "$t" "$REPS" >>"$results"; }
      ort_m() { [ -f "$std/$1" ] && "$PY" benches/peers/ort_bench.py "$std/$1" "$t" "$REPS" "$2" >>"$results" || true; }
      run_ortstd() { ort_m minilm_std.onnx ort-std; }
      run_ortopt() { ort_m minilm_std_opt.onnx ort-std-opt; }
      run_ort8() { ort_m minilm_int8.onnx ort-int8; }
      run_pt() { [ "$torch" = 1 ] && "$PY" benches/peers/torch_bench.py "$model" "$t" "$REPS" 2>/dev/null >>"$results" || true; }
      run_candle() { [ "$candle" = 1 ] && RAYON_NUM_THREADS=$t "$candle_bin" "$model" "$REPS" >>"$results" || true; }
      # Rotate the order by r + t: over nine rounds every system runs once
      # in each position at each thread count.
      systems=(run_tc run_tc8 run_tcb run_ort run_ortstd run_ortopt run_ort8 run_pt run_candle)
      [ -n "${TC_BASE:-}" ] && systems+=(run_base)
      run_base() { RAYON_NUM_THREADS=$t "$TC_BASE" "$REPS" minilm | as_base >>"$results"; }
      rotate "$r" "$t" "${systems[@]}"
    fi
    if has gpt2-block; then
      run_tc() { RAYON_NUM_THREADS=$t TC_GPT2_DIR=$gpt2 "$tc" "$REPS" gpt2-block >>"$results"; }
      run_ort() { [ -f "$out/gpt2_block.onnx" ] && "$PY" benches/peers/gpt2_block.py ort "$out/gpt2_block.onnx" "$t" "$REPS" >>"$results" || true; }
      run_ortf() { [ -f "$out/gpt2_block_fused.onnx" ] && "$PY" benches/peers/gpt2_block.py ort "$out/gpt2_block_fused.onnx" "$t" "$REPS" ort-fused >>"$results" || true; }
      run_pt() { [ "$torch" = 1 ] && "$PY" benches/peers/gpt2_block.py torch "$gpt2" "$t" "$REPS" 2>/dev/null >>"$results" || true; }
      run_base() { RAYON_NUM_THREADS=$t TC_GPT2_DIR=$gpt2 "$TC_BASE" "$REPS" gpt2-block | as_base >>"$results"; }
      systems=(run_tc run_ort run_ortf run_pt)
      [ -n "${TC_BASE:-}" ] && systems+=(run_base)
      rotate "$r" "$t" "${systems[@]}"
    fi
  done
  echo "round $r done"
done
# Cold start (MiniLM): process start to exit of a program that loads the
# model and embeds the first workload (1 x 10 tokens) once, timed from
# outside (a Python parent, so no interpreter start of its own is counted),
# default threads; ROUNDS rounds in a rotating order. tc twice: with its
# kernels on disk (the persistent kernel cache, filled by one untimed run
# first: every later process of a deployed program) and with no kernel
# cache (TC_KERNEL_CACHE=off: every kernel compiled).
cold="$out/cold.jsonl"
: >"$cold"
if has minilm; then
  time_cold() {
    python3 - "$@" >>"$cold" <<'PY'
import json, subprocess, sys, time
t0 = time.perf_counter()
r = subprocess.run(sys.argv[2:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
ms = (time.perf_counter() - t0) * 1e3
print(json.dumps({"system": sys.argv[1], "ms": ms, "ok": r.returncode == 0}))
PY
  }
  "$tc" 0 minilm >/dev/null
  for r in $(seq 1 "$ROUNDS"); do
    c_tc() { time_cold tc "$tc" 0 minilm; }
    c_tcc() { time_cold tc-no-cache env TC_KERNEL_CACHE=off "$tc" 0 minilm; }
    c_ort() { time_cold ort "$PY" benches/peers/ort_bench.py "$out/minilm.onnx" "$(nproc)" 0; }
    c_orto() { [ -f "$std/minilm_std_opt.onnx" ] && time_cold ort-std-opt "$PY" benches/peers/ort_bench.py "$std/minilm_std_opt.onnx" "$(nproc)" 0 || true; }
    c_pt() { [ "$torch" = 1 ] && time_cold pytorch "$PY" benches/peers/torch_bench.py "$model" "$(nproc)" 0 || true; }
    c_candle() { [ "$candle" = 1 ] && time_cold candle "$candle_bin" "$model" 0 || true; }
    systems=(c_tc c_tcc c_ort c_orto c_pt c_candle)
    for i in 0 1 2 3 4 5; do "${systems[(r + i) % 6]}"; done
  done
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 benches/peers/peer_table.py "$results" $([ -f "$std/minilm_export.json" ] && echo "$std/minilm_export.json")
python3 - "$cold" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
if rows:
    names = {"tc": "tc (kernels on disk)", "tc-no-cache": "tc (no kernel cache)",
             "ort": "ONNX Runtime (hand-built)", "ort-std-opt": "ONNX Runtime (standard, optimized)",
             "pytorch": "PyTorch", "candle": "candle"}
    cols = [s for s in names if any(r["system"] == s for r in rows)]
    med = {s: statistics.median(r["ms"] for r in rows if r["system"] == s) for s in cols}
    bad = sorted({r["system"] for r in rows if not r["ok"]})
    peers = [s for s in cols if not s.startswith("tc")]
    best = min((med[s] for s in peers), default=float("nan"))
    print("\n| MiniLM cold start: process start to exit, first 1 x 10 embedding, ms | "
          + " | ".join(names[s] for s in cols) + " | tc (kernels on disk) vs best |")
    print("|---|" + "---|" * len(cols) + "---|")
    rng = {s: [r["ms"] for r in rows if r["system"] == s] for s in cols}
    print(f"| median [min–max] of {len(rows) // len(cols)} | "
          + " | ".join(f"{med[s]:.0f} [{min(rng[s]):.0f}–{max(rng[s]):.0f}]" for s in cols)
          + f" | {best / med['tc']:.2f}x |")
    if bad:
        print(f"(failed runs: {', '.join(bad)})")
PY
