#!/usr/bin/env bash
# Build cost of #[tensor_fn]: a generated crate of N (default 50) tensor fns,
# built with the attribute and, as the baseline, the same fns as plain Rust
# (same parameters and return type, trivial body). Only the crate itself is
# rebuilt in the timed runs (dependencies are built once by a warm-up), so the
# difference is the macro's work (parse, Z3 checks, expansion) plus compiling
# the generated IR constructors.
#
# Three annotated builds are timed: cold (the proof cache off), warm (every
# answer from the proof cache the warm-up filled) and edited (warm, with one
# function's `requires` changed before each run, so its queries miss; each
# crate built after its own unedited source, so rustc's incremental cache
# holds the rest, as on a user's second build).
# TC_SOLVER_FAST=off sends every query that is not syntactic to Z3 (what
# the proof cache saves on crates whose obligations are not bounds).
# With TC_PROFILE=<file> set, the macro appends a per-function breakdown
# there (tc-core/src/profile.rs); scripts/macro-profile.awk sums it.
#
# usage: scripts/macro-cost.sh [N] [RUNS]
set -euo pipefail
N=${1:-50}
RUNS=${2:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${MACRO_COST_DIR:-$(mktemp -d /tmp/tc-macro-cost.XXXXXX)}
export CARGO_TARGET_DIR=${MACRO_COST_TARGET:-$ROOT/target-macro-cost}

# Two crates, the plain fns and the annotated ones, each with its own
# incremental state: a build after an edit then reuses what the previous
# build of the *same* crate compiled, as a user's second build does (one
# crate alternating between the two sources recompiled all of it each time,
# and charged that to the edited function).
for crate in plain annotated; do
    mkdir -p "$WORK/$crate/src"
    # Same dependency versions as the workspace (so the shared target dir reuses them).
    cp "$ROOT/Cargo.lock" "$WORK/$crate/Cargo.lock"
    cat > "$WORK/$crate/Cargo.toml" <<TOML
[package]
name = "tc-macro-cost-$crate"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
tc = { path = "$ROOT" }

[workspace]

[profile.dev.package."*"]
opt-level = 1
TOML
done

# Five templates of increasing size, cycled: name, signature, attribute, body.
gen() { # $1 = annotated|plain
    local mode=$1 i
    echo "#![allow(unused, clippy::all)]"
    echo "use tc::{tensor_fn, Tensor};"
    for ((i = 0; i < N; i++)); do
        local attr sig body psig
        case $((i % 5)) in
        0)
            attr="#[tensor_fn]"
            sig="(x: Tensor![f32; B, I], w: Tensor![f32; I, O], b: Tensor![f32; O]) -> Tensor![f32; B, O]"
            psig="(x: tc::Tensor, w: tc::Tensor, b: tc::Tensor)"
            body="matmul(x, w) + broadcast(b, [B, O])" ;;
        1)
            attr="#[tensor_fn]"
            sig="(x: Tensor![f32; B, S, D], g: Tensor![f32; D], eps: f32) -> Tensor![f32; B, S, D]"
            psig="(x: tc::Tensor, g: tc::Tensor, eps: f32)"
            body="let mu = mean_keepdims(x, [2]); let xc = x - broadcast(mu, [B, S, D]); let var = mean_keepdims(xc * xc, [2]); xc * broadcast(rsqrt(var + eps), [B, S, D]) * broadcast(g, [B, S, D])" ;;
        2)
            attr="#[tensor_fn]"
            sig="(x: Tensor![f32; B, N]) -> Tensor![f32; B, N]"
            psig="(x: tc::Tensor)"
            body="let m = max_keepdims(x, [1]); let e = exp(x - broadcast(m, [B, N])); e / broadcast(sum_keepdims(e, [1]), [B, N])" ;;
        3)
            attr="#[tensor_fn(requires(D % H == 0))]"
            sig="(x: Tensor![f32; B, S, D], gate: Tensor![f32; H]) -> Tensor![f32; B, S, D]"
            psig="(x: tc::Tensor, gate: tc::Tensor)"
            body="let q = transpose(reshape(x, [B, S, H, D / H]), [0, 2, 1, 3]); let k = transpose(reshape(x, [B, S, H, D / H]), [0, 2, 3, 1]); let p = matmul(q, k); let c = matmul(p, q); reshape(transpose(c, [0, 2, 1, 3]), [B, S, D])" ;;
        4)
            attr="#[tensor_fn(requires(S >= K))]"
            sig="(x: Tensor![f32; B, S], w: Tensor![f32; K]) -> Tensor![f32; B, S - K + 1]"
            psig="(x: tc::Tensor, w: tc::Tensor)"
            body="let a = slice(x, 1, 0, S - K + 1); let b = slice(x, 1, K - 1, S); a + b" ;;
        esac
        if [[ $mode == annotated ]]; then
            echo "$attr pub fn f$i$sig { $body }"
        else
            echo "pub fn f$i$psig -> Result<tc::Tensor, tc::Error> { Err(tc::Error::UnknownFunction(String::new())) }"
        fi
    done
}

