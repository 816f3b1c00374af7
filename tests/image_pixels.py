"""Images' pixels (src/image/) against transformers, bit for bit:

  a. decoding: transformers.image_utils.load_image (Pillow's decoders, EXIF transpose,
     convert("RGB")) against `image_pixels --decode`;
     (a PNG's tRNS colour survives there as Pillow's "transparency", which the processors then
     paint white: the keyed files check that);
  b. processing: the model's image processor (transformers' default, torchvision backend) on that
     picture against `image_pixels CONFIG`, for Gemma 3's, SigLIP's, CLIP's (LLaVA's) and
     Qwen2-VL's (smart_resize, then patches: at its default bounds and at a small maximum that
     shrinks most pictures); where transformers refuses a picture (Qwen2-VL: an aspect ratio
     beyond 200), loom must refuse it too.

The pictures are generated here (gradients, text, noise, odd and extreme sizes) and written by
Pillow as PNG (RGB, RGBA, gray, gray+alpha, palette with transparency, 1-bit, 16-bit), JPEG
(4:2:0, 4:4:4, progressive, gray, CMYK) and WebP (lossy, lossless, with alpha), and with each EXIF
orientation. Broken files (truncated, a PNG declaring 100k x 100k, other formats) must be
refused by name.

Needs torch, torchvision, transformers and Pillow: scripts/test.sh makes .venv-vision for it.
Usage: image_pixels.py IMAGE_PIXELS (the driver built from tests/image_pixels.c)"""
import io
import os
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw
from transformers import CLIPImageProcessor, Gemma3ImageProcessor, Qwen2VLImageProcessor, SiglipImageProcessor
from transformers.image_utils import load_image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util  # noqa: E402
from serve_util import check  # noqa: E402

DRIVER = sys.argv[1]
rng = np.random.default_rng(47)


def picture(kind, w, h):
    """An RGB picture of one kind at w x h."""
    if kind == "gradient":
        x = np.linspace(0, 255, w)[None, :].repeat(h, 0)
        y = np.linspace(0, 255, h)[:, None].repeat(w, 1)
        a = np.stack([x, y, 255 - (x + y) / 2], -1)
        return Image.fromarray(a.astype(np.uint8), "RGB")
    if kind == "noise":
        return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")
    im = Image.new("RGB", (w, h), (250, 245, 230))  # text: hard edges, where resampling rings
    d = ImageDraw.Draw(im)
    for i in range(0, h, 14):
        d.text((2, i), "loom sees 0123456789 ABCDEF", fill=(i % 256, 20, 120))
    d.line([(0, 0), (w - 1, h - 1)], fill=(0, 0, 0), width=3)
    return im


def encodings(im):
    """(name, bytes) of the picture in each format and mode."""
    def save(img, fmt, **kw):
        b = io.BytesIO()
        img.save(b, fmt, **kw)
        return b.getvalue()

    rgba = im.convert("RGBA")
    rgba.putalpha(Image.fromarray((np.arange(im.width * im.height) % 256).reshape(im.height, im.width).astype(np.uint8)))
    pal = im.convert("P", palette=Image.Palette.ADAPTIVE, colors=200)
    pal.info["transparency"] = 3
    gray16 = Image.fromarray((np.asarray(im.convert("L"), dtype=np.uint16) * 2).astype(np.uint16))
    out = [
        ("rgb.png", save(im, "PNG")),
        ("rgba.png", save(rgba, "PNG")),
        ("gray.png", save(im.convert("L"), "PNG")),
        ("graya.png", save(rgba.convert("LA"), "PNG")),
        ("palette.png", save(pal, "PNG", transparency=3)),
        ("bits.png", save(im.convert("1"), "PNG")),
        ("gray16.png", save(gray16, "PNG")),
        ("q90.jpg", save(im, "JPEG", quality=90)),
        ("444.jpg", save(im, "JPEG", quality=95, subsampling=0)),
        ("progressive.jpg", save(im, "JPEG", quality=80, progressive=True)),
        ("gray.jpg", save(im.convert("L"), "JPEG")),
        ("cmyk.jpg", save(im.convert("CMYK"), "JPEG")),
        ("lossy.webp", save(im, "WEBP", quality=80)),
        ("lossless.webp", save(im, "WEBP", lossless=True)),
        ("alpha.webp", save(rgba, "WEBP", quality=80)),
    ]
    return out


