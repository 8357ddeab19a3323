#!/usr/bin/env python3
"""ONNX Runtime side of the GPT-2-small decoding rows (scripts/gpt2-bench.sh,
issue #15): the same weights (models/gpt2-seed0), the same 8-token prompt,
greedy decoding with a KV cache, one RESULT line in the format of
scripts/gpt2_torch_bench.py.

    python3 benches/peers/gpt2_decode.py export MODEL_DIR OUT.onnx
    python3 benches/peers/gpt2_decode.py ort MODEL.onnx TOKENS THREADS [SYSTEM]

(SYSTEM names the RESULT line's system: default "ort", "ort-fused" for the
transformer optimizer's form of the export, benches/peers/ort_fuse.py.)

`export` traces one decoding step of the whole model, written with plain
tensor ops on the file's weights (what transformers' GPT2LMHeadModel
computes: pre-LN blocks, tanh GELU "gelu_new", causal attention over the
cache, the tied LM head), and exports it with the prompt length S and the
cache length T dynamic:

    (ids [1, S] i64, pos [S] i64, mask [S, T + S] f32,
     past_k [L, 1, H, T, 64], past_v [L, 1, H, T, 64])
      -> (logits of the last token [1, V], k [L, 1, H, T + S, 64], v [...])

It checks the step against GPT2LMHeadModel (prefill logits and one cached
step) before writing the file. `ort` runs the prefill with T = 0 and then
one step per token, feeding the returned cache back (no IO binding: what a
user of the plain export writes).
"""
import sys
import time

import numpy as np

PROMPT = [464, 2068, 7586, 21831, 18045, 625, 262, 16931]
H, HD, D = 12, 64, 768


def step_module(model_dir):
    """One decoding step of GPT-2 on the file's weights, as a torch module."""
    import torch
    from safetensors.torch import load_file

    w = load_file(f"{model_dir}/model.safetensors")
    layers = 0
    while f"h.{layers}.ln_1.weight" in w:
        layers += 1

    def ln(x, p):
        return torch.nn.functional.layer_norm(x, (D,), w[p + ".weight"], w[p + ".bias"], 1e-5)

    def lin(x, p):
        return x @ w[p + ".weight"] + w[p + ".bias"]

    class Step(torch.nn.Module):
        def forward(self, ids, pos, mask, past_k, past_v):
            s = ids.shape[1]
            x = w["wte.weight"][ids] + w["wpe.weight"][pos].unsqueeze(0)
            ks, vs = [], []
            for l in range(layers):
                p = f"h.{l}."
                qkv = lin(ln(x, p + "ln_1"), p + "attn.c_attn")
                q, k, v = (t.reshape(1, s, H, HD).transpose(1, 2) for t in qkv.split(D, dim=2))
                k = torch.cat([past_k[l], k], dim=2)
                v = torch.cat([past_v[l], v], dim=2)
                ks.append(k)
                vs.append(v)
                att = torch.softmax(q @ k.transpose(2, 3) * 0.125 + mask, dim=-1)
                ctx = (att @ v).transpose(1, 2).reshape(1, s, D)
                x = x + lin(ctx, p + "attn.c_proj")
                m = lin(ln(x, p + "ln_2"), p + "mlp.c_fc")
                g = 0.5 * m * (1.0 + torch.tanh(0.7978845608028654 * (m + 0.044715 * m * m * m)))
                x = x + lin(g, p + "mlp.c_proj")
            last = ln(x[:, -1], "ln_f")
            # `linear` (Gemm, transB): one copy of wte in the export, not two.
            return torch.nn.functional.linear(last, w["wte.weight"]), torch.stack(ks), torch.stack(vs)

    return Step().eval(), layers


def causal_mask(s, t):
    """Row i (position t - s + i) sees cache positions 0..=t - s + i."""
    j = np.arange(t)[None, :]
    i = np.arange(s)[:, None]
    return np.where(j <= t - s + i, 0.0, -1e30).astype(np.float32)


def export(model_dir, out):
    import torch
    from safetensors.torch import load_file
    from transformers import GPT2Config, GPT2LMHeadModel

    step, layers = step_module(model_dir)
    s = len(PROMPT)
    empty = torch.zeros(layers, 1, H, 0, HD)
    args = (torch.tensor([PROMPT]), torch.arange(s), torch.from_numpy(causal_mask(s, s)), empty, empty)
    with torch.no_grad():
        logits, k, v = step(*args)
        ref = GPT2LMHeadModel(GPT2Config()).eval()
        ref.transformer.load_state_dict(load_file(f"{model_dir}/model.safetensors"), strict=False)
        ref.tie_weights()
        out_ref = ref(torch.tensor([PROMPT]), use_cache=True)
        d0 = (logits - out_ref.logits[:, -1]).abs().max().item()
        nxt = int(logits.argmax(-1))
        l1, _, _ = step(torch.tensor([[nxt]]), torch.tensor([s]),
                        torch.from_numpy(causal_mask(1, s + 1)), k, v)
        r1 = ref(torch.tensor([[nxt]]), past_key_values=out_ref.past_key_values, use_cache=True)
        d1 = (l1 - r1.logits[:, -1]).abs().max().item()
    assert d0 < 1e-3 and d1 < 1e-3, (d0, d1)
    print(f"step matches GPT2LMHeadModel: prefill {d0:.1e}, cached step {d1:.1e}", file=sys.stderr)
    torch.onnx.export(
        step, args, out, dynamo=False, opset_version=17,
        input_names=["ids", "pos", "mask", "past_k", "past_v"],
        output_names=["logits", "k", "v"],
        dynamic_axes={"ids": {1: "S"}, "pos": {0: "S"}, "mask": {0: "S", 1: "TS"},
                      "past_k": {3: "T"}, "past_v": {3: "T"}, "k": {3: "TS"}, "v": {3: "TS"}},
    )


def run_ort(path, tokens, threads, system="ort"):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    layers = sess.get_inputs()[3].shape[0]
    s = len(PROMPT)

    def step(ids, start, k, v):
        n = len(ids)
        return sess.run(None, {
            "ids": np.array([ids], dtype=np.int64),
            "pos": np.arange(start, start + n, dtype=np.int64),
            "mask": causal_mask(n, start + n),
            "past_k": k, "past_v": v})

    empty = np.zeros((layers, 1, H, 0, HD), dtype=np.float32)
    step(PROMPT, 0, empty, empty)  # warm-up: ORT plans on the first run
    t0 = time.perf_counter()
    logits, k, v = step(PROMPT, 0, empty, empty)
    prefill = time.perf_counter() - t0
    toks = []
    t1 = time.perf_counter()
    for i in range(tokens):
        nxt = int(logits.argmax(-1)[0])
        toks.append(nxt)
        logits, k, v = step([nxt], s + i, k, v)
    decode = time.perf_counter() - t1
    print(f"RESULT system={system} threads={threads} tokens={tokens} prefill_ms={prefill * 1e3:.2f} "
          f"decode_ms={decode * 1e3:.2f} tokens_per_s={tokens / decode:.2f} first={toks[:4]}")


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "export":
        export(sys.argv[2], sys.argv[3])
    elif mode == "ort":
        run_ort(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:6])
    else:
        sys.exit(__doc__)
