"""GGUF golden models: small random models written as llama.cpp's converter writes them, and
transformers' logits for them, loaded from the GGUF itself (`from_pretrained(...,
gguf_file=...)`, which dequantizes with the gguf package).

Every linear is a different block type, so that each type loom decodes meets transformers in a
real forward pass: the codes are random bytes and the f16 scales random around a size that
keeps the activations in range, so the weights are whatever those blocks mean, as in any
quantized file. Layer 0 and 1 together cover Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q4_0, Q4_1, Q5_0,
Q5_1, Q8_0, IQ4_NL and IQ4_XS; norms and biases are F32. The shapes keep the row-parallel
linears splittable: o_proj (512 or 256 input features) has 32-weight blocks, down_proj (1024) k-quant
super-blocks, so tp = 2 and 4 cut no block. Four heads of 128 (Qwen2: of 64), two kv heads.

Cases (folder tests/golden/<case>/: model.gguf, golden.safetensors as make_golden.py writes it):
  gguf_llama   llama, q and k rows permuted into Meta's layout as llama.cpp's converter does,
               untied head
  gguf_qwen2   qwen2: q/k/v biases
  gguf_qwen3   qwen3: per-head q/k norms
  gguf_gemma3  gemma3: norms stored as 1 + w, sliding layers, tied embedding (Q8_0)
  gguf_qwen2_moe  qwen2moe: q/k/v biases; every layer 4 experts of 64 features, top 2, stacked as
               ffn_{gate,up,down}_exps, an F32 router, and the shared expert (128 features) with
               its sigmoid gate (ffn_gate_inp_shexp, stored 1-D)
  gguf_qwen3_moe  qwen3moe: per-head q/k norms, the same experts, top 2 renormalised (llama.cpp's
               rule for qwen3moe, which transformers' loader sets as norm_topk_prob), no shared one
               The experts' down_exps read 64 features in 32-weight blocks: they split 2 ways, not
               4. transformers' loader does not map expert_feed_forward_length (nor the shared
               one), so those two sizes are passed to from_pretrained beside the file
  gguf_llama3  the `llama` golden (Llama 3 RoPE scaling) converted as convert_hf_to_gguf.py does
               it, in F32: q/k rows permuted, the scaling written as rope_freqs.weight. Its
               golden is that case's own (transformers on the Hugging Face folder), because
               transformers' GGUF loader drops rope_freqs.weight and would run it unscaled
  gguf_llama3_split  the same file split as llama.cpp's gguf-split writes it, three parts
               (model-0000N-of-00003.gguf, eight tensors a part, split.* keys), with the same golden
  gguf_olmoe   the `olmoe` golden converted as convert_hf_to_gguf.py does it (F32, experts merged
               into ffn_*_exps, the router as ffn_gate_inp), with that case's golden: transformers'
               GGUF loader does not read olmoe
  gguf_mixtral the `mixtral` golden converted likewise: a `llama` file with expert_count, q/k rows
               in Meta's layout, w1/w3/w2 merged into ffn_{gate,up,down}_exps
  gguf_granite the `granite` golden converted likewise (arch granite: q/k in Meta's layout, its
               multipliers as attention.scale, embedding_scale, residual_scale and logit_scale)
  gguf_ernie4_5_moe  the `ernie4_5_moe` golden converted as Ernie4_5MoeModel does it (arch
               ernie4_5-moe): a dense first layer (leading_dense_block_count), the experts stacked,
               moe_statics' correction bias as exp_probs_b.bias, the shared expert as ffn_*_shexp
               with its width as expert_shared_feed_forward_length
  gguf_granitemoe the `granitemoe` golden converted as GraniteMoeModel does it (arch granitemoe):
               granite's keys, input_linear split into ffn_gate_exps (its first intermediate_size
               rows) and ffn_up_exps, output_linear as ffn_down_exps, router.layer as ffn_gate_inp
  gguf_phi3, gguf_phi4_mini  the `phi3` and `phi4_mini` goldens converted as Phi3MiniModel does
               it: fused attn_qkv and ffn_up (gate and up), longrope as rope_factors_short and
               rope_factors_long tensors with rope.scaling.original_context_length and the
               attention factor it computes (rope.scaling.attn_factor), the rotary width as
               rope.dimension_count (phi4_mini: 12 of 16), sliding_window 0 for none
  gguf_ernie4_5  the `ernie4_5` golden converted likewise: biases on every projection, rotary
               pairs interleaved as Hugging Face stores them (llama.cpp rotates adjacent pairs)
  gguf_deepseek_v3  the `deepseek_v3` golden as convert_hf_to_gguf.py's DeepseekV2Model writes it
               (arch deepseek2, F32): latent attention as MQA (head_count_kv 1, key_length
               kv_lora + rope, the head widths as key_length_mla / value_length_mla), kv_b_proj
               split per head into attn_k_b (transposed) and attn_v_b, the sigmoid router with
               its correction bias (exp_probs_b.bias), groups, scaling, the shared expert, the
               leading dense layer, YaRN's log multiplier (0.1 x mscale_all_dim). `deepseek_v2`
               is not converted: its mscale (1) differs from its mscale_all_dim (0.707), which a
               GGUF file cannot state
  gguf_gpt_oss the `gpt_oss` golden as convert_hf_to_gguf.py's GptOssModel writes it (arch gpt-oss):
               the experts' MXFP4 blocks repacked into ggml's MXFP4 (the E8M0 byte before its
               block, weight j in byte j's low nibble and j + 16 in its high one), gate_up split
               into ffn_gate_exps and ffn_up_exps (even and odd rows) with their biases, the router
               as ffn_gate_inp with its bias, the sinks as attn_sinks.weight, the pre-FFN norm as
               post_attention_norm, YaRN's factor, original context and betas. A GGUF file cannot
               state the SwiGLU limit (llama.cpp's graph fixes 7.0) nor YaRN's `truncate` (llama.cpp
               always truncates, as transformers does by default), so the golden is transformers'
               GptOss class on the source checkpoint with swiglu_limit 7.0 and truncate true; the
               gate and up weights are doubled twice (their E8M0 bytes + 2) so that the limit of
               7.0 clamps some values, as the source's 2.0 does. transformers' GGUF loader cannot
               read such a file (its gpt-oss path fails on the rope.scaling keys), hence this
               oracle; the file's dequantized experts are checked equal to the oracle's weights

Usage: make_gguf_golden.py [CASE...]"""
import os
import sys

