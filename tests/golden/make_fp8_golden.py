#!/usr/bin/env python3
"""FP8 golden checkpoints for loom's FP8 readers (src/quant/fp8.c).

Run (in a venv with torch 2.13.0+cpu and transformers 5.24.0; see tests/golden/README.md):
    python3 tests/golden/make_fp8_golden.py             (all cases)
    python3 tests/golden/make_fp8_golden.py fp8_llama   (a subset)

Each case quantizes a float model's decoder linears to FP8 by hand, as llm-compressor's
presets and DeepSeek's checkpoints store them: scale = amax / max (per tensor, per output
channel or per block), cast to the scale's stored dtype first, then the weight divided by the
stored scale, clamped to +-max and cast with torch (round to nearest even). The dequantized
weight is fp8.float() * scale in fp32, one rounding, as loom computes it; the golden logits
come from transformers running the float model on those weights (eager attention, fp32).

Cases with FP8 activations also store `logits_w8a8_*`: the same model with every quantized
linear's input rounded as vLLM's W8A8 path rounds it (static: fp8(x * (1/s)) * s with the
checkpoint's input_scale; dynamic per token: s = max(amax / 448, 1 / (448 * 512)); per group:
s = max(amax, 1e-10) / 448 and fp8(x / s)), the casts done by torch.
"""
import json
import os
import sys
import tempfile
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_golden as mg  # noqa: E402
import make_quant_golden as mq  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402

warnings.filterwarnings("ignore")

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FP8_MAX = {E4M3: 448.0, E5M2: 57344.0}
SCALE_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}

# llama_tp3's shape (make_golden.py): every sharded dimension divides by 3
TP3 = dict(hidden_size=96, num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=3, head_dim=16,
           intermediate_size=96, vocab_size=120, max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1,
           eos_token_id=2, tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})

# case -> (base, options). base: an architecture of make_quant_golden.py (a fresh model), "tp3"
# (llama_tp3's shape), or "dir:<case>" (a float golden folder's model, quantized).
CASES = {
    # compressed-tensors FP8 preset: per-tensor weights, static per-tensor activations
    "fp8_llama": ("llama", dict(method="ct", weights="tensor", act="static", dtype=E4M3, scale="F32")),
    # FP8_DYNAMIC: per-channel weights ([out, 1] BF16 scales), dynamic per-token activations
    "fp8_qwen2": ("qwen2", dict(method="ct", weights="channel", act="token", dtype=E4M3, scale="BF16")),
    # FP8_BLOCK: [128, 128] blocks (F16 scales), dynamic groups of 128, on a mixture of experts
    "fp8_mixtral": ("mixtral", dict(method="ct", weights="block", block=[128, 128], act="group", dtype=E4M3,
                                    scale="F16")),
    # DeepSeek-V3's layout: quant_method "fp8", weight_scale_inv per [32, 32] block (at hidden 64 a
    # [128, 128] block would be the whole matrix), MLA projections and experts quantized, the router
    # and the head not; an unused multi-token-prediction layer's tensors beside them
    "fp8_deepseek_v3": ("dir:deepseek_v3_skewed", dict(method="fp8", weights="block", block=[32, 32], act="group",
                                                       dtype=E4M3, scale="F32", mtp=True)),
    # E5M2 codes in [64, 64] blocks of a 96-wide model: a split over 3 ranks cuts blocks
    "fp8_tp3": ("tp3", dict(method="fp8", weights="block", block=[64, 64], act="group", dtype=E5M2, scale="F32",
                            fmt="e5m2")),
}

SKIP = ("mlp.gate.", "lm_head", "embed_tokens", "block_sparse_moe.gate.")  # routers, head, embedding: float


def quantizable(name, t):
    return t.dim() == 2 and name.endswith(".weight") and not any(s in name for s in SKIP) and \
        "norm" not in name.split(".")[-2]


