"""Streaming load on an OpenAI-compatible server (tc-serve or llama.cpp's).

Usage: serve_load.py HOST:PORT [--streams 1,4,16,32] [--tokens 128]
                     [--requests-per-stream 2] [--model NAME]

For each concurrency C, C client threads each send `requests-per-stream`
streamed /v1/completions requests back to back (temperature 0,
`max_tokens` = --tokens, `ignore_eos` so every request generates exactly
that many tokens). Reports aggregate generated tokens/s (all tokens over
the wall time of the level), and p50/p99 inter-token latency (the gaps
between a stream's successive token chunks, first token excluded), plus
p50 time to first token. Standard library only.
"""

import argparse
import http.client
import json
import statistics
import threading
import time

PROMPTS = [
    "Write a story about a lighthouse keeper who finds a map.",
    "Explain how a bicycle works, part by part.",
    "Describe a day in the life of a honeybee.",
    "List the steps to bake bread at home, with details.",
    "Tell me about the history of the printing press.",
    "Write a letter to a friend about a trip to the mountains.",
    "Explain why the sky is blue to a ten-year-old.",
    "Describe the water cycle in detail.",
]


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


def one_request(host, port, model, prompt, tokens, out):
    body = {"prompt": prompt, "max_tokens": tokens, "temperature": 0,
            "stream": True, "ignore_eos": True}
    if model:
        body["model"] = model
    conn = http.client.HTTPConnection(host, port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    times = []
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        ch = ev.get("choices") or []
        # A chunk per token (tc-serve and llama.cpp both stream one token
        # per event; an empty text still counts as the token's event).
        if ch and ch[0].get("finish_reason") is None:
            times.append(time.perf_counter())
    conn.close()
    out.append((t0, times))


def level(host, port, model, c, tokens, per_stream):
    results = []
    lock = threading.Lock()
    errors = []

    def worker(i):
        for r in range(per_stream):
            local = []
            try:
                one_request(host, port, model, PROMPTS[(i + r) % len(PROMPTS)] + f" ({i}.{r})", tokens, local)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(str(e))
                return
            with lock:
                results.extend(local)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(c)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(errors[0])
    ntok = sum(len(ts) for _, ts in results)
    gaps = [b - a for _, ts in results for a, b in zip(ts, ts[1:])]
    ttft = [ts[0] - t0r for t0r, ts in results if ts]
    return {
        "streams": c,
        "requests": len(results),
        "tokens": ntok,
        "seconds": wall,
        "tok_s": ntok / wall,
        "itl_p50_ms": 1e3 * pct(gaps, 50),
        "itl_p99_ms": 1e3 * pct(gaps, 99),
        "ttft_p50_ms": 1e3 * pct(ttft, 50),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("--streams", default="1,4,16,32")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--requests-per-stream", type=int, default=2)
    ap.add_argument("--model", default="")
    a = ap.parse_args()
    host, port = a.addr.rsplit(":", 1)
    port = int(port)
    # Warm-up: kernels compiled, caches faulted in.
    level(host, port, a.model, 2, 16, 1)
    rows = []
    print("| streams | tokens/s | vs 1 stream | p50 ITL ms | p99 ITL ms | p50 TTFT ms |")
    print("|---|---|---|---|---|---|")
    for c in [int(x) for x in a.streams.split(",")]:
        r = level(host, port, a.model, c, a.tokens, a.requests_per_stream)
        rows.append(r)
        base = rows[0]["tok_s"]
        print(f"| {c} | {r['tok_s']:.1f} | {r['tok_s'] / base:.2f}x | {r['itl_p50_ms']:.1f} | "
              f"{r['itl_p99_ms']:.1f} | {r['ttft_p50_ms']:.0f} |", flush=True)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
