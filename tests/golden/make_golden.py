#!/usr/bin/env python3
"""Generate golden logits from Hugging Face transformers for loom's parity tests.

Run:  python3 tests/golden/make_golden.py            (all cases)
      python3 tests/golden/make_golden.py llama qwen3 (a subset)

For each case, tests/golden/<case>/ gets:
  config.json, model.safetensors   -- written by save_pretrained (single file);
                                      deepseek_v3's model.safetensors is rewritten
                                      from state_dict() (fused expert tensors)
  generation_config.json           -- harmless leftover of save_pretrained
  golden.safetensors               -- ids_0/ids_1 (I64), logits_0/logits_1 (F32,
                                      [n, vocab]) + __metadata__ (prefill_0,
                                      prefill_1, decode_steps, versions, case)

Golden logits are computed from the model *re-loaded from the written files*
(so they test exactly what the C loader sees), in fp32, eager attention, full
causal forward of one unpadded sequence at a time.

Mistral sliding window (transformers 5.x, masking_utils.sliding_window_overlay):
    allowed(q, k) = (k <= q) and (k > q - sliding_window)
i.e. each query attends to exactly the last `sliding_window` keys INCLUDING
itself (positions q-W+1 .. q).  With W=4, position 6 sees keys 3,4,5,6.  This
script asserts that semantics empirically from the eager attention
probabilities (output_attentions=True), and asserts that the KV-cache decode
path (DynamicSlidingWindowLayer) agrees with the full forward.
"""
import inspect
import json
import math
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import (  # noqa: E402
    GraniteConfig, GraniteForCausalLM,
    LlamaConfig, LlamaForCausalLM,
    MistralConfig, MistralForCausalLM,
    Qwen2Config, Qwen2ForCausalLM,
    Qwen3Config, Qwen3ForCausalLM,
    OlmoeConfig, OlmoeForCausalLM,
    MixtralConfig, MixtralForCausalLM,
    Qwen2MoeConfig, Qwen2MoeForCausalLM,
    Qwen3MoeConfig, Qwen3MoeForCausalLM,
    GraniteMoeConfig, GraniteMoeForCausalLM,
    DeepseekV2Config, DeepseekV2ForCausalLM,
    DeepseekV3Config, DeepseekV3ForCausalLM,
    Gemma2Config, Gemma2ForCausalLM,
    Gemma3TextConfig, Gemma3ForCausalLM,
    Ernie4_5Config, Ernie4_5ForCausalLM,
    Ernie4_5_MoeConfig, Ernie4_5_MoeForCausalLM,
    Phi3Config, Phi3ForCausalLM,
    GptOssConfig, GptOssForCausalLM, Mxfp4Config,
    Qwen3_5TextConfig, Qwen3_5ForCausalLM, Qwen3_5Config, Qwen3_5ForConditionalGeneration,
    Qwen3_5MoeTextConfig, Qwen3_5MoeForCausalLM,
    Qwen3NextConfig, Qwen3NextForCausalLM,
    GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM,
    NemotronHConfig, NemotronHForCausalLM,
    Mamba2Config, Mamba2ForCausalLM,
)
from transformers.integrations.mxfp4 import FP4_VALUES  # noqa: E402

torch.set_num_threads(1)
HERE = os.path.dirname(os.path.abspath(__file__))

PREFILL = (7, 4)       # prefill lengths for sequence 0 and 1
DECODE_STEPS = 3       # teacher-forced single-token steps after the prefill
INCR_TOL = 1e-5        # HF cache path vs HF full forward
SKEW_BIAS = 10.0       # added to the correction bias of the skewed experts ("skew_experts")
KEEP_FILES = {"config.json", "model.safetensors", "generation_config.json",
              "golden.safetensors", "tokenizer.json", "tokenizer_config.json", "preprocessor_config.json"}

BASE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=96, vocab_size=128,
            max_position_embeddings=256, rms_norm_eps=1e-5,
            bos_token_id=1, eos_token_id=2)


MOE = dict(BASE, intermediate_size=48)

# DeepSeek (MLA attention + routed/shared experts): 3 layers, layer 0 dense, layers 1-2 MoE.
DEEPSEEK = dict(BASE, num_hidden_layers=3, num_key_value_heads=4, rms_norm_eps=1e-6,
                intermediate_size=96, moe_intermediate_size=32, kv_lora_rank=32,
                qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=24,
                first_k_dense_replace=1, tie_word_embeddings=False)


