#!/usr/bin/env python3
"""Helpers for scripts/llm-peer-bench.sh (standard library only).

  llm_peer_table.py weight-bytes FILE.gguf   bytes of weights read per token
  llm_peer_table.py amx-tilecfg-fix MMQ.CPP  patch ggml's AMX tile config load
  llm_peer_table.py table RUN_DIR            the markdown table

RUN_DIR holds what the shell script collected: tc-<numerics>-t<T>-r<R>.log
(the smollm2 example's stderr) and .out (its text), llama-bench-<build>-
<pp|tg>.json, batched-<build>-<kv>-t<T>.jsonl, candle-t<T>.jsonl (the
candle crate's smollm2 binary), membw.txt and meta.txt.
"""
import glob
import json
import os
import re
import statistics
import struct
import sys


def read_gguf_tensors(path):
    """(name, offset) of every tensor, the data section's start, file size."""
    with open(path, "rb") as f:
        data = f.read(16 << 20)  # header, metadata and tensor infos
        size = os.fstat(f.fileno()).st_size
    if data[:4] != b"GGUF":
        raise SystemExit(f"{path}: not a GGUF file")
    pos = 8  # magic, version
    n_tensors, n_kv = struct.unpack_from("<QQ", data, pos)
    pos += 16
    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?",
              10: "Q", 11: "q", 12: "d"}

    def string():
        nonlocal pos
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 8 + n
        return data[pos - n:pos].decode("utf-8", "replace")

    def value(t):
        nonlocal pos
        if t == 8:
            return string()
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, pos)
            pos += 12
            return [value(et) for _ in range(n)]
        (v,) = struct.unpack_from("<" + scalar[t], data, pos)
        pos += struct.calcsize(scalar[t])
        return v

    alignment = 32
    for _ in range(n_kv):
        key = string()
        (t,) = struct.unpack_from("<I", data, pos)
        pos += 4
        v = value(t)
        if key == "general.alignment":
            alignment = v
    tensors = []
    for _ in range(n_tensors):
        name = string()
        (nd,) = struct.unpack_from("<I", data, pos)
        pos += 4 + 8 * nd + 4  # dims, ggml type
        (off,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        tensors.append((name, off))
    start = (pos + alignment - 1) // alignment * alignment
    return tensors, start, size


def weight_bytes(path):
    # Sizes from the gaps between tensor offsets (the last one runs to the end
    # of the file), so no table of ggml block sizes is needed; alignment
    # padding adds at most alignment-1 bytes per tensor.
    tensors, start, size = read_gguf_tensors(path)
    offs = sorted(off for _, off in tensors) + [size - start]
    nbytes = dict(zip(sorted(tensors, key=lambda t: t[1]),
                      (b - a for a, b in zip(offs, offs[1:]))))
    by_name = {name: n for (name, _), n in nbytes.items()}
    total = sum(by_name.values())
    # With tied embeddings the output projection reads all of token_embd each
    # token; with a separate output.weight, token_embd costs one row.
    if "output.weight" in by_name:
        total -= by_name.get("token_embd.weight", 0)
    return total


# ggml's AMX matmul (ggml-cpu/amx/mmq.cpp) fills a 64-byte tile config on the
# stack and loads it with _tile_loadconfig. GCC 12's intrinsic is an asm
# statement whose memory operand is a pointer-sized object, so the compiler
# may treat the stores of the rows and column widths as dead and drop them:
# ldtilecfg then loads palette 1 with every tile 0 x 0, and the first
# tileloadd raises #UD (SIGILL). An asm statement naming the whole struct
# as its operand keeps the stores.
AMX_OLD = "    _tile_loadconfig(&tc);\n"
AMX_NEW = ("    // The whole config as the operand: GCC 12's _tile_loadconfig declares\n"
           "    // an 8-byte read, and the stores above were dropped as dead.\n"
           '    __asm__ __volatile__("ldtilecfg %0" :: "m"(tc));\n')


def amx_tilecfg_fix(path):
    text = open(path).read()
    if AMX_NEW in text:
        print("already patched")
    elif text.count(AMX_OLD) == 1:
        open(path, "w").write(text.replace(AMX_OLD, AMX_NEW))
        print("patched")
    else:
        print("pattern not found")


def stats(xs):
    if not xs:
        return "—"
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}–{max(xs):.1f})"


TC_LINE = re.compile(
    r"prefill: (\d+) tokens in [\d.]+ s \(([\d.]+) tokens/s\); "
    r"decode: (\d+) tokens in [\d.]+ s \(([\d.]+) tokens/s\)")
