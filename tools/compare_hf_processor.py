#!/usr/bin/env python3
"""transformers' own LLaVA-OneVision processing on the SDAR-VL fixture's images and video: the
goldens of tests/vision/hf_processor_test.cpp (tests/fixtures/models/sdar-vl-tiny/
hf_processor.json), small checksums rather than tensors.

SDAR-VL (JetAstra/SDAR-VL, inference/sdar_v_8b/preprocessor_config.json) names
LlavaOnevisionImageProcessorFast, the torchvision processor, which AutoProcessor loads in its
environment (transformers 4.52.4 with torchvision 0.22.1); in transformers 5 that class is
LlavaOnevisionImageProcessor (torchvision backend) and the PIL one LlavaOnevisionImageProcessorPil.
Both are run here: per image the pinpoint, the crop count, the number of <|image_pad|> tokens
(LlavaOnevisionProcessor._get_number_of_features: anyres tiles, unpadding, anyres_max_9 downscale,
image_newline) and per crop and channel exact integer checksums of the 8-bit levels behind its
normalised pixel values; per video frame the same of LlavaOnevisionVideoProcessor's output.

Needs torch, transformers, Pillow, PyAV and torchvision (CPU is enough):
  python tools/compare_hf_processor.py tests/fixtures/models/sdar-vl-tiny
"""
import argparse
import json
import math
import os
import types

import numpy as np
import torch
from PIL import Image
from transformers.models.llava_onevision import image_processing_llava_onevision as tv_proc
from transformers.models.llava_onevision import image_processing_pil_llava_onevision as pil_proc
from transformers.models.llava_onevision.processing_llava_onevision import LlavaOnevisionProcessor
from transformers.models.llava_onevision.video_processing_llava_onevision import (
    LlavaOnevisionVideoProcessor)


def processor_kwargs(fixture):
    with open(os.path.join(fixture, "preprocessor_config.json")) as f:
        cfg = json.load(f)
    keys = ("do_convert_rgb", "do_normalize", "do_pad", "do_rescale", "do_resize",
            "image_grid_pinpoints", "image_mean", "image_std", "resample", "rescale_factor",
            "size")
    return {k: cfg[k] for k in keys}


def token_count(hw, kwargs, fixture):
    """LlavaOnevisionProcessor's placeholder count of one image (single-image prompt)."""
    with open(os.path.join(fixture, "processor_config.json")) as f:
        pcfg = json.load(f)
    me = types.SimpleNamespace(
        image_processor=types.SimpleNamespace(image_grid_pinpoints=kwargs["image_grid_pinpoints"]),
        num_image_tokens=pcfg["num_image_tokens"],
        vision_aspect_ratio=pcfg["vision_aspect_ratio"])
    me._get_unpadded_features = types.MethodType(LlavaOnevisionProcessor._get_unpadded_features,
                                                 me)
    side = kwargs["size"]["height"]
    return LlavaOnevisionProcessor._get_number_of_features(me, hw[0], hw[1], side, side)


def crop_checksums(pixels, mean, std, rescale):
    """[crops, 3, H, W] normalised values -> per crop, per channel: exact integer checksums of
    the 8-bit levels they came from (level = round((value * std + mean) / rescale)): the plain
    sum and the sum of level * (index % 251), so that one pixel one level off shows."""
    p = pixels.to(torch.float64)
    m = torch.tensor(mean, dtype=torch.float64)[None, :, None, None]
    s = torch.tensor(std, dtype=torch.float64)[None, :, None, None]
    levels = torch.round((p * s + m) / rescale).to(torch.int64)
    assert levels.min() >= 0 and levels.max() <= 255
    flat = levels.reshape(levels.shape[0], levels.shape[1], -1)
    mix = torch.arange(flat.shape[-1], dtype=torch.int64) % 251
    return [[[int(flat[c, ch].sum()), int((flat[c, ch] * mix).sum())]
             for ch in range(flat.shape[1])] for c in range(flat.shape[0])]


def read_frames(path, indices):
    import av
    frames = []
    with av.open(path) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i in indices:
                frames.append(frame.to_ndarray(format="rgb24"))
    return np.stack(frames)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("fixture", help="the SDAR-VL fixture directory (reference.json, images/)")
    args = ap.parse_args()
    kwargs = processor_kwargs(args.fixture)
    with open(os.path.join(args.fixture, "reference.json")) as f:
        ref = json.load(f)
    def checksums(px):
        return crop_checksums(px, kwargs["image_mean"], kwargs["image_std"],
                              kwargs["rescale_factor"])

    backends = {"torchvision": tv_proc.LlavaOnevisionImageProcessor(**kwargs),
                "pil": pil_proc.LlavaOnevisionImageProcessorPil(**kwargs)}
    out = {"transformers": __import__("transformers").__version__, "images": {}, "video": {}}
    for name, info in sorted(ref["images"].items()):
        image = Image.open(os.path.join(args.fixture, info["file"])).convert("RGB")
        hw = (image.height, image.width)
        entry = {"file": info["file"], "height": hw[0], "width": hw[1],
                 "tokens": token_count(hw, kwargs, args.fixture)}
        values = {}
        for backend, proc in backends.items():
            r = proc(images=image, return_tensors="pt")
            px = r["pixel_values"][0]
            values[backend] = px.to(torch.float64)
            entry[backend] = {"crops": int(px.shape[0]), "checksums": checksums(px)}
        d = (values["torchvision"] - values["pil"]).abs()
        entry["backend_max_abs_diff"] = float(d.max())
        entry["backend_differing_share"] = float((d > 1 / 255).double().mean())  # a level or more
        out["images"][name] = entry
        print(name, hw, "tokens", entry["tokens"], "crops", entry["pil"]["crops"],
              "tv-vs-pil max", entry["backend_max_abs_diff"], "share differing",
              round(entry["backend_differing_share"], 4))
    v = ref["video"]
    frames = read_frames(os.path.join(args.fixture, v["file"]), set(v["indices"]))
    vp = LlavaOnevisionVideoProcessor(**{k: kwargs[k] for k in (
        "do_convert_rgb", "do_normalize", "do_rescale", "do_resize", "image_mean", "image_std",
        "resample", "rescale_factor", "size")})
    pv = vp(videos=[torch.from_numpy(frames).permute(0, 3, 1, 2)], return_tensors="pt")
    px = pv["pixel_values_videos"][0]
    side = int(math.sqrt(729))
    pooled = math.ceil(side / 2)
    out["video"] = {"file": v["file"], "indices": v["indices"], "frames": int(px.shape[0]),
                    "tokens": int(px.shape[0]) * pooled * pooled + 1,
                    "torchvision": {"checksums": checksums(px)}}
    print("video frames", px.shape[0], "tokens", out["video"]["tokens"])
    path = os.path.join(args.fixture, "hf_processor.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
