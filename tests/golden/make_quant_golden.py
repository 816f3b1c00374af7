#!/usr/bin/env python3
"""Quantized golden checkpoints for loom's GPTQ, AWQ and compressed-tensors readers.

Run (in a venv with torch 2.13.0+cpu, transformers 5.24.0, compressed-tensors, and the
GPTQModel and AutoAWQ sources installed with --no-deps; see tests/golden/README.md):
    python3 tests/golden/make_quant_golden.py            (all cases)
    python3 tests/golden/make_quant_golden.py gptq_llama (a subset)

For each case, tests/golden/<case>/ gets config.json (with its quantization_config),
model.safetensors (the quantized linears in the format's tensors, the rest in fp32) and
golden.safetensors (ids and logits, as make_golden.py writes them).

How each format's tensors are made, and where the logits come from:
  - GPTQ: GPTQModel's own TorchLinear.pack packs the codes, scales, zero points and g_idx;
    for checkpoint_format "gptq" GPTQModel's convert_gptq_v2_to_v1_format_module then stores
    the zero points minus one, as GPTQ checkpoints do. The packing is verified with
    GPTQModel's dequantize_weight. GPTQModel's kernels need a GPU, so the logits come from
    transformers on the dequantized weights.
  - AWQ: AutoAWQ's WQLinear_GEMM.from_linear packs; AutoAWQ's unpack_awq and
    reverse_awq_order must give back the codes and zero points exactly. Logits from
    transformers on the dequantized weights (AutoAWQ's kernels need a GPU).
  - compressed-tensors: the library's pack_to_int32 packs; unpack_from_int32 must give the
    codes back. For symmetric schemes transformers then loads the written checkpoint itself
    (its compressed-tensors integration decompresses on the CPU), and those logits are the
    golden ones; they must also match the dequantized float model. For asymmetric
    pack-quantized, transformers 5.24 cannot load what compressed-tensors 0.20 writes (it
    expects unpacked zero points), nor quantized per-expert tensors of a mixture (it fuses
    experts into 3-D tensors on load), so those logits come from the dequantized weights.

The codes come from round-to-nearest quantization of seeded random weights (no calibration:
the oracle is the format, not the quantizer). Dequantized weights are (q - zero) * scale in
fp32, exact, as loom computes them.
"""
import json
import os
import sys
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_golden as mg  # noqa: E402  (shared: ids, logits, golden file writer)
from safetensors.torch import save_file  # noqa: E402
from transformers import (LlamaConfig, LlamaForCausalLM, MixtralConfig,  # noqa: E402
                          MixtralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

warnings.filterwarnings("ignore")

# every sharded dimension divides by 4 in whole groups of 32 and whole packed int32s
SHAPE = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=256, vocab_size=128, max_position_embeddings=256, rms_norm_eps=1e-5,
             bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
ARCHS = {
    "llama": (LlamaForCausalLM, LlamaConfig, dict(SHAPE)),
    "qwen2": (Qwen2ForCausalLM, Qwen2Config, dict(SHAPE, use_sliding_window=False)),
    "mixtral": (MixtralForCausalLM, MixtralConfig, dict(SHAPE, num_local_experts=4, num_experts_per_tok=2)),
}
# case -> (arch, format, options)
CASES = {
    "gptq_llama": ("llama", "gptq", dict(bits=4, group=32, sym=False, act_order=True, v1=True)),
    "gptq_qwen2": ("qwen2", "gptq", dict(bits=8, group=-1, sym=True, act_order=False, v1=False)),
    "gptq_mixtral": ("mixtral", "gptq", dict(bits=4, group=64, sym=False, act_order=False, v1=True)),
    "awq_llama": ("llama", "awq", dict(bits=4, group=32)),
    "awq_qwen2": ("qwen2", "awq", dict(bits=4, group=64)),
    "ct_llama": ("llama", "ct-pack", dict(bits=4, group=32, sym=False, act_order=False)),
    "ct_qwen2": ("qwen2", "ct-pack", dict(bits=8, group=0, sym=True, act_order=False)),
    "ct_mixtral": ("mixtral", "ct-int", dict(bits=8, group=0, sym=True, act_order=False)),
    "awq_mixtral": ("mixtral", "awq", dict(bits=4, group=32)),  # last: each case's seed is its index
}

# transformers' KV-cache path against its own full forward (a check of the reference, not of
# loom): these models are twice make_golden.py's width, and the MoE's accumulate to 1.3e-5
INCR_TOL = 5e-5

QUANTIZED = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "w1", "w2", "w3")


