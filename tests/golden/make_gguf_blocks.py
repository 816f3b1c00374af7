"""Blocks of every GGUF weight type loom decodes, with the gguf package's dequantization of each
as the oracle (tests/test_gguf.c checks loom's decoders and kernels against it).

For each type T the file holds tensor "T": ROWS rows of COLS weights as raw blocks, and "T.ref":
the same weights as gguf.quants.dequantize gives them, in F32. The codes are random bytes, so
every code and sub-block scale appears; the f16 scales (d, and dmin or m where the type has one)
are drawn from a list of edge values (zero, negative, subnormal, the largest finite half, one)
and random normal halves, never Inf or NaN. MXFP4's E8M0 exponent byte likewise: the two that
make a subnormal scale (0, 1), 2, 127, 128 and 160, then random ones around 127 (bytes past 252
would put 12 x 2^(e - 128) beyond the largest float).

Beside OUT, mla.gguf holds DeepSeek's kv_b_proj as llama.cpp's converter splits it, per head
into attn_k_b (k's rows transposed) in Q8_0 and attn_v_b in Q5_1 (random blocks), and "kv_b.ref",
the Hugging Face tensor those halves join back into, from the gguf package's dequantization, for
model/gguf_mla.c.

Usage: make_gguf_blocks.py OUT.gguf"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

ROWS, COLS = 4, 512
TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL, T.IQ4_XS,
         T.F16, T.BF16, T.MXFP4]
# byte offsets of each type's f16 scales within a block
HALVES = {T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0], T.Q2_K: [80, 82], T.Q3_K: [108],
          T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208], T.IQ4_NL: [0], T.IQ4_XS: [0]}
E8M0_EDGES = [0, 1, 2, 127, 128, 160]
EDGES = np.array([0.0, -0.0, 1.0, -1.0, 65504.0, -65504.0, 2.0 ** -24, -(2.0 ** -14), 0.5], dtype=np.float16)

rng = np.random.default_rng(20261206)
w = GGUFWriter(sys.argv[1], "loom-blocks")
for t in TYPES:
    block, size = GGML_QUANT_SIZES[t]
    n_blocks = ROWS * COLS // block
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    if t == T.F16:
        raw = rng.normal(0, 1, size=ROWS * COLS).astype(np.float16).view(np.uint8).reshape(n_blocks, size)
    elif t == T.BF16:  # a random sign and mantissa, exponents from 2^-27 to 2^27
        bits = rng.integers(0, 1 << 16, size=ROWS * COLS, dtype=np.uint32).astype(np.uint16)
        bits = (bits & 0x807F) | (rng.integers(100, 155, size=ROWS * COLS).astype(np.uint16) << 7)
        raw = bits.view(np.uint8).reshape(n_blocks, size)
    if t == T.MXFP4:
        raw[:, 0] = rng.integers(100, 150, size=n_blocks)
        raw[:len(E8M0_EDGES), 0] = E8M0_EDGES
    for b in range(n_blocks):
        for off in HALVES.get(t, []):
            h = EDGES[b % len(EDGES)] if b < len(EDGES) else np.float16(rng.normal(0, 0.05))
            raw[b, off:off + 2] = np.frombuffer(np.float16(h).tobytes(), dtype=np.uint8)
    data = raw.reshape(ROWS, COLS // block * size)
    ref = dequantize(data, t).astype(np.float32).reshape(ROWS, COLS)
    assert np.isfinite(ref).all(), t.name
    w.add_tensor(t.name, data, raw_dtype=t)
    w.add_tensor(t.name + ".ref", ref)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

# DeepSeek's split kv_b_proj: 2 heads, kv_lora 64, nope 32, v 16
HEADS, LORA, NOPE, VD = 2, 64, 32, 16
rng = np.random.default_rng(20261207)
w = GGUFWriter(os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "mla.gguf"), "deepseek2")
halves = {}
for name, t, (rows, cols) in (("attn_k_b", T.Q8_0, (HEADS * LORA, NOPE)), ("attn_v_b", T.Q5_1, (HEADS * VD, LORA))):
    block, size = GGML_QUANT_SIZES[t]
    raw = rng.integers(0, 256, size=(rows * cols // block, size), dtype=np.uint8)
    for off in HALVES[t]:
        raw[:, off:off + 2] = np.frombuffer(np.float16(0.05).tobytes(), dtype=np.uint8)
    data = raw.reshape(HEADS, rows // HEADS, cols // block * size)
    halves[name] = dequantize(raw.reshape(rows, -1), t).astype(np.float32).reshape(HEADS, rows // HEADS, cols)
    w.add_tensor(f"blk.0.{name}.weight", data, raw_dtype=t)
k_b, v_b = halves["attn_k_b"], halves["attn_v_b"]  # [heads, lora, nope], [heads, v, lora]
ref = np.concatenate([k_b.transpose(0, 2, 1), v_b], axis=1).reshape(HEADS * (NOPE + VD), LORA)
w.add_tensor("kv_b.ref", np.ascontiguousarray(ref))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
