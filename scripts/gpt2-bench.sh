#!/usr/bin/env bash
# GPT-2-small greedy decoding, tc vs PyTorch eager on the same weights and
# threads, in one run (issue #16): TOKENS (default 256) tokens after an
# 8-token prompt, at 1 and 2 threads, the systems alternating. Prints
# tokens/s, tc's ratio, and tc's kernel compile count (bounded: no compile
# per step). Needs models/gpt2-seed0 (scripts/fetch-gpt2.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
TOKENS=${TOKENS:-256}
bash scripts/fetch-gpt2.sh
cargo build --release --example gpt2_decode
out=$(mktemp)
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs"
for t in 1 2; do
  RAYON_NUM_THREADS=$t target/release/examples/gpt2_decode "$TOKENS" | grep '^RESULT' >>"$out"
  python3 scripts/gpt2_torch_bench.py "$TOKENS" "$t" | grep '^RESULT' >>"$out"
done
python3 - "$out" <<'PY'
import sys
rows = [dict(kv.split("=", 1) for kv in l.split()[1:] if "=" in kv) for l in open(sys.argv[1])]
print(f"| GPT-2-small, {rows[0]['tokens']} greedy tokens | threads | tc tokens/s | PyTorch eager tokens/s | tc vs PyTorch | tc prefill ms | PyTorch prefill ms | tc kernel compiles |")
print("|---|---|---|---|---|---|---|---|")
for t in ("1", "2"):
    tc = next(r for r in rows if r["system"] == "tc" and r["threads"] == t)
    pt = next(r for r in rows if r["system"] == "pytorch" and r["threads"] == t)
    ratio = float(tc["tokens_per_s"]) / float(pt["tokens_per_s"])
    print(f"| 8-token prompt | {t} | {tc['tokens_per_s']} | {pt['tokens_per_s']} | {ratio:.2f}x | {tc['prefill_ms']} | {pt['prefill_ms']} | {tc['compiles']} |")
PY
