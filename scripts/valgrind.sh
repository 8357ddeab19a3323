#!/usr/bin/env bash
# Memcheck over the JIT's differential tests (issue #10): every test of the
# named tc-llvm test files (modules of its `all` test binary) runs alone
# under valgrind, which sees the JIT-compiled kernels' loads and stores
# (ASan cannot: the kernels are not instrumented). Reports each test's verdict and fails on any memcheck
# error.
#
#   scripts/valgrind.sh                      # differential + soundness + edge_values
#   scripts/valgrind.sh differential         # one file
#   TC_VG_TIMEOUT=3600 scripts/valgrind.sh   # per-test limit in seconds (default 2400)
#
# Slow: LLVM compiles ~30–50× slower under valgrind; the default set takes
# hours of CPU on 2 cores. Results go to target/valgrind/<file>.<test>.log.
set -uo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind.sh: install valgrind (apt-get install -y valgrind)" >&2; exit 2; }
bins=("$@")
[ ${#bins[@]} -eq 0 ] && bins=(differential soundness edge_values)
limit=${TC_VG_TIMEOUT:-2400}
out=target/valgrind
mkdir -p "$out"
failed=0
exe=$(cargo test -p tc-llvm --test all --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["kind"]==["test"]: print(m["executable"])' | tail -1)
[ -x "$exe" ] || { echo "valgrind.sh: no tc-llvm test binary" >&2; exit 2; }
for b in "${bins[@]}"; do
  tests=$("$exe" --list 2>/dev/null | sed -n "s/^\($b::.*\): test\$/\1/p")
  [ -n "$tests" ] || { echo "valgrind.sh: no tests in $b" >&2; exit 2; }
  for t in $tests; do
    log="$out/${t//::/.}.log"
    start=$(date +%s)
    # --smc-check: the JIT writes code at run time; leaks are not errors here
    # (LLVM and Z3 keep global state until exit).
    timeout "$limit" valgrind --error-exitcode=99 --smc-check=all-non-file \
      --leak-check=no --track-origins=no --log-file="$log" \
      "$exe" --exact "$t" --test-threads 1 >/dev/null 2>&1
    rc=$?
    errs=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$log" | tail -1)
    secs=$(( $(date +%s) - start ))
    case $rc in
      0) verdict="ok" ;;
      99) verdict="MEMCHECK ERRORS"; failed=1 ;;
      124) verdict="timed out (${limit}s)"; failed=1 ;;
      *) verdict="exit $rc"; failed=1 ;;
    esac
    printf '%-14s %-70s %-22s errors=%-4s %5ss\n' "$b" "$t" "$verdict" "${errs:-?}" "$secs"
  done
done
exit $failed