gen annotated > "$WORK/annotated.rs"
gen plain > "$WORK/plain.rs"
# One more tensor fn whose `requires` names a constant: each edited run
# changes it, so that function's queries are new and reach Z3 (A = 4k + 1,
# the witness tried before Z3, fails A % 4 == 0).
edited() { # $1 = k
    cp "$WORK/annotated.rs" "$WORK/edited.rs"
    echo "#[tensor_fn(requires(A % 4 == 0, A >= $((4 * $1 + 1))))] pub fn edited(x: Tensor![f32; A, B]) -> Tensor![f32; A / 4, 4, B] { reshape(x, [A / 4, 4, B]) }" >>"$WORK/edited.rs"
    # Its baseline: the plain crate with the same edit, since an edited
    # source also makes rustc recompile the crate's code, not only re-expand.
    cp "$WORK/plain.rs" "$WORK/plain-edited.rs"
    echo "pub fn edited(x: tc::Tensor) -> Result<tc::Tensor, tc::Error> { let _k = $((4 * $1 + 1)); Err(tc::Error::UnknownFunction(String::new())) }" >>"$WORK/plain-edited.rs"
}
CACHE="$WORK/proof-cache"
rm -rf "$CACHE"

build() { # $1 = variant; prints seconds
    local crate=annotated
    case $1 in plain*) crate=plain ;; esac
    cp "$WORK/$1.rs" "$WORK/$crate/src/lib.rs"
    touch "$WORK/$crate/src/lib.rs"
    local t0 t1
    t0=$(date +%s.%N)
    (cd "$WORK/$crate" && cargo build -q 2>"$WORK/$1.err") || { cat "$WORK/$1.err" >&2; exit 1; }
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}

echo "warm-up (dependencies, proof cache)..." >&2
build plain >/dev/null
TC_PROOF_CACHE=off build annotated >/dev/null
edited 1
TC_PROOF_CACHE=$CACHE build edited >/dev/null
build plain-edited >/dev/null

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
P=$(for ((r = 0; r < RUNS; r++)); do build plain; done | median)
C=$(for ((r = 0; r < RUNS; r++)); do TC_PROOF_CACHE=off build annotated; done | median)
W=$(for ((r = 0; r < RUNS; r++)); do TC_PROOF_CACHE=$CACHE build annotated; done | median)
# Edited: each round the plain and the annotated crate with the same edit,
# each after a build of its own unedited source (its incremental state).
EDITS=$(for ((r = 0; r < RUNS; r++)); do
    build plain >/dev/null
    TC_PROOF_CACHE=$CACHE build annotated >/dev/null
    edited $((r + 2))
    echo "$(build plain-edited) $(TC_PROOF_CACHE=$CACHE build edited)"
done)
PE=$(echo "$EDITS" | awk '{print $1}' | median)
E=$(echo "$EDITS" | awk '{print $2}' | median)
per() { echo "($1 - $2) * 1000 / $N" | bc -l; }
printf 'fns: %d  runs: %d (median)\nplain:             %.3f s\ncold (cache off):  %.3f s  %.1f ms per fn\nwarm (all hits):   %.3f s  %.1f ms per fn\none fn edited:     %.3f s  %.1f ms per fn (plain with the same edit: %.3f s)\n' \
    "$N" "$RUNS" "$P" "$C" "$(per "$C" "$P")" "$W" "$(per "$W" "$P")" "$E" "$(per "$E" "$PE")" "$PE"