def quantizable(name, t):
    """Decoder linears (attention, MLP, experts); not routers, norms, embeddings, LM head."""
    parts = name.split(".")
    return t.dim() == 2 and name.endswith(".weight") and len(parts) > 2 and parts[-2] in QUANTIZED


def rtn(w, bits, group, sym, act_order, gen, v1):
    """Round-to-nearest codes q [out, in] (unsigned), scales and zeros [out, groups], and each
    input feature's group (act-order: a shuffled assignment, as desc_act produces)."""
    out, inf = w.shape
    g = group if group > 0 else inf
    groups = inf // g
    if act_order:
        g_idx = torch.randperm(inf, generator=gen) % groups
    else:
        g_idx = torch.arange(inf) // g
    qmax = (1 << bits) - 1
    scales = torch.empty(out, groups)
    zeros = torch.empty(out, groups, dtype=torch.int64)
    for k in range(groups):
        cols = w[:, g_idx == k]
        if sym:
            s = cols.abs().amax(1) / ((qmax - 1) / 2)
            z = torch.full((out,), (qmax + 1) // 2, dtype=torch.int64)
        else:
            lo, hi = cols.amin(1).clamp(max=0), cols.amax(1).clamp(min=0)
            s = (hi - lo) / qmax
            z = torch.round(-lo / s).long().clamp(1 if v1 else 0, qmax)  # v1 cannot store zero point 0
        scales[:, k], zeros[:, k] = s, z
    return g_idx.int(), scales, zeros


def codes_for(w, g_idx, scales, zeros, bits):
    s, z = scales[:, g_idx.long()], zeros[:, g_idx.long()]
    return (torch.round(w / s) + z).clamp(0, (1 << bits) - 1).long()


def dequant(q, g_idx, scales, zeros):
    return (q - zeros[:, g_idx.long()]).float() * scales[:, g_idx.long()].float()


def pack_gptq(name, w, o, gen, sd):
    from gptqmodel.nn_modules.qlinear.torch import TorchLinear
    from gptqmodel.utils.model import convert_gptq_v2_to_v1_format_module
    g_idx, scales, zeros = rtn(w, o["bits"], o["group"], o["sym"], o["act_order"], gen, o["v1"])
    scales = scales.half()
    q = codes_for(w, g_idx, scales.float(), zeros, o["bits"])
    deq = dequant(q, g_idx, scales, zeros)
    out, inf = w.shape
    lin = torch.nn.Linear(inf, out, bias=False)
    lin.weight.data = deq.clone()
    m = TorchLinear(bits=o["bits"], group_size=o["group"], sym=o["sym"], desc_act=o["act_order"], in_features=inf,
                    out_features=out, bias=False)
    m.pack(lin, scales.contiguous(), zeros.contiguous(), g_idx)
    # GPTQModel's own dequantization (fp16) must give the same weights
    back = m.dequantize_weight().t().float()
    assert torch.allclose(back, deq, rtol=2e-3, atol=1e-6), f"{name}: GPTQModel does not unpack what it packed"
    if o["v1"]:
        from types import SimpleNamespace
        convert_gptq_v2_to_v1_format_module(m, SimpleNamespace(bits=o["bits"], pack_dtype=torch.int32))
    prefix = name[: -len(".weight")]
    for k in ("qweight", "qzeros", "scales"):
        sd[f"{prefix}.{k}"] = getattr(m, k).detach().clone().contiguous()
    if o["act_order"]:
        sd[f"{prefix}.g_idx"] = m.g_idx.detach().clone().int().contiguous()
    return deq


def pack_awq(name, w, o, gen, sd):
    from awq.modules.linear.gemm import WQLinear_GEMM
    from awq.utils.packing_utils import reverse_awq_order, unpack_awq
    g_idx, scales, zeros = rtn(w, 4, o["group"], False, False, gen, False)
    scales = scales.half()
    q = codes_for(w, g_idx, scales.float(), zeros, 4)
    deq = dequant(q, g_idx, scales, zeros)
    out, inf = w.shape
    lin = torch.nn.Linear(inf, out, bias=False)
    lin.weight.data = deq.clone()
    # AutoAWQ takes scales and zeros as [groups, out], as it stores them
    m = WQLinear_GEMM.from_linear(lin, 4, o["group"], scales=scales.t().contiguous(),
                                  zeros=zeros.t().contiguous().half())
    iw, iz = unpack_awq(m.qweight, m.qzeros, 4)
    iw, iz = reverse_awq_order(iw, iz, 4)
    assert torch.equal(iw.long() & 15, q.t()), f"{name}: AutoAWQ's unpacking does not give the codes back"
    assert torch.equal(iz.long() & 15, zeros.t()), f"{name}: AutoAWQ's unpacking does not give the zeros back"
    prefix = name[: -len(".weight")]
    for k in ("qweight", "qzeros", "scales"):
        sd[f"{prefix}.{k}"] = getattr(m, k).detach().clone().contiguous()
    return deq


def pack_ct(name, w, o, gen, sd, fmt):
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32, unpack_from_int32
    g_idx, scales, zeros = rtn(w, o["bits"], o["group"], o["sym"], o["act_order"], gen, False)
    q = codes_for(w, g_idx, scales, zeros, o["bits"])
    deq = dequant(q, g_idx, scales, zeros)
    mid = 1 << (o["bits"] - 1)
    signed = (q - mid).to(torch.int8)
    prefix = name[: -len(".weight")]
    sd[f"{prefix}.weight_scale"] = scales.contiguous()
    if fmt == "ct-int":
        sd[f"{prefix}.weight"] = signed.contiguous()
    else:
        packed = pack_to_int32(signed, o["bits"])
        assert torch.equal(unpack_from_int32(packed, o["bits"], signed.shape), signed), f"{name}: unpack differs"
        sd[f"{prefix}.weight_packed"] = packed
        sd[f"{prefix}.weight_shape"] = torch.tensor(list(w.shape), dtype=torch.int64)
    if not o["sym"]:
        zp = (zeros - mid).to(torch.int8)
        if fmt == "ct-int":
            sd[f"{prefix}.weight_zero_point"] = zp.contiguous()
        else:
            pz = pack_to_int32(zp, o["bits"], packed_dim=0)
            assert torch.equal(unpack_from_int32(pz, o["bits"], zp.shape, packed_dim=0), zp)
            sd[f"{prefix}.weight_zero_point"] = pz.contiguous()
    if o["act_order"]:
        sd[f"{prefix}.weight_g_idx"] = g_idx.contiguous()
    return deq


def quant_config(fmt, o):
    if fmt == "gptq":
        return {"quant_method": "gptq", "bits": o["bits"], "group_size": o["group"], "sym": o["sym"],
                "desc_act": o["act_order"], "checkpoint_format": "gptq" if o["v1"] else "gptq_v2", "lm_head": False}
    if fmt == "awq":
        return {"quant_method": "awq", "bits": 4, "group_size": o["group"], "zero_point": True, "version": "gemm",
                "modules_to_not_convert": ["gate"]}
    weights = {"num_bits": o["bits"], "type": "int", "symmetric": o["sym"],
               "strategy": "group" if o["group"] else "channel", "group_size": o["group"] or None,
               "actorder": "group" if o["act_order"] else None, "dynamic": False}
    return {"quant_method": "compressed-tensors", "format": "pack-quantized" if fmt == "ct-pack" else "int-quantized",
            "quantization_status": "compressed", "ignore": ["lm_head", "re:.*block_sparse_moe.gate"],
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": None,
                                          "output_activations": None}}}