def oriented(im, fmt, o):
    exif = Image.Exif()
    exif[0x0112] = o
    b = io.BytesIO()
    im.save(b, fmt, exif=exif)
    return b.getvalue()


def run(*args):
    return subprocess.run([DRIVER, *args], capture_output=True, text=True)


def read_out(path, dtype):
    raw = Path(path).read_bytes()
    h, w = struct.unpack("<ii", raw[:8])
    return h, w, np.frombuffer(raw[8:], dtype=dtype)


def compare(what, ours, theirs):
    if ours.shape == theirs.shape and np.array_equal(ours.view(np.uint8), theirs.view(np.uint8)):
        return True
    if ours.shape != theirs.shape:
        check(False, f"{what}: shape {ours.shape}, transformers {theirs.shape}")
        return False
    d = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
    check(False, f"{what}: {np.count_nonzero(d)} of {d.size} values differ, at most by {d.max()}")
    return False


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def raw_png(w, h, depth, ctype, samples, chunks=()):
    """A PNG written sample by sample (Pillow cannot write 2-bit gray or 16-bit keys): samples is
    an (h, w * channels) array of values of the bit depth."""
    rows = b""
    for row in samples:
        if depth == 16:
            packed = b"".join(struct.pack(">H", int(v)) for v in row)
        else:
            bits = "".join(format(int(v), f"0{depth}b") for v in row)
            bits += "0" * (-len(bits) % 8)
            packed = int(bits, 2).to_bytes(len(bits) // 8, "big") if bits else b""
        rows += b"\0" + packed
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + b"".join(png_chunk(k, v) for k, v in chunks)
            + png_chunk(b"IDAT", zlib.compress(rows)) + png_chunk(b"IEND", b""))


def keyed_pngs():
    """PNGs with a tRNS colour key, which transformers' processors paint white, each in the form
    Pillow keeps it in (a colour, an integer, or dropped)."""
    w, h = 40, 30
    n = np.arange(w * h).reshape(h, w)
    g2 = n % 4
    g8 = n % 256
    g16 = (n * 37) % 65536
    rgb16 = np.stack([n % 7 * 9000, n % 5 * 13000, n % 3 * 20000], -1).reshape(h, w * 3)
    rgb8 = np.stack([n % 7 * 30, n % 5 * 50, n % 3 * 100], -1).reshape(h, w * 3)
    pal = bytes(range(0, 192))  # 64 entries
    k16 = lambda *v: b"".join(struct.pack(">H", x) for x in v)  # noqa: E731
    return [
        ("key-gray1-0.png", raw_png(w, h, 1, 0, n % 2, [(b"tRNS", k16(0))])),
        ("key-gray1-1.png", raw_png(w, h, 1, 0, n % 2, [(b"tRNS", k16(1))])),
        ("key-gray2-0.png", raw_png(w, h, 2, 0, g2, [(b"tRNS", k16(0))])),
        ("key-gray2-2.png", raw_png(w, h, 2, 0, g2, [(b"tRNS", k16(2))])),
        ("key-gray8.png", raw_png(w, h, 8, 0, g8, [(b"tRNS", k16(17))])),
        ("key-gray16.png", raw_png(w, h, 16, 0, g16, [(b"tRNS", k16(37 * 5))])),
        ("key-rgb8.png", raw_png(w, h, 8, 2, rgb8, [(b"tRNS", k16(60, 100, 200))])),
        ("key-rgb16.png", raw_png(w, h, 16, 2, rgb16, [(b"tRNS", k16(18000, 26000, 40000))])),
        ("key-palette-one.png", raw_png(w, h, 8, 3, n % 64, [(b"PLTE", pal), (b"tRNS", bytes([255] * 9 + [0]))])),
        ("key-palette-alpha.png", raw_png(w, h, 8, 3, n % 64, [(b"PLTE", pal), (b"tRNS", bytes([255, 0, 128]))])),
        ("key-palette-two.png", raw_png(w, h, 8, 3, n % 64, [(b"PLTE", pal), (b"tRNS", bytes([0, 0]))])),
    ]


def bomb_png():
    """A valid PNG header declaring 100000 x 100000 RGB, with a few bytes of image data."""
    ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(b"\0" * 64))
            + png_chunk(b"IEND", b""))


