#!/usr/bin/env python3
"""Export all-MiniLM-L6-v2 (the same model.safetensors tc loads) to ONNX
without PyTorch: the BERT encoder, mean pooling and L2 normalisation built
node by node with onnx.helper, so ONNX Runtime runs exactly the model tc
runs (same weights, same eps, erf GELU, additive finfo.min mask).

    python3 benches/peers/minilm_onnx.py MODEL_DIR OUT.onnx

Inputs: input_ids int64 [B, S], attention_mask float [B, S],
position_ids int64 [S]. Output: embeddings float [B, 384].
"""
import json
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import load_file

HIDDEN, HEADS, HEAD_DIM, LAYERS = 384, 12, 32, 6


class Graph:
    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def const(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, kind, inputs, **attrs):
        self.n += 1
        out = f"t{self.n}"
        self.nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def linear(self, x, w, b):
        # PyTorch layout [out, in]: x · wᵀ + b.
        wt = self.const(f"w{self.n}_{len(self.inits)}", w.T.copy())
        bb = self.const(f"b{self.n}_{len(self.inits)}", b)
        return self.op("Add", [self.op("MatMul", [x, wt]), bb])

    def layer_norm(self, x, g, b, eps):
        gg = self.const(f"g{len(self.inits)}", g)
        bb = self.const(f"b{len(self.inits)}", b)
        return self.op("LayerNormalization", [x, gg, bb], axis=-1, epsilon=eps)


def build(model_dir):
    w = load_file(f"{model_dir}/model.safetensors")
    eps = json.load(open(f"{model_dir}/config.json"))["layer_norm_eps"]
    g = Graph()
    # Embeddings: word + position + token type 0, LayerNorm.
    words = g.op("Gather", [g.const("word", w["embeddings.word_embeddings.weight"]), "input_ids"], axis=0)
    pos = g.op("Gather", [g.const("pos", w["embeddings.position_embeddings.weight"]), "position_ids"], axis=0)
    tt = g.const("tt", w["embeddings.token_type_embeddings.weight"][0])
    x = g.op("Add", [g.op("Add", [words, pos]), tt])
    x = g.layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    # (1 − mask) · finfo(f32).min as [B, 1, 1, S].
    one = g.const("one", np.float32(1.0))
    fmin = g.const("fmin", np.float32(np.finfo(np.float32).min))
    bias = g.op("Mul", [g.op("Sub", [one, "attention_mask"]), fmin])
    bias = g.op("Unsqueeze", [bias, g.const("ax12", np.array([1, 2], dtype=np.int64))])
    heads = g.const("heads", np.array([0, 0, HEADS, HEAD_DIM], dtype=np.int64))
    merged = g.const("merged", np.array([0, 0, HIDDEN], dtype=np.int64))
    scale = g.const("scale", np.float32(1.0 / np.sqrt(HEAD_DIM)))
    half = g.const("half", np.float32(0.5))
    rsqrt2 = g.const("rsqrt2", np.float32(1.0 / np.sqrt(2.0)))
    for l in range(LAYERS):
        p = lambda s: w[f"encoder.layer.{l}.{s}"]
        proj = lambda name: g.linear(x, p(f"attention.self.{name}.weight"), p(f"attention.self.{name}.bias"))
        q = g.op("Transpose", [g.op("Reshape", [proj("query"), heads])], perm=[0, 2, 1, 3])
        k = g.op("Transpose", [g.op("Reshape", [proj("key"), heads])], perm=[0, 2, 3, 1])
        v = g.op("Transpose", [g.op("Reshape", [proj("value"), heads])], perm=[0, 2, 1, 3])
        scores = g.op("Add", [g.op("Mul", [g.op("MatMul", [q, k]), scale]), bias])
        probs = g.op("Softmax", [scores], axis=-1)
        ctx = g.op("Reshape", [g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3]), merged])
        a = g.linear(ctx, p("attention.output.dense.weight"), p("attention.output.dense.bias"))
        h = g.layer_norm(g.op("Add", [a, x]), p("attention.output.LayerNorm.weight"),
                         p("attention.output.LayerNorm.bias"), eps)
        f = g.linear(h, p("intermediate.dense.weight"), p("intermediate.dense.bias"))
        # erf GELU: x · ½ · (1 + erf(x / √2)).
        f = g.op("Mul", [g.op("Mul", [f, half]), g.op("Add", [one, g.op("Erf", [g.op("Mul", [f, rsqrt2])])])])
        f = g.linear(f, p("output.dense.weight"), p("output.dense.bias"))
        x = g.layer_norm(g.op("Add", [f, h]), p("output.LayerNorm.weight"), p("output.LayerNorm.bias"), eps)
    # Mean pooling over real tokens, then L2 normalisation.
    m = g.op("Unsqueeze", ["attention_mask", g.const("ax2", np.array([2], dtype=np.int64))])
    ax1 = g.const("ax1", np.array([1], dtype=np.int64))
    summed = g.op("ReduceSum", [g.op("Mul", [x, m]), ax1], keepdims=0)
    count = g.op("Max", [g.op("ReduceSum", [m, ax1], keepdims=0), g.const("tiny", np.float32(1e-9))])
    pooled = g.op("Div", [summed, count])
    norm = g.op("Sqrt", [g.op("ReduceSum", [g.op("Mul", [pooled, pooled]),
                                              g.const("axl", np.array([1], dtype=np.int64))], keepdims=1)])
    out = g.op("Div", [pooled, g.op("Max", [norm, g.const("tiny2", np.float32(1e-12))])])
    g.nodes.append(helper.make_node("Identity", [out], ["embeddings"]))
    graph = helper.make_graph(
        g.nodes, "all-MiniLM-L6-v2",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["B", "S"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, ["B", "S"]),
         helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["S"])],
        [helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["B", HIDDEN])],
        g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    onnx.save(build(sys.argv[1]), sys.argv[2])
    print(f"wrote {sys.argv[2]}")
