#!/usr/bin/env python3
"""The transformers peer of `dllm bench --video` (src/cli/vision_bench.h): an SDAR-VL-shaped
video prompt end to end on random weights — decode, preprocess, encode, prefill — with
transformers' own classes.

Model: LlavaOnevisionForConditionalGeneration (the layout SDAR-VL publishes) built from the
shape's config.json: the SigLIP vision tower (SiglipVisionModel under vision_config), the 2-layer
GELU projector, image_newline, and as language model Qwen3 with the SDAR text_config's numbers
(SDAR is Qwen3 with a block-causal attention mask; a prefill under the causal mask does the same
work, so the mask does not matter for its timing). Random weights (transformers' own init), bf16,
SDPA attention. The weights' values are not dllm's: only the shapes are shared, which is what
timing needs.

Stages, each timed alone (median of --reps after one warm-up), then end to end:
  decode     the --video frames: a directory of image files (PIL), or a video file through
             PyAV, decord, torchvision.io or the ffmpeg CLI, whichever exists (the JSON says
             which); frame indices sampled uniformly as dllm does (np.linspace, truncated);
  preprocess LlavaOnevisionVideoProcessor (needs torchvision) or, without torchvision, the PIL
             SiglipImageProcessorPil per frame (the same resize to image_size², bicubic,
             rescale, normalise); the JSON says which;
  encode     LlavaOnevisionModel.get_video_features: tower + projector + 2x2 bilinear pooling +
             image_newline (dllm's "pack" is inside this number here);
  prefill    the language model over the prompt (text ids + the video features scattered into
             the <|video_pad|> positions), with a KV cache, logits of the last row only;
  end to end decode + processor + the model's own forward(input_ids, pixel_values_videos).
Images/s: --images whole images through LlavaOnevisionImageProcessorPil (anyres) and
get_image_features (tower + projector + unpadding + newlines).

  python3 tools/bench_vl_torch.py --shape configs/sdar-vl-8b.json --video FRAMES_DIR \
      --frames 64 --images 16 --reps 3 --device cuda --json torch.json
"""
import argparse
import json
import os
import shutil
import subprocess
import time

import numpy as np
import torch
from PIL import Image


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def uniform_indices(total, wanted):
    if total <= wanted:
        return list(range(total))
    return [int(x) for x in np.linspace(0, total - 1, wanted)]


# ---- decoding -------------------------------------------------------------------------------

def frame_files(path):
    return sorted(os.path.join(path, f) for f in os.listdir(path)
                  if os.path.isfile(os.path.join(path, f)))


def decode_dir(path, wanted):
    files = frame_files(path)
    return [np.asarray(Image.open(files[i]).convert("RGB"))
            for i in uniform_indices(len(files), wanted)]


def decode_av(path, wanted):
    import av
    with av.open(path) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    return [frames[i] for i in uniform_indices(len(frames), wanted)]


def decode_decord(path, wanted):
    import decord
    vr = decord.VideoReader(path)
    return list(vr.get_batch(uniform_indices(len(vr), wanted)).asnumpy())


def decode_torchvision(path, wanted):
    import torchvision.io
    video, _, _ = torchvision.io.read_video(path, pts_unit="sec", output_format="THWC")
    return [video[i].numpy() for i in uniform_indices(video.shape[0], wanted)]


def decode_ffmpeg_cli(path, wanted):
    probe = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                            "stream=width,height", "-of", "csv=p=0", path],
                           check=True, capture_output=True, text=True).stdout.strip()
    w, h = (int(x) for x in probe.split(",")[:2])
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-f", "rawvideo", "-pix_fmt",
                          "rgb24", "-"], check=True, capture_output=True).stdout
    frames = np.frombuffer(raw, np.uint8).reshape(-1, h, w, 3)
    return [frames[i] for i in uniform_indices(frames.shape[0], wanted)]


def pick_decoder(path):
    """(name, function): the first video decoder this machine has."""
    if os.path.isdir(path):
        return "PIL (directory of frame images)", decode_dir
    import importlib.util
    for module, name, fn in (("av", "PyAV", decode_av), ("decord", "decord", decode_decord),
                             ("torchvision", "torchvision.io", decode_torchvision)):
        if importlib.util.find_spec(module):
            return name, fn
    if shutil.which("ffmpeg") and shutil.which("ffprobe"):
        return "ffmpeg CLI (rawvideo pipe)", decode_ffmpeg_cli
    raise SystemExit(f"--video {path}: no video decoder here (PyAV, decord, torchvision, ffmpeg "
                     "CLI); pass a directory of frame images instead")


# ---- preprocessing --------------------------------------------------------------------------

def processor_settings(vc):
    side = vc["image_size"]
    return dict(size={"height": side, "width": side}, resample=3, do_resize=True,
                do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5], do_convert_rgb=True)