import gguf
import numpy as np
import torch
import transformers
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(__file__))
from make_golden import DECODE_STEPS, PREFILL, full_logits, incremental_logits, make_ids, save_safetensors  # noqa

HERE = os.path.dirname(os.path.abspath(__file__))
HIDDEN, HEADS, KV_HEADS, INTER, VOCAB, LAYERS, MAX_POS = 256, 4, 2, 512, 256, 2, 256
# transformers' GGUF loader takes head_dim from rope.dimension_count (llama), key_length
# (gemma3), its config class's default (qwen3: 128) or hidden / heads (qwen2)
HEAD_DIMS = {"llama": 128, "qwen2": 64, "qwen3": 128, "gemma3": 128, "qwen2moe": 64, "qwen3moe": 128}
EXPERTS, TOP_K, EXP_INTER, SHARED_INTER = 4, 2, 64, 128
# the MoE cases' layers: the experts' and the shared expert's types in place of the dense MLP's
MOE_TYPES = [
    {"ffn_gate_exps": T.Q4_K, "ffn_up_exps": T.Q5_K, "ffn_down_exps": T.Q8_0, "ffn_gate_shexp": T.Q6_K,
     "ffn_up_shexp": T.Q2_K, "ffn_down_shexp": T.Q5_0},
    {"ffn_gate_exps": T.IQ4_XS, "ffn_up_exps": T.Q3_K, "ffn_down_exps": T.Q4_1, "ffn_gate_shexp": T.Q4_K,
     "ffn_up_shexp": T.IQ4_NL, "ffn_down_shexp": T.Q5_1},
]
LAYER_TYPES = [
    {"attn_q": T.Q4_K, "attn_k": T.Q5_K, "attn_v": T.Q6_K, "attn_output": T.Q8_0, "ffn_gate": T.Q2_K,
     "ffn_up": T.Q3_K, "ffn_down": T.Q4_K},
    {"attn_q": T.IQ4_XS, "attn_k": T.Q4_0, "attn_v": T.Q4_1, "attn_output": T.Q5_0, "ffn_gate": T.Q5_1,
     "ffn_up": T.IQ4_NL, "ffn_down": T.Q6_K},
]
# byte offsets of each type's f16 scales within a block
HALVES = {T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0], T.Q2_K: [80, 82], T.Q3_K: [108],
          T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208], T.IQ4_NL: [0], T.IQ4_XS: [0]}
