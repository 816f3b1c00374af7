#!/usr/bin/env python3
"""Golden embeddings from Hugging Face transformers, for loom's embedding models (--task embed).

Run:  python3 tests/golden/make_embed_golden.py

Two cases, each a bare Qwen3Model (architectures ["Qwen3Model"], as Qwen3-Embedding is saved:
tensor names without the "model." prefix) of the golden shapes with random weights, and the
sentence-transformers files that declare its pooling:
  qwen3_embed/        modules.json: Transformer, Pooling (pooling_mode_lasttoken), Normalize
                      (Qwen3-Embedding's pipeline)
  qwen3_embed_mean/   the same weights (a link to qwen3_embed's); Pooling
                      (pooling_mode_mean_tokens) and no Normalize
Each gets golden.safetensors: ids_0..ids_2 (I64, three prompts of 9, 5 and 13 tokens) and
embedding_0..embedding_2 (F32 [hidden]): transformers' last_hidden_state (after the final norm,
fp32, eager attention, one unpadded sequence at a time) pooled as sentence-transformers'
Pooling module defines it (the last token's row, or the mean of the rows) and, with Normalize,
divided by its L2 norm. __metadata__: case, pooling, normalize, n, atol=1e-4, versions.
"""
import json
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import Qwen3Config, Qwen3Model  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import BASE, save_safetensors  # noqa: E402

torch.set_num_threads(1)
HERE = os.path.dirname(os.path.abspath(__file__))
LENGTHS = (9, 5, 13)


def pool(hidden, mode, normalize):
    v = hidden[-1] if mode == "last" else hidden.mean(dim=0)
    return v / v.norm() if normalize else v


def main():
    torch.manual_seed(2026)
    cfg = Qwen3Config(**dict(BASE, head_dim=32, tie_word_embeddings=False, use_sliding_window=False,
                             attention_bias=False, rms_norm_eps=1e-6,
                             rope_parameters={"rope_type": "default", "rope_theta": 1e6}))
    cfg._attn_implementation = "eager"
    model = Qwen3Model(cfg).float().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.1)
            else:
                p.normal_(1.0, 0.1)  # norm weights away from 1 so that a missing norm shows
    gen = torch.Generator().manual_seed(77)
    ids = [torch.randint(3, cfg.vocab_size, (n,), generator=gen) for n in LENGTHS]
    for case, mode, normalize in (("qwen3_embed", "last", True), ("qwen3_embed_mean", "mean", False)):
        out = os.path.join(HERE, case)
        shutil.rmtree(out, ignore_errors=True)
        model.save_pretrained(out, safe_serialization=True)
        for f in os.listdir(out):
            if f not in ("config.json", "model.safetensors"):
                os.remove(os.path.join(out, f))
        modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
        if normalize:
            modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                            "type": "sentence_transformers.models.Normalize"})
        with open(os.path.join(out, "modules.json"), "w") as f:
            json.dump(modules, f, indent=2)
        os.makedirs(os.path.join(out, "1_Pooling"))
        with open(os.path.join(out, "1_Pooling", "config.json"), "w") as f:
            json.dump({"word_embedding_dimension": cfg.hidden_size, "pooling_mode_cls_token": False,
                       "pooling_mode_mean_tokens": mode == "mean", "pooling_mode_max_tokens": False,
                       "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
                       "pooling_mode_lasttoken": mode == "last", "include_prompt": True}, f, indent=2)
        if mode == "mean":  # the same weights: one copy in the repository
            os.remove(os.path.join(out, "model.safetensors"))
            os.symlink("../qwen3_embed/model.safetensors", os.path.join(out, "model.safetensors"))
        reloaded = Qwen3Model.from_pretrained(out, attn_implementation="eager").float().eval()
        names = [k for k in __import__("safetensors").safe_open(os.path.join(out, "model.safetensors"), "pt").keys()]
        assert not any(n.startswith("model.") for n in names), "a bare Qwen3Model's names carry no prefix"
        tensors = {}
        with torch.no_grad():
            for i, x in enumerate(ids):
                hidden = reloaded(input_ids=x[None]).last_hidden_state[0]
                tensors[f"ids_{i}"] = x.to(torch.int64)
                tensors[f"embedding_{i}"] = pool(hidden, mode, normalize).float().contiguous()
        save_safetensors(tensors, os.path.join(out, "golden.safetensors"),
                         {"case": case, "pooling": mode, "normalize": str(normalize).lower(), "n": str(len(ids)),
                          "atol": "1e-4", "transformers": transformers.__version__, "torch": torch.__version__})
        print(f"{case}: {len(ids)} embeddings of {cfg.hidden_size}, {mode} pooling, normalize {normalize}")


main()