def make_video_processor(vc):
    """(name, frames -> pixel_values_videos [1, F, 3, S, S])."""
    settings = processor_settings(vc)
    try:
        import torchvision  # noqa: F401  (LlavaOnevisionVideoProcessor runs on torchvision)
        from transformers.models.llava_onevision.video_processing_llava_onevision import (
            LlavaOnevisionVideoProcessor)
        vp = LlavaOnevisionVideoProcessor(**settings)

        def run(frames):
            video = torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2)
            return vp(videos=[video], return_tensors="pt")["pixel_values_videos"]
        return "LlavaOnevisionVideoProcessor", run
    except ImportError:
        try:
            from transformers.models.siglip import SiglipImageProcessorPil
        except ImportError:  # releases where the PIL processor carries the plain name
            from transformers.models.siglip import SiglipImageProcessor as SiglipImageProcessorPil
        ip = SiglipImageProcessorPil(**{k: v for k, v in settings.items()
                                        if k != "do_convert_rgb"})

        def run(frames):
            px = ip(images=[Image.fromarray(f) for f in frames], return_tensors="pt")
            return px["pixel_values"][None]
        return "SiglipImageProcessorPil per frame (no torchvision)", run


def make_image_processor(config):
    try:
        from transformers.models.llava_onevision import LlavaOnevisionImageProcessorPil
    except ImportError:  # releases where the PIL processor carries the plain name
        from transformers.models.llava_onevision import (
            LlavaOnevisionImageProcessor as LlavaOnevisionImageProcessorPil)
    settings = processor_settings(config["vision_config"])
    settings["image_grid_pinpoints"] = config["image_grid_pinpoints"]
    settings["do_pad"] = True
    return LlavaOnevisionImageProcessorPil(**settings)


# ---- model ----------------------------------------------------------------------------------

def build_model(config, device):
    from transformers import LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration
    t = config["text_config"]
    text = dict(model_type="qwen3", vocab_size=t["vocab_size"], hidden_size=t["hidden_size"],
                intermediate_size=t["intermediate_size"],
                num_hidden_layers=t["num_hidden_layers"],
                num_attention_heads=t["num_attention_heads"],
                num_key_value_heads=t["num_key_value_heads"], head_dim=t["head_dim"],
                max_position_embeddings=max(t["max_position_embeddings"], 32768),
                rms_norm_eps=t["rms_norm_eps"], hidden_act=t["hidden_act"],
                rope_parameters={"rope_type": "default", "rope_theta": t["rope_theta"]},
                rope_theta=t["rope_theta"], tie_word_embeddings=config["tie_word_embeddings"],
                attention_bias=t.get("attention_bias", False))
    v = {k: x for k, x in config["vision_config"].items() if k not in ("torch_dtype",)}
    cfg = LlavaOnevisionConfig(
        text_config=text, vision_config=v, image_token_index=config["image_token_index"],
        video_token_index=config["video_token_index"],
        projector_hidden_act=config["projector_hidden_act"],
        multimodal_projector_bias=config.get("multimodal_projector_bias", True),
        vision_feature_layer=config["vision_feature_layer"],
        vision_feature_select_strategy=config["vision_feature_select_strategy"],
        vision_aspect_ratio=config["vision_aspect_ratio"],
        image_grid_pinpoints=config["image_grid_pinpoints"],
        tie_word_embeddings=config["tie_word_embeddings"])
    cfg._attn_implementation = "sdpa"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with torch.device(device):
        try:
            model = LlavaOnevisionForConditionalGeneration._from_config(cfg, dtype=dtype)
        except TypeError:  # transformers releases that still call it torch_dtype
            model = LlavaOnevisionForConditionalGeneration._from_config(cfg, torch_dtype=dtype)
    return model.eval(), dtype


def prompt_ids(config, frames):
    """The ids dllm's bench uses: 32 text ids, the video's placeholders, 32 text ids."""
    vocab = config["text_config"]["vocab_size"]
    image, video = config["image_token_index"], config["video_token_index"]

    def text_id(i):
        x = (i * 7919) % vocab
        while x in (image, video):
            x = (x + 1) % vocab
        return x
    side = config["vision_config"]["image_size"] // config["vision_config"]["patch_size"]
    pooled = (side + 1) // 2
    n_video = frames * pooled * pooled + 1
    ids = [text_id(i) for i in range(32)] + [video] * n_video + [text_id(32 + i) for i in range(32)]
    return torch.tensor([ids])


def with_video_newline(lm, feats, slots):
    """The video's features as the placeholders take them: frames x pooled tokens, then one
    image_newline. transformers 5.24 appends the newline in get_video_features; earlier 5.x
    releases (5.17 on the GPU machine) leave it to forward(), so add it here when it is missing."""
    if feats.shape[0] == slots - 1:
        feats = torch.cat((feats, lm.image_newline[None].to(feats.dtype)), dim=0)
    if feats.shape[0] != slots:
        raise SystemExit(f"get_video_features gave {feats.shape[0]} rows for {slots} placeholders")
    return feats


# ---- timing ---------------------------------------------------------------------------------

