#!/usr/bin/env python3
"""Golden data for loom's Eagle3 draft: a tiny random Llama target and a tiny random Eagle3
draft for it in both checkpoint layouts, with the logits the reference computes.

Run (a venv with torch, transformers, safetensors, and the `speculators` package's code on
PYTHONPATH or installed):  python3 tests/golden/make_eagle3_golden.py

The reference is not written here: the draft's decoder layer is speculators'
LlamaDecoderEagle3FirstLayer (the class its Eagle3 training and checkpoints use), with
transformers' Llama rotary embedding, eager attention and RMSNorm, in fp32; the target is
transformers' LlamaForCausalLM, whose hidden_states[k] is the state entering layer k (vLLM's
aux hidden state k). Positions follow speculators (a pair (token x[q+1], state g[q]) sits at
position q + 1); loom puts it at q, as vLLM does, which RoPE cannot tell apart.

tests/golden/eagle3/ gets:
  target/        LlamaForCausalLM, 8 layers (aux layers 2, 4, 5), vocabulary 128
  speculators/   speculators' layout: layers.0.*, fc, norm, lm_head, d2t, t2d, no embedding;
                 config without norm_before_residual (vLLM then assumes true)
  eagle/         EAGLE's layout (LlamaForCausalLMEagle3): midlayer.*, its own embed_tokens
                 (the target's), config without norm_before_residual (false)
  no_d2t/        the EAGLE layout without d2t (a draft vocabulary it cannot map: refused)
  golden.safetensors:
    ids          I64 [10]: the prompt (9 tokens), then the target's greedy next token
    target_logits F32 [9, 128]; aux F32 [9, 3, 64]: the states entering layers 2, 4, 5
    <fmt>_first  F32 [9, 96]: the draft's logits for pairs (ids[q+1], fc(aux[q])), q = 0..8
    <fmt>_chain_ids I64 [2], <fmt>_chain F32 [2, 96]: two more steps on the draft's own state,
                 feeding the draft's greedy tokens (as target ids)
"""
import json
import os
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from speculators.models.eagle3.model_definitions import LlamaDecoderEagle3FirstLayer  # noqa: E402
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding  # noqa: E402

torch.set_num_threads(1)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "eagle3")
H, V, DV, AUX = 64, 128, 96, [2, 4, 5]


def llama_config(layers, inter):
    c = LlamaConfig(hidden_size=H, intermediate_size=inter, num_hidden_layers=layers, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=V, max_position_embeddings=256, rms_norm_eps=1e-5,
                    rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    c._attn_implementation = "eager"
    return c


def randomize(module, gen):
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))


def target():
    torch.manual_seed(0)
    m = LlamaForCausalLM(llama_config(8, 128)).eval()
    randomize(m, torch.Generator().manual_seed(1))
    d = os.path.join(OUT, "target")
    m.save_pretrained(d, safe_serialization=True)
    for f in ("generation_config.json",):
        if os.path.exists(os.path.join(d, f)):
            os.remove(os.path.join(d, f))
    return LlamaForCausalLM.from_pretrained(d, attn_implementation="eager").eval()


class Draft(torch.nn.Module):
    """The reference: speculators' first layer between fc and the head."""

    def __init__(self, norm_before_residual, gen):
        super().__init__()
        cfg = llama_config(1, 96)
        self.layer = LlamaDecoderEagle3FirstLayer(cfg, 0, norm_before_residual=norm_before_residual)
        self.fc = torch.nn.Linear(3 * H, H, bias=False)
        self.norm = LlamaRMSNorm(H, eps=cfg.rms_norm_eps)
        self.lm_head = torch.nn.Linear(H, DV, bias=False)
        self.rotary = LlamaRotaryEmbedding(cfg)
        randomize(self, gen)
        self.layer.self_attn.config._attn_implementation = "eager"

    def step(self, embeds, g, positions, cache):
        x = torch.cat([embeds, g], dim=-1)[None]
        q = x.shape[1]
        past = cache.get_seq_length()
        mask = torch.full((q, past + q), float("-inf"))
        mask = torch.triu(mask, diagonal=past + 1)[None, None]
        pos = torch.tensor(positions)[None]
        h = self.layer(x, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True,
                       cache_position=torch.arange(past, past + q), position_embeddings=self.rotary(x, pos))
        h = h[0] if isinstance(h, tuple) else h
        return h[0], self.lm_head(self.norm(h[0]))