def main():
    tmp = Path(tempfile.mkdtemp(prefix="loom-images-"))
    processors = {
        "gemma3": Gemma3ImageProcessor(size={"height": 896, "width": 896}),
        "siglip": SiglipImageProcessor(),
        "clip": CLIPImageProcessor(size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336}),
        "qwen2vl": Qwen2VLImageProcessor(),
        "qwen2vl_small": Qwen2VLImageProcessor(size={"shortest_edge": 3136, "longest_edge": 50176}),
    }
    configs = {}
    for name, proc in processors.items():
        d = tmp / name
        proc.save_pretrained(d)
        configs[name] = str(d / "preprocessor_config.json")
    print(f"oracle: torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), "
          f"transformers {__import__('transformers').__version__}, Pillow {Image.__version__}", flush=True)

    files = []
    for kind, w, h in [("gradient", 333, 517), ("text", 640, 480), ("noise", 97, 61), ("text", 1200, 800),
                       ("gradient", 896, 896)]:
        for name, data in encodings(picture(kind, w, h)):
            files.append((f"{kind}-{w}x{h}-{name}", data))
    for kind, w, h in [("noise", 1, 1), ("noise", 2, 3), ("gradient", 10000, 10), ("gradient", 10, 5000),
                       ("noise", 223, 224), ("text", 337, 336)]:
        files.append((f"{kind}-{w}x{h}.png", encodings(picture(kind, w, h))[0][1]))
    files += keyed_pngs()
    base = picture("text", 120, 80)
    for o in range(1, 9):
        for fmt, ext in [("JPEG", "jpg"), ("PNG", "png"), ("WEBP", "webp")]:
            files.append((f"orientation{o}.{ext}", oriented(base, fmt, o)))

    decoded = processed = 0
    for name, data in files:
        path = tmp / name
        path.write_bytes(data)
        ref = load_image(str(path))
        r = run("--decode", str(path), str(tmp / "out"))
        if r.returncode != 0:
            check(False, f"{name}: image_pixels --decode exit {r.returncode}: {r.stdout}{r.stderr}")
            continue
        h, w, ours = read_out(tmp / "out", np.uint8)
        decoded += compare(f"{name} decoded", ours.reshape(h, w, 3), np.asarray(ref))
        for pname, proc in processors.items():
            try:
                theirs = proc(images=ref, return_tensors="pt")["pixel_values"]
            except ValueError as e:  # refused by transformers: loom must refuse it too
                r = run(configs[pname], str(path), str(tmp / "out"))
                refused = r.returncode == 3
                check(refused, f"{name} {pname}: transformers refuses ({e}), loom exit {r.returncode}: {r.stdout}")
                processed += refused
                continue
            theirs = theirs.numpy() if theirs.ndim == 2 else theirs[0].numpy()  # patches, or planes
            r = run(configs[pname], str(path), str(tmp / "out"))
            if r.returncode != 0:
                check(False, f"{name} {pname}: image_pixels exit {r.returncode}: {r.stdout}{r.stderr}")
                continue
            h, w, ours = read_out(tmp / "out", np.float32)
            processed += compare(f"{name} through {pname}", ours.reshape(theirs.shape) if ours.size == theirs.size
                                 else ours, theirs)
    print(f"{decoded} of {len(files)} files decode to load_image's bytes; {processed} of "
          f"{len(files) * len(processors)} processor outputs are transformers' bits", flush=True)

    png = files[0][1]
    bad = [
        ("truncated.png", png[: len(png) // 2], "PNG"),
        ("truncated.jpg", dict(files)["text-640x480-q90.jpg"][:3000], "JPEG"),
        ("truncated.webp", dict(files)["text-640x480-lossy.webp"][:500], "WebP"),
        ("bomb.png", bomb_png(), "100000x100000 is more than"),
        ("picture.gif", b"GIF89a\x01\x00\x01\x00\x00\x00\x00;", "not a JPEG, PNG or WebP"),
        ("empty.png", b"", "not a JPEG, PNG or WebP"),
        ("header-only.png", png[:8], "PNG"),
    ]
    for name, data, expect in bad:
        path = tmp / name
        path.write_bytes(data)
        r = run("--decode", str(path), str(tmp / "out"))
        check(r.returncode == 3 and expect in r.stdout,
              f"{name}: expected a refusal naming '{expect}', got exit {r.returncode}: {r.stdout}{r.stderr}")
        print(f"{name}: {r.stdout.strip()}")
    if serve_util.failures:
        print(f"{serve_util.failures} check(s) failed")
        sys.exit(1)
    print("image_pixels: all checks passed")


main()
