#!/usr/bin/env python3
"""The tables of scripts/peer-bench.sh from its results.jsonl: per row
(workload, threads) and system, the median and [min–max] over rounds of
each process's median time, ONNX Runtime's fastest fp32 configuration,
tc's speed ÷ the best peer's per round (> 1: tc is faster) and whether a
lead holds (only when the two systems' per-round ranges do not overlap).

    python3 benches/peers/peer_table.py RESULTS.jsonl [EXPORT.json]

RESULTS holds one JSON line per process and workload, and a line
{"round": R} before each round's lines. EXPORT is minilm_export.py's
settings and int8 accuracy, printed under the MiniLM table. Lines of
system "tc-base" (a baseline build of tc, scripts/peer-bench.sh's TC_BASE)
are no peer: they get a table of their own, tc against the baseline per
round. Lines of systems "tc-int8" and "tc-bf16" (tc's int8 and BF16
MiniLM, `peer_bench minilm-int8` and `minilm-bf16`) get one each too:
against ONNX Runtime's best fp32 configuration and its int8 model, per
round.
"""
import json
import statistics
import sys

NAMES = {"ort": "hand-built", "ort-fused": "hand-built, optimized", "ort-std": "standard",
         "ort-std-opt": "standard, optimized", "pytorch": "PyTorch", "candle": "candle",
         "ort-int8": "ONNX Runtime int8"}
ORT_FP32 = ("ort", "ort-fused", "ort-std", "ort-std-opt")
TITLES = {"minilm": ("MiniLM", "embedding"), "gpt2-block": ("GPT-2-small block", "output")}


def load(path):
    rows, rnd = [], 0
    for line in open(path):
        r = json.loads(line)
        if "round" in r and "system" not in r:
            rnd = r["round"]
            continue
        r.setdefault("model", "minilm")  # candle's lines name no model
        r["round"] = rnd
        rows.append(r)
    return rows


def cell(v):
    """median [min–max] of per-round times."""
    if not v:
        return "-"
    return f"{statistics.median(v):.2f} [{min(v):.2f}–{max(v):.2f}]"


def lead(tc, other, name):
    """The per-round ratio other ÷ tc (> 1: tc is faster) with its range,
    and which side leads: only one whose per-round range lies wholly below
    the other's."""
    rr = sorted(set(tc) & set(other))
    ratios = [other[r] / tc[r] for r in rr]
    ratio = f"{statistics.median(ratios):.2f}× [{min(ratios):.2f}–{max(ratios):.2f}]"
    if max(tc.values()) < min(other.values()):
        return ratio, "tc leads"
    if max(other.values()) < min(tc.values()):
        return ratio, f"{name} leads"
    return ratio, "overlap: no lead"


def against_base(title, by):
    """tc against the baseline build, per row, when the run has one."""
    rows = [k for k in sorted(by, key=lambda k: (k[0] * k[1], k[2]))
            if by[k].get("tc") and by[k].get("tc-base")]
    if not rows:
        return
    print(f"\n| {title}: tc against the baseline build (TC_BASE), ms | threads | tc | "
          "tc-base | tc ÷ tc-base speed, per round | lead (ranges) |")
    print("|---|---|---|---|---|---|")
    for k in rows:
        tc, base = by[k]["tc"], by[k]["tc-base"]
        ratio, verdict = lead(tc, base, "tc-base")
        print(f"| {k[0]} x {k[1]} tokens | {k[2]} | {cell(list(tc.values()))} | "
              f"{cell(list(base.values()))} | {ratio} | {verdict} |")


