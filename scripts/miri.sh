#!/usr/bin/env bash
# Miri over tc-runtime's unit and integration tests (tensors, the reference
# interpreter, casts, the contract, the pool, safetensors I/O): every
# `unsafe` block they reach is checked for undefined behaviour (out-of-bounds
# or misaligned accesses, invalid values, aliasing violations, leaks, data
# races). The JIT (tc-llvm) runs machine code Miri cannot interpret, so it
# is not covered here.
#
# Under `cfg(miri)` the pool allocates plain `Vec`s (no madvise) and the
# exhaustive sweeps run on a sample; see the `miri` notes in the tests.
#
# Usage: scripts/miri.sh [extra `cargo test` arguments: a target such as
# `--test all` (the integration tests) or `--lib` (default: both), a
# test-name filter such as `casts::` (one file of tests/)]
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo +nightly miri --version >/dev/null 2>&1; then
  echo "installing Miri: rustup component add miri rust-src --toolchain nightly" >&2
  rustup component add miri rust-src --toolchain nightly
fi

# A target dir of its own: Miri's MIR-only artefacts must not evict the
# normal build's.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/miri}"
# Isolation off: the safetensors tests write and read a temp file.
# No extra rounding error: Miri perturbs the results of `powi` and of the
# libm functions (exp, ln, tanh, ...) by a few ulps to model hosts whose
# libm differs; the tests pin the interpreter's values on this host (and use
# `powi` for exact powers of two), so that perturbation would fail them
# without any undefined behaviour. NaN payloads stay randomised.
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation -Zmiri-no-extra-rounding-error}"

targets=(--lib --tests)
for a in "$@"; do
  case "$a" in --lib | --tests | --test | --test=*) targets=() ;; esac
done
exec cargo +nightly miri test --no-fail-fast -p tc-runtime "${targets[@]}" "$@"
