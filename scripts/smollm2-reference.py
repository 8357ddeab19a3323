#!/usr/bin/env python3
"""Independent numpy reference for SmolLM2-135M-Instruct (Q4_1 GGUF).

tc runs this model from the GGUF that scripts/fetch-smollm2.sh publishes in
models/smollm2/. To check it, this script re-implements the same Llama
forward pass in plain numpy, sharing no code with tc: weights are read with
llama.cpp's gguf-py (GGUFReader) and dequantized to f32 by
gguf.quants.dequantize, and the prompts are tokenized by transformers'
GGUF tokenizer loader. All arithmetic is float32 (activations, KV cache,
softmax), so tc's f32 path should agree to float-rounding noise.

Outputs, in tests/fixtures/smollm2/:
  reference.json         prompts, their ids, 32 greedy tokens each with the
                         top-5 logits of every step
  logits_<i>.f32         the 49152 logits (little-endian f32) of the last
                         prompt position after prefill, for prompt i
  tokenizer_corpus.json  texts and their ids, for tc's tokenizer

RoPE layout. llama.cpp's converter permutes the rows of attn_q/attn_k
within each head so that rotating adjacent pairs (2i, 2i+1), llama.cpp's
LLAMA_ROPE_TYPE_NORM, equals Hugging Face's rotate-half on the original
weights; `check_rope_layout` undoes that permutation and runs the halves
layout on the un-permuted weights for prompt 0, and the two agree (max
|logit difference| is printed and stored, of the order of 1e-5 — float
summation order only), so the adjacent-pair layout on the GGUF weights is
the right one.

Run (about half a minute on two cores; deterministic: single-threaded BLAS):

    scripts/fetch-smollm2.sh
    "$(scripts/py-ref-env.sh)" scripts/smollm2-reference.py
"""
import os

# One BLAS thread: a multi-threaded BLAS may split reductions differently
# from run to run, and the fixture should be reproducible bit for bit on a
# given machine. Must be set before numpy loads its BLAS.
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"
# Nothing here may reach the network; transformers would otherwise try the
# Hugging Face hub for files that a local GGUF already provides.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_VERBOSITY"] = "error"

import hashlib
import json
import sys
import time
from importlib.metadata import version

import numpy as np
import jinja2
import jinja2.sandbox
from gguf import GGUFReader
from gguf.quants import dequantize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_DIR = os.path.join(ROOT, "models", "smollm2")
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_PATH = os.path.join(MODEL_DIR, MODEL_FILE)
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "smollm2")
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
STEPS = 32
TOPK = 5

USER_MESSAGE = "What is the capital of France?"
RAW_PROMPTS = [
    "The quick brown fox jumps over the lazy dog. It was the year 1999 and",
    "def fibonacci(n):\n    ",
]

