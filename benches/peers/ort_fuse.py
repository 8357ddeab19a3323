#!/usr/bin/env python3
"""The ONNX Runtime transformer optimizer's fused form of a peer-bench
export (scripts/peer-bench.sh runs the GPT-2 block's this way; MiniLM's
optimized standard export is made by minilm_export.py): what an ORT user
would run after `onnxruntime.transformers.optimizer` (SkipLayerNorm,
BiasGelu and whatever else it recognises in the graph; prints the fused
operator counts).

    python3 benches/peers/ort_fuse.py IN.onnx OUT.onnx bert|gpt2 HEADS HIDDEN
"""
import sys

from onnxruntime.transformers.optimizer import optimize_model


def main():
    src, dst, kind, heads, hidden = sys.argv[1:6]
    # opt_level 0: the fusions only; the session applies ORT_ENABLE_ALL itself.
    m = optimize_model(src, model_type=kind, num_heads=int(heads), hidden_size=int(hidden),
                       opt_level=0)
    m.save_model_to_file(dst)
    fused = {k: v for k, v in m.get_fused_operator_statistics().items() if v}
    print(f"{dst}: fused {fused}", file=sys.stderr)


main()
