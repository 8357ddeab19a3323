#!/usr/bin/env python3
"""The table of scripts/gpt2-bench.sh from its RESULT lines (one per system,
thread count and round, in run order).

    python3 benches/peers/gpt2_decode_table.py RESULTS

Tokens/s are the median [min–max] over rounds. "tc ÷ peer, per round" pairs
each round's tc run with the same round's peer run (the n-th line of each)
and gives the median ratio and its range; a lead needs the two systems'
per-round ranges not to overlap, as in benches/peers/peer_table.py. The
ONNX Runtime column is the faster (by median) of the plain export and the
transformer optimizer's fused one, per thread count, named below the table.
"""
import statistics
import sys

NAMES = {"ort": "ONNX Runtime", "pytorch": "PyTorch eager"}
FORMS = ("ort", "ort-fused")


def main():
    rows = [dict(kv.split("=", 1) for kv in l.split()[1:] if "=" in kv)
            for l in open(sys.argv[1]) if l.startswith("RESULT")]

    def vals(system, t, key):
        return [float(r[key]) for r in rows if r["system"] == system and r["threads"] == t]

    def med(system, t, key):
        return statistics.median(vals(system, t, key))

    def rng(v):
        return f"{statistics.median(v):.2f} [{min(v):.2f}–{max(v):.2f}]"

    forms = [f for f in FORMS if any(r["system"] == f for r in rows)]
    best = {t: max((f for f in forms if vals(f, t, "tokens_per_s")),
                   key=lambda f: med(f, t, "tokens_per_s"), default=None)
            for t in ("1", "2")}
    peers = [p for p in ("ort", "pytorch")
             if (p == "ort" and forms) or any(r["system"] == p for r in rows)]

    def peer_sys(p, t):
        return best[t] if p == "ort" else p

    print(f"| GPT-2-small, {rows[0]['tokens']} greedy tokens | threads | tc tokens/s | "
          + " | ".join(f"{NAMES[p]} tokens/s" for p in peers) + " | "
          + " | ".join(f"tc ÷ {NAMES[p]}, per round | lead" for p in peers)
          + " | tc prefill ms | " + " | ".join(f"{NAMES[p]} prefill ms" for p in peers)
          + " | tc first prefill ms | tc warm-up ms | tc kernel compiles |")
    print("|---|---|---|" + "---|" * (4 * len(peers)) + "---|---|---|---|")
    for t in ("1", "2"):
        tc = vals("tc", t, "tokens_per_s")
        cells, ratios = [], []
        for p in peers:
            v = vals(peer_sys(p, t), t, "tokens_per_s")
            cells.append(rng(v))
            r = [a / b for a, b in zip(tc, v)]
            lead = ("tc leads" if min(tc) > max(v) else
                    f"{NAMES[p]} leads" if max(tc) < min(v) else "overlap: no lead")
            ratios.append(f"{statistics.median(r):.2f}× [{min(r):.2f}–{max(r):.2f}] | {lead}")
        comp = max(int(r["compiles"]) for r in rows if r["system"] == "tc")
        print(f"| 8-token prompt | {t} | {rng(tc)} | " + " | ".join(cells) + " | "
              + " | ".join(ratios)
              + f" | {med('tc', t, 'prefill_ms'):.1f} | "
              + " | ".join(f"{med(peer_sys(p, t), t, 'prefill_ms'):.1f}" for p in peers)
              + f" | {med('tc', t, 'cold_prefill_ms'):.1f} | {med('tc', t, 'warmup_ms'):.1f}"
              + f" | {comp} |")
    for t in ("1", "2"):
        got = ", ".join(f"{f} {rng(vals(f, t, 'tokens_per_s'))}" for f in forms
                        if vals(f, t, "tokens_per_s"))
        if got:
            print(f"\nONNX Runtime at {t} thread(s), tokens/s: {got} "
                  f"(the table's column: {best[t]})")


main()
