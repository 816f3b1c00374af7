"""GGUF models loom must refuse by name (src/model/gguf_*.c): each case rewrites a golden
GGUF with the gguf package (one key or tensor changed) and runs `loom plan -m` on it, which must
exit non-zero with a message naming the file and what it does not read. The golden files
themselves must load, so that a refusal is the change's and not the file's.

Usage: gguf_refusals.py LOOM SOURCE_DIR"""
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, GGUFValueType, GGUFWriter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util  # noqa: E402
from serve_util import check  # noqa: E402


def rewrite(src, dst, arch=None, keys=None, strip=(), drop=(), tensors=None, rename=None, edit=None):
    """src as dst: general.architecture `arch`, the keys in `keys` set ({name: (value, type)}) and
    those in `strip` left out, the tensors in `drop` left out, `tensors` ({name: (array, raw
    type)}) added, and tensor names renamed by `rename` ({old: new}); edit(writer), if given,
    called after the keys."""
    r = GGUFReader(src)
    old_arch = r.fields["general.architecture"].contents()
    arch = arch or old_arch
    w = GGUFWriter(dst, arch)
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key in strip:
            continue
        key = key.replace(f"{old_arch}.", f"{arch}.", 1)
        if field.types[0] == GGUFValueType.ARRAY:
            w.add_key_value(key, field.contents(), field.types[0], sub_type=field.types[-1])
        else:
            w.add_key_value(key, field.contents(), field.types[0])
    for key, (value, vtype) in (keys or {}).items():
        w.add_key_value(key, value, vtype)
    if edit:
        edit(w)
    for t in r.tensors:
        if t.name not in drop:
            w.add_tensor((rename or {}).get(t.name, t.name), np.array(t.data), raw_dtype=t.tensor_type)
    for name, (data, raw) in (tensors or {}).items():
        w.add_tensor(name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def plan(loom, path, load=False):
    """`loom plan` on the file, or where the weights must be read, a one-token run."""
    cmd = ["bench", "latency", "--input-len", "2", "--output-len", "1", "--batch-size", "1"] if load else ["plan"]
    r = subprocess.run([*loom.split(), *cmd, "-m", path], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def main():
    loom, root = sys.argv[1], sys.argv[2]
    moe = os.path.join(root, "tests/golden/gguf_qwen2_moe/model.gguf")
    dense = os.path.join(root, "tests/golden/gguf_qwen2/model.gguf")
    mla = os.path.join(root, "tests/golden/gguf_deepseek_v3/model.gguf")
    phi3 = os.path.join(root, "tests/golden/gguf_phi3/model.gguf")
    oss = os.path.join(root, "tests/golden/gguf_gpt_oss/model.gguf")
    granite = os.path.join(root, "tests/golden/gguf_granitemoe/model.gguf")
    ernie = os.path.join(root, "tests/golden/gguf_ernie4_5_moe/model.gguf")
    for path in (moe, dense, mla, phi3, oss, granite, ernie):
        rc, out = plan(loom, path)
        check(rc == 0, f"{path} does not load: {out[-400:]}")
    u32, i32 = GGUFValueType.UINT32, GGUFValueType.INT32
    iq2 = np.zeros((512, 66), dtype=np.uint8)  # gguf_qwen2's ffn_gate, [512, 256], in IQ2_XXS (66 bytes a block)
    cases = [
        ("a hybrid architecture llama.cpp defines that loom does not run", moe, {"arch": "granitehybrid"},
         "general.architecture 'granitehybrid' is not one loom runs (GGUF: llama, qwen2, qwen3, gemma2, gemma3"),
        ("an architecture loom does not run", moe, {"arch": "mamba"},
         "general.architecture 'mamba' is not one loom runs (GGUF: llama, qwen2, qwen3, gemma2, gemma3, qwen2moe"),
        ("experts' weights scaled", moe, {"keys": {"qwen2moe.expert_weights_scale": (2.5, GGUFValueType.FLOAT32)}},
         "key 'qwen2moe.expert_weights_scale' is not supported"),
        ("a sigmoid router", moe, {"keys": {"qwen2moe.expert_gating_func": (2, u32)}},
         "key 'qwen2moe.expert_gating_func' is 2 (1, softmax, is read)"),
        ("experts in an architecture llama.cpp has no MoE form of", dense, {"keys": {"qwen2.expert_count": (8, u32)}},
         "key 'qwen2.expert_count': experts in a 'qwen2' file are not supported"),
        ("a tensor loom has no name for", moe, {"rename": {"blk.1.ffn_norm.weight": "blk.1.ffn_sub_norm.weight"}},
         "tensor 'blk.1.ffn_sub_norm.weight' (F32) is not one of a qwen2moe model that loom reads"),
        ("a block type loom does not decode", dense,
         {"drop": ["blk.0.ffn_gate.weight"], "tensors": {"blk.0.ffn_gate.weight": (iq2, T.IQ2_XXS)}},
         "tensor 'blk.0.ffn_gate.weight' has type IQ2_XXS, which loom does not decode"),
        ("a missing expert tensor", moe, {"drop": ["blk.1.ffn_up_exps.weight"], "load": True},
         "model.layers.1.mlp.experts.up_proj.weight"),
        ("a missing expert count", moe, {"strip": ["qwen2moe.expert_count"]},
         "missing key 'qwen2moe.expert_count'"),
        ("Granite's logit multiplier in a Qwen2", dense, {"keys": {"qwen2.logit_scale": (8.0, GGUFValueType.FLOAT32)}},
         "key 'qwen2.logit_scale' is not supported"),
        ("longrope's long factors without the short ones", phi3, {"drop": ["rope_factors_short.weight"]},
         "or tensors 'rope_factors_short.weight' and 'rope_factors_long.weight': not two of them, nor one of the last two"),
        ("a rotary width over a head's", phi3, {"strip": ["phi3.rope.dimension_count"],
                                               "keys": {"phi3.rope.dimension_count": (40, u32)}},
         "phi3.rope.dimension_count 40: a head has 16 features"),
        ("half of a latent attention's kv_b_proj", mla, {"drop": ["blk.1.attn_k_b.weight"], "load": True},
         "tensor 'blk.1.attn_v_b.weight' without 'blk.1.attn_k_b.weight'"),
        ("latent attention without its rank", mla, {"strip": ["deepseek2.attention.kv_lora_rank"]},
         "deepseek2.attention.kv_lora_rank, rope.dimension_count and key_length_mla"),
        ("a DeepSeek router of another gating function", mla, {"strip": ["deepseek2.expert_gating_func"],
                                                              "keys": {"deepseek2.expert_gating_func": (3, u32)}},
         "key 'deepseek2.expert_gating_func' is 3 (1, softmax, or 2, sigmoid, is read)"),
        ("GraniteMoeShared's shared expert", granite,
         {"keys": {"granitemoe.expert_shared_feed_forward_length": (32, u32)}},
         "key 'granitemoe.expert_shared_feed_forward_length': a shared expert in a 'granitemoe' file "
         "(GraniteMoeForCausalLM has none) is not supported"),
        ("ERNIE's shared experts' width against their count", ernie,
         {"strip": ["ernie4_5-moe.expert_shared_feed_forward_length"],
          "keys": {"ernie4_5-moe.expert_shared_feed_forward_length": (24, u32)}},
         "key 'ernie4_5-moe.expert_shared_feed_forward_length' is 24, not expert_shared_count 1 x "
         "expert_feed_forward_length 48"),
        ("ERNIE without its MoE layers' step", ernie, {"strip": ["ernie4_5-moe.interleave_moe_layer_step"]},
         "missing key 'ernie4_5-moe.interleave_moe_layer_step'"),
        ("ERNIE's layer step in another MoE", moe, {"keys": {"qwen2moe.interleave_moe_layer_step": (2, u32)}},
         "key 'qwen2moe.interleave_moe_layer_step' is not supported"),
        ("a GPT-OSS expert's missing up bias", oss, {"drop": ["blk.1.ffn_up_exps.bias"], "load": True},
         "model.layers.1.mlp.experts.up_proj.bias"),
        ("a bias on an expert projection of a model whose experts have none", moe,
         {"tensors": {"blk.0.ffn_up_exps.bias": (np.zeros((4, 64), dtype=np.float32), T.F32)}},
         "tensor 'blk.0.ffn_up_exps.bias' (F32) is not one of a qwen2moe model that loom reads"),
        ("YaRN's extrapolation factor", oss, {"keys": {"gpt-oss.rope.scaling.yarn_ext_factor": (0.5, GGUFValueType.FLOAT32)}},
         "key 'gpt-oss.rope.scaling.yarn_ext_factor' is not supported"),
        ("a negative experts used count", moe, {"strip": ["qwen2moe.expert_used_count"], "keys": {"qwen2moe.expert_used_count": (-1, i32)}}, "num_experts_per_tok"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (what, src, change, want) in enumerate(cases):
            path = os.path.join(tmp, f"case{i}.gguf")
            load = change.pop("load", False)
            rewrite(src, path, **change)
            rc, out = plan(loom, path, load)
            ok = rc != 0 and want in out and path in out and "Sanitizer" not in out
            check(ok, f"{what}: exit {rc}, expected a refusal naming {path} and holding '{want}', got: {out[-500:]}")
            print(f"{'ok' if ok else 'FAILED'}: {what}: {out.strip().splitlines()[-1] if out.strip() else ''}")
    print(f"{len(cases)} refusals checked, {serve_util.failures} failed")
    return 1 if serve_util.failures else 0


if __name__ == "__main__":
    sys.exit(main())