TOKENIZER_TEXTS = [
    # digits: SmolLM2 has no multi-digit tokens, every digit stands alone
    "1234567890",
    "in 2024, 3.14159",
    "Call +1 (555) 123-4567 or 555.987.6543 today",
    "0.5e-10 and 1,000,000",
    # unicode
    "café naïve résumé",
    "日本語のテキスト",
    "Hugging Face 🤗 loves emoji 🚀🔥",
    "Привет, мир!",
    "مرحبا بالعالم",
    "Ünïcödé ß ø å",
    # whitespace runs
    "a  b   c",
    "tab\there\t\tdouble",
    "\n\n\n",
    "  leading spaces",
    "trailing spaces   ",
    " ",
    "line1\nline2\r\nline3",
    # code
    "def fibonacci(n):\n    if n < 2:\n        return n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "fn main() { println!(\"{}\", x); }",
    "<div class=\"x\">&amp;</div>",
    # punctuation
    "Hello, world!",
    "Wait... what?!? (yes) [no] {maybe}",
    "email@example.com https://example.org/path?q=1&r=2",
    "--- *** ___ ### @@@",
    # contractions
    "don't",
    "I'll be there, won't you? She's here; they've gone; we'd go; I'm ok",
    "DON'T SHOUT",
    # chat special tokens
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>assistant\nThe capital is Paris.<|im_end|>\n<|endoftext|>",
    # plain prose
    "The quick brown fox jumps over the lazy dog.",
    "",
]


# ---------------------------------------------------------------- weights

def load_model(path):
    """Read hparams and every tensor, dequantized to f32.

    gguf-py's dequantize returns, for a tensor with GGUF dims [ne0=K, ne1=N],
    the row-major matrix W[N, K]; the layers below compute y = x @ W.T.
    """
    r = GGUFReader(path)
    f = r.fields

    def meta(key):
        return f[key].contents()

    hp = {
        "n_layer": int(meta("llama.block_count")),
        "n_embd": int(meta("llama.embedding_length")),
        "n_ff": int(meta("llama.feed_forward_length")),
        "n_head": int(meta("llama.attention.head_count")),
        "n_head_kv": int(meta("llama.attention.head_count_kv")),
        "rope_base": float(meta("llama.rope.freq_base")),
        # stored as f32 in the file; keep that exact value
        "eps": np.float32(meta("llama.attention.layer_norm_rms_epsilon")),
        "n_vocab": len(f["tokenizer.ggml.tokens"].data),
    }
    hp["head_dim"] = hp["n_embd"] // hp["n_head"]
    w = {}
    for t in r.tensors:
        a = dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32, copy=False)
        w[t.name] = np.ascontiguousarray(a.reshape([int(d) for d in reversed(t.shape)]))
    assert "output.weight" not in w, "expected a tied output head"
    assert w["token_embd.weight"].shape == (hp["n_vocab"], hp["n_embd"])
    assert hp["head_dim"] == 64 and hp["n_layer"] == 30
    meta_out = {
        "chat_template": meta("tokenizer.chat_template"),
        "add_bos_token": bool(meta("tokenizer.ggml.add_bos_token")) if "tokenizer.ggml.add_bos_token" in f else None,
        "bos_token_id": int(meta("tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(meta("tokenizer.ggml.eos_token_id")),
        "pre": meta("tokenizer.ggml.pre"),
        "tokens": f["tokenizer.ggml.tokens"].contents(),
        "merges": f["tokenizer.ggml.merges"].contents(),
        "token_type": f["tokenizer.ggml.token_type"].contents(),
    }
    return hp, w, meta_out


# ---------------------------------------------------------------- model

def rope_tables(hp, positions):
    # Angles in float64, then cast: tc builds its tables the same way, so the
    # comparison is not dominated by how cos/sin of large angles are rounded.
    d = hp["head_dim"]
    inv_freq = 1.0 / (hp["rope_base"] ** (np.arange(0, d, 2, dtype=np.float64) / d))
    ang = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def rope_pairs(x, cos, sin):
    """Adjacent-pair rotation (LLAMA_ROPE_TYPE_NORM). x: [T, H, D]."""
    x0 = x[..., 0::2]
    x1 = x[..., 1::2]
    c = cos[:, None, :]
    s = sin[:, None, :]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def rope_halves(x, cos, sin):
    """Rotate-half (NeoX / Hugging Face) layout, for the layout check only."""
    h = x.shape[-1] // 2
    x0 = x[..., :h]
    x1 = x[..., h:]
    c = cos[:, None, :]
    s = sin[:, None, :]
    return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)


def rmsnorm(x, w, eps):
    ms = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
    return x * (np.float32(1.0) / np.sqrt(ms + eps)) * w


def softmax(s):
    s = s - s.max(axis=-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=-1, keepdims=True, dtype=np.float32)


class Model:
    def __init__(self, hp, w, rope=rope_pairs, qk_override=None):
        self.hp, self.w, self.rope = hp, w, rope
        # For the layout check: alternative (un-permuted) q/k weights.
        self.qk = qk_override or {}

    def W(self, name):
        return self.qk.get(name, self.w[name])

    def new_cache(self):
        return [[None, None] for _ in range(self.hp["n_layer"])]

    def forward(self, ids, pos0, cache, probe=None):
        """Logits of the last position; appends this chunk's k/v to cache.

        A prompt is one chunk (causal mask inside it); each generated token
        is a chunk of one that attends to the whole cache.
        """
        hp = self.hp
        T = len(ids)
        H, Hkv, D = hp["n_head"], hp["n_head_kv"], hp["head_dim"]
        group = H // Hkv
        scale = np.float32(1.0 / np.sqrt(D))  # 0.125, exact
        cos, sin = rope_tables(hp, range(pos0, pos0 + T))
        x = self.w["token_embd.weight"][np.asarray(ids)]
        if probe is not None:
            probe["embed"] = x[-1]
        for l in range(hp["n_layer"]):
            p = f"blk.{l}."
            xn = rmsnorm(x, self.w[p + "attn_norm.weight"], hp["eps"])
            q = (xn @ self.W(p + "attn_q.weight").T).reshape(T, H, D)
            k = (xn @ self.W(p + "attn_k.weight").T).reshape(T, Hkv, D)
            v = (xn @ self.w[p + "attn_v.weight"].T).reshape(T, Hkv, D)
            q = self.rope(q, cos, sin)
            k = self.rope(k, cos, sin)
            kc, vc = cache[l]
            kc = k if kc is None else np.concatenate([kc, k], axis=0)
            vc = v if vc is None else np.concatenate([vc, v], axis=0)
            cache[l] = [kc, vc]
            S = kc.shape[0]
            # query i sits at absolute position pos0+i and may see keys 0..pos0+i
            qpos = np.arange(pos0, pos0 + T)[:, None]
            kpos = np.arange(S)[None, :]
            masked = kpos > qpos
            ctx = np.empty((T, H, D), dtype=np.float32)
            for h in range(H):
                kv = h // group
                s = (q[:, h, :] @ kc[:, kv, :].T) * scale
                s = np.where(masked, np.float32(-np.inf), s)
                ctx[:, h, :] = softmax(s) @ vc[:, kv, :]
            attn = ctx.reshape(T, H * D) @ self.w[p + "attn_output.weight"].T
            h_ = x + attn
            hn = rmsnorm(h_, self.w[p + "ffn_norm.weight"], hp["eps"])
            g = hn @ self.w[p + "ffn_gate.weight"].T
            u = hn @ self.w[p + "ffn_up.weight"].T
            silu = g / (np.float32(1.0) + np.exp(-g))
            x = h_ + (silu * u) @ self.w[p + "ffn_down.weight"].T
            if probe is not None and l in (0, hp["n_layer"] - 1):
                probe[f"after_layer_{l}"] = x[-1]
        xl = rmsnorm(x[-1:], self.w["output_norm.weight"], hp["eps"])
        if probe is not None:
            probe["final_norm"] = xl[0]
        logits = (xl @ self.w["token_embd.weight"].T)[0]
        assert logits.dtype == np.float32
        return logits


def unpermute_qk(w, n_head):
    """Invert llama.cpp convert_hf_to_gguf's permute() of q/k rows.

    The converter maps HF row s*(D/2)+j of each head to GGUF row 2j+s, so
    GGUF's adjacent pair (2j, 2j+1) is HF's half pair (j, j+D/2).
    """
    N, K = w.shape
    return np.ascontiguousarray(w.reshape(n_head, N // n_head // 2, 2, K).swapaxes(1, 2).reshape(N, K))


def check_rope_layout(hp, w, ids):
    a = Model(hp, w).forward(ids, 0, Model(hp, w).new_cache())
    alt = {}
    for l in range(hp["n_layer"]):
        alt[f"blk.{l}.attn_q.weight"] = unpermute_qk(w[f"blk.{l}.attn_q.weight"], hp["n_head"])
        alt[f"blk.{l}.attn_k.weight"] = unpermute_qk(w[f"blk.{l}.attn_k.weight"], hp["n_head_kv"])
    m = Model(hp, w, rope=rope_halves, qk_override=alt)
    b = m.forward(ids, 0, m.new_cache())
    diff = float(np.max(np.abs(a - b)))
    assert diff < 1e-3, f"rope layouts disagree: {diff}"
    assert int(np.argmax(a)) == int(np.argmax(b))
    return diff


def topk(logits, k):
    # stable sort of -logits: ties keep the lower index first, like argmax
    idx = np.argsort(-logits, kind="stable")[:k]
    return [int(i) for i in idx], [float(logits[i]) for i in idx]


def generate(model, ids, steps):
    cache = model.new_cache()
    probe = {}
    logits = model.forward(ids, 0, cache, probe=probe)
    prefill_logits = logits
    out, recs = [], []
    pos = len(ids)
    for s in range(steps):
        if s > 0:
            logits = model.forward([out[-1]], pos, cache)
            pos += 1
        ti, tl = topk(logits, TOPK)
        nxt = int(np.argmax(logits))  # first maximum = lowest index on ties
        assert nxt == ti[0]
        out.append(nxt)
        recs.append({"top5_ids": ti, "top5_logits": tl})
    return prefill_logits, out, recs, probe


# ---------------------------------------------------------------- tokenizer

def load_tokenizer():
    """transformers' own GGUF tokenizer conversion, used without torch.

    transformers 4.57 refuses to read any GGUF unless torch is importable,
    although the tokenizer/config path (return_tensors=False) never touches
    torch. Lifting that one gate is enough; everything else is transformers'
    unmodified conversion of the GGUF vocabulary and merges.
    """
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    gguf_utils.is_torch_available = lambda: True
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(MODEL_DIR, gguf_file=MODEL_FILE)


def build_crosscheck_tokenizer(meta):
    """A second tokenizer, built by hand the way llama.cpp reads this GGUF.

    tokenizer.ggml.pre = "smollm": llama.cpp first isolates every \\p{N}
    character, then applies the GPT-2 split regex, then byte-level BPE with
    the GGUF's merges; control tokens (token_type 3) are matched whole.
    transformers' converter uses the GPT-2 regex alone, which agrees only
    because SmolLM2's vocabulary has no multi-digit tokens; comparing the
    two on every text makes that visible instead of assumed.
    """
    from tokenizers import Tokenizer, Regex, AddedToken, models, pre_tokenizers, decoders
    vocab = {t: i for i, t in enumerate(meta["tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in meta["merges"]]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tk.decoder = decoders.ByteLevel()
    specials = [meta["tokens"][i] for i, t in enumerate(meta["token_type"]) if t == 3]
    tk.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    return tk


def render_chat(template, user_message):
    # The same Jinja settings transformers' apply_chat_template uses. This
    # template reads only `messages` and `add_generation_prompt` (no
    # bos_token), and adds the default system turn itself.
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(
        messages=[{"role": "user", "content": user_message}],
        add_generation_prompt=True,
        bos_token="", eos_token="",
    )


# ---------------------------------------------------------------- main

def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    timings = {}
    t0 = time.time()
    sha = sha256_of(GGUF_PATH)
    if sha != GGUF_SHA256:
        sys.exit(f"{GGUF_PATH}: sha256 {sha}, expected {GGUF_SHA256} (run scripts/fetch-smollm2.sh)")

    t = time.time()
    hp, w, meta = load_model(GGUF_PATH)
    timings["load_dequantize_s"] = round(time.time() - t, 2)

    t = time.time()
    tok = load_tokenizer()
    cross = build_crosscheck_tokenizer(meta)
    timings["tokenizer_load_s"] = round(time.time() - t, 2)

    def encode(text):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        alt = cross.encode(text, add_special_tokens=False).ids
        return ids, alt

    chat_text = render_chat(meta["chat_template"], USER_MESSAGE)
    # transformers also reads tokenizer.chat_template from the GGUF; its
    # rendering must match ours, or one of the two is misreading the template.
    if getattr(tok, "chat_template", None):
        hf_chat = tok.apply_chat_template([{"role": "user", "content": USER_MESSAGE}],
                                          tokenize=False, add_generation_prompt=True)
        assert hf_chat == chat_text, (hf_chat, chat_text)

    prompts = [("chat", chat_text)] + [("raw", p) for p in RAW_PROMPTS]
    os.makedirs(OUT_DIR, exist_ok=True)

    t = time.time()
    rope_diff = check_rope_layout(hp, w, encode(chat_text)[0])
    timings["rope_layout_check_s"] = round(time.time() - t, 2)
    print(f"rope layout check: adjacent pairs on GGUF weights vs halves on un-permuted weights, "
          f"max |dlogit| = {rope_diff:.3g}")

    model = Model(hp, w)
    records = []
    mismatches = []
    for i, (kind, text) in enumerate(prompts):
        ids, alt = encode(text)
        if ids != alt:
            mismatches.append(text)
        t = time.time()
        logits, greedy, steps, probe = generate(model, ids, STEPS)
        dt = time.time() - t
        timings[f"prompt_{i}_s"] = round(dt, 2)
        logits.astype("<f4").tofile(os.path.join(OUT_DIR, f"logits_{i}.f32"))
        eos = meta["eos_token_id"]
        text_out = tok.decode(greedy, skip_special_tokens=False)
        records.append({
            "kind": kind,
            "text": text,
            "ids": ids,
            "greedy": greedy,
            "greedy_text": text_out,
            "first_eos_step": greedy.index(eos) if eos in greedy else None,
            # smallest top-1 minus top-2 logit over the 32 steps: how far an
            # implementation's logits may drift before its greedy path can
            # differ from this one
            "min_top1_margin": min(st["top5_logits"][0] - st["top5_logits"][1] for st in steps),
            "logits_file": f"logits_{i}.f32",
            "steps": steps,
            # first 8 values at the last prompt position, for locating a
            # divergence layer by layer
            "probe_first8": {k: [float(x) for x in v[:8]] for k, v in probe.items()},
        })
        print(f"[{i}] {len(ids)} prompt tokens, {dt:.1f}s; greedy: {text_out!r}")

    ref = {
        "model": MODEL_FILE,
        "gguf_sha256": sha,
        "script": "scripts/smollm2-reference.py",
        "versions": {p: version(p) for p in ("numpy", "gguf", "transformers", "tokenizers", "jinja2")},
        "hparams": {k: (float(v) if isinstance(v, (float, np.floating)) else v) for k, v in hp.items()},
        "math": ("f32 throughout on gguf-py-dequantized weights; RoPE adjacent pairs (NORM), tables "
                 "computed in f64 and cast to f32; scores*0.125, causal mask, softmax by row max; "
                 "tied output head (token_embd); greedy = argmax, lowest index on ties; "
                 "step 0 is the prefill's last position, steps 1.. feed one token each through an f32 KV cache"),
        "rope_layout_check_max_abs_logit_diff": rope_diff,
        "tokenizer": {
            "source": "transformers AutoTokenizer.from_pretrained(gguf_file=...), add_special_tokens=False",
            "gguf_pre": meta["pre"],
            "add_bos_token": meta["add_bos_token"],
            "llama_cpp_adds_bos": bool(meta["add_bos_token"]),
            "bos_token_id": meta["bos_token_id"],
            "eos_token_id": meta["eos_token_id"],
            "crosscheck_mismatches": mismatches,
        },
        "chat_template": meta["chat_template"],
        "chat_render": ("jinja2 ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks), "
                        "messages=[user], add_generation_prompt=True; identical to transformers' apply_chat_template"),
        "chat_user_message": USER_MESSAGE,
        "steps": STEPS,
        "prompts": records,
    }
    with open(os.path.join(OUT_DIR, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
        f.write("\n")

    corpus_ids, corpus_mismatch = [], []
    for text in TOKENIZER_TEXTS:
        ids, alt = encode(text)
        corpus_ids.append(ids)
        if ids != alt:
            corpus_mismatch.append({"text": text, "transformers": ids, "llama_cpp_style": alt})
    with open(os.path.join(OUT_DIR, "tokenizer_corpus.json"), "w") as f:
        json.dump({
            "tokenizer": "transformers GGUF tokenizer for " + MODEL_FILE + ", add_special_tokens=False",
            "versions": {p: version(p) for p in ("transformers", "tokenizers")},
            "crosscheck_mismatches": corpus_mismatch,
            "texts": TOKENIZER_TEXTS,
            "ids": corpus_ids,
        }, f, indent=1, ensure_ascii=False)
        f.write("\n")

    timings["total_s"] = round(time.time() - t0, 2)
    print(f"tokenizer cross-check: {len(TOKENIZER_TEXTS) - len(corpus_mismatch)}/{len(TOKENIZER_TEXTS)} corpus texts "
          f"and {len(prompts) - len(mismatches)}/{len(prompts)} prompts agree with a llama.cpp-style BPE")
    for m in corpus_mismatch:
        print("  mismatch:", repr(m["text"]), m["transformers"], m["llama_cpp_style"])
    print("timings:", json.dumps(timings))


if __name__ == "__main__":
    main()
