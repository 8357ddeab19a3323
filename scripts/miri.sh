#!/usr/bin/env bash
# Miri over the crates' plain-Rust `unsafe`: every `unsafe` block the tests
# reach is checked for undefined behaviour (out-of-bounds or misaligned
# accesses, pointer arithmetic leaving its allocation, invalid values,
# aliasing violations, leaks, data races). Three passes:
#
# - runtime: tc-runtime's unit and integration tests (tensors, the
#   reference interpreter, casts, the contract, safetensors I/O, and the
#   pool with its huge-page advice: the same code as outside Miri, only
#   the `madvise` system call itself is replaced by a check that its range
#   lies inside the buffer, `tc_runtime::huge`).
# - kernels: the `unsafe_tests` modules of tc-llvm (the GEMM packers and
#   drivers, with reference micro-kernels standing in for the JIT's, the
#   sweep and gemv paths, the integer GEMM) and tc-quant (every kernel path
#   against the scalar one), on the baseline x86-64 target: the scalar
#   paths.
# - kernels-avx2: tc-quant's tests built with AVX2/FMA/F16C target
#   features, which Miri then reports as present: its AVX2 kernels,
#   interpreted (target dir target/miri/avx2).
# - kernels-avx512: tc-llvm's and tc-quant's tests built with AVX-512
#   F/BW/VL/VNNI as well: the packing transposes, the sweep and gemv paths,
#   tc-quant's AVX-512 exact kernels and its VNNI packing (target dir
#   target/miri/avx512).
#
# The JIT's machine code cannot run under Miri: what only compiled kernels
# reach is not covered (docs/soundness.md, "Miri", lists what is).
#
# Under `cfg(miri)` the pool's threshold is 4 KiB and the exhaustive sweeps
# run on a sample; see the `miri` notes in the tests.
#
# Usage: scripts/miri.sh [PASS] [ARGS]
#   PASS: all (the default, which takes no ARGS), runtime, kernels,
#   kernels-avx2 or kernels-avx512. ARGS alone (no PASS) go to the runtime pass, as before.
#   runtime: extra `cargo test` arguments, a target such as `--test all`
#   (the integration tests) or `--lib` (default: both), a test-name filter
#   such as `casts::` (one file of tests/). Kernel passes: test-name
#   filters in place of `unsafe_tests` (e.g. `matmul_int::unsafe_tests`).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo +nightly miri --version >/dev/null 2>&1; then
  echo "installing Miri: rustup component add miri rust-src --toolchain nightly" >&2
  rustup component add miri rust-src --toolchain nightly
fi

pass=all
case "${1:-}" in
  all | runtime | kernels | kernels-avx2 | kernels-avx512) pass="$1"; shift ;;
  ?*) pass=runtime ;;
esac
if [[ $pass == all && $# -gt 0 ]]; then
  echo "scripts/miri.sh: arguments need a pass (runtime, kernels, kernels-avx2 or kernels-avx512)" >&2
  exit 2
fi
filters=("$@")
[[ ${#filters[@]} -gt 0 ]] || filters=(unsafe_tests)

# A target dir of its own: Miri's MIR-only artefacts must not evict the
# normal build's.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/miri}"
# Isolation off: the safetensors tests write and read a temp file, and the
# huge-page probe times its faults.
# No extra rounding error: Miri perturbs the results of `powi` and of the
# libm functions (exp, ln, tanh, ...) by a few ulps to model hosts whose
# libm differs; the tests pin the interpreter's values on this host (and use
# `powi` for exact powers of two), so that perturbation would fail them
# without any undefined behaviour. NaN payloads stay randomised.
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation -Zmiri-no-extra-rounding-error}"
# The kernel passes run rayon's thread pools (scoped: joined before each
# test returns), whose crossbeam-epoch breaks the Stacked Borrows rules but
# not Tree Borrows' (crossbeam checks itself under Tree Borrows) and keeps
# its global collector's records to the end of the process: those passes
# use Tree Borrows and do not report leaks, and permissive provenance
# silences the warning about crossbeam's integer-to-pointer casts (tc's
# own code makes none).
kernel_flags="$MIRIFLAGS -Zmiri-tree-borrows -Zmiri-ignore-leaks -Zmiri-permissive-provenance"
avx2="+avx2,+fma,+f16c"
avx512="$avx2,+avx512f,+avx512bw,+avx512vl,+avx512vnni"

status=0
run() {
  echo "== scripts/miri.sh: $1" >&2
  shift
  local t0=$SECONDS
  "$@" || status=1
  echo "== $((SECONDS - t0)) s" >&2
}

if [[ $pass == all || $pass == runtime ]]; then
  targets=(--lib --tests)
  for a in "$@"; do
    case "$a" in --lib | --tests | --test | --test=*) targets=() ;; esac
  done
  run runtime cargo +nightly miri test --no-fail-fast -p tc-runtime "${targets[@]}" "$@"
fi
if [[ $pass == all || $pass == kernels ]]; then
  run kernels env MIRIFLAGS="$kernel_flags" \
    cargo +nightly miri test --no-fail-fast -p tc-llvm -p tc-quant --lib -- "${filters[@]}"
fi
if [[ $pass == all || $pass == kernels-avx2 ]]; then
  run kernels-avx2 env MIRIFLAGS="$kernel_flags" CARGO_TARGET_DIR="$CARGO_TARGET_DIR/avx2" \
    RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=$avx2" \
    cargo +nightly miri test --no-fail-fast -p tc-quant --lib -- "${filters[@]}"
fi
if [[ $pass == all || $pass == kernels-avx512 ]]; then
  run kernels-avx512 env MIRIFLAGS="$kernel_flags" CARGO_TARGET_DIR="$CARGO_TARGET_DIR/avx512" \
    RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=$avx512" \
    cargo +nightly miri test --no-fail-fast -p tc-llvm -p tc-quant --lib -- "${filters[@]}"
fi
exit $status