def case_defs():
    """name -> (model class, config class, config kwargs, options)."""
    return {
        "llama": (LlamaForCausalLM, LlamaConfig, dict(
            BASE, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
            rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0,
                             "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 32}), {}),
        "llama_tied": (LlamaForCausalLM, LlamaConfig, dict(
            BASE, tie_word_embeddings=True, head_dim=32, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), {}),
        "mistral": (MistralForCausalLM, MistralConfig, dict(
            BASE, sliding_window=4, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
            {"check_window": 4}),
        "qwen2": (Qwen2ForCausalLM, Qwen2Config, dict(
            BASE, tie_word_embeddings=False, use_sliding_window=False,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6}), {}),
        "qwen3": (Qwen3ForCausalLM, Qwen3Config, dict(
            BASE, head_dim=32, tie_word_embeddings=False, use_sliding_window=False,
            attention_bias=False, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6}), {}),
        # logits are divided by logits_scaling=8, so lm_head is initialised 8x
        # larger than the other weights to keep the softmax far from uniform.
        "granite": (GraniteForCausalLM, GraniteConfig, dict(
            BASE, tie_word_embeddings=False, embedding_multiplier=12.0,
            attention_multiplier=0.15, residual_multiplier=0.22,
            logits_scaling=8.0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
            {"lm_head_std_scale": 8.0}),
        "llama_bf16": (LlamaForCausalLM, LlamaConfig, dict(
            BASE, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
            {"half": "bfloat16"}),
        "llama_tp3": (LlamaForCausalLM, LlamaConfig, dict(
            BASE, hidden_size=96, num_attention_heads=6, num_key_value_heads=3,
            intermediate_size=96, vocab_size=120, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), {}),
        # f16 on disk: loom widens it to f32 at load (exact), so HF's fp32 compute on the
        # same f16-rounded weights is the oracle, as for bf16
        "llama_f16": (LlamaForCausalLM, LlamaConfig, dict(
            BASE, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
            {"half": "float16"}),
        # biases on every linear, row-parallel ones (o_proj, down_proj) included: under tensor
        # parallelism their bias must be counted once in the sum over ranks
        "llama_bias": (LlamaForCausalLM, LlamaConfig, dict(
            BASE, tie_word_embeddings=False, attention_bias=True, mlp_bias=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), {}),
        # Mixtures of experts: 8 experts of 48 features (divisible by 2, 3 and 4 ranks), top-k
        # >= 2. A decode step routes 2 tokens to at most 2k experts, so some get none.
        # OLMoE: q/k norms over the whole projections; 4 kv heads as in OLMoE-1B-7B.
        "olmoe": (OlmoeForCausalLM, OlmoeConfig, dict(
            MOE, num_key_value_heads=4, num_experts=8, num_experts_per_tok=2,
            norm_topk_prob=False, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), {}),
        # Mixtral, with a routing tie: experts 3 and 5 share router row and weights, so every
        # token's logits tie between them exactly (the output cannot depend on which wins)
        "mixtral": (MixtralForCausalLM, MixtralConfig, dict(
            MOE, num_local_experts=8, num_experts_per_tok=2, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
            {"tie_experts": (3, 5)}),
        # Qwen2-MoE: shared expert with a sigmoid gate, biases on q/k/v, a dense layer (1)
        "qwen2_moe": (Qwen2MoeForCausalLM, Qwen2MoeConfig, dict(
            MOE, num_hidden_layers=3, num_experts=8, num_experts_per_tok=2,
            moe_intermediate_size=48, shared_expert_intermediate_size=64,
            norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[1],
            tie_word_embeddings=False, use_sliding_window=False, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6}), {}),
        # Qwen3-MoE: per-head q/k norms, renormalised top 3, sparse every 2nd layer (layer 0 dense)
        "qwen3_moe": (Qwen3MoeForCausalLM, Qwen3MoeConfig, dict(
            MOE, head_dim=32, num_experts=8, num_experts_per_tok=3, moe_intermediate_size=48,
            norm_topk_prob=True, decoder_sparse_step=2, tie_word_embeddings=False,
            use_sliding_window=False, attention_bias=False, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6}), {}),
        # GraniteMoE: the router is a module of its own, experts in stacked tensors, multipliers
        "granitemoe": (GraniteMoeForCausalLM, GraniteMoeConfig, dict(
            MOE, num_local_experts=8, num_experts_per_tok=2, tie_word_embeddings=False,
            embedding_multiplier=12.0, attention_multiplier=0.15, residual_multiplier=0.22,
            logits_scaling=8.0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
            {"lm_head_std_scale": 8.0}),
        # DeepSeek-V2: MLA with a plain q_proj, YaRN (attention factor != 1 since mscale !=
        # mscale_all_dim), softmax router with group-limited greedy top-2 (group score = max),
        # no renormalisation, 2 shared experts. Per-expert tensors (save_pretrained).
        # New cases go at the END of this dict: a case's seeds derive from its index.
        "deepseek_v2": (DeepseekV2ForCausalLM, DeepseekV2Config, dict(
            DEEPSEEK, q_lora_rank=None, n_routed_experts=8, num_experts_per_tok=2,
            n_shared_experts=2, topk_method="group_limited_greedy", n_group=4, topk_group=2,
            routed_scaling_factor=1.5, norm_topk_prob=False,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 32, "mscale": 1.0,
                             "mscale_all_dim": 0.707, "beta_fast": 32, "beta_slow": 1}),
            {"routing": "v2", "router_std": 0.3, "seed_tries": 20,
             "yarn_attention_factor_not_1": True}),
        # DeepSeek-V3: q LoRA (q_a_proj/q_a_layernorm/q_b_proj), interleaved YaRN rope,
        # sigmoid router with a non-zero e_score_correction_bias, group score = sum of the
        # top-2, renormalised top-3, 1 shared expert. Experts stored FUSED (gate_up_proj,
        # down_proj as in memory). 16 experts make the folder ~1.3 MB, hence max_bytes.
        "deepseek_v3": (DeepseekV3ForCausalLM, DeepseekV3Config, dict(
            DEEPSEEK, q_lora_rank=48, n_routed_experts=16, num_experts_per_tok=3,
            n_group=4, topk_group=2, n_shared_experts=1, routed_scaling_factor=2.5,
            norm_topk_prob=True, rope_interleave=True,
            topk_method="noaux_tc", scoring_func="sigmoid",
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0,
                             "original_max_position_embeddings": 32, "mscale": 1.0,
                             "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}),
            {"routing": "v3", "router_std": 0.3, "score_bias_std": 0.1, "seed_tries": 20,
             "fused_experts": True, "max_bytes": 3 << 19,
             "config_keys": {"topk_method": "noaux_tc", "scoring_func": "sigmoid"}}),
        # DeepSeek-V3 with skewed routing, for expert parallelism's extremes: +10 on the
        # correction bias of experts 0 and 1 sends every token of the MoE layer (layer 1,
        # the only one) to exactly those two (top-2), i.e. all to the experts of rank 0, and
        # the other ranks receive nothing. The bias only chooses the experts; their weights
        # are the plain sigmoid scores, so the outputs stay well-conditioned. Per-expert
        # tensors (save_pretrained).
        "deepseek_v3_skewed": (DeepseekV3ForCausalLM, DeepseekV3Config, dict(
            DEEPSEEK, num_hidden_layers=2, q_lora_rank=48, n_routed_experts=8,
            num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1,
            routed_scaling_factor=2.5, norm_topk_prob=True, rope_interleave=True,
            topk_method="noaux_tc", scoring_func="sigmoid",
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0,
                             "original_max_position_embeddings": 32, "mscale": 1.0,
                             "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}),
            {"routing": "v3", "router_std": 0.3, "score_bias_std": 0.1, "seed_tries": 20,
             "skew_experts": 2,
             "config_keys": {"topk_method": "noaux_tc", "scoring_func": "sigmoid"}}),
        # Mixtral for expert parallelism's uneven placement at 3 ranks: attention shards 3
        # ways as llama_tp3's (hidden 96, 6 heads, 3 kv heads, head_dim 16, vocab 120), but
        # the 8 experts do not divide by 3 (3, 3 and 2 per rank). Experts of 24 features
        # (divisible by 2, 3 and 4 ranks): 48 would make the folder ~1.2 MB. No routing tie.
        "mixtral_ep3": (MixtralForCausalLM, MixtralConfig, dict(
            MOE, hidden_size=96, num_attention_heads=6, num_key_value_heads=3,
            intermediate_size=24, vocab_size=120, num_local_experts=8,
            num_experts_per_tok=2, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6}), {}),
        # Gemma 2: a sliding layer (window 4, shorter than the prompts) then a global one,
        # soft-capping small enough to bite on these weights (scores reach ~7, logits ~3), scores
        # scaled by query_pre_attn_scalar (not head_dim), GeGLU, norms scaling by 1 + w, tied.
        "gemma2": (Gemma2ForCausalLM, Gemma2Config, dict(
            BASE, head_dim=32, query_pre_attn_scalar=24, sliding_window=4,
            layer_types=["sliding_attention", "full_attention"], attn_logit_softcapping=5.0,
            final_logit_softcapping=3.0, tie_word_embeddings=True,
            hidden_activation="gelu_pytorch_tanh",
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
            {"check_window": 4}),
        # Gemma 3: per-head q/k norms, the global layers' RoPE linearly scaled (base 1e6) and the
        # sliding layers' unscaled on their own base; no soft-capping. Three layers: sliding,
        # global, sliding.
        "gemma3": (Gemma3ForCausalLM, Gemma3TextConfig, dict(
            BASE, num_hidden_layers=3, head_dim=32, query_pre_attn_scalar=24, sliding_window=4,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            final_logit_softcapping=None, attn_logit_softcapping=None, tie_word_embeddings=True,
            hidden_activation="gelu_pytorch_tanh",
            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
            {"incr_tol": 3e-5}),  # HF's own cache path drifts 1.3e-5 from its full forward here
        # ERNIE 4.5 dense: biases on every projection (use_bias), rotary pairs interleaved, tied
        "ernie4_5": (Ernie4_5ForCausalLM, Ernie4_5Config, dict(
            BASE, head_dim=32, use_bias=True, tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0}), {}),
        # ERNIE 4.5 MoE (the seed PR's validation model, ERNIE-4.5-21B-A3B, in small): layer 0
        # dense, layers 1-2 sparse (moe_layer_start_index 1), 8 experts of 48, top 2 chosen by
        # softmax score + moe_statics' correction bias (a parameter here: drawn with the
        # weights), renormalised, one shared expert. Per-expert tensors (save_pretrained).
        "ernie4_5_moe": (Ernie4_5_MoeForCausalLM, Ernie4_5_MoeConfig, dict(
            MOE, num_hidden_layers=3, moe_num_experts=8, moe_k=2, moe_intermediate_size=48,
            moe_num_shared_experts=1, moe_layer_start_index=1, moe_layer_end_index=-1,
            moe_layer_interval=1, use_bias=False, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), {}),
        # Phi-3: fused qkv_proj and gate_up_proj, a sliding window on every layer, longrope
        # past its original context: both prompts are longer than original_max_position_embeddings
        # (3), so every pass rotates by the long factors, which is also what transformers' full
        # forward does (its short-then-long switch mid-sequence would differ from the full forward).
        "phi3": (Phi3ForCausalLM, Phi3Config, dict(
            BASE, max_position_embeddings=32, original_max_position_embeddings=3, sliding_window=4, pad_token_id=0,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                             "short_factor": [1.0, 1.0, 1.02, 1.05, 1.1, 1.2, 1.3, 1.5],
                             "long_factor": [1.0, 1.1, 1.5, 2.2, 3.5, 6.0, 9.0, 14.0]}),
            {"check_window": 4, "longrope": "long"}),
        # Phi-4-mini: partial_rotary_factor 0.75 (12 of 16 features rotated), tied embeddings,
        # longrope inside its original context (64): the short factors.
        "phi4_mini": (Phi3ForCausalLM, Phi3Config, dict(
            BASE, original_max_position_embeddings=64, tie_word_embeddings=True, pad_token_id=0,
            rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
                             "short_factor": [1.0, 1.3, 1.9, 2.8, 4.0, 6.5],
                             "long_factor": [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]}),
            {"longrope": "short"}),
        # GPT-OSS: attention sinks (one learned logit per head in the softmax's denominator),
        # biases on q/k/v/o, the router and the experts, a sliding layer (window 4) then a full
        # one, YaRN (factor 8, truncate false: no rounding of the ramp's ends, attention factor
        # 1.2079), softmax over the top-2 router logits, interleaved gate/up with a clamped
        # SwiGLU (limit 2: on these weights the real 7 never bites; 2 clamps 5% of the gate and
        # 10% of the up values). reinit draws sinks and expert biases (names not ending in
        # ".bias") N(0, 0.15), the router bias N(0, 0.1). Experts stored as the released
        # checkpoints store them: MXFP4 blocks + scales ("mxfp4"; see mxfp4_quantize).
        "gpt_oss": (GptOssForCausalLM, GptOssConfig, dict(
            BASE, head_dim=16, intermediate_size=128, num_local_experts=8, num_experts_per_tok=2,
            sliding_window=4, layer_types=["sliding_attention", "full_attention"],
            tie_word_embeddings=False, pad_token_id=0, swiglu_limit=2.0,
            rope_parameters={"rope_type": "yarn", "factor": 8.0, "beta_fast": 32.0, "beta_slow": 1.0,
                             "truncate": False, "original_max_position_embeddings": 32,
                             "rope_theta": 150000.0}),
            {"check_window": 4, "mxfp4": True}),
        # Qwen3.5 (text): Gated DeltaNet linear attention in layers 0 and 1, gated full attention
        # (q_proj holds each head's query and output gate) in layer 2, zero-centred norms
        # (scale 1 + w, w drawn near 0; the DeltaNet's gated norm scales by w, drawn near 1), a
        # quarter of each head rotated. Value heads twice the key heads, as the
        # released models have. Sequence 0's prompt of 70 tokens crosses transformers' chunk of
        # 64 in its chunked delta rule; decode runs its recurrent form, which sums in another
        # order (1.2e-5 apart on these weights, hence incr_tol).
        "qwen3_5": (Qwen3_5ForCausalLM, Qwen3_5TextConfig, dict(
            BASE, num_hidden_layers=3, head_dim=32, layer_types=["linear_attention", "linear_attention",
                                                                "full_attention"],
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
            linear_conv_kernel_dim=4, tie_word_embeddings=False, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25}),
            {"prefill": (70, 5), "incr_tol": 5e-5, "zero_centred_norms": True}),
        # Qwen3.5-MoE (text): qwen3_5's layers with every MLP a mixture: 8 experts of 32, the
        # top 2 of the router's softmax renormalised (always: the config has no switch), and a
        # shared expert of 48 scaled by sigmoid(shared_expert_gate x). Its config class has no
        # intermediate_size (every layer is sparse), so none is written.
        "qwen3_5_moe": (Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig, dict(
            {k: v for k, v in BASE.items() if k != "intermediate_size"}, num_hidden_layers=3, head_dim=32, layer_types=["linear_attention", "linear_attention",
                                                                "full_attention"],
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
            linear_conv_kernel_dim=4, tie_word_embeddings=False, rms_norm_eps=1e-6,
            num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25}),
            {"prefill": (70, 5), "incr_tol": 5e-5, "zero_centred_norms": True, "max_bytes": 3 << 19}),
        # Qwen3-Next: Qwen3.5-MoE's layers before it, with the DeltaNet's projections fused per key
        # head (in_proj_qkvz: each key head's q, k, then its value heads' v and z; in_proj_ba:
        # their b then a), the top k renormalised as norm_topk_prob says, and layer 1 dense
        # (mlp_only_layers).
        "qwen3_next": (Qwen3NextForCausalLM, Qwen3NextConfig, dict(
            BASE, num_hidden_layers=3, head_dim=32, layer_types=["linear_attention", "linear_attention",
                                                                "full_attention"],
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
            linear_conv_kernel_dim=4, tie_word_embeddings=False, rms_norm_eps=1e-6,
            num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48,
            norm_topk_prob=True, mlp_only_layers=[1],
            rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25}),
            {"prefill": (70, 5), "incr_tol": 5e-5, "zero_centred_norms": True, "max_bytes": 3 << 19}),
        # Granite 4.0-H (GraniteMoeHybrid): Mamba-2 in layers 0 and 1, attention without RoPE
        # (position_embedding_type none, as the released models) in layer 2; the Mamba layers: 8
        # heads of 16 (expand 2), one group of B and C with a state of 16, a 4-tap convolution
        # with a bias, the norm gated before it normalises; every layer 4 experts (top 2) beside a
        # shared MLP; Granite's multipliers. The chunked scan's chunks of 32: the 70-token prompt
        # crosses two.
        "granitemoehybrid": (GraniteMoeHybridForCausalLM, GraniteMoeHybridConfig, dict(
            BASE, num_hidden_layers=3, layer_types=["mamba", "mamba", "attention"],
            mamba_n_heads=8, mamba_n_groups=1, mamba_d_state=16, mamba_d_head="auto", mamba_d_conv=4,
            mamba_expand=2, mamba_chunk_size=32, mamba_conv_bias=True, mamba_proj_bias=False,
            num_local_experts=4, num_experts_per_tok=2, intermediate_size=32, shared_intermediate_size=48,
            position_embedding_type=None, tie_word_embeddings=False, embedding_multiplier=12.0,
            attention_multiplier=0.15, residual_multiplier=0.22, logits_scaling=8.0),
            {"prefill": (70, 5), "incr_tol": 5e-5, "lm_head_std_scale": 8.0, "max_bytes": 3 << 19}),
        # Nemotron-H: a layer is one block, Mamba-2, attention (no RoPE) or a squared-ReLU MLP
        # (up_proj, down_proj), each after its own norm; here M - * M -, with the Mamba layers' B
        # and C in two groups and the gated norm per group, so tp=2 keeps a group a rank. Its
        # embedding and final norm are `embeddings` and `norm_f`.
        "nemotron_h": (NemotronHForCausalLM, NemotronHConfig, dict(
            {k: v for k, v in BASE.items() if k not in ("num_hidden_layers", "rms_norm_eps")},
            layers_block_type=["linear_attention", "mlp", "full_attention", "linear_attention", "mlp"],
            head_dim=16, mamba_num_heads=8, mamba_head_dim=16, n_groups=2, ssm_state_size=16,
            conv_kernel=4, chunk_size=32, use_conv_bias=True, use_bias=False, mlp_hidden_act="relu2",
            layer_norm_epsilon=1e-5, tie_word_embeddings=False),
            {"prefill": (70, 5), "incr_tol": 5e-5, "max_bytes": 3 << 19}),
        # Qwen3.5 as released: the vision-language model (Qwen3_5ForConditionalGeneration), its
        # text model qwen3_5's (text_config) under model.language_model., beside a vision tower
        # of one block that a text prompt never runs; logits of text prompts.
        "qwen3_5_vl": (Qwen3_5ForConditionalGeneration, Qwen3_5Config, dict(
            text_config=dict(
                BASE, num_hidden_layers=3, head_dim=32, layer_types=["linear_attention", "linear_attention",
                                                                    "full_attention"],
                linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                linear_conv_kernel_dim=4, tie_word_embeddings=False, rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25,
                                 "mrope_section": [2, 1, 1], "mrope_interleaved": True}),
            vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=4,
                               spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64,
                               num_position_embeddings=16),
            tie_word_embeddings=False),
            {"prefill": (70, 5), "incr_tol": 5e-5, "zero_centred_norms": True}),
        # Nemotron-H with experts (Nemotron 3 Nano's layout): M E * M E, each mixture-of-experts
        # layer 8 experts of 32 without a gate (down(relu2(up x))), the top 2 by sigmoid scores
        # plus a correction bias in 2 groups (the best 1, scored by their two best), renormalised
        # and scaled by 2.5, beside a shared squared-ReLU MLP of 48. Router margins as
        # deepseek_v3's.
        "nemotron_h_moe": (NemotronHForCausalLM, NemotronHConfig, dict(
            {k: v for k, v in BASE.items() if k not in ("num_hidden_layers", "rms_norm_eps")},
            layers_block_type=["linear_attention", "moe", "full_attention", "linear_attention", "moe"],
            head_dim=16, mamba_num_heads=8, mamba_head_dim=16, n_groups=2, ssm_state_size=16,
            conv_kernel=4, chunk_size=32, use_conv_bias=True, use_bias=False, mlp_hidden_act="relu2",
            n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
            moe_shared_expert_intermediate_size=48, n_group=2, topk_group=1, norm_topk_prob=True,
            routed_scaling_factor=2.5, layer_norm_epsilon=1e-5, tie_word_embeddings=False),
            {"prefill": (70, 5), "incr_tol": 5e-5, "max_bytes": 3 << 19, "routing": "v3", "router_std": 0.3,
             "score_bias_std": 0.1, "seed_tries": 20}),
        # Mamba-2 alone (Mamba2ForCausalLM): two Mamba-2 layers of 8 heads of 16, B and C in two
        # groups, the gated norm per group; names under `backbone.`, the LM head tied.
        "mamba2": (Mamba2ForCausalLM, Mamba2Config, dict(
            hidden_size=64, num_hidden_layers=2, num_heads=8, head_dim=16, expand=2, state_size=16,
            n_groups=2, conv_kernel=4, chunk_size=32, use_conv_bias=True, use_bias=False, vocab_size=128,
            layer_norm_epsilon=1e-5, bos_token_id=1, eos_token_id=2, pad_token_id=0,
            tie_word_embeddings=True),
            {"prefill": (70, 5), "incr_tol": 5e-5}),
    }