def build(idx, name, arch, fmt, o):
    model_cls, cfg_cls, kw = ARCHS[arch]
    out_dir = os.path.join(HERE, name)
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(9000 + idx)
    model = model_cls(cfg_cls(**kw)).eval()
    mg.reinit(model, {})
    model.save_pretrained(out_dir, safe_serialization=True)
    mg.clean_dir(out_dir)
    from safetensors.torch import load_file
    float_sd = load_file(os.path.join(out_dir, "model.safetensors"))
    gen = torch.Generator().manual_seed(77 + idx)
    sd, deq_sd = {}, {}
    for k in sorted(float_sd):
        t = float_sd[k]
        if not quantizable(k, t):
            sd[k] = t
            continue
        if fmt == "gptq":
            deq_sd[k] = pack_gptq(k, t, o, gen, sd)
        elif fmt == "awq":
            deq_sd[k] = pack_awq(k, t, o, gen, sd)
        else:
            deq_sd[k] = pack_ct(k, t, o, gen, sd, fmt)
    save_file(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    cfg_path = os.path.join(out_dir, "config.json")
    cfg = json.load(open(cfg_path))
    with open(cfg_path, "w") as f:
        json.dump({**cfg, "quantization_config": quant_config(fmt, o)}, f, indent=2, sort_keys=True)

    # the reference: the float model with the dequantized weights, in fp32, loaded by
    # transformers from a folder as it would load the float checkpoint
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        save_file({**float_sd, **deq_sd}, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump({k: v for k, v in cfg.items() if k != "quantization_config"}, f)
        ref = model_cls.from_pretrained(tmp, dtype=torch.float32, attn_implementation="eager").eval()
    gen_ids = torch.Generator().manual_seed(4321 + idx)
    ids = [mg.make_ids(gen_ids, kw["vocab_size"], p + mg.DECODE_STEPS) for p in mg.PREFILL]
    logits = [mg.full_logits(ref, s) for s in ids]
    source = "transformers on the dequantized weights"
    if fmt.startswith("ct") and o["sym"] and arch != "mixtral":
        # transformers loads the compressed-tensors checkpoint itself; its logits are the oracle
        # (not for asymmetric pack-quantized: transformers 5.24 expects the zero points
        # unpacked, [out, groups], while compressed-tensors 0.20 packs them along the outputs;
        # nor a mixture's per-expert quantized tensors, which it would fuse into 3-D ones)
        m = model_cls.from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager").eval()
        loaded = [mg.full_logits(m, s) for s in ids]
        d = max((a - b).abs().max().item() for a, b in zip(loaded, logits))
        assert d < 1e-4, f"{name}: transformers' loading differs from the dequantized model by {d}"
        logits, source = loaded, "transformers loading the checkpoint (compressed-tensors)"
    for i in range(2):
        assert logits[i].std(dim=-1).min().item() > 0.5, f"{name}: logits too flat"
        inc = mg.incremental_logits(ref, ids[i], mg.PREFILL[i])
        d = (inc - mg.full_logits(ref, ids[i])).abs().max().item()
        assert d <= INCR_TOL, f"{name}: transformers' KV-cache path differs from its full forward by {d}"
    tensors = {"ids_0": ids[0].contiguous(), "ids_1": ids[1].contiguous(), "logits_0": logits[0].contiguous(),
               "logits_1": logits[1].contiguous()}
    import transformers
    meta = {"prefill_0": str(mg.PREFILL[0]), "prefill_1": str(mg.PREFILL[1]), "decode_steps": str(mg.DECODE_STEPS),
            "transformers": transformers.__version__, "torch": torch.__version__, "case": name, "atol": "1e-4",
            "oracle": source}
    mg.save_safetensors(tensors, os.path.join(out_dir, "golden.safetensors"), meta)
    size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
    assert size < 1 << 21, f"{name}: {size} bytes, too big"
    return {"oracle": source, "bytes": size}


def main():
    wanted = sys.argv[1:] or list(CASES)
    for name in wanted:
        arch, fmt, o = CASES[name]
        info = build(list(CASES).index(name), name, arch, fmt, o)
        print(f"{name:14s} {json.dumps(info)}", flush=True)


if __name__ == "__main__":
    main()