def quantize(w, o):
    """FP8 codes, the stored scale, and the dequantized weight."""
    fmax, out, inf = FP8_MAX[o["dtype"]], w.shape[0], w.shape[1]
    sdt = SCALE_DTYPES[o["scale"]]
    if o["weights"] == "tensor":
        s = (w.abs().amax() / fmax).reshape(1).to(sdt)
        full = s.float().expand(out, inf)
    elif o["weights"] == "channel":
        s = (w.abs().amax(1, keepdim=True) / fmax).to(sdt)
        full = s.float().expand(out, inf)
    else:
        bh, bw = o["block"]
        nb_r, nb_c = -(-out // bh), -(-inf // bw)
        s = torch.empty(nb_r, nb_c)
        for i in range(nb_r):
            for j in range(nb_c):
                s[i, j] = w[i * bh:(i + 1) * bh, j * bw:(j + 1) * bw].abs().amax() / fmax
        s = s.to(sdt)
        full = s.float().repeat_interleave(bh, 0)[:out].repeat_interleave(bw, 1)[:, :inf]
    q = (w / full).clamp(-fmax, fmax).to(o["dtype"])
    return q, s, q.float() * full


def fake_quant(x, o, input_scale):
    """x as vLLM's W8A8 path rounds a linear's input (E4M3 activations)."""
    x = x.float()
    if o["act"] == "static":
        s = input_scale
        return (x * (1.0 / s)).clamp(-448, 448).to(E4M3).float() * s
    if o["act"] == "token":
        s = torch.clamp(x.abs().amax(-1, keepdim=True) / 448, min=1.0 / (448 * 512))
        return (x * (1.0 / s)).clamp(-448, 448).to(E4M3).float() * s
    g, out = o["block"][1], torch.empty_like(x)
    for c in range(0, x.shape[-1], g):  # the last group may be short
        xs = x[..., c:c + g]
        s = xs.abs().amax(-1, keepdim=True).clamp(min=1e-10) / 448
        out[..., c:c + g] = (xs / s).clamp(-448, 448).to(E4M3).float() * s
    return out


def quant_config(o):
    if o["method"] == "fp8":
        return {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": o.get("fmt", "e4m3"),
                "weight_block_size": o["block"]}
    weights = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False, "strategy": o["weights"],
               "block_structure": o.get("block"), "group_size": None, "actorder": None}
    act = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "tensor" if o["act"] == "static" else o["act"],
           "dynamic": o["act"] != "static", "group_size": o["block"][1] if o["act"] == "group" else None}
    return {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
            "ignore": ["lm_head", "re:.*block_sparse_moe.gate$"], "kv_cache_scheme": None,
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": act,
                                          "output_activations": None}}}


def float_model(idx, base, out_dir):
    """The float model of a case, saved into out_dir: (model class, config dict, state dict)."""
    if base.startswith("dir:"):
        src = os.path.join(HERE, base[4:])
        cfg = json.load(open(os.path.join(src, "config.json")))
        sd = load_file(os.path.join(src, "model.safetensors"))
        return AutoModelForCausalLM, cfg, sd
    if base == "tp3":
        model_cls, cfg_cls, kw = LlamaForCausalLM, LlamaConfig, TP3
    else:
        model_cls, cfg_cls, kw = mq.ARCHS[base]
    torch.manual_seed(9100 + idx)
    model = model_cls(cfg_cls(**kw)).eval()
    mg.reinit(model, {})
    model.save_pretrained(out_dir, safe_serialization=True)
    mg.clean_dir(out_dir)
    return model_cls, json.load(open(os.path.join(out_dir, "config.json"))), \
        load_file(os.path.join(out_dir, "model.safetensors"))


@torch.no_grad()
def calibrate(model, ids, names):
    """Each quantized linear's input amax over both sequences (static input scales)."""
    amax, hooks = {}, []
    for n, m in model.named_modules():
        if n + ".weight" in names:
            hooks.append(m.register_forward_pre_hook(
                lambda mod, args, n=n: amax.__setitem__(n, max(amax.get(n, 0.0), args[0].abs().max().item()))))
    for s in ids:
        model(input_ids=s[None, :], use_cache=False)
    for h in hooks:
        h.remove()
    return amax


