#!/usr/bin/env python3
"""Dequantization reference for tc's GGUF block formats.

Writes tests/fixtures/quant/dequant_reference.json: for each of Q8_0, Q4_0,
Q4_1, Q4_K and Q6_K, a few blocks of seeded random bytes and what llama.cpp's
own Python package (gguf-py, `gguf.quants.dequantize`) makes of them, as the
bit patterns of the f32 results, so that tc's dequantizers can be checked
bit for bit rather than to a tolerance. Two rows of real tensors from the
SmolLM2 GGUF are added, so the fixture also pins the on-disk layout that
the model loader sees.

Run it in the reference environment (needs models/smollm2, from
scripts/fetch-smollm2.sh):

    "$(scripts/py-ref-env.sh)" scripts/quant-reference.py
"""
import json
import os
from importlib.metadata import version

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T, GGUFReader
from gguf.quants import dequantize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GGUF_PATH = os.path.join(ROOT, "models", "smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
OUT = os.path.join(ROOT, "tests", "fixtures", "quant", "dequant_reference.json")
N_BLOCKS = 8

# Byte offsets of the f16 fields in each block. They are overwritten with
# chosen halfs because random bytes there would often be NaN/inf or huge,
# which says nothing useful about a dequantizer (and NaN payloads are not
# preserved bit-exactly across implementations).
#   name: (type, block_bytes, block_elems, primary scale offset, other f16 offsets)
FORMATS = {
    "q8_0": (T.Q8_0, 34, 32, 0, []),          # d, qs[32] (int8)
    "q4_0": (T.Q4_0, 18, 32, 0, []),          # d, qs[16]
    "q4_1": (T.Q4_1, 20, 32, 0, [2]),         # d, m, qs[16]
    "q4_k": (T.Q4_K, 144, 256, 0, [2]),       # d, dmin, scales[12], qs[128]
    "q6_k": (T.Q6_K, 210, 256, 208, []),      # ql[128], qh[64], scales[16] (int8), d
}

# Which block carries which edge case in the "d" (primary scale) field.
SPECIAL = {
    0: "d = +0.0: only the offset term survives (m for q4_1, -dmin*min for q4_k); elsewhere 0*q, which is -0.0 where q < 0",
    1: "d negative",
    2: "d an f16 subnormal (2^-20): exercises the f16->f32 subnormal path",
}


def half_bytes(x):
    return np.array([x], dtype=np.float16).view(np.uint8)


def bits(a):
    """f32 values as u32 bit patterns: JSON floats would lose -0.0 and ulps."""
    return np.ascontiguousarray(a, dtype=np.float32).reshape(-1).view(np.uint32).tolist()


def make_blocks(rng, qtype, block_bytes, d_off, other_offs):
    blocks = rng.integers(0, 256, size=(N_BLOCKS, block_bytes), dtype=np.uint8)
    for b in range(N_BLOCKS):
        if b == 0:
            d = np.float16(0.0)
        elif b == 1:
            d = -abs(np.float16(rng.uniform(0.25, 2.0)))
        elif b == 2:
            d = np.float16(2.0 ** -20)
        else:
            d = np.float16(rng.uniform(-2.0, 2.0))
        blocks[b, d_off:d_off + 2] = half_bytes(d)
        for off in other_offs:
            blocks[b, off:off + 2] = half_bytes(np.float16(rng.uniform(-2.0, 2.0)))
    assert np.isfinite(blocks[:, d_off:d_off + 2].copy().view(np.float16)).all()
    return blocks


def real_rows(reader, name, rows):
    t = next(t for t in reader.tensors if t.name == name)
    # GGUFReader exposes a quantized tensor as uint8 [rows, bytes_per_row];
    # ne0 (t.shape[0]) is the row length in elements.
    raw = np.ascontiguousarray(t.data[:rows])
    f32 = dequantize(raw, t.tensor_type)
    assert f32.shape == (rows, int(t.shape[0])), f32.shape
    return {
        "tensor": name,
        "type": t.tensor_type.name,
        "rows": list(range(rows)),
        "row_elems": int(t.shape[0]),
        "row_bytes": int(raw.shape[1]),
        "hex": raw.tobytes().hex(),
        "f32_bits": bits(f32),
    }


def main():
    rng = np.random.default_rng(20240611)
    formats = {}
    for name, (qtype, block_bytes, block_elems, d_off, other_offs) in FORMATS.items():
        assert gguf.GGML_QUANT_SIZES[qtype] == (block_elems, block_bytes)
        blocks = make_blocks(rng, qtype, block_bytes, d_off, other_offs)
        # One flat row of N_BLOCKS blocks, as a tensor row would be stored.
        f32 = dequantize(blocks.reshape(1, -1), qtype)
        assert f32.shape == (1, N_BLOCKS * block_elems) and f32.dtype == np.float32
        assert np.isfinite(f32).all()
        formats[name] = {
            "block_bytes": block_bytes,
            "block_elems": block_elems,
            "n_blocks": N_BLOCKS,
            "special_blocks": {str(k): v for k, v in SPECIAL.items()},
            "hex": blocks.tobytes().hex(),
            "f32_bits": bits(f32),
        }

    reader = GGUFReader(GGUF_PATH)
    out = {
        "generator": f"scripts/quant-reference.py: gguf-py {version('gguf')} (gguf.quants.dequantize), numpy {np.__version__}",
        "notes": [
            "f32_bits are IEEE-754 bit patterns of the dequantized values, in element order.",
            "gguf-py rounds each product to f32 separately (no fused multiply-add): "
            "q4_1 = d*q + m; q4_k = (d*sc)*q - (dmin*m); q6_k = (d*sc)*q; q8_0/q4_0 = d*q. "
            "An implementation that fuses these into FMA differs in the last bit.",
        ],
        "formats": formats,
        "real_q4_1": real_rows(reader, "blk.0.attn_q.weight", 2),
        "real_q8_0": real_rows(reader, "token_embd.weight", 1),
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