def median(xs):
    return sorted(xs)[len(xs) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", required=True, help="an SDAR-VL config.json (configs/sdar-vl-8b.json)")
    ap.add_argument("--video", required=True, help="a video file or a directory of frame images")
    ap.add_argument("--frames", type=int, default=64)
    ap.add_argument("--images", type=int, default=0, help="whole images for images/s")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    with open(args.shape) as f:
        config = json.load(f)
    dev = args.device
    t0 = time.perf_counter()
    model, dtype = build_model(config, dev)
    lm = model.model
    print(f"torch: {args.shape} ({sum(p.numel() for p in model.parameters()) / 1e9:.2f} B "
          f"parameters) on {dev}, set up in {time.perf_counter() - t0:.1f} s", flush=True)
    decoder_name, decode = pick_decoder(args.video)
    processor_name, preprocess = make_video_processor(config["vision_config"])
    vfl, vfs = config["vision_feature_layer"], config["vision_feature_select_strategy"]
    video_id = config["video_token_index"]
    embed = model.get_input_embeddings()

    stages = {k: [] for k in ("decode_ms", "preprocess_ms", "encode_ms", "prefill_ms",
                              "end_to_end_ms")}
    ms = lambda a, b: (b - a) * 1e3  # noqa: E731
    n_frames = 0
    with torch.inference_mode():
        for rep in range(-1, args.reps):  # rep -1: warm-up
            sync(dev)
            a = time.perf_counter()
            frames = decode(args.video, args.frames)
            b = time.perf_counter()
            pixels = preprocess(frames)
            c = time.perf_counter()
            feats = lm.get_video_features(pixels.to(dev, dtype), vision_feature_layer=vfl,
                                          vision_feature_select_strategy=vfs)
            feats = getattr(feats, "pooler_output", feats)  # an output object or the tensor
            sync(dev)
            d = time.perf_counter()
            ids = prompt_ids(config, len(frames)).to(dev)
            emb = embed(ids)
            feats = with_video_newline(lm, feats.reshape(-1, emb.shape[-1]),
                                       int((ids == video_id).sum()))
            emb = emb.masked_scatter((ids == video_id)[..., None].expand_as(emb),
                                     feats.to(emb.dtype))
            sync(dev)
            e = time.perf_counter()
            model(inputs_embeds=emb, use_cache=True, logits_to_keep=1)
            sync(dev)
            f = time.perf_counter()
            # End to end as transformers serves a request: decode, processor, one forward.
            frames = decode(args.video, args.frames)
            pixels = preprocess(frames)
            model(input_ids=ids, pixel_values_videos=pixels.to(dev, dtype), use_cache=True,
                  logits_to_keep=1)
            sync(dev)
            g = time.perf_counter()
            if rep < 0:
                continue
            n_frames = len(frames)
            for k, v in (("decode_ms", ms(a, b)), ("preprocess_ms", ms(b, c)),
                         ("encode_ms", ms(c, d)), ("prefill_ms", ms(e, f)),
                         ("end_to_end_ms", ms(f, g))):
                stages[k].append(v)
        r = {"side": "transformers " + __import__("transformers").__version__,
             "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
             "shape": args.shape, "frames": n_frames,
             "prompt_tokens": int(prompt_ids(config, n_frames).shape[1]),
             "decoder": decoder_name, "video_processor": processor_name,
             "pack_ms": None, "note": "encode_ms includes pooling + image_newline (pack)"}
        r.update({k: median(v) for k, v in stages.items()})
        r["frames_per_s"] = n_frames / (r["encode_ms"] * 1e-3)
        if args.images > 0:
            ip = make_image_processor(config)
            pictures = [Image.open(p).convert("RGB") for p in image_files(args.video, args.images)] \
                if os.path.isdir(args.video) else [Image.fromarray(x) for x in
                                                   decode(args.video, args.images)]
            times, crops = [], 0
            for rep in range(-1, args.reps):
                sync(dev)
                a = time.perf_counter()
                out = ip(images=pictures, return_tensors="pt")
                crops = int(out["pixel_values"].shape[0] * out["pixel_values"].shape[1])
                lm.get_image_features(pixel_values=out["pixel_values"].to(dev, dtype),
                                      image_sizes=out["image_sizes"].to(dev),
                                      vision_feature_layer=vfl,
                                      vision_feature_select_strategy=vfs,
                                      vision_aspect_ratio=config["vision_aspect_ratio"])
                sync(dev)
                if rep >= 0:
                    times.append(time.perf_counter() - a)
            r["images"] = len(pictures)
            r["image_crops"] = crops  # padded to the most crops of the batch, as the processor does
            r["images_per_s"] = len(pictures) / median(times)
            r["image_crops_per_s"] = crops / median(times)
    print(json.dumps(r, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": args.shape, "device": r["device"], "rows": [r]}, f, indent=1)


def image_files(path, wanted):
    files = frame_files(path)
    return [files[i] for i in uniform_indices(len(files), wanted)]


if __name__ == "__main__":
    main()
