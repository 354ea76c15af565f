#!/usr/bin/env python3
"""Frames for the vision-prompt benchmark (tools/bench_vl_gpu.sh): a synthetic clip as a
directory of JPEG files, frame_00000.jpg ... — what both dllm (a build without FFmpeg, e.g.
the GPU bundle, still decodes images) and the transformers peer (PIL) read the same way. A
moving colour gradient with a few moving shapes, so that JPEG decoding does real work.

  python3 tools/make_vl_bench_frames.py OUT_DIR --count 128 --width 640 --height 360
"""
import argparse
import os

import numpy as np
from PIL import Image, ImageDraw


def frame(i, width, height):
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    t = i / 8.0
    rgb = np.stack([127 + 127 * np.sin(x / 37 + t), 127 + 127 * np.sin(y / 23 - t),
                    127 + 127 * np.sin((x + y) / 51 + 2 * t)], axis=-1)
    img = Image.fromarray(rgb.astype(np.uint8))
    d = ImageDraw.Draw(img)
    for k in range(5):
        cx = (37 * k + 9 * i) % width
        cy = (53 * k + 5 * i) % height
        d.ellipse([cx - 30, cy - 20, cx + 30, cy + 20], fill=(40 * k, 255 - 40 * k, 90))
    return img


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--count", type=int, default=128)
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--height", type=int, default=360)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for i in range(args.count):
        frame(i, args.width, args.height).save(os.path.join(args.out, f"frame_{i:05d}.jpg"),
                                               quality=90)
    print(f"wrote {args.count} frames {args.width}x{args.height} to {args.out}")


if __name__ == "__main__":
    main()
