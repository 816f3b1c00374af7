#!/usr/bin/env python3
"""Trains an Eagle3 head for a real model on this machine, from text the model generates itself,
and writes it in speculators' layout for `loom --speculative-config '{"method": "eagle3", ...}'`.

    python3 benches/eagle3_train.py --target models/stories260K --out build-bench/eagle3-stories260K

Needs torch, transformers, safetensors and the `speculators` package's code (its Eagle3 layer
is the draft's layer here, so the head is what speculators would train). The recipe is
EAGLE-3's, small: the target samples --sequences continuations of its BOS (temperature 0.8);
its hidden states entering the aux layers are the inputs; the draft learns the target's
next-token distribution (KL divergence) at each position, over --ttt-steps steps of feeding its
own pre-norm state back (EAGLE-3's training-time test), as it runs at inference. The embedding
is the target's and stays frozen, as in speculators; the draft vocabulary is the target's.
"""
import argparse
import json
import os
import time

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from speculators.models.eagle3.model_definitions import LlamaDecoderEagle3FirstLayer
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding


def causal_mask(q, past):
    m = torch.full((q, past + q), float("-inf"))
    return torch.triu(m, diagonal=past + 1)[None, None]


class Head(torch.nn.Module):
    def __init__(self, cfg, n_aux):
        super().__init__()
        self.layer = LlamaDecoderEagle3FirstLayer(cfg, 0, norm_before_residual=True)
        self.layer.self_attn.config._attn_implementation = "eager"
        self.fc = torch.nn.Linear(n_aux * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.norm = LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.lm_head = torch.nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.rotary = LlamaRotaryEmbedding(cfg)

    def forward(self, embeds, g, pos):
        """One step over a whole batch of sequences (no cache: every step sees the full
        sequence, with the state fed back shifted one position, as speculators trains)."""
        x = torch.cat([embeds, g], dim=-1)
        b, t, _ = x.shape
        p = pos.expand(b, t)
        h = self.layer(x, attention_mask=causal_mask(t, 0), position_ids=p, position_embeddings=self.rotary(x, p))
        h = h[0] if isinstance(h, tuple) else h
        return h, self.lm_head(self.norm(h))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--aux", default="1,3,4")
    ap.add_argument("--sequences", type=int, default=1024)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--ttt-steps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(os.cpu_count())
    aux = [int(x) for x in a.aux.split(",")]
    t0 = time.time()
    target = LlamaForCausalLM.from_pretrained(a.target, attn_implementation="eager", dtype=torch.float32).eval()
    cfg = target.config
    with torch.no_grad():
        bos = torch.full((a.sequences, 1), cfg.bos_token_id)
        ids = target.generate(bos, do_sample=True, temperature=0.8, max_new_tokens=a.length - 1,
                              min_new_tokens=a.length - 1, pad_token_id=0)
        out = target(ids, output_hidden_states=True)
        states = torch.cat([out.hidden_states[k] for k in aux], dim=-1)  # [S, T, n_aux * H]
        teacher = F.log_softmax(out.logits, dim=-1)
    print(f"generated {a.sequences} x {a.length} tokens and their states in {time.time() - t0:.0f} s")
    lcfg = LlamaConfig(**{k: getattr(cfg, k) for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                                       "vocab_size", "max_position_embeddings", "rms_norm_eps",
                                                       "bos_token_id", "eos_token_id")},
                       rope_parameters=cfg.rope_parameters, head_dim=cfg.hidden_size // cfg.num_attention_heads,
                       intermediate_size=cfg.intermediate_size, num_hidden_layers=1, tie_word_embeddings=False)
    lcfg._attn_implementation = "eager"
    head = Head(lcfg, len(aux))
    embed = target.model.embed_tokens.weight.detach()
    opt = torch.optim.AdamW(head.parameters(), lr=3e-3, weight_decay=0.0)
    steps = a.epochs * (a.sequences // 32)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps)
    t1 = time.time()
    for step in range(steps):
        idx = torch.randint(0, a.sequences, (32,))
        x, s, tch = ids[idx], states[idx], teacher[idx]
        # pair q: token q + 1 beside the target's state at q; it predicts token q + 2
        emb, g = embed[x[:, 1:]], head.fc(s[:, :-1])
        tgt = tch[:, 1:]
        pos = torch.arange(1, x.shape[1])[None]
        loss = 0.0
        for k in range(a.ttt_steps):
            h, logits = head(emb[:, k:], g, pos[:, k:] + 0)
            lp = F.log_softmax(logits, dim=-1)
            loss = loss + F.kl_div(lp[:, :tgt.shape[1] - k], tgt[:, k:], log_target=True, reduction="batchmean") \
                / x.shape[1]
            # the next step: the draft's own state, one position on
            g = h[:, :-1]
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps - 1:
            with torch.no_grad():
                h, logits = head(emb, head.fc(s[:, :-1]), pos)
                acc = (logits[:, :-1].argmax(-1) == tch[:, 1:-1].argmax(-1)).float().mean().item()
            print(f"step {step}/{steps} loss {loss.item():.4f} first-step agreement with the target {acc:.3f}")
    print(f"trained in {time.time() - t1:.0f} s")
    os.makedirs(a.out, exist_ok=True)
    sd = {f"layers.0.{k}": v.detach().contiguous() for k, v in head.layer.state_dict().items()}
    sd.update({"fc.weight": head.fc.weight.detach().contiguous(), "norm.weight": head.norm.weight.detach(),
               "lm_head.weight": head.lm_head.weight.detach().contiguous(),
               "d2t": torch.zeros(cfg.vocab_size, dtype=torch.int64),
               "t2d": torch.ones(cfg.vocab_size, dtype=torch.bool)})
    save_file(sd, os.path.join(a.out, "model.safetensors"))
    layer = lcfg.to_dict()
    for k in ("_attn_implementation", "transformers_version", "architectures"):
        layer.pop(k, None)
    config = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
              "transformer_layer_config": layer, "draft_vocab_size": cfg.vocab_size,
              "norm_before_residual": True, "target_hidden_size": cfg.hidden_size,
              "eagle_aux_hidden_state_layer_ids": aux,
              "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                     "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                     "verifier": {"name_or_path": a.target, "architectures": cfg.architectures}}}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