TC_JIT = re.compile(r"generic compiles \((\d+) ms\)")


def table(run):
    meta = dict(l.rstrip("\n").split("=", 1)
                for l in open(os.path.join(run, "meta.txt")) if "=" in l)
    bw = {}
    for line in open(os.path.join(run, "membw.txt")):
        kind, threads, gbs = line.split()
        bw[(kind, int(threads))] = float(gbs)
    wbytes = int(meta["weight_bytes"])
    rows, notes, jit_ms = [], [], []

    # tc: one process per round; the example's own stderr line.
    for numerics in ("fast", "exact"):
        for t in (1, 2):
            pp, tg, counts, jit = [], [], set(), []
            for log in sorted(glob.glob(f"{run}/tc-{numerics}-t{t}-r*.log")):
                text = open(log).read()
                m = TC_LINE.search(text)
                if not m:
                    raise SystemExit(f"{log}: no statistics line:\n{text}")
                counts.add((int(m[1]), int(m[3])))
                pp.append(float(m[2]))
                tg.append(float(m[4]))
                j = TC_JIT.search(text)
                if j:
                    jit.append(int(j[1]))
            if counts != {(128, 64)}:
                notes.append(f"tc {numerics} t={t}: token counts (prefill, decode) "
                             f"were {sorted(counts)}, not (128, 64)")
            if jit:
                jit_ms.append(f"{numerics} t={t} {statistics.median(jit):.0f} ms")
            rows.append(("tc", f"numerics {numerics}", "f32", t, "smollm2 example",
                         stats(pp), stats(tg), len(pp)))

    def failed(path):
        if not os.path.exists(path + ".failed"):
            return None
        rc = int(open(path + ".failed").read())
        why = f"failed, exit {rc}" + (" (SIGILL)" if rc in (132, -4) else "")
        last = [l for l in open(path + ".err").read().splitlines() if l.strip()][-1:]
        notes.append(f"`{os.path.basename(path)}`: {why}" + (f"; last line: `{last[0]}`" if last else ""))
        return why

    if jit_ms:
        # Each tc round is a fresh process, so its first forward pass compiles
        # kernels; llama-bench and llama-batched-bench time after a warm-up.
        notes.append("tc's prefill time includes its JIT compiles (median): " + ", ".join(jit_ms))

    # candle: one process per thread count, one JSON line per timed round
    # and a last one with the generated ids and text.
    candle_text = {}
    for t in (1, 2):
        path = f"{run}/candle-t{t}.jsonl"
        if not os.path.exists(path):
            continue
        why = failed(path)
        if why:
            rows.append(("candle", "quantized_llama", "f32", t, "candle smollm2 binary", why, why, 0))
            continue
        recs = [json.loads(l) for l in open(path) if l.startswith("{")]
        rounds = [r for r in recs if "round" in r]
        counts = {(r["prefill_tokens"], r["decode_tokens"]) for r in rounds}
        if counts != {(128, 64)}:
            notes.append(f"candle t={t}: token counts (prefill, decode) were "
                         f"{sorted(counts)}, not (128, 64)")
        candle_text.update((t, r["text"]) for r in recs if "text" in r)
        rows.append(("candle", "quantized_llama", "f32", t, "candle smollm2 binary",
                     stats([r["prefill_tok_s"] for r in rounds]),
                     stats([r["decode_tok_s"] for r in rounds]), len(rounds)))
    if candle_text:
        # Greedy text against tc's (its first round at 1 thread): tc's
        # example ends its text with one newline of its own.
        text = candle_text.get(1, next(iter(candle_text.values())))
        if len(set(candle_text.values())) > 1:
            notes.append("candle's greedy text differs between 1 and 2 threads")
        for numerics in ("exact", "fast"):
            out = f"{run}/tc-{numerics}-t1-r1.out"
            if not os.path.exists(out):
                continue
            ref = open(out).read()
            ref = ref[:-1] if ref.endswith("\n") else ref
            if text == ref:
                notes.append(f"candle's greedy text (64 tokens) is identical to tc {numerics}'s")
            else:
                same = len(os.path.commonprefix([text, ref]))
                notes.append(f"candle's greedy text (64 tokens) and tc {numerics}'s agree on "
                             f"their first {same} characters ({len(text)} and {len(ref)} in all)")
        notes.append("candle's greedy text begins: `" +
                     text[:100].replace("\n", " ").replace("`", "'") + "…`")

    builds = [("amx", "native, AMX on" if meta.get("amx") == "yes" else "native")]
    if meta.get("amx") == "yes":
        builds.append(("noamx", "native, AMX off"))
    for build, label in builds:
        # llama-bench: pp128 from an empty context, tg64 after a 128-token
        # (untimed) depth, as tc decodes after its prompt.
        cell = {}
        for kind in ("pp", "tg"):
            path = f"{run}/llama-bench-{build}-{kind}.json"
            why = failed(path)
            for t in (1, 2):
                cell[(kind, t)] = (why, 0)
            if why:
                continue
            for r in json.load(open(path)):
                cell[(kind, r["n_threads"])] = (stats(r["samples_ts"]), len(r["samples_ts"]))
                meta.setdefault("llama_build", f'{r["build_commit"]} ({r["build_number"]})')
        for t in (1, 2):
            rows.append(("llama.cpp", label, "f16", t, "llama-bench", cell[("pp", t)][0],
                         cell[("tg", t)][0], max(cell[("pp", t)][1], cell[("tg", t)][1])))
        # llama-batched-bench: takes -ctk f32 (llama-bench does not), one
        # pp128 + tg64 per listed prompt, decode right after the prompt.
        for kv in ("f16", "f32"):
            for t in (1, 2):
                path = f"{run}/batched-{build}-{kv}-t{t}.jsonl"
                why = failed(path)
                if why:
                    rows.append(("llama.cpp", label, kv, t, "llama-batched-bench", why, why, 0))
                    continue
                recs = [json.loads(l) for f in (path, path + ".err") for l in open(f)
                        if l.startswith('{"n_kv_max"')]
                rows.append(("llama.cpp", label, kv, t, "llama-batched-bench",
                             stats([r["speed_pp"] for r in recs]),
                             stats([r["speed_tg"] for r in recs]), len(recs)))
    if "amx_probe" in meta:
        notes.append(f"AMX probe (benches/peers/amxprobe.c, outside llama.cpp): {meta['amx_probe']}")
    if meta.get("amx") != "yes":
        notes.append("no amx_int8 in /proc/cpuinfo: the AMX-off llama.cpp build is skipped")

    for t in (1, 2):
        limit = bw[("dram", t)] * 1e9 / wbytes
        rows.append(("DRAM limit", f"{bw[('dram', t)]:.1f} GB/s ÷ {wbytes / 1e6:.1f} MB",
                     "", t, meta["membw_what"], "", f"≤ {limit:.1f}", ""))
    for t in (1, 2):
        if ("cache", t) in bw:
            limit = bw[("cache", t)] * 1e9 / wbytes
            rows.append(("cache limit", f"{bw[('cache', t)]:.1f} GB/s ÷ {wbytes / 1e6:.1f} MB",
                         "", t, meta["membw_cache_what"], "", f"≤ {limit:.1f}", ""))

    peers = "llama.cpp and candle" if "candle" in meta else "llama.cpp"
    print(f"## SmolLM2-135M-Instruct Q4_1: tc against {peers}, {meta['date']}")
    print()
    print(f"- CPU: {meta['cpu']} ({meta['ncpu']} logical CPUs, L3 {meta['l3']}); "
          f"flags: {meta['flags']}")
    print(f"- model: `{meta['model']}` ({meta['model_bytes']} bytes; "
          f"{wbytes / 1e6:.1f} MB of tensors read per token)")
    src = meta.get("llama_src") or f"vendored in llama-cpp-python {meta['llama_cpp_python']}"
    print(f"- llama.cpp: {src} (build {meta.get('llama_build', '?')}), "
          f"-DGGML_NATIVE=ON Release, default flash-attention and batch sizes")
    if "candle" in meta:
        print(f"- candle: candle-transformers {meta['candle']} quantized_llama "
              f"(`benches/peers/candle`, binary smollm2), -C target-cpu=native, CPU: "
              f"Q4_1 matmuls on Q8_1-quantized activations through candle's portable "
              f"(compiler-vectorized) dot product, f32 KV cache; on tc's prompt ids; "
              f"threads from RAYON_NUM_THREADS; one warm-up round, then the timed "
              f"rounds in one process")
    print(f"- prompt: 128 tokens (the GGUF's tokenizer adds no BOS), decode: 64 tokens after it, greedy; "
          f"tokens/s as median (min–max) over rounds")
    print()
    print("| engine | build / numerics | KV cache | threads | tool | prefill 128 tok/s | decode 64 tok/s | rounds |")
    print("|---|---|---|---:|---|---:|---:|---:|")
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")
    if notes:
        print()
        for n in notes:
            print(f"- {n}")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "weight-bytes":
        print(weight_bytes(sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == "amx-tilecfg-fix":
        amx_tilecfg_fix(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "table":
        table(sys.argv[2])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