def build(idx, name, base, o):
    out_dir = os.path.join(HERE, name)
    os.makedirs(out_dir, exist_ok=True)
    model_cls, cfg, float_sd = float_model(idx, base, out_dir)
    vocab = cfg["vocab_size"]
    gen_ids = torch.Generator().manual_seed(5321 + idx)
    ids = [mg.make_ids(gen_ids, vocab, p + mg.DECODE_STEPS) for p in mg.PREFILL]

    sd, deq_sd = {}, {}
    names = [k for k in sorted(float_sd) if quantizable(k, float_sd[k])]
    input_scale = {}
    if o["act"] == "static":
        with tempfile.TemporaryDirectory() as tmp:
            save_file(float_sd, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
            json.dump(cfg, open(os.path.join(tmp, "config.json"), "w"))
            fm = model_cls.from_pretrained(tmp, dtype=torch.float32, attn_implementation="eager").eval()
        amax = calibrate(fm, ids, set(names))
        # one scale per input: q, k and v (and gate and up) read the same one, as calibration finds
        input_scale = {k: torch.tensor([amax[k[:-len(".weight")]] / 448], dtype=torch.float32) for k in names}
    for k in sorted(float_sd):
        t = float_sd[k]
        if k not in names:
            sd[k] = t
            continue
        q, s, deq = quantize(t, o)
        prefix = k[:-len(".weight")]
        sd[k] = q.contiguous()
        scale_key = "weight_scale_inv" if o["method"] == "fp8" else "weight_scale"
        sd[f"{prefix}.{scale_key}"] = s.contiguous()
        if o["act"] == "static":
            sd[f"{prefix}.input_scale"] = input_scale[k]
        deq_sd[k] = deq
    if o.get("mtp"):  # DeepSeek-V3's multi-token-prediction layer: stored, never run
        n = cfg["num_hidden_layers"]
        q, s, _ = quantize(torch.randn(cfg["hidden_size"], 2 * cfg["hidden_size"]) * 0.15, o)
        sd[f"model.layers.{n}.eh_proj.weight"], sd[f"model.layers.{n}.eh_proj.weight_scale_inv"] = q, s
        sd[f"model.layers.{n}.enorm.weight"] = torch.ones(cfg["hidden_size"])
    save_file(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    cfg_out = {k: v for k, v in cfg.items() if k != "quantization_config"}
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump({**cfg_out, "quantization_config": quant_config(o)}, f, indent=2, sort_keys=True)

    with tempfile.TemporaryDirectory() as tmp:
        save_file({**float_sd, **deq_sd}, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        json.dump(cfg_out, open(os.path.join(tmp, "config.json"), "w"))
        ref = model_cls.from_pretrained(tmp, dtype=torch.float32, attn_implementation="eager").eval()
    logits = [mg.full_logits(ref, s) for s in ids]
    for i in range(2):
        assert logits[i].std(dim=-1).min().item() > 0.5, f"{name}: logits too flat"
        inc = mg.incremental_logits(ref, ids[i], mg.PREFILL[i])
        d = (inc - mg.full_logits(ref, ids[i])).abs().max().item()
        assert d <= mq.INCR_TOL, f"{name}: transformers' KV-cache path differs from its full forward by {d}"
    tensors = {"ids_0": ids[0].contiguous(), "ids_1": ids[1].contiguous(), "logits_0": logits[0].contiguous(),
               "logits_1": logits[1].contiguous()}
    if o["act"] in ("static", "token") or base == "tp3":  # dense models: every linear is an nn.Linear
        hooks = []
        for n, m in ref.named_modules():
            if n + ".weight" in deq_sd:
                sc = input_scale[n + ".weight"].item() if input_scale else None
                hooks.append(m.register_forward_pre_hook(
                    lambda mod, args, sc=sc: (fake_quant(args[0], o, sc),) + tuple(args[1:])))
        for i in range(2):
            tensors[f"logits_w8a8_{i}"] = mg.full_logits(ref, ids[i]).contiguous()
        for h in hooks:
            h.remove()
        d = max((tensors[f"logits_w8a8_{i}"] - logits[i]).abs().max().item() for i in range(2))
        print(f"{name}: W8A8 logits differ from weight-only ones by up to {d:.3g}")
    import transformers
    meta = {"prefill_0": str(mg.PREFILL[0]), "prefill_1": str(mg.PREFILL[1]), "decode_steps": str(mg.DECODE_STEPS),
            "transformers": transformers.__version__, "torch": torch.__version__, "case": name, "atol": "1e-4",
            "oracle": "transformers on the dequantized weights"}
    mg.save_safetensors(tensors, os.path.join(out_dir, "golden.safetensors"), meta)
    size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
    assert size < 1 << 21, f"{name}: {size} bytes, too big"
    return {"bytes": size, "quantized": len(names)}


def main():
    wanted = sys.argv[1:] or list(CASES)
    for name in wanted:
        base, o = CASES[name]
        info = build(list(CASES).index(name), name, base, o)
        print(f"{name:16s} {json.dumps(info)}", flush=True)


if __name__ == "__main__":
    main()
