"""Does batching change a server's greedy texts? (tc-serve or llama.cpp's.)

Usage: serve_consistency.py HOST:PORT [STREAMS]

Sends STREAMS (default 16) non-streamed /v1/completions requests one at a
time (temperature 0, 48 tokens, `ignore_eos`), then the same requests all
at once, and reports how many concurrent texts equal their solo text.
Standard library only.
"""

import http.client
import json
import sys
import threading

# The load test's prompts (scripts/serve_load.py, beside this file).
from serve_load import PROMPTS as BASE


def complete(host, port, prompt):
    conn = http.client.HTTPConnection(host, port, timeout=600)
    body = {"prompt": prompt, "max_tokens": 48, "temperature": 0, "ignore_eos": True}
    conn.request("POST", "/v1/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    return json.loads(resp.read())["choices"][0]["text"]


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    port = int(port)
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    prompts = [BASE[i % len(BASE)] + f" ({i})" for i in range(n)]
    solo = [complete(host, port, p) for p in prompts]
    together = [None] * n

    def worker(i):
        together[i] = complete(host, port, prompts[i])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    differ = [i for i in range(n) if together[i] != solo[i]]
    print(f"{n} concurrent streams: {n - len(differ)} texts equal their solo text, "
          f"{len(differ)} differ {differ}")
    for i in differ[:3]:
        print(f"  {i} solo:     {solo[i][:100]!r}")
        print(f"  {i} together: {together[i][:100]!r}")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