def tie_experts(model, a, b):
    """Copies expert a's router row and weights to expert b (every tensor whose first
    dimension is the expert count, in the MoE modules)."""
    n = model.config.num_local_experts
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2 and p.shape[0] == n and (".experts." in name or name.endswith("mlp.gate.weight")):
                p[b].copy_(p[a])


def reinit(model, opts):
    """Deterministic, non-trivial weights (caller seeds torch)."""
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied params appear once
            if name.endswith(".bias"):
                p.normal_(0.0, 0.1)
            elif "norm" in name:  # zero-centred norms (scale 1 + w) draw w near 0, as trained ones hold
                centre = 0.0 if opts.get("zero_centred_norms") and not name.endswith("linear_attn.norm.weight") else 1.0
                p.copy_(centre + 0.2 * torch.randn_like(p))
            else:
                std = 0.15
                if name.startswith("lm_head."):
                    std *= opts.get("lm_head_std_scale", 1.0)
                if name.endswith("mlp.gate.weight") and "router_std" in opts:
                    std = opts["router_std"]
                p.normal_(0.0, std)
        if "score_bias_std" in opts:  # buffers are not parameters: set them explicitly
            for name, b in model.named_buffers():
                if name.endswith("e_score_correction_bias"):
                    b.normal_(0.0, opts["score_bias_std"])
                    if "skew_experts" in opts:  # experts 0..n-1 win every token
                        b[:opts["skew_experts"]] += SKEW_BIAS


