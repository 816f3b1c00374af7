"""`loom run --image` against transformers, from the picture's file to the generated text, on the
random Gemma 3 of tests/golden/gemma3_vlm (its tokenizer: one CJK character a token, so any
output is text of its own): transformers' Gemma3Processor (load_image, the image processor,
the prompt's <start_of_image> expanded) and Gemma3ForConditionalGeneration.generate(), greedy,
up to 8 tokens or EOS, against loom's decoding, processor, tower and generation. Pictures are generated here and
written by Pillow as PNG and JPEG; one prompt has two. Each case's greedy choices must be clear
(a margin of 5e-4 between the top two logits, 20 times loom's largest difference from
transformers), and two pictures must give two different answers (the picture is read).

Needs torch, torchvision, transformers and Pillow (scripts/test.sh's .venv-vision).
Usage: vlm_run.py "LOOM" SOURCE_DIR"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from PIL import Image, ImageDraw
from transformers import AutoTokenizer, Gemma3ForConditionalGeneration, Gemma3ImageProcessor, Gemma3Processor
from transformers.image_utils import load_image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util  # noqa: E402
from serve_util import check  # noqa: E402

LOOM, SRC = sys.argv[1], sys.argv[2]
FOLDER = os.path.join(SRC, "tests/golden/gemma3_vlm")
NEW = 8


def pictures(tmp):
    rng = np.random.default_rng(5)
    a = Image.fromarray(rng.integers(0, 256, (50, 70, 3), dtype=np.uint8), "RGB")
    b = Image.new("RGB", (90, 120), (240, 230, 200))
    ImageDraw.Draw(b).ellipse([10, 20, 80, 100], fill=(20, 90, 160))
    pa, pb = os.path.join(tmp, "noise.png"), os.path.join(tmp, "disc.jpg")
    a.save(pa)
    b.save(pb, quality=90)
    return pa, pb


@torch.no_grad()
def transformers_answer(model, proc, tok, prompt, files):
    inputs = proc(text=prompt, images=[load_image(f) for f in files], return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=NEW, do_sample=False, output_scores=True,
                         return_dict_in_generate=True)
    margins = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in out.scores]
    new = out.sequences[0, inputs["input_ids"].shape[1]:]
    return tok.decode(new, skip_special_tokens=True), min(margins)


def loom_answer(prompt, files):
    args = [*LOOM.split(), "run", "-m", FOLDER, "--dtype", "float32", "-p", prompt, "-n", str(NEW)]
    for f in files:
        args += ["--image", f]
    r = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "2"})
    return r.returncode, r.stdout, r.stderr


def main():
    tmp = tempfile.mkdtemp(prefix="loom-vlm-")
    pa, pb = pictures(tmp)
    tok = AutoTokenizer.from_pretrained(FOLDER)
    proc = Gemma3Processor(image_processor=Gemma3ImageProcessor.from_pretrained(FOLDER), tokenizer=tok,
                           image_seq_length=16)
    model = Gemma3ForConditionalGeneration.from_pretrained(FOLDER, attn_implementation="eager").eval()
    cases = [("<start_of_image>\u4e10\u4e20 \u4e30", [pa]), ("<start_of_image>\u4e10\u4e20 \u4e30", [pb]),
             ("\u4e40<start_of_image>\u4e41 \u4e42<start_of_image>\u4e43", [pa, pb])]
    answers = []
    for prompt, files in cases:
        want, margin = transformers_answer(model, proc, tok, prompt, files)
        rc, out, err = loom_answer(prompt, files)
        name = f"{' + '.join(os.path.basename(f) for f in files)}"
        check(margin > 5e-4, f"{name}: transformers' greedy margin {margin:.2g} is too close to call")
        check(rc == 0, f"{name}: loom run exit {rc}: {err}")
        check(out.strip() == want.strip(), f"{name}: loom wrote {out.strip()!r}, transformers {want.strip()!r}")
        print(f"{name}: {out.strip()!r} (transformers {want.strip()!r}; smallest margin {margin:.2g})", flush=True)
        answers.append(out.strip())
    check(answers[0] != answers[1], "two pictures, one answer: the picture is not read")
    rc, out, err = loom_answer("no placeholder", [pa])
    check(rc != 0 and "placeholder" in err, f"a prompt without a placeholder: exit {rc}, {err!r}")
    if serve_util.failures:
        print(f"{serve_util.failures} check(s) failed")
        sys.exit(1)
    print("vlm_run: all checks passed")


main()
