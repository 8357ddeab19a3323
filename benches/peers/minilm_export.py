#!/usr/bin/env python3
"""Standard ONNX exports of all-MiniLM-L6-v2 for the peer benchmark
(scripts/peer-bench.sh): what an ONNX Runtime user would deploy, from the
same model directory (model.safetensors) tc loads.

    python3 benches/peers/minilm_export.py MODEL_DIR OUTDIR

Writes into OUTDIR:
- minilm_std.onnx: `torch.onnx.export` (TorchScript exporter,
  dynamo=False, opset 17, constant folding) of transformers' `AutoModel`
  (eager attention) followed by mean pooling over the attention mask and
  L2 normalisation (as sentence-transformers and tc's
  `mean_pool_normalize`). Inputs input_ids, attention_mask,
  token_type_ids (int64 [B, S], dynamic B and S); output embeddings
  float [B, 384].
- minilm_std_opt.onnx: that export through ONNX Runtime's transformer
  optimizer, `optimize_model(model_type="bert", num_heads=12,
  hidden_size=384)` with its defaults (opt_level 1 for bert, fp32).
- minilm_int8.onnx: the optimized model through
  `quantize_dynamic(weight_type=QuantType.QInt8, per_channel=True)` (int8
  weights with a scale per output channel, activations quantized at run
  time; ORT's defaults otherwise, with DefaultTensorType FLOAT for the
  fused ops' outputs).
- minilm_export.json: the settings, the fused operator counts, and the
  int8 model's accuracy: cosine similarity of its embeddings to the fp32
  export's on the benchmark's token ids and on a fixed set of sentences.
"""
import json
import os
import sys

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ort_bench import WORKLOADS, ids  # noqa: E402

OPSET = 17

SENTENCES = [
    "The cat sits outside.",
    "A man is playing guitar.",
    "The new movie is awesome.",
    "The dog plays in the garden.",
    "A woman watches TV.",
    "The new movie is so great.",
    "Do you like pizza?",
    "The weather is lovely today.",
    "It's so sunny outside!",
    "He drove to the stadium.",
    "Tensor programs are shape-checked when they are built.",
    "The kernels are compiled just in time for the CPU they run on.",
    "A quick brown fox jumps over the lazy dog.",
    "Sentence embeddings map text to vectors whose cosine measures similarity.",
    "Quantization trades a little accuracy for speed and memory.",
    "What is the capital of France?",
    "Paris is the capital and most populous city of France.",
    "The stock market fell sharply on Monday after the announcement.",
    "Please restart the server before applying the update.",
    "I have never been to Australia, but I would like to go.",
]


class Embedder(torch.nn.Module):
    def __init__(self, path):
        super().__init__()
        self.bert = AutoModel.from_pretrained(path, attn_implementation="eager").eval()

    def forward(self, input_ids, attention_mask, token_type_ids):
        h = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                      token_type_ids=token_type_ids).last_hidden_state
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1)


def export(model_dir, dst):
    model = Embedder(model_dir)
    x = torch.from_numpy(ids(2, 8))
    args = (x, torch.ones_like(x), torch.zeros_like(x))
    dyn = {0: "b", 1: "s"}
    with torch.inference_mode():
        torch.onnx.export(model, args, dst, dynamo=False, opset_version=OPSET,
                          do_constant_folding=True,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["embeddings"],
                          dynamic_axes={"input_ids": dyn, "attention_mask": dyn,
                                        "token_type_ids": dyn, "embeddings": {0: "b"}})


def embed(path, feeds):
    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return [sess.run(None, f)[0] for f in feeds]


def main():
    model_dir, outdir = sys.argv[1], sys.argv[2]
    std = f"{outdir}/minilm_std.onnx"
    opt = f"{outdir}/minilm_std_opt.onnx"
    q8 = f"{outdir}/minilm_int8.onnx"
    export(model_dir, std)

    from onnxruntime.transformers.optimizer import optimize_model
    m = optimize_model(std, model_type="bert", num_heads=12, hidden_size=384)
    m.save_model_to_file(opt)
    fused = {k: v for k, v in m.get_fused_operator_statistics().items() if v}
    print(f"{opt}: fused {fused}", file=sys.stderr)

    from onnxruntime.quantization import QuantType, quantize_dynamic
    # The fused contrib ops (Attention, SkipLayerNormalization) defeat ONNX
    # shape inference; DefaultTensorType tells the quantizer their outputs
    # are float, as its error message suggests.
    import onnx
    # per_channel: one scale per output column, the scheme of tc's int8
    # path; per-tensor scales (ORT's default) give cosines down to 0.94 on
    # the sentences below and 0.89 on the 8 x 128 token ids, at about the
    # same speed.
    quantize_dynamic(opt, q8, weight_type=QuantType.QInt8, per_channel=True,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})

    # Accuracy of the int8 model: cosine to the fp32 export, every row of
    # every benchmark workload and a fixed set of sentences.
    feeds = []
    for b, s in WORKLOADS:
        x = ids(b, s)
        feeds.append({"input_ids": x, "attention_mask": np.ones_like(x),
                      "token_type_ids": np.zeros_like(x)})
    tok = AutoTokenizer.from_pretrained(model_dir)
    t = tok(SENTENCES, padding=True, return_tensors="np")
    feeds.append({k: t[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")})
    ref, opt_out, q = embed(std, feeds), embed(opt, feeds), embed(q8, feeds)
    cosines = {}
    for (b, s), r, v in zip(WORKLOADS + [("sentences", "")], ref, q):
        c = (r * v).sum(1) / (np.linalg.norm(r, axis=1) * np.linalg.norm(v, axis=1))
        cosines[f"{b}x{s}" if s else b] = {"min": float(c.min()), "mean": float(c.mean())}
    ref, opt_out, q = (np.concatenate(v) for v in (ref, opt_out, q))
    # Against the real model: PyTorch eager on the same inputs.
    model = Embedder(model_dir)
    with torch.inference_mode():
        pt = np.concatenate([model(*(torch.from_numpy(f[k]) for k in
                                     ("input_ids", "attention_mask", "token_type_ids"))).numpy()
                             for f in feeds])
    info = {
        "export": {"exporter": "torch.onnx.export", "dynamo": False, "opset": OPSET,
                   "do_constant_folding": True, "attn_implementation": "eager",
                   "torch": torch.__version__, "transformers": __import__("transformers").__version__},
        "optimizer": {"call": "optimize_model(model_type='bert', num_heads=12, hidden_size=384)",
                      "onnxruntime": __import__("onnxruntime").__version__, "fused": fused},
        "int8": {"call": "quantize_dynamic(minilm_std_opt.onnx, weight_type=QuantType.QInt8, "
                         "per_channel=True, extra_options={'DefaultTensorType': FLOAT})",
                 "sentences": len(SENTENCES), "cosine_to_fp32_export": cosines},
        "max_abs_diff_to_pytorch": {"std": float(np.abs(ref - pt).max()),
                                    "std_opt": float(np.abs(opt_out - pt).max()),
                                    "int8": float(np.abs(q - pt).max())},
    }
    json.dump(info, open(f"{outdir}/minilm_export.json", "w"), indent=1)
    print(json.dumps(info), file=sys.stderr)


if __name__ == "__main__":
    main()