def reduced_table(title, by, system, label):
    """tc's reduced-precision model (`system`, e.g. "tc-int8") against ONNX
    Runtime's best fp32 configuration (per row) and its int8 model, when
    the run has it."""
    rows = [k for k in sorted(by, key=lambda k: (k[0] * k[1], k[2])) if by[k].get(system)]
    if not rows:
        return
    print(f"\n| {title} {label}, ms | threads | tc {label} | tc fp32 | ONNX Runtime (best fp32) | "
          f"ONNX Runtime int8 | tc {label} ÷ ONNX Runtime fp32, per round | lead | "
          f"tc {label} ÷ ONNX Runtime int8, per round | lead |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for k in rows:
        sy = by[k]
        med = {s: statistics.median(v.values()) for s, v in sy.items()}
        low = sy[system]
        best = min((s for s in ORT_FP32 if s in sy), key=med.get, default=None)
        cells = [cell(list(low.values())), cell(list(sy.get("tc", {}).values()))]
        cells.append(f"{cell(list(sy[best].values()))} ({NAMES[best]})" if best else "-")
        cells.append(cell(list(sy.get("ort-int8", {}).values())))
        for peer in (best, "ort-int8"):
            if peer and sy.get(peer):
                ratio, verdict = lead(low, sy[peer], "ONNX Runtime")
                cells += [ratio, verdict.replace("tc leads", f"tc {label} leads")]
            else:
                cells += ["-", "-"]
        print(f"| {k[0]} x {k[1]} tokens | {k[2]} | " + " | ".join(cells) + " |")


def main():
    rows = load(sys.argv[1])
    export = json.load(open(sys.argv[2])) if len(sys.argv) > 2 else None
    for model in ("minilm", "gpt2-block"):
        by = {}  # (b, s, threads) -> system -> {round: ms}
        emb = {}
        for r in rows:
            if r["model"] != model:
                continue
            k = (r["b"], r["s"], r["threads"])
            by.setdefault(k, {}).setdefault(r["system"], {})[r["round"]] = r["ms"]
            emb.setdefault((k, r["system"]), r["emb"])
        if not by:
            continue
        title, what = TITLES[model]
        if model == "gpt2-block":  # its ONNX model is a TorchScript export
            NAMES.update({"ort": "export", "ort-fused": "export, optimized"})
        systems = {s for v in by.values() for s in v}
        others = [p for p in ("pytorch", "candle") if p in systems]
        int8 = "ort-int8" in systems
        rounds = len({rd for v in by.values() for t in v.values() for rd in t})
        head = [f"{title}, ms per batch, median [min–max] of {rounds} rounds", "threads", "tc",
                "ONNX Runtime (best fp32)"] + [NAMES[p] for p in others]
        head += ["tc ÷ best peer, per round", "lead (ranges)"]
        head += ["ONNX Runtime int8"] if int8 else []
        head += [f"max \\|{what} diff\\| to tc"]
        print("\n| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        detail = []
        for k in sorted(by, key=lambda k: (k[0] * k[1], k[2])):
            sy = by[k]
            tc = sy.get("tc", {})
            med = {s: statistics.median(v.values()) for s, v in sy.items()}
            orts = [s for s in ORT_FP32 if s in sy]
            ort_best = min(orts, key=med.get, default=None)
            fp32 = [s for s in sy if s not in ("tc", "tc-base", "tc-int8", "tc-bf16", "ort-int8")]
            best = min(fp32, key=med.get, default=None)
            if best and tc:
                name = "ONNX Runtime" if best in ORT_FP32 else NAMES[best]
                ratio, verdict = lead(tc, sy[best], name)
                ratio += f" vs {name}"
            else:
                ratio, verdict = "-", "-"
            diff = max((abs(a - b) for s in fp32 if (k, s) in emb and (k, "tc") in emb
                        for a, b in zip(emb[(k, "tc")], emb[(k, s)])), default=float("nan"))
            ob = f"{cell(list(sy[ort_best].values()))} ({NAMES[ort_best]})" if ort_best else "-"
            cells = [cell(list(tc.values())), ob] + [cell(list(sy.get(p, {}).values())) for p in others]
            cells += [ratio, verdict]
            if int8:
                cells.append(cell(list(sy.get("ort-int8", {}).values())))
            print(f"| {k[0]} x {k[1]} tokens | {k[2]} | " + " | ".join(cells) + f" | {diff:.1e} |")
            detail.append((k, [cell(list(sy[s].values())) for s in orts], orts))
        # Every ONNX Runtime configuration, so the choice of the best is seen.
        orts = [s for s in ORT_FP32 if s in systems]
        print(f"\n| {title}: ONNX Runtime fp32 configurations, ms | threads | "
              + " | ".join(NAMES[s] for s in orts) + " |")
        print("|---|---|" + "---|" * len(orts))
        for k, cells, have in detail:
            c = dict(zip(have, cells))
            print(f"| {k[0]} x {k[1]} tokens | {k[2]} | " + " | ".join(c.get(s, "-") for s in orts) + " |")
        against_base(title, by)
        reduced_table(title, by, "tc-int8", "int8")
        reduced_table(title, by, "tc-bf16", "bf16")
        if model == "minilm" and export and int8:
            cos = export["int8"]["cosine_to_fp32_export"]
            print("\nONNX Runtime int8 (" + export["int8"]["call"] + "): cosine to the fp32 "
                  "export's embeddings, min / mean: "
                  + "; ".join(f"{w} {v['min']:.4f} / {v['mean']:.4f}" for w, v in cos.items()))

if __name__ == "__main__":
    main()
