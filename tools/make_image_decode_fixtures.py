#!/usr/bin/env python3
"""Writes tests/fixtures/images/: small images in the formats and variants the vision decoder
reads beyond plain JPEG / PNG (src/vision/image_decode.cpp), each with the RGB picture Pillow makes
of it as SDAR-VL's processor path does (Image.open(...), then the processor's convert("RGB"); no
EXIF rotation), stored losslessly as <name>.rgb.png:
  cmyk.jpg          a CMYK JPEG with Adobe's marker (Pillow writes CMYK inverted, as Photoshop)
  exif_rotated.jpg  a JPEG whose EXIF orientation says "rotate 90" (6): decoded as stored
  lossy.webp        VP8 (lossy) WebP
  lossless.webp     VP8L (lossless) WebP
  alpha.webp        lossy WebP with an alpha channel (alpha dropped, as convert("RGB"))
  animated.webp     two frames: refused by the decoder (no .rgb.png)
Needs Pillow with WebP (python -m pip install pillow).
"""
import pathlib

import numpy as np
from PIL import Image, features

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/images"


def picture(w, h, seed):
    """Gradients, a few shapes and noise: chroma and edges for the codecs to get right."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    r = (255 * x / max(w - 1, 1)).astype(np.float64)
    g = (255 * y / max(h - 1, 1)).astype(np.float64)
    b = 128 + 100 * np.sin(x / 5.0) * np.cos(y / 7.0)
    img = np.stack([r, g, b], axis=-1) + rng.normal(0, 12, (h, w, 3))
    img[h // 4: h // 2, w // 3: w // 2] = [250, 20, 30]
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def save_expected(path):
    img = Image.open(path)
    img.load()
    img.convert("RGB").save(str(path) + ".rgb.png")  # cmyk.jpg -> cmyk.jpg.rgb.png


def main():
    assert features.check("webp"), "this Pillow has no WebP support"
    OUT.mkdir(parents=True, exist_ok=True)
    base = picture(64, 48, 1)
    base.convert("CMYK").save(OUT / "cmyk.jpg", quality=90)
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 clockwise to display
    picture(40, 24, 2).save(OUT / "exif_rotated.jpg", quality=90, exif=exif.tobytes())
    base.save(OUT / "lossy.webp", quality=80)
    base.save(OUT / "lossless.webp", lossless=True)
    rgba = picture(30, 20, 3).convert("RGBA")
    alpha = np.array(rgba)
    alpha[:, :, 3] = np.linspace(0, 255, 30, dtype=np.uint8)[None, :]
    Image.fromarray(alpha, "RGBA").save(OUT / "alpha.webp", quality=85)
    frames = [picture(20, 16, 4), picture(20, 16, 5)]
    frames[0].save(OUT / "animated.webp", save_all=True, append_images=frames[1:], duration=100)
    for name in ["cmyk.jpg", "exif_rotated.jpg", "lossy.webp", "lossless.webp", "alpha.webp"]:
        save_expected(OUT / name)
    # What the check rests on: Pillow reads these as the modes named above.
    assert Image.open(OUT / "cmyk.jpg").mode == "CMYK"
    assert Image.open(OUT / "exif_rotated.jpg").getexif()[0x0112] == 6
    assert Image.open(OUT / "alpha.webp").mode == "RGBA"
    assert getattr(Image.open(OUT / "animated.webp"), "n_frames", 1) == 2


if __name__ == "__main__":
    main()
