#!/usr/bin/env python3
"""Interleaved A/B of tc configurations on the MiniLM peer workloads.

    python3 scripts/peer-ab.py ROUNDS REPS THREADS 'label:[ENV=VAL ...] BINARY' ...

Each configuration is a label, a colon, optional environment assignments
and a binary that prints `examples/peer_bench.rs`'s JSON lines (it gets
REPS as its argument and RAYON_NUM_THREADS=THREADS). Every round runs all
configurations, the starting one rotating, so that a host whose speed
drifts from minute to minute (benches/README.md) affects them alike.
Prints per workload the minimum and the median of the per-run medians.

Example (the row block, measured in one run):

    cargo build --release --example peer_bench
    python3 scripts/peer-ab.py 4 10 2 \\
      'mc56:TC_MM_MC=56 target/release/examples/peer_bench' \\
      'mc252:target/release/examples/peer_bench'
"""
import json
import os
import shlex
import statistics
import subprocess
import sys


def main():
    rounds, reps, threads = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    cfgs = sys.argv[4:]
    res = {c: {} for c in cfgs}
    for r in range(rounds):
        k = r % len(cfgs)
        for c in cfgs[k:] + cfgs[:k]:
            parts = shlex.split(c.split(":", 1)[1])
            env = dict(os.environ, RAYON_NUM_THREADS=threads)
            while parts and "=" in parts[0]:
                key, val = parts.pop(0).split("=", 1)
                env[key] = val
            out = subprocess.run(parts + [reps], env=env, capture_output=True,
                                 text=True, check=True).stdout
            for line in out.splitlines():
                j = json.loads(line)
                res[c].setdefault((j["b"], j["s"]), []).append(j["ms"])
    for c in cfgs:
        cells = "  ".join(
            f"{b}x{s}: min {min(v):7.2f} med {statistics.median(v):7.2f}"
            for (b, s), v in res[c].items())
        print(c.split(":")[0].ljust(10), cells)


if __name__ == "__main__":
    main()
