#!/usr/bin/env python3
"""Golden outputs of vision-language models from transformers, for loom's image tests.

Run:  python3 tests/golden/make_vlm_golden.py

tests/golden/gemma3_vlm/ gets a random tiny Gemma3ForConditionalGeneration (save_pretrained:
config.json, model.safetensors) and golden.safetensors:

  pixels_0, pixels_1     F32 [3, 64, 64]   two pictures' pixel values (random, in [-1, 1])
  features_0, features_1 F32 [16, hidden]  get_image_features: the vision tower (SigLIP), then
                                           the projector (4 x 4 average pool, soft-embedding
                                           norm, projection) for each
  ids_0                  I64 [n]           a prompt with picture 0 (boi, 16 image tokens, eoi)
  logits_0               F32 [n, vocab]    its logits with pixels_0
  ids_1, logits_1                          a prompt with both pictures, in order
  generated_1            I64 [8]           generate()'s greedy tokens after ids_1

The folder also gets a tokenizer (tokenizer.json: characters, id 3 a newline, 4 a space, 5-296
the CJK characters U+4E05-U+4F28, 297-299 Gemma 3's <start_of_image>, <end_of_image> and
<image_soft_token>, 0-2 <pad>, <eos>, <bos>, which it adds first) and the processor's files (preprocessor_config.json: Gemma3ImageProcessor
at 64 x 64), for tests/vlm_run.py, which runs `loom run --image` against transformers'
Gemma3Processor and generate().

The model runs from the written files, fp32, eager attention, one sequence at a time; the
logits are the full forward with token_type_ids (1 on image tokens), so the text model's
attention is bidirectional within each image's run of tokens, as the processor has it. The
vision tower: 64 x 64 pixels in 8 x 8 patches (64 patches), two layers of 4 heads of 12; the
text model: Gemma 3's layer (sliding, global), its sliding window wider than an image.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import Gemma3Config, Gemma3ForConditionalGeneration  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import clean_dir, reinit, save_safetensors  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB, BOI, EOI, IMAGE = 300, 297, 298, 299
TOKENS = 16


def config():
    return Gemma3Config(
        text_config=dict(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16, sliding_window=32,
            layer_types=["sliding_attention", "full_attention"], max_position_embeddings=256,
            hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, final_logit_softcapping=None,
            attn_logit_softcapping=None,
            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
        vision_config=dict(
            hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, image_size=64,
            patch_size=8, layer_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh", vision_use_head=False),
        mm_tokens_per_image=TOKENS, boi_token_index=BOI, eoi_token_index=EOI, image_token_index=IMAGE,
        tie_word_embeddings=True)


def prompt(gen, images):
    """BOS, text, and per image a boi, its tokens and an eoi between text (ids below 290)."""
    ids = [2]
    for _ in range(images):
        ids += torch.randint(3, 290, (3,), generator=gen).tolist() + [BOI] + [IMAGE] * TOKENS + [EOI]
    ids += torch.randint(3, 290, (4,), generator=gen).tolist()
    return torch.tensor(ids)


def write_tokenizer(out):
    """A character-level BPE without merges over the golden's 300 ids: a newline, a space and
    one CJK character each (U+4E00 + id), so that any generated id is printable text of its
    own; and Gemma 3's image tokens."""
    from tokenizers import Tokenizer, models, processors
    specials = {0: "<pad>", 1: "<eos>", 2: "<bos>", BOI: "<start_of_image>", EOI: "<end_of_image>",
                IMAGE: "<image_soft_token>"}
    vocab = {"\n": 3, " ": 4}
    vocab.update({chr(0x4E00 + i): i for i in range(5, BOI)})
    vocab.update({t: i for i, t in specials.items()})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.add_special_tokens(list(specials.values()))
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>",
                   "pad_token": "<pad>", "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                   "image_token": "<image_soft_token>",
                   "extra_special_tokens": {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                                            "image_token": "<image_soft_token>"}}, f, indent=2)
    with open(os.path.join(out, "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "Gemma3ImageProcessor", "size": {"height": 64, "width": 64},
                   "resample": 2, "do_normalize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
                   "do_rescale": True, "rescale_factor": 1 / 255, "do_resize": True, "do_convert_rgb": True},
                  f, indent=2)


@torch.no_grad()
def main():
    out = os.path.join(HERE, "gemma3_vlm")
    os.makedirs(out, exist_ok=True)
    clean_dir(out)
    torch.manual_seed(47)
    model = Gemma3ForConditionalGeneration(config()).eval()
    reinit(model, {})
    model.save_pretrained(out, safe_serialization=True)
    write_tokenizer(out)
    model = Gemma3ForConditionalGeneration.from_pretrained(out, attn_implementation="eager").eval()
    gen = torch.Generator().manual_seed(7)
    pixels = [torch.rand(3, 64, 64, generator=gen) * 2 - 1 for _ in range(2)]
    golden = {}
    for i, px in enumerate(pixels):
        golden[f"pixels_{i}"] = px
        golden[f"features_{i}"] = model.get_image_features(px[None]).pooler_output[0].float()
    for s, n in enumerate((1, 2)):
        ids = prompt(gen, n)
        tt = (ids == IMAGE).long()
        logits = model(input_ids=ids[None], pixel_values=torch.stack(pixels[:n]), token_type_ids=tt[None],
                       use_cache=False).logits[0].float()
        golden[f"ids_{s}"], golden[f"logits_{s}"] = ids, logits
        assert logits.std(-1).min() > 0.5, "logit rows too flat to test"
        # the bidirectional image mask matters here: without token_type_ids the logits differ
        causal = model(input_ids=ids[None], pixel_values=torch.stack(pixels[:n]), use_cache=False).logits[0]
        assert (causal - logits).abs().max() > 1e-3, "the image mask changes nothing"
    gen = model.generate(input_ids=ids[None], pixel_values=torch.stack(pixels), token_type_ids=tt[None],
                         max_new_tokens=8, do_sample=False, output_scores=True,
                         return_dict_in_generate=True)
    for step in gen.scores:  # no near-ties: loom's logits differ by up to 2.5e-5, 20 times less
        top = step[0].topk(2).values
        assert top[0] - top[1] > 5e-4, f"greedy margin {top[0] - top[1]}"
    golden["generated_1"] = gen.sequences[0, ids.numel():]
    save_safetensors(golden, os.path.join(out, "golden.safetensors"),
                     {"transformers": transformers.__version__, "torch": torch.__version__, "case": "gemma3_vlm",
                      "atol": "1e-4"})
    print(f"gemma3_vlm: {sum(t.numel() for t in model.parameters())} parameters")


main()