# MXFP4 (OCP microscaling), as the released gpt-oss checkpoints store their experts: blocks of
# 32 values share a power-of-two scale 2**X, and each value is a 4-bit e2m1 code, an index into
# transformers' FP4_VALUES (codes 8-15 are the negatives of 0-7).
E2M1 = torch.tensor(FP4_VALUES[:8])
MXFP4_QUANT_CONFIG = {"quant_method": "mxfp4", "modules_to_not_convert": [
    "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}


def mxfp4_quantize(w):
    """w [E, out, in], in a multiple of 32 -> (blocks U8 [E, out, in/32, 16], scales U8
    [E, out, in/32], dequantized w). Per block X = floor(log2(amax)) - 2 (OCP MX: 2 is e2m1's
    largest exponent; X = 0 for an all-zero block), so the largest magnitude scales into [4, 8)
    and is clamped to 6; each value takes the nearest e2m1 value (ties: the smaller). Byte j of
    a block packs value 2j in its low nibble and 2j+1 in its high one; scale = X + 127."""
    e, o, i = w.shape
    v = w.reshape(e, o, i // 32, 32)
    amax = v.abs().amax(dim=-1)
    x = (torch.frexp(amax).exponent - 3).clamp(-127, 127)  # amax = m * 2**exp, m in [0.5, 1)
    x = torch.where(amax > 0, x, 0)
    mag = torch.ldexp(v.abs(), -x[..., None]).clamp(max=6.0)
    code = (mag[..., None] - E2M1).abs().argmin(dim=-1)  # the first minimum: ties go down
    code = torch.where((v < 0) & (code > 0), code + 8, code)  # no -0.0 codes
    deq = torch.ldexp(torch.tensor(FP4_VALUES)[code], x[..., None]).reshape(e, o, i)
    blocks = (code[..., 0::2] | code[..., 1::2] << 4).to(torch.uint8)
    return blocks, (x + 127).to(torch.uint8), deq


def mxfp4_experts(model):
    """Quantizes every layer's experts to MXFP4 in place, so the model holds exactly the
    dequantized weights. transformers keeps gate_up_proj [E, H, 2I] and down_proj [E, I, H]
    (in x out); the checkpoint quantizes W = param.transpose(1, 2), [E, out, in], along `in`.
    Returns the checkpoint's tensors: <name>_blocks and <name>_scales for each weight <name>."""
    packed = {}
    with torch.no_grad():
        for li, layer in enumerate(model.model.layers):
            for proj in ("gate_up_proj", "down_proj"):
                p = getattr(layer.mlp.experts, proj)
                blocks, scales, deq = mxfp4_quantize(p.transpose(1, 2))
                p.copy_(deq.transpose(1, 2))
                name = f"model.layers.{li}.mlp.experts.{proj}"
                packed[name + "_blocks"], packed[name + "_scales"] = blocks, scales
    return packed


def write_mxfp4(out_dir, packed):
    """Replaces the experts' float weights in save_pretrained's model.safetensors by their
    MXFP4 blocks and scales (the expert biases stay F32, under their names), and declares the
    quantization in config.json as the released checkpoints do."""
    path = os.path.join(out_dir, "model.safetensors")
    sd = {k: v.clone() for k, v in load_file(path).items()}  # clones: the file is rewritten
    for k in packed:
        if k.endswith("_blocks"):
            del sd[k.removesuffix("_blocks")]
    assert not set(packed) & set(sd)
    sd.update(packed)
    save_safetensors(sd, path, {"format": "pt"})
    cfg_path = os.path.join(out_dir, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = MXFP4_QUANT_CONFIG
    with open(cfg_path, "w") as f:  # as save_pretrained writes it
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


@torch.no_grad()
def check_gpt_oss(model, ids, min_gap=1e-4):
    """GPT-OSS's own features must bite on the golden prompts (full forward of each sequence):
    the SwiGLU clamp hits some but not all gate and up values, the sinks move the logits
    (removed: -inf; zeroed; either also re-routes a few tokens), and no token's routing sits on a knife-edge (the k-th router logit
    beats the k+1-th by > min_gap: the engine's router logits differ by ~1e-6)."""
    cfg, layers = model.config, model.model.layers
    lim, k = cfg.swiglu_limit, cfg.num_experts_per_tok
    gate_up, top = [], []
    hooks = [l.mlp.router.register_forward_hook(
        lambda mod, inp, out: top.append(out[0].topk(k + 1, dim=-1).values)) for l in layers]
    for l in layers:  # the experts' forward calls self._apply_gate: shadow it per instance
        f = l.mlp.experts._apply_gate
        l.mlp.experts._apply_gate = lambda x, f=f: (gate_up.append(x.clone()), f(x))[1]
    try:
        base = [full_logits(model, s) for s in ids]
    finally:
        for h in hooks:
            h.remove()
        for l in layers:
            del l.mlp.experts._apply_gate
    gu = torch.cat([x.reshape(-1, x.shape[-1]) for x in gate_up])
    gate_frac = (gu[:, 0::2] > lim).float().mean().item()
    up_frac = (gu[:, 1::2].abs() > lim).float().mean().item()
    assert 0 < gate_frac < 0.5 and 0 < up_frac < 0.5, "swiglu clamp not exercised"
    gap = min((t[:, k - 1] - t[:, k]).min().item() for t in top)
    assert gap > min_gap, f"routing near-tie: the top-{k} gap is {gap}"
    sinks = [l.self_attn.sinks for l in layers]
    assert all((s != 0).all() for s in sinks)
    saved = [s.clone() for s in sinks]
    effect = {}
    for what, value in (("removed", float("-inf")), ("zeroed", 0.0)):
        for s in sinks:
            s.fill_(value)
        effect[what] = max((full_logits(model, x) - b).abs().max().item()
                           for x, b in zip(ids, base))
        for s, v in zip(sinks, saved):
            s.copy_(v)
        assert effect[what] > 1e-2, f"sinks {what}: logits move by {effect[what]} only"
    return {"swiglu_clamped_gate": gate_frac, "swiglu_clamped_up": up_frac,
            "sink_effect_removed": effect["removed"], "sink_effect_zeroed": effect["zeroed"],
            "min_routing_gap": gap}


def yarn_mscale(scale, mscale=1.0):
    """transformers' yarn_get_mscale / get_mscale."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def route(kind, logits, bias, n_group, topk_group, top_k):
    """Re-implements the DeepSeek router selection on fp32 router logits [T, E].
    Returns (experts [T, top_k] sorted ascending, expert margin [T], group margin [T]):
    the margins are the gap between the last chosen and the best unchosen candidate
    (choosing-score of experts inside the chosen groups; group score)."""
    t, e = logits.shape
    if kind == "v2":     # softmax; group score = max; experts of other groups masked out
        choose = logits.softmax(dim=-1, dtype=torch.float32)
        gscore = choose.view(t, n_group, e // n_group).max(dim=-1).values
    else:                # sigmoid + correction bias; group score = sum of the group's top 2
        choose = logits.sigmoid() + bias
        gscore = choose.view(t, n_group, e // n_group).topk(2, dim=-1)[0].sum(dim=-1)
    gs = gscore.sort(dim=-1, descending=True)
    gmargin = gs.values[:, topk_group - 1] - gs.values[:, topk_group]
    gmask = torch.zeros_like(gscore, dtype=torch.bool)
    gmask.scatter_(1, gs.indices[:, :topk_group], True)
    allowed = gmask[:, :, None].expand(t, n_group, e // n_group).reshape(t, e)
    assert int(allowed[0].sum()) > top_k
    es = choose.masked_fill(~allowed, float("-inf")).sort(dim=-1, descending=True)
    emargin = es.values[:, top_k - 1] - es.values[:, top_k]
    return es.indices[:, :top_k].sort(dim=-1).values, emargin, gmargin


@torch.no_grad()
def check_routing(model, ids, kind, min_margin=1e-4, skew=0):
    """Full forward of each sequence; the router input of every MoE layer is captured by a
    hook on mlp.gate. The selection recomputed here must equal HF's, and every token of
    every MoE layer must clear the margins (an engine whose router logits differ by ~1e-6
    then picks the same experts). skew > 0 asserts that every token of every MoE layer
    chose exactly experts 0..skew-1 (skew == top_k). Returns (ok, report)."""
    cfg = model.config
    caps = []
    hooks = []
    moes = [getattr(layer, "mlp", None) or getattr(layer, "mixer", None) for layer in model.model.layers]
    for li, moe in enumerate(moes):  # (Nemotron-H's experts are a layer's mixer)
        if hasattr(moe, "experts"):
            hooks.append(moe.gate.register_forward_hook(
                lambda mod, inp, out, li=li: caps.append(
                    (li, mod, inp[0].detach().reshape(-1, mod.hidden_dim).float().clone(),
                     out[2].detach().clone()))))
    try:
        for s in ids:
            model(input_ids=s[None, :], use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    assert caps and len(caps) == len(ids) * sum(hasattr(m, "experts") for m in moes)
    emin, gmin, bias_changed, tokens = float("inf"), float("inf"), 0, 0
    for li, gate, x, hf_idx in caps:
        logits = torch.nn.functional.linear(x, gate.weight.float())
        bias = getattr(gate, "e_score_correction_bias", None)
        sel, em, gm = route(kind, logits, bias, cfg.n_group, cfg.topk_group,
                            cfg.num_experts_per_tok)
        assert torch.equal(sel, hf_idx.sort(dim=-1).values), \
            f"layer {li}: recomputed selection differs from HF's"
        if skew:
            assert skew == cfg.num_experts_per_tok
            want = torch.arange(skew).expand_as(sel)
            assert torch.equal(sel, want), \
                f"layer {li}: a token chose experts other than 0..{skew - 1}: {sel.tolist()}"
        emin, gmin = min(emin, em.min().item()), min(gmin, gm.min().item())
        tokens += x.shape[0]
        if kind == "v3":
            nb, _, _ = route(kind, logits, torch.zeros_like(bias), cfg.n_group,
                             cfg.topk_group, cfg.num_experts_per_tok)
            bias_changed += int((nb != sel).any(dim=-1).sum())
    report = {"expert_margin": emin, "group_margin": gmin, "routed_tokens": tokens}
    if skew:
        report["skewed_tokens"] = tokens  # every routed token went to experts 0..skew-1
    ok = emin > min_margin and gmin > min_margin
    if kind == "v3":
        report["tokens_changed_by_bias"] = bias_changed
        ok = ok and bias_changed > 0
    return ok, report


def make_ids(gen, vocab, n):
    while True:
        ids = torch.randint(0, vocab, (n,), generator=gen, dtype=torch.int64)
        if len(set(ids.tolist())) >= max(3, n // 2):
            return ids


@torch.no_grad()
def full_logits(model, ids):
    out = model(input_ids=ids[None, :], use_cache=False)
    return out.logits[0].float()


@torch.no_grad()
def incremental_logits(model, ids, prefill):
    """Prefill `prefill` tokens with use_cache=True, then one token per step."""
    # transformers >= 5.2x renamed `past_key_values` to `cache` (old name is
    # deprecated); support both.
    key = ("cache" if "cache" in inspect.signature(model.forward).parameters
           else "past_key_values")
    out = model(input_ids=ids[None, :prefill], use_cache=True)
    rows = [out.logits[0]]
    past = getattr(out, key)
    assert past is not None
    for t in range(prefill, ids.numel()):
        out = model(input_ids=ids[None, t:t + 1], use_cache=True, **{key: past})
        past = getattr(out, key)
        rows.append(out.logits[0])
    return torch.cat(rows, 0).float()


@torch.no_grad()
def check_sliding_window(model, ids, window):
    """Eager attention probabilities must be nonzero exactly on k in (q-W, q] (on the sliding
    layers where layer_types names them; the others on k <= q)."""
    out = model(input_ids=ids[None, :], use_cache=False, output_attentions=True)
    n = ids.numel()
    q = torch.arange(n)[:, None]
    k = torch.arange(n)[None, :]
    types = getattr(model.config, "layer_types", None)
    for li, a in enumerate(out.attentions):  # [1, heads, n, n]
        sliding = types is None or types[li] == "sliding_attention"
        expected = (k <= q) & (k > q - window) if sliding else k <= q
        nz = a[0] > 0
        assert torch.equal(nz, expected.expand_as(nz)), \
            f"layer {li}: attention pattern differs from {'(q-W, q]' if sliding else 'k <= q'}"


def save_safetensors(tensors, path, metadata, align=8):
    """Like safetensors.torch.save_file, but with a deterministic header
    (save_file's Rust HashMap orders __metadata__ randomly, which would make
    every regeneration a spurious git diff).  Data is read back and checked.
    align=64 pads the header so that every tensor starts 64-byte aligned in the
    file (each tensor's size must then be a multiple of 64 bytes)."""
    dt = {torch.float32: "F32", torch.int64: "I64", torch.uint8: "U8"}
    header = {"__metadata__": dict(sorted(metadata.items()))}
    blobs, off = [], 0
    for k in sorted(tensors):
        t = tensors[k].detach().cpu().contiguous()
        b = t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()
        header[k] = {"dtype": dt[t.dtype], "shape": list(t.shape),
                     "data_offsets": [off, off + len(b)]}
        assert len(b) % align == 0, f"{k}: {len(b)} bytes, not a multiple of {align}"
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-(8 + len(h)) % align)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)
    back = load_file(path)
    assert sorted(back) == sorted(tensors)
    assert all(torch.equal(back[k], tensors[k]) for k in tensors)
    with safe_open(path, "pt") as f:
        assert f.metadata() == metadata


def clean_dir(d):
    for f in os.listdir(d):
        if f not in KEEP_FILES:
            p = os.path.join(d, f)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)


def build_case(idx, name, model_cls, cfg_cls, cfg_kw, opts):
    out_dir = os.path.join(HERE, name)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)

    gen = torch.Generator().manual_seed(4321 + idx)  # independent of the weight seed
    prefill = opts.get("prefill", PREFILL)
    vocab = cfg_kw["vocab_size"] if "vocab_size" in cfg_kw else cfg_kw["text_config"]["vocab_size"]
    ids = [make_ids(gen, vocab, p + DECODE_STEPS) for p in prefill]

    # Weight seed 1234 + idx. Cases with a routing check (DeepSeek) move on to
    # 1234 + idx + 1000*k, k = 1, 2, ... while the routing sits on a knife-edge.
    extra_info = {}
    for attempt in range(opts.get("seed_tries", 1)):
        seed = 1234 + idx + 1000 * attempt
        torch.manual_seed(seed)
        cfg = cfg_cls(**cfg_kw)
        cfg._attn_implementation = "eager"
        model = model_cls(cfg).eval()
        assert model.config._attn_implementation == "eager"
        reinit(model, opts)
        if "tie_experts" in opts:
            tie_experts(model, *opts["tie_experts"])
        if opts.get("mxfp4"):
            mxfp4 = mxfp4_experts(model)
        if "routing" not in opts:
            break
        ok, report = check_routing(model, ids, opts["routing"],
                                   skew=opts.get("skew_experts", 0))
        if ok:
            extra_info.update(seed=seed, **report)
            break
        print(f"{name}: weight seed {seed} rejected: {json.dumps(report)}", flush=True)
    else:
        raise AssertionError(f"{name}: no weight seed passed the routing checks")
    if cfg.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == \
            model.get_input_embeddings().weight.data_ptr()

    half = getattr(torch, opts["half"]) if "half" in opts else None
    bf16 = half is torch.bfloat16
    if half is not None:
        model = model.to(half)
    model.save_pretrained(out_dir, safe_serialization=True)
    clean_dir(out_dir)
    ref_sd = {k: v.clone() for k, v in model.state_dict().items()}
    st_path = os.path.join(out_dir, "model.safetensors")
    if opts.get("fused_experts"):
        # Replace save_pretrained's per-expert conversion by the in-memory names
        # (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]).
        # 64-byte aligned: from_pretrained maps these tensors straight from the file, and
        # torch's grouped_mm experts path rounds differently on a misaligned mmap
        # (~1e-6), which would break the exact in-memory == reloaded logits check.
        assert half is None
        save_safetensors(ref_sd, st_path, {"format": "pt"}, align=64)
    if opts.get("mxfp4"):
        write_mxfp4(out_dir, mxfp4)
    with safe_open(st_path, "pt") as f:
        keys = set(f.keys())
    if "routing" in opts:
        fused = {k for k in keys if k.endswith(("mlp.experts.gate_up_proj",
                                                 "mlp.experts.down_proj"))}
        per_expert = {k for k in keys if (".mlp.experts." in k or ".mixer.experts." in k) and k.endswith(".weight")}
        if opts.get("fused_experts"):
            assert fused and not per_expert, f"{name}: expected fused experts"
        else:
            assert per_expert and not fused, f"{name}: expected per-expert tensors"
    with open(os.path.join(out_dir, "config.json")) as f:
        written = json.load(f)
    for k, v in opts.get("config_keys", {}).items():
        assert written.get(k) == v, f"{name}: config.json {k}={written.get(k)!r}"
    # (half: model.to(half) also rounds the rotary inv_freq buffer; from_pretrained
    # recomputes it in fp32, as the C engine does, so compare logits only in fp32.)
    ref_mem = None if half is not None else [full_logits(model, s) for s in ids]
    del model

    # Reload what was written; golden logits come from the files on disk.
    load_dtype = half if half is not None else torch.float32
    # mxfp4: transformers' own MXFP4 dequantizer is the oracle for the packing. The experts
    # come back as float params (GptOssExperts, under their in-memory names), which the
    # checks below compare bit for bit with the dequantized weights held in memory.
    quant = {"quantization_config": Mxfp4Config(dequantize=True)} if opts.get("mxfp4") else {}
    m = model_cls.from_pretrained(out_dir, dtype=load_dtype,
                                  attn_implementation="eager", **quant).eval()
    sd = m.state_dict()
    assert sorted(sd) == sorted(ref_sd), f"{name}: reloaded state_dict keys differ"
    for k, v in ref_sd.items():
        assert sd[k].dtype == v.dtype and torch.equal(sd[k], v), \
            f"{name}: reloaded {k} differs"
    extra = {}
    if half is not None:
        assert all(p.dtype == half for p in m.parameters())
    if bf16:
        extra = {f"logits_bf16_{i}": full_logits(m, s).contiguous()
                 for i, s in enumerate(ids)}
    if half is not None:
        m = m.float()
    assert m.config._attn_implementation == "eager"
    logits = [full_logits(m, s) for s in ids]

    for i in range(2):
        if ref_mem is not None:
            d = (logits[i] - ref_mem[i]).abs().max().item()
            assert d == 0.0, f"{name}: reload changed logits_{i} by {d}"
        std = logits[i].std(dim=-1)
        assert std.min().item() > 0.5, \
            f"{name}: logits_{i} too flat (min row std {std.min().item():.3f})"
        inc = incremental_logits(m, ids[i], prefill[i])
        d = (inc - logits[i]).abs().max().item()
        tol = opts.get("incr_tol", INCR_TOL)
        assert d <= tol, f"{name}: incremental vs full differ by {d}"
    rope = getattr(m.config, "rope_parameters", None) or {}  # Mamba-2 has none
    if rope.get("rope_type") == "llama3":
        # The scaling must actually touch some (not all) frequencies.
        inv = m.model.rotary_emb.inv_freq
        hd = m.config.head_dim
        base = 1.0 / (m.config.rope_parameters["rope_theta"] **
                      (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        changed = ~torch.isclose(inv, base, rtol=1e-6, atol=0)
        assert 0 < int(changed.sum()) < inv.numel(), "llama3 rope not exercised"
        f = m.config.rope_parameters["factor"]
        assert torch.isclose(inv, base / f, rtol=1e-6, atol=0).any(), \
            "no frequency in the fully-scaled (low-frequency) band"
        assert (changed & ~torch.isclose(inv, base / f, rtol=1e-6, atol=0)).any(), \
            "no frequency in the smooth-interpolation band"
    if rope.get("rope_type") == "yarn":
        rp = m.config.rope_parameters
        rot = m.model.rotary_emb
        inv = rot.inv_freq
        hd = m.config.head_dim  # DeepSeek: head_dim := qk_rope_head_dim
        base = 1.0 / (rp["rope_theta"] **
                      (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        f = rp["factor"]
        changed = ~torch.isclose(inv, base, rtol=1e-6, atol=0)
        assert 0 < int(changed.sum()) < inv.numel(), "yarn rope not exercised"
        assert torch.isclose(inv, base / f, rtol=1e-6, atol=0).any(), \
            "no fully interpolated yarn frequency"
        assert (changed & ~torch.isclose(inv, base / f, rtol=1e-6, atol=0)).any(), \
            "no blended yarn frequency"
        ms, msa = rp.get("mscale"), rp.get("mscale_all_dim")
        want = (yarn_mscale(f, ms) / yarn_mscale(f, msa) if ms and msa
                else yarn_mscale(f))
        assert abs(rot.attention_scaling - want) < 1e-12, \
            f"{name}: yarn attention factor {rot.attention_scaling} != {want}"
        if opts.get("yarn_attention_factor_not_1"):
            assert rot.attention_scaling != 1.0, f"{name}: yarn attention factor is 1"
        extra_info["yarn_attention_factor"] = rot.attention_scaling
        if msa and hasattr(m.config, "qk_nope_head_dim"):  # DeepSeek softmax scale
            qk = m.config.qk_nope_head_dim + m.config.qk_rope_head_dim
            for layer in m.model.layers:
                sc = layer.self_attn.scaling
                assert sc != qk ** -0.5, f"{name}: mscale_all_dim did not change the scale"
                assert abs(sc - qk ** -0.5 * yarn_mscale(f, msa) ** 2) < 1e-12
            extra_info["softmax_scale"] = m.model.layers[0].self_attn.scaling
    if "longrope" in opts:
        # every pass of the golden (and of its incremental check) on one side of the original context
        rp = m.config.rope_parameters
        orig = rp["original_max_position_embeddings"]
        if opts["longrope"] == "long":
            assert min(prefill) > orig, f"{name}: a prefill within the original context"
        else:
            assert max(prefill) + DECODE_STEPS <= orig, f"{name}: a pass past the original context"
        assert rp["short_factor"] != rp["long_factor"]
        extra_info["longrope_attention_factor"] = m.model.rotary_emb.attention_scaling
        extra_info["rotary_dim"] = 2 * m.model.rotary_emb.inv_freq.numel()
    if "routing" in opts:
        # Same weights as the in-memory model checked above; check the reloaded one too.
        ok, report = check_routing(m, ids, opts["routing"],
                                   skew=opts.get("skew_experts", 0))
        assert ok and report["expert_margin"] == extra_info["expert_margin"], \
            f"{name}: reloaded model routes differently: {report}"
    if "check_window" in opts:
        assert m.config.sliding_window == opts["check_window"]
        for s in ids:
            check_sliding_window(m, s, opts["check_window"])
    if m.config.model_type == "gpt_oss":
        extra_info.update(check_gpt_oss(m, ids))

    tensors = {"ids_0": ids[0].contiguous(), "ids_1": ids[1].contiguous(),
               "logits_0": logits[0].contiguous(),
               "logits_1": logits[1].contiguous()}
    tensors.update(extra)
    meta = {"prefill_0": str(prefill[0]), "prefill_1": str(prefill[1]),
            "decode_steps": str(DECODE_STEPS),
            "transformers": transformers.__version__,
            "torch": torch.__version__, "case": name, "atol": "1e-4"}
    save_safetensors(tensors, os.path.join(out_dir, "golden.safetensors"), meta)

    info = {"max_abs_logit": max(l.abs().max().item() for l in logits),
            "min_row_std": min(l.std(dim=-1).min().item() for l in logits)}
    if bf16:
        info["bf16_vs_fp32_max_abs"] = max(
            (extra[f"logits_bf16_{i}"] - logits[i]).abs().max().item()
            for i in range(2))
    size = sum(os.path.getsize(os.path.join(out_dir, f))
               for f in os.listdir(out_dir))
    assert size < opts.get("max_bytes", 1 << 20), f"{name}: {size} bytes, too big"
    info["bytes"] = size
    info.update(extra_info)
    return info


def main():
    defs = case_defs()
    wanted = sys.argv[1:] or list(defs)
    for name in wanted:
        idx = list(defs).index(name)
        info = build_case(idx, name, *defs[name])
        print(f"{name:12s} " + json.dumps(info), flush=True)
    print(f"transformers {transformers.__version__}  torch {torch.__version__}"
          f"  numpy {np.__version__}")


if __name__ == "__main__":
    main()