CASES = {"gguf_llama": "llama", "gguf_qwen2": "qwen2", "gguf_qwen3": "qwen3", "gguf_gemma3": "gemma3",
         "gguf_llama3": "llama", "gguf_llama3_split": "llama", "gguf_qwen2_moe": "qwen2moe",
         "gguf_qwen3_moe": "qwen3moe", "gguf_olmoe": "olmoe", "gguf_mixtral": "llama",
         "gguf_deepseek_v3": "deepseek2", "gguf_granite": "granite", "gguf_phi3": "phi3", "gguf_phi4_mini": "phi3",
         "gguf_ernie4_5": "ernie4_5", "gguf_gpt_oss": "gpt-oss", "gguf_granitemoe": "granitemoe",
         "gguf_ernie4_5_moe": "ernie4_5-moe"}


def random_blocks(rng, t, rows, cols, std):
    """rows x cols weights of type t as raw blocks whose dequantized values have about `std`."""
    from gguf.quants import dequantize
    block, size = GGML_QUANT_SIZES[t]
    raw = rng.integers(0, 256, size=(rows * cols // block, size), dtype=np.uint8)
    for off in HALVES[t]:
        raw[:, off:off + 2] = np.frombuffer(np.float16(1.0).tobytes(), dtype=np.uint8)
    data = raw.reshape(rows, cols // block * size)
    unit = dequantize(data, t).std()
    for off in HALVES[t]:  # every scale std / unit, times a random factor in [0.5, 1.5)
        s = (std / unit * rng.uniform(0.5, 1.5, size=raw.shape[0])).astype(np.float16)
        raw[:, off:off + 2] = s.view(np.uint8).reshape(-1, 2)
    return raw.reshape(rows, cols // block * size)


def f32(rng, shape, mean=0.0, std=0.1):
    return (mean + std * rng.standard_normal(shape)).astype(np.float32)


def write(case, arch, path, rng):
    gemma, moe = arch == "gemma3", arch.endswith("moe")
    HEAD_DIM = HEAD_DIMS[arch]
    w = GGUFWriter(path, arch)
    w.add_context_length(MAX_POS)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(INTER)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0 if arch == "llama" else 1e6)
    if gemma:
        w.add_sliding_window(4)
    if moe:
        w.add_expert_count(EXPERTS)
        w.add_expert_used_count(TOP_K)
        w.add_expert_feed_forward_length(EXP_INTER)
        if arch == "qwen2moe":
            w.add_expert_shared_feed_forward_length(SHARED_INTER)
    # a byte-level vocabulary of the 256 bytes, no merges: enough for the loaders, unused here
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([bytes([b]).decode("latin-1") for b in range(VOCAB)])
    w.add_token_types([1] * VOCAB)
    w.add_token_merges([])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def norm(name, n):  # Gemma's converter stores 1 + w
        v = f32(rng, (n,), 0.0 if gemma else 1.0, 0.2)
        w.add_tensor(name, (v + 1).astype(np.float32) if gemma else v)

    w.add_tensor("token_embd.weight", random_blocks(rng, T.Q8_0, VOCAB, HIDDEN, 0.05 if gemma else 0.5), raw_dtype=T.Q8_0)
    norm("output_norm.weight", HIDDEN)
    if not gemma:
        w.add_tensor("output.weight", random_blocks(rng, T.Q6_K, VOCAB, HIDDEN, 0.06), raw_dtype=T.Q6_K)
    for layer, types in enumerate(LAYER_TYPES):
        p = f"blk.{layer}."
        shapes = {"attn_q": (HEADS * HEAD_DIM, HIDDEN), "attn_k": (KV_HEADS * HEAD_DIM, HIDDEN),
                  "attn_v": (KV_HEADS * HEAD_DIM, HIDDEN), "attn_output": (HIDDEN, HEADS * HEAD_DIM),
                  "ffn_gate": (INTER, HIDDEN), "ffn_up": (INTER, HIDDEN), "ffn_down": (HIDDEN, INTER),
                  "ffn_gate_exps": (EXPERTS, EXP_INTER, HIDDEN), "ffn_up_exps": (EXPERTS, EXP_INTER, HIDDEN),
                  "ffn_down_exps": (EXPERTS, HIDDEN, EXP_INTER), "ffn_gate_shexp": (SHARED_INTER, HIDDEN),
                  "ffn_up_shexp": (SHARED_INTER, HIDDEN), "ffn_down_shexp": (HIDDEN, SHARED_INTER)}
        if moe:  # the experts (and Qwen2-MoE's shared one) in place of the MLP
            types = {k: v for k, v in types.items() if not k.startswith("ffn_")}
            types.update({k: v for k, v in MOE_TYPES[layer].items() if arch == "qwen2moe" or "shexp" not in k})
            w.add_tensor(p + "ffn_gate_inp.weight", f32(rng, (EXPERTS, HIDDEN), 0.0, 0.1))
            if arch == "qwen2moe":
                w.add_tensor(p + "ffn_gate_inp_shexp.weight", f32(rng, (HIDDEN,), 0.0, 0.1))
        for name, t in types.items():
            *lead, rows, cols = shapes[name]
            raw = random_blocks(rng, t, int(np.prod(lead, dtype=int)) * rows, cols, 0.06)
            w.add_tensor(p + name + ".weight", raw.reshape(*lead, rows, -1), raw_dtype=t)
        norm(p + "attn_norm.weight", HIDDEN)
        norm(p + "ffn_norm.weight", HIDDEN)
        if gemma:
            norm(p + "post_attention_norm.weight", HIDDEN)
            norm(p + "post_ffw_norm.weight", HIDDEN)
        if arch in ("qwen3", "gemma3", "qwen3moe"):
            norm(p + "attn_q_norm.weight", HEAD_DIM)
            norm(p + "attn_k_norm.weight", HEAD_DIM)
        if arch in ("qwen2", "qwen2moe"):
            for name, n in (("attn_q", HEADS * HEAD_DIM), ("attn_k", KV_HEADS * HEAD_DIM),
                            ("attn_v", KV_HEADS * HEAD_DIM)):
                w.add_tensor(p + name + ".bias", f32(rng, (n,)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def build(case, arch, seed):
    out = os.path.join(HERE, case)
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.remove(os.path.join(out, f))
    rng = np.random.default_rng(seed)
    write(case, arch, os.path.join(out, "model.gguf"), rng)
    sizes = {"moe_intermediate_size": EXP_INTER} if arch.endswith("moe") else {}
    if arch == "qwen2moe":
        sizes["shared_expert_intermediate_size"] = SHARED_INTER
    m = AutoModelForCausalLM.from_pretrained(out, gguf_file="model.gguf", dtype=torch.float32,
                                             attn_implementation="eager", **sizes).eval()
    gen = torch.Generator().manual_seed(seed)
    ids = [make_ids(gen, VOCAB, PREFILL[i] + DECODE_STEPS) for i in range(2)]
    logits = write_golden(m, ids, case, out)
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"{case}: {size} bytes, max |logit| {max(l.abs().max().item() for l in logits):.2f}, "
          f"min row std {min(l.std(dim=-1).min().item() for l in logits):.2f}")


def write_golden(m, ids, case, out):
    """Model m's logits for the two sequences ids (checked against its cache path and for
    flatness) as case's golden.safetensors in folder out; returns them."""
    logits = [full_logits(m, s) for s in ids]
    for s, lg, pre in zip(ids, logits, PREFILL):
        inc = incremental_logits(m, s, pre)
        assert (inc - lg).abs().max() < 2e-5, f"{case}: transformers' cache path differs"
        assert lg.std(dim=-1).min() > 0.5, f"{case}: logits too flat"
    tensors = {"ids_0": ids[0], "ids_1": ids[1], "logits_0": logits[0].contiguous(), "logits_1": logits[1].contiguous()}
    meta = {"prefill_0": str(PREFILL[0]), "prefill_1": str(PREFILL[1]), "decode_steps": str(DECODE_STEPS),
            "transformers": transformers.__version__, "torch": torch.__version__, "case": case, "atol": "1e-4"}
    save_safetensors(tensors, os.path.join(out, "golden.safetensors"), meta)
    return logits


def meta_permute(w, heads):
    """HF's q/k rows into Meta's layout (rotary pairs adjacent), as llama.cpp's converter does."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_factors(cfg):
    """rope_freqs.weight as convert_hf_to_gguf.py computes it from Llama 3's rope parameters."""
    import math
    rp = cfg["rope_parameters"]
    dim, base = cfg["head_dim"], rp["rope_theta"]
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, low, high, old = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"], \
        rp["original_max_position_embeddings"]
    out = []
    for freq in freqs.tolist():
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def finish_converted(w, case, source):
    """Writes a converted case's GGUF and gives it the source case's golden."""
    import shutil
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    src, out = os.path.join(HERE, source), os.path.join(HERE, case)
    shutil.copy(os.path.join(src, "golden.safetensors"), os.path.join(out, "golden.safetensors"))
    print(f"{case}: from {source}, {sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))} bytes")


def size_keys(w, cfg, heads):
    """The sizes every converter writes first: context, hidden, layers, FFN width, heads."""
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)


def build_converted(case, source, arch):
    """A float golden folder as llama.cpp's converter writes it, with that folder's golden: a
    Llama's (and Mixtral's) q/k rows permuted and Llama 3's RoPE scaling as rope_freqs.weight,
    experts stacked per projection."""
    import json
    from safetensors.numpy import load_file
    src, out = os.path.join(HERE, source), os.path.join(HERE, case)
    os.makedirs(out, exist_ok=True)
    cfg = json.load(open(os.path.join(src, "config.json")))
    t = load_file(os.path.join(src, "model.safetensors"))
    granite = arch in ("granite", "granitemoe")
    llama = arch == "llama" or granite  # LlamaModel's converters: q/k rows in Meta's layout
    w = GGUFWriter(os.path.join(out, "model.gguf"), arch)
    size_keys(w, cfg, cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    if cfg.get("head_dim") and not granite:  # as TextModel does (GraniteModel drops it)
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    rp = cfg["rope_parameters"]
    w.add_rope_dimension_count(int(rp.get("partial_rotary_factor", 1.0) * head_dim))
    if rp.get("rope_type") == "longrope":  # Phi3MiniModel's form
        import math
        orig, scale = rp["original_max_position_embeddings"], cfg["max_position_embeddings"] / rp[
            "original_max_position_embeddings"]
        w.add_rope_scaling_orig_ctx_len(orig)
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1 else 1.0)
        w.add_sliding_window(cfg.get("sliding_window") or 0)
        w.add_tensor("rope_factors_long.weight", np.array(rp["long_factor"], dtype=np.float32))
        w.add_tensor("rope_factors_short.weight", np.array(rp["short_factor"], dtype=np.float32))
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    if cfg["rope_parameters"].get("rope_type") == "llama3":
        w.add_tensor("rope_freqs.weight", llama3_factors(cfg))
    if granite:
        w.add_attention_scale(cfg["attention_multiplier"])
        w.add_embedding_scale(cfg["embedding_multiplier"])
        w.add_residual_scale(cfg["residual_multiplier"])
        w.add_logit_scale(cfg["logits_scaling"])
    if "num_experts_per_tok" in cfg:
        w.add_expert_count(cfg.get("num_experts") or cfg["num_local_experts"])
        w.add_expert_used_count(cfg["num_experts_per_tok"])
    if arch == "ernie4_5-moe":  # Ernie4_5MoeModel's keys
        w.add_expert_count(cfg["moe_num_experts"])
        w.add_expert_used_count(cfg["moe_k"])
        w.add_interleave_moe_layer_step(cfg["moe_layer_interval"])
        w.add_leading_dense_block_count(cfg["moe_layer_start_index"])
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        w.add_expert_shared_count(cfg["moe_num_shared_experts"])
        # the converter writes intermediate_size // num_key_value_heads, which is the shared
        # experts' width (moe_intermediate_size x their count) in ERNIE-4.5-21B-A3B's config but
        # not in this golden's: the width the tensors have is written, which llama.cpp loads
        w.add_expert_shared_feed_forward_length(cfg["moe_intermediate_size"] * cfg["moe_num_shared_experts"])
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    parts = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
             "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm", "mlp.gate": "ffn_gate_inp",
             "block_sparse_moe.gate": "ffn_gate_inp", "self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up",
             "block_sparse_moe.router.layer": "ffn_gate_inp", "block_sparse_moe.output_linear": "ffn_down_exps",
             "mlp.shared_experts.gate_proj": "ffn_gate_shexp", "mlp.shared_experts.up_proj": "ffn_up_shexp",
             "mlp.shared_experts.down_proj": "ffn_down_shexp"}
    projs = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down", "w1": "gate", "w3": "up", "w2": "down"}
    experts = {}  # (layer, proj) -> {expert: weight}, stacked once all are read
    for name, v in sorted(t.items()):
        if name in names:
            w.add_tensor(names[name], v)
            continue
        layer, rest = name.split(".")[2], ".".join(name.split(".")[3:-1])
        if ".experts." in rest:
            _, _, e, proj = rest.split(".")
            experts.setdefault((layer, projs[proj]), {})[int(e)] = v
            continue
        if name.endswith("mlp.moe_statics.e_score_correction_bias"):  # ERNIE's, kept [1, experts]
            w.add_tensor(f"blk.{layer}.exp_probs_b.bias", v)
            continue
        if rest == "block_sparse_moe.input_linear":  # GraniteMoeModel: gate's rows, then up's
            inter = cfg["intermediate_size"]
            w.add_tensor(f"blk.{layer}.ffn_gate_exps.weight", np.ascontiguousarray(v[:, :inter]))
            w.add_tensor(f"blk.{layer}.ffn_up_exps.weight", np.ascontiguousarray(v[:, inter:]))
            continue
        if llama and rest == "self_attn.q_proj":
            v = meta_permute(v, cfg["num_attention_heads"])
        if llama and rest == "self_attn.k_proj":
            v = meta_permute(v, cfg["num_key_value_heads"])
        w.add_tensor(f"blk.{layer}.{parts[rest]}.{name.split('.')[-1]}", np.ascontiguousarray(v))
    for (layer, proj), per in sorted(experts.items()):
        stacked = np.stack([per[e] for e in range(len(per))])
        w.add_tensor(f"blk.{layer}.ffn_{proj}_exps.weight", np.ascontiguousarray(stacked))
    finish_converted(w, case, source)


def build_deepseek(case, source):
    """A DeepSeek-V3 golden folder as llama.cpp's converter writes it (arch deepseek2), with
    that folder's golden."""
    import json
    from gguf import ExpertGatingFuncType
    from safetensors.numpy import load_file
    src, out = os.path.join(HERE, source), os.path.join(HERE, case)
    os.makedirs(out, exist_ok=True)
    cfg = json.load(open(os.path.join(src, "config.json")))
    t = load_file(os.path.join(src, "model.safetensors"))
    heads, lora, nope, rope, vd = (cfg[k] for k in ("num_attention_heads", "kv_lora_rank", "qk_nope_head_dim",
                                                     "qk_rope_head_dim", "v_head_dim"))
    rp = cfg["rope_parameters"]
    w = GGUFWriter(os.path.join(out, "model.gguf"), "deepseek2")
    size_keys(w, cfg, heads)
    w.add_head_count_kv(1)
    w.add_rope_freq_base(rp["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_leading_dense_block_count(cfg["first_k_dense_replace"])
    if cfg.get("q_lora_rank"):
        w.add_q_lora_rank(cfg["q_lora_rank"])
    w.add_kv_lora_rank(lora)
    w.add_key_length(lora + rope)
    w.add_value_length(lora)
    w.add_key_length_mla(nope + rope)
    w.add_value_length_mla(vd)
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_expert_count(cfg["n_routed_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_shared_count(cfg["n_shared_experts"])
    w.add_expert_weights_scale(cfg["routed_scaling_factor"])
    if cfg["norm_topk_prob"]:
        w.add_expert_weights_norm(True)
    w.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)
    w.add_expert_group_count(cfg["n_group"])
    w.add_expert_group_used_count(cfg["topk_group"])
    w.add_rope_dimension_count(rope)
    assert rp["rope_type"] == "yarn" and rp["mscale"] == rp["mscale_all_dim"]
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(rp["factor"])
    w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
    w.add_rope_scaling_yarn_log_mul(0.1 * rp["mscale_all_dim"])
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    parts = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
             "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_a_proj.weight": "attn_q_a.weight",
             "self_attn.q_a_layernorm.weight": "attn_q_a_norm.weight", "self_attn.q_b_proj.weight": "attn_q_b.weight",
             "self_attn.kv_a_proj_with_mqa.weight": "attn_kv_a_mqa.weight",
             "self_attn.kv_a_layernorm.weight": "attn_kv_a_norm.weight", "self_attn.o_proj.weight": "attn_output.weight",
             "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
             "mlp.down_proj.weight": "ffn_down.weight", "mlp.gate.weight": "ffn_gate_inp.weight",
             "mlp.gate.e_score_correction_bias": "exp_probs_b.bias",
             "mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
             "mlp.shared_experts.up_proj.weight": "ffn_up_shexp.weight",
             "mlp.shared_experts.down_proj.weight": "ffn_down_shexp.weight", "mlp.experts.down_proj": "ffn_down_exps.weight"}
    for name, v in sorted(t.items()):
        if name in names:
            w.add_tensor(names[name], v)
            continue
        layer, rest = int(name.split(".")[2]), ".".join(name.split(".")[3:])
        if layer >= cfg["num_hidden_layers"]:  # the MTP layer: not converted
            continue
        p = f"blk.{layer}."
        if rest == "self_attn.kv_b_proj.weight":  # per head: k's rows transposed, then v's
            kv = v.reshape(heads, nope + vd, lora)
            w.add_tensor(p + "attn_k_b.weight", np.ascontiguousarray(kv[:, :nope, :].transpose(0, 2, 1)))
            w.add_tensor(p + "attn_v_b.weight", np.ascontiguousarray(kv[:, nope:, :]))
        elif rest == "mlp.experts.gate_up_proj":  # [E, 2I, H]: gate rows, then up rows
            inter = v.shape[1] // 2
            w.add_tensor(p + "ffn_gate_exps.weight", np.ascontiguousarray(v[:, :inter]))
            w.add_tensor(p + "ffn_up_exps.weight", np.ascontiguousarray(v[:, inter:]))
        else:
            w.add_tensor(p + parts[rest], np.ascontiguousarray(v))
    finish_converted(w, case, source)


def ggml_mxfp4(blocks, scales):
    """A Hugging Face MXFP4 tensor (blocks [..., n, 16]: byte j holds weights 2j and 2j + 1 of
    its block in its low and high nibble; scales [..., n]) as ggml's MXFP4 rows of 17-byte blocks,
    as GptOssModel.repack_mxfp4 writes them."""
    codes = np.stack([blocks & 15, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)
    packed = (codes[..., :16] | codes[..., 16:] << 4).astype(np.uint8)
    data = np.concatenate([scales[..., None], packed], axis=-1)
    return np.ascontiguousarray(data.reshape(*data.shape[:-2], -1))


def build_gpt_oss(case, source, bump=2, seed=4400):
    """The `gpt_oss` golden as llama.cpp's converter writes it, and its own golden (see the
    module's docstring)."""
    import json
    from gguf.quants import dequantize
    from make_golden import check_gpt_oss
    from safetensors.numpy import load_file
    from transformers import GptOssForCausalLM, Mxfp4Config
    src, out = os.path.join(HERE, source), os.path.join(HERE, case)
    os.makedirs(out, exist_ok=True)
    cfg = json.load(open(os.path.join(src, "config.json")))
    t = load_file(os.path.join(src, "model.safetensors"))
    rp = cfg["rope_parameters"]
    w = GGUFWriter(os.path.join(out, "model.gguf"), "gpt-oss")
    size_keys(w, cfg, cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_freq_base(rp["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(cfg["num_local_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_sliding_window(cfg["sliding_window"])
    w.add_expert_feed_forward_length(cfg["intermediate_size"])
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(rp["factor"])
    w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
    w.add_rope_scaling_yarn_beta_fast(rp["beta_fast"])
    w.add_rope_scaling_yarn_beta_slow(rp["beta_slow"])
    vocab = cfg["vocab_size"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([bytes([b]).decode("latin-1") for b in range(vocab)])
    w.add_token_types([1] * vocab)
    w.add_token_merges([])
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    parts = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "post_attention_norm.weight",
             "self_attn.sinks": "attn_sinks.weight", "mlp.router.weight": "ffn_gate_inp.weight",
             "mlp.router.bias": "ffn_gate_inp.bias", "mlp.experts.down_proj_bias": "ffn_down_exps.bias"}
    for p, g in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "output")):
        for kind in ("weight", "bias"):
            parts[f"self_attn.{p}_proj.{kind}"] = f"attn_{g}.{kind}"
    experts = {}  # (layer, gguf name) -> the float weights the file holds, for the check below
    for name, v in sorted(t.items()):
        if name in names:
            w.add_tensor(names[name], v)
            continue
        layer, rest = int(name.split(".")[2]), ".".join(name.split(".")[3:])
        p = f"blk.{layer}."
        if rest in parts:
            w.add_tensor(p + parts[rest], np.ascontiguousarray(v))
        elif rest == "mlp.experts.gate_up_proj_bias":
            w.add_tensor(p + "ffn_gate_exps.bias", np.ascontiguousarray(v[..., ::2]))
            w.add_tensor(p + "ffn_up_exps.bias", np.ascontiguousarray(v[..., 1::2]))
        elif rest.endswith("_blocks"):
            scales = t[name.replace("_blocks", "_scales")]
            if "gate_up" in rest:
                halves = (("ffn_gate_exps", v[:, ::2], scales[:, ::2] + bump),
                          ("ffn_up_exps", v[:, 1::2], scales[:, 1::2] + bump))
            else:
                halves = (("ffn_down_exps", v, scales),)
            for gname, b, s in halves:
                raw = ggml_mxfp4(b, s)
                w.add_tensor(p + gname + ".weight", raw, raw_dtype=T.MXFP4)
                experts[layer, gname] = dequantize(raw, T.MXFP4)
        else:
            assert rest.endswith("_scales"), name
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    m = GptOssForCausalLM.from_pretrained(src, dtype=torch.float32, attn_implementation="eager",
                                          quantization_config=Mxfp4Config(dequantize=True), swiglu_limit=7.0,
                                          rope_parameters=dict(rp, truncate=True)).eval()
    with torch.no_grad():
        for layer, l in enumerate(m.model.layers):
            e = l.mlp.experts  # gate_up_proj [E, H, 2I] (gate columns even), down_proj [E, I, H]
            e.gate_up_proj.mul_(2.0 ** bump)
            for gname, have in (("ffn_gate_exps", e.gate_up_proj[..., ::2]), ("ffn_up_exps", e.gate_up_proj[..., 1::2]),
                                ("ffn_down_exps", e.down_proj)):
                assert np.array_equal(experts[layer, gname], have.transpose(1, 2).numpy()), f"{case}: {gname}"
    gen = torch.Generator().manual_seed(seed)
    ids = [make_ids(gen, vocab, PREFILL[i] + DECODE_STEPS) for i in range(2)]
    report = check_gpt_oss(m, ids)
    write_golden(m, ids, case, out)
    print(f"{case}: from {source}, {sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))} bytes, "
          f"{json.dumps(report)}")


def build_split(case, source):
    """Case `source`'s GGUF rewritten in parts of eight tensors by the gguf package's writer."""
    import shutil
    from gguf import GGUFReader, GGUFValueType
    src, out = os.path.join(HERE, source), os.path.join(HERE, case)
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.remove(os.path.join(out, f))
    r = GGUFReader(os.path.join(src, "model.gguf"))
    w = GGUFWriter(os.path.join(out, "model.gguf"), r.fields["general.architecture"].contents(),
                   split_max_tensors=8)
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        if field.types[0] == GGUFValueType.ARRAY:
            w.add_key_value(key, field.contents(), field.types[0], sub_type=field.types[-1])
        else:
            w.add_key_value(key, field.contents(), field.types[0])
    for t in r.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    shutil.copy(os.path.join(src, "golden.safetensors"), os.path.join(out, "golden.safetensors"))
    print(f"{case}: {sorted(os.listdir(out))}")


def main():
    torch.manual_seed(0)
    names = sys.argv[1:] or list(CASES)
    for i, case in enumerate(CASES):
        if case in names and case == "gguf_llama3":
            build_converted(case, "llama", "llama")
        elif case in names and case in ("gguf_olmoe", "gguf_mixtral", "gguf_granite", "gguf_phi3", "gguf_phi4_mini",
                                        "gguf_ernie4_5", "gguf_granitemoe", "gguf_ernie4_5_moe"):
            build_converted(case, case[5:], CASES[case])
        elif case in names and case == "gguf_deepseek_v3":
            build_deepseek(case, "deepseek_v3")
        elif case in names and case == "gguf_gpt_oss":
            build_gpt_oss(case, "gpt_oss")
        elif case in names and case == "gguf_llama3_split":
            build_split(case, "gguf_llama3")
        elif case in names:
            build(case, CASES[case], 4300 + i)


if __name__ == "__main__":
    main()
