"""tc-serve through the real OpenAI Python client.

Usage: openai_client_test.py BASE_URL  (e.g. http://127.0.0.1:8080/v1)

Environment: TC_EXPECT_GREEDY names a JSON file {"message", "max_tokens",
"text"}: the smollm2 example's greedy answer to that chat message, which
the server's greedy chat answer must equal exactly.
Exits non-zero on the first failed check.
"""

import json
import os
import sys

import openai

base = sys.argv[1]
client = openai.OpenAI(base_url=base, api_key="not-needed", max_retries=0, timeout=300)
checks = 0


def check(cond, what):
    global checks
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr)
        sys.exit(1)
    checks += 1


models = client.models.list()
ids = [m.id for m in models.data]
check(len(ids) == 1, f"one model listed: {ids}")
model = ids[0]

# Chat, not streamed, greedy.
msgs = [{"role": "user", "content": "What is the capital of France?"}]
r = client.chat.completions.create(model=model, messages=msgs, max_tokens=32, temperature=0)
check(r.object == "chat.completion", "chat object")
check(r.id.startswith("chatcmpl-"), "chat id")
c = r.choices[0]
check(c.message.role == "assistant", "assistant role")
check(c.finish_reason in ("stop", "length"), f"finish_reason {c.finish_reason}")
check(r.usage.prompt_tokens == 37, f"prompt tokens {r.usage.prompt_tokens}")
check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "usage total")
answer = c.message.content
check("Paris" in answer, f"answer {answer!r}")

expect = os.environ.get("TC_EXPECT_GREEDY")
if expect:
    with open(expect) as f:
        e = json.load(f)
    g = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": e["message"]}],
        max_tokens=e["max_tokens"], temperature=0)
    check(g.choices[0].message.content == e["text"],
          f"greedy text {g.choices[0].message.content!r} != the example's {e['text']!r}")

# Chat, streamed: the chunks add up to the same answer; usage at the end.
stream = client.chat.completions.create(
    model=model, messages=msgs, max_tokens=32, temperature=0, stream=True,
    stream_options={"include_usage": True})
parts, finish, usage, roles = [], None, None, []
for chunk in stream:
    check(chunk.object == "chat.completion.chunk", "chunk object")
    if chunk.usage is not None:
        usage = chunk.usage
    for ch in chunk.choices:
        if ch.delta.role:
            roles.append(ch.delta.role)
        if ch.delta.content:
            parts.append(ch.delta.content)
        if ch.finish_reason:
            finish = ch.finish_reason
check("".join(parts) == answer, f"streamed {''.join(parts)!r} != {answer!r}")
check(roles == ["assistant"], f"roles {roles}")
check(finish == c.finish_reason, f"stream finish {finish}")
check(usage is not None and usage.completion_tokens == r.usage.completion_tokens, "stream usage")

# max_tokens: a length finish with exactly that many tokens.
r = client.chat.completions.create(model=model, messages=msgs, max_tokens=3, temperature=0)
check(r.choices[0].finish_reason == "length", "max_tokens finish")
check(r.usage.completion_tokens == 3, f"completion tokens {r.usage.completion_tokens}")

# Completions, not streamed and streamed.
prompt = "1, 2, 3, 4, 5, 6, 7, 8,"
r = client.completions.create(model=model, prompt=prompt, max_tokens=12, temperature=0)
check(r.object == "text_completion", "completion object")
text = r.choices[0].text
check(len(text) > 0, "completion text")
stream = client.completions.create(model=model, prompt=prompt, max_tokens=12, temperature=0, stream=True)
check("".join(ch.choices[0].text for ch in stream if ch.choices) == text, "streamed completion")

# stop: the text ends before the stop sequence.
r = client.completions.create(model=model, prompt=prompt, max_tokens=12, temperature=0, stop=["10"])
check(r.choices[0].finish_reason == "stop", f"stop finish {r.choices[0].finish_reason}")
check(r.choices[0].text == text[: text.index("10")], f"stop text {r.choices[0].text!r}")

# seed: the same request and seed give the same sampled text.
kw = dict(model=model, messages=[{"role": "user", "content": "Tell me a short story."}],
          max_tokens=24, temperature=0.9, top_p=0.95, seed=1234)
a = client.chat.completions.create(**kw).choices[0].message.content
b = client.chat.completions.create(**kw).choices[0].message.content
check(a == b, f"seeded texts differ: {a!r} / {b!r}")

# Errors: the client raises the typed exceptions OpenAI's errors map to.
try:
    client.completions.create(model=model, prompt="word " * 9000, max_tokens=4)
    check(False, "a prompt past the context was accepted")
except openai.BadRequestError as e:
    check(e.status_code == 400, "context error status")
    check(e.code == "context_length_exceeded", f"context error code {e.code}")
try:
    client.chat.completions.create(model="gpt-4o", messages=msgs)
    check(False, "an unknown model was accepted")
except openai.NotFoundError as e:
    check(e.status_code == 404, "unknown model status")
try:
    client.chat.completions.create(model=model, messages=msgs, temperature=5)
    check(False, "temperature 5 was accepted")
except openai.BadRequestError as e:
    check(e.body.get("param") == "temperature" if isinstance(e.body, dict) else True, "error param")

print(f"openai {openai.__version__}: {checks} checks passed")
