#!/usr/bin/env bash
# rust-analyzer's command-line diagnostics over a small crate of tensor fns
# (issue #48 item 4): does the IDE expand #[tensor_fn] without crashing,
# show tc's own diagnostics, and how long does it take?
#
# The crate has three well-typed fns and one with a shape error (a matmul
# whose inner dims differ), which must come back as tc's E0xxx error.
# Needs `rustup component add rust-analyzer`. rust-analyzer runs `cargo
# check` first (build scripts, proc macros); the crate uses the workspace's
# target dir and dev profile, so the dependencies' check artifacts are the
# workspace's own where they exist (RA_TARGET names another dir).
#
# usage: scripts/ra-diagnostics.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${RA_DIR:-$(mktemp -d /tmp/tc-ra.XXXXXX)}
export CARGO_TARGET_DIR=${RA_TARGET:-$ROOT/target}
mkdir -p "$WORK/src"
cp "$ROOT/Cargo.lock" "$WORK/Cargo.lock"
cat > "$WORK/Cargo.toml" <<TOML
[package]
name = "tc-ra-check"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
tc = { path = "$ROOT" }

[workspace]

[profile.dev.package."*"]
opt-level = 1
TOML
cat > "$WORK/src/lib.rs" <<'RS'
#![allow(unused)]
use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn linear(x: Tensor![f32; B, I], w: Tensor![f32; I, O], b: Tensor![f32; O]) -> Tensor![f32; B, O] {
    matmul(x, w) + broadcast(b, [B, O])
}

#[tensor_fn]
pub fn softmax(x: Tensor![f32; B, N]) -> Tensor![f32; B, N] {
    let m = max_keepdims(x, [1]);
    let e = exp(x - broadcast(m, [B, N]));
    e / broadcast(sum_keepdims(e, [1]), [B, N])
}

#[tensor_fn(requires(D % H == 0))]
pub fn heads(x: Tensor![f32; B, S, D], gate: Tensor![f32; H]) -> Tensor![f32; B, H, S, D / H] {
    transpose(reshape(x, [B, S, H, D / H]), [0, 2, 1, 3])
}

#[tensor_fn]
pub fn wrong(x: Tensor![f32; B, I], w: Tensor![f32; O, I]) -> Tensor![f32; B, O] {
    matmul(x, w)
}

pub fn caller(x: tc::Tensor, w: tc::Tensor, b: tc::Tensor) -> Result<tc::Tensor, tc::Error> {
    linear(x, w, b)
}
RS
echo "crate: $WORK" >&2
t0=$(date +%s.%N)
set +e
rust-analyzer diagnostics "$WORK" >"$WORK/diagnostics.txt" 2>"$WORK/stderr.txt"
rc=$?
set -e
t1=$(date +%s.%N)
# The scan also covers the path dependencies (tc's own crates); show this
# crate's diagnostics, without the progress lines.
tr '\r' '\n' <"$WORK/diagnostics.txt" | awk '
    /at crate tc_ra_check/ { print substr($0, index($0, "at crate tc_ra_check")); more = 1; next }
    more && /^  / { print; next }
    { more = 0 }'
# rust-analyzer exits with 1 when it reports an error (here: `wrong`).
printf 'rust-analyzer exit status %d (1: errors reported), %.1f s\n' "$rc" "$(echo "$t1 - $t0" | bc -l)"
printf 'tc diagnostics: %d (lines with [E0...]); expected 1, E0301 in `wrong`\n' "$(grep -ac '\[E0' "$WORK/diagnostics.txt" || true)"
if grep -aq 'panicked' "$WORK/stderr.txt"; then echo "rust-analyzer stderr mentions a panic: $WORK/stderr.txt"; fi
exit 0
