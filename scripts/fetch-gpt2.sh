#!/usr/bin/env bash
# Make models/gpt2-seed0/model.safetensors, the GPT-2-small weights the
# benchmarks (scripts/gpt2-bench.sh, scripts/peer-bench.sh) and
# `cargo run --example gpt2_decode` use: tc's seeded generator
# (examples/gpt2_weights.rs, transformers' initialisation scheme, seed 0),
# no Python and no download. The same bytes as the file
# tests/gpt2_decode.rs writes for itself and tests/fixtures/
# gpt2_reference.json was computed from.
#
# The generator's report (its fingerprint of the weights) is kept beside
# the file; the folder is remade when that is missing (as in one made by an
# earlier PyTorch-based version of this script) or differs from the
# fixture's fingerprint.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/models/gpt2-seed0"
stamp="$dir/.made-by-gpt2_weights"
want="$(sed -n 's/.*"fingerprint": "\([0-9a-f]*\)".*/\1/p' "$root/tests/fixtures/gpt2_reference.json")"
[ -f "$dir/model.safetensors" ] && [ -n "$want" ] && grep -qs "fingerprint $want" "$stamp" && exit 0
rm -f "$stamp"
mkdir -p "$dir"
log="$(mktemp)"
(cd "$root" && cargo run --quiet --release --example gpt2_weights -- "$dir" --seed 0) >"$log" 2>&1 ||
  { cat "$log" >&2; rm -f "$log"; exit 1; }
mv "$log" "$stamp"