def layer_tensors(draft, prefix):
    return {f"{prefix}.{k}": v.contiguous() for k, v in draft.layer.state_dict().items()}


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    t = target()
    ids = torch.tensor([1, 17, 42, 99, 5, 63, 88, 12, 7])
    with torch.no_grad():
        out = t(ids[None], output_hidden_states=True)
    logits = out.logits[0]
    nxt = int(logits[-1].argmax())
    all_ids = torch.cat([ids, torch.tensor([nxt])])
    aux = torch.stack([out.hidden_states[k][0] for k in AUX], dim=1)  # [9, 3, H]
    embed = t.model.embed_tokens.weight.detach()
    gen = torch.Generator().manual_seed(2)
    # the draft vocabulary: 96 of the 128 ids, as d2t offsets (draft id i -> target id i + d2t[i])
    keep = torch.sort(torch.randperm(V, generator=gen)[:DV]).values
    keep[0], keep[1] = 0, 1
    keep = torch.sort(torch.unique(keep)).values
    while len(keep) < DV:
        keep = torch.sort(torch.unique(torch.cat([keep, torch.randint(0, V, (1,), generator=gen)]))).values
    d2t = keep - torch.arange(DV)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[keep] = True
    golden = {"ids": all_ids.to(torch.int64), "target_logits": logits.contiguous(), "aux": aux.contiguous()}
    for fmt, nbr in (("speculators", True), ("eagle", False)):
        draft = Draft(nbr, torch.Generator().manual_seed(3 if fmt == "speculators" else 4)).eval()
        with torch.no_grad():
            g = draft.fc(aux.reshape(9, 3 * H))
            cache = DynamicCache()
            pre, first = draft.step(embed[all_ids[1:]], g, list(range(1, 10)), cache)
            chain_ids, chain = [], []
            state, lg = pre[-1:], first[-1]
            for j in range(2):
                tok = int(keep[int(lg.argmax())])
                chain_ids.append(tok)
                state, lg2 = draft.step(embed[torch.tensor([tok])], state, [10 + j], cache)
                lg = lg2[0]
                chain.append(lg)
        golden[f"{fmt}_first"] = first.contiguous()
        golden[f"{fmt}_chain_ids"] = torch.tensor(chain_ids, dtype=torch.int64)
        golden[f"{fmt}_chain"] = torch.stack(chain).contiguous()
        tensors = {"fc.weight": draft.fc.weight.detach().contiguous(), "norm.weight": draft.norm.weight.detach(),
                   "lm_head.weight": draft.lm_head.weight.detach().contiguous(), "d2t": d2t.clone(), "t2d": t2d}
        layer_cfg = llama_config(1, 96).to_dict()
        for k in ("_attn_implementation", "transformers_version", "architectures"):
            layer_cfg.pop(k, None)
        if fmt == "speculators":
            tensors.update(layer_tensors(draft, "layers.0"))
            config = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
                      "transformer_layer_config": layer_cfg, "draft_vocab_size": DV, "target_hidden_size": H,
                      "eagle_aux_hidden_state_layer_ids": AUX,
                      "speculators_config": {"algorithm": "eagle3",
                                             "proposal_methods": [{"proposal_type": "greedy",
                                                                   "speculative_tokens": 3}],
                                             "default_proposal_method": "greedy",
                                             "verifier": {"name_or_path": "target",
                                                          "architectures": ["LlamaForCausalLM"]}}}
        else:
            tensors.update(layer_tensors(draft, "midlayer"))
            tensors["embed_tokens.weight"] = embed.clone().contiguous()
            config = dict(layer_cfg, architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=DV,
                          eagle_config={"eagle_aux_hidden_state_layer_ids": AUX})
        d = os.path.join(OUT, fmt)
        os.makedirs(d)
        save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(d, "model.safetensors"))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        if fmt == "eagle":
            nd = os.path.join(OUT, "no_d2t")
            os.makedirs(nd)
            save_file({k: v.contiguous() for k, v in tensors.items() if k not in ("d2t", "t2d")},
                      os.path.join(nd, "model.safetensors"))
            shutil.copy(os.path.join(d, "config.json"), os.path.join(nd, "config.json"))
    meta = {"transformers": transformers.__version__, "torch": torch.__version__, "atol": "1e-4"}
    save_file(golden, os.path.join(OUT, "golden.safetensors"), metadata=meta)
    print("wrote", OUT, "next token", nxt)


if __name__ == "__main__":
    main()
