#!/usr/bin/env python3
"""SDAR-VL parity fixture: a tiny random checkpoint in the exact on-disk layout of
JetAstra/SDAR-VL's inference/sdar_v_8b (config.json with text_config / vision_config,
preprocessor_config.json, processor_config.json, tensors vision_tower.vision_model.*,
multi_modal_projector.linear_{1,2}, image_newline, language_model.*), small test images and a
tiny lossless video made here, and reference outputs from tools/reference_sdar_vl.py.

    /work/refenv/bin/python tools/make_sdar_vl_fixture.py --out tests/fixtures/models/sdar-vl-tiny

Needs torch, numpy, safetensors, pillow and av (PyAV, for the video). Writes into --out:
  config.json, generation_config.json, preprocessor_config.json, processor_config.json,
  model.safetensors                     the checkpoint (bf16)
  images/*.png|jpg, video.mkv           inputs
  <image>.canvas.png, <image>.base.png  the processor's resized + padded canvas and 384² base crop
  features_<image>.npy                  packed projected features: rows listed in reference.json
  logits_<case>.npy                     logits of the listed rows of each end-to-end prompt
  reference.json                        everything else (token counts, rows, prompts)
Real SDAR-VL numbers are kept where they shape preprocessing (image 384, patch 14, the 36
pinpoints, anyres_max_9); widths and depths are tiny.
"""
import argparse
import json
import os

import numpy as np
import torch
from PIL import Image, ImageDraw
from safetensors.torch import save_file

import reference_sdar_vl as ref

torch.set_grad_enabled(False)

PINPOINTS = [[h, w] for h in range(384, 2305, 384) for w in range(384, 2305, 384)]
TEXT = dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, inter=96, vocab=320, eps=1e-6, theta=1e6)
VISION = dict(hidden=32, layers=2, heads=2, inter=64)
IMAGE_TOKEN, VIDEO_TOKEN, MASK, EOS = 300, 301, 290, 250


def config():
    return {
        "architectures": ["LlavaOnevisionForConditionalGeneration"],
        "hidden_size": TEXT["hidden"], "ignore_index": -100, "image_grid_pinpoints": PINPOINTS,
        "image_token_index": IMAGE_TOKEN, "model_type": "sdar_v", "multimodal_projector_bias": True,
        "projector_hidden_act": "gelu",
        "text_config": {
            "architectures": ["SDAR"], "attention_bias": False, "attention_dropout": 0.0, "block_size": 4,
            "bos_token_id": EOS, "eos_token_id": EOS, "head_dim": TEXT["head_dim"], "hidden_act": "silu",
            "hidden_size": TEXT["hidden"], "intermediate_size": TEXT["inter"], "mask_token_id": MASK,
            "max_position_embeddings": 32768, "model_type": "sdar", "num_attention_heads": TEXT["heads"],
            "num_hidden_layers": TEXT["layers"], "num_key_value_heads": TEXT["kv_heads"],
            "rms_norm_eps": TEXT["eps"], "rope_scaling": None, "rope_theta": TEXT["theta"],
            "sliding_window": None, "torch_dtype": "bfloat16", "use_cache": False, "use_sliding_window": False,
            "vocab_size": TEXT["vocab"],
        },
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.52.4",
        "use_cache": False, "use_image_newline_parameter": True, "video_token_index": VIDEO_TOKEN,
        "vision_aspect_ratio": "anyres_max_9",
        "vision_config": {
            "attention_dropout": 0.0, "hidden_act": "gelu_pytorch_tanh", "hidden_size": VISION["hidden"],
            "image_size": 384, "intermediate_size": VISION["inter"], "layer_norm_eps": 1e-6,
            "model_type": "siglip_vision_model", "num_attention_heads": VISION["heads"], "num_channels": 3,
            "num_hidden_layers": VISION["layers"], "patch_size": 14, "torch_dtype": "bfloat16",
            "vision_use_head": False,
        },
        "vision_feature_layer": -1, "vision_feature_select_strategy": "full",
    }


def preprocessor_config():
    return {
        "do_convert_rgb": True, "do_normalize": True, "do_pad": True, "do_rescale": True, "do_resize": True,
        "image_grid_pinpoints": PINPOINTS, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "image_processor_type": "LlavaOnevisionImageProcessorFast", "processor_class": "LlavaOnevisionProcessor",
        "resample": 3, "rescale_factor": 0.00392156862745098, "size": {"height": 384, "width": 384},
    }


def weights(gen):
    def r(*shape, scale=None):
        fan_in = shape[-1] if len(shape) > 1 else 1
        s = scale if scale is not None else fan_in ** -0.5
        return (torch.randn(*shape, generator=gen) * s).to(torch.bfloat16)

    def norm(n):
        return (1.0 + 0.1 * torch.randn(n, generator=gen)).to(torch.bfloat16)

    t = {}
    d, ff = VISION["hidden"], VISION["inter"]
    p = "vision_tower.vision_model."
    t[p + "embeddings.patch_embedding.weight"] = r(d, 3, 14, 14, scale=(3 * 14 * 14) ** -0.5)
    t[p + "embeddings.patch_embedding.bias"] = r(d, scale=0.1)
    t[p + "embeddings.position_embedding.weight"] = r(729, d, scale=0.5)
    for i in range(VISION["layers"]):
        l = f"{p}encoder.layers.{i}."
        for n in ("layer_norm1", "layer_norm2"):
            t[l + n + ".weight"] = norm(d)
            t[l + n + ".bias"] = r(d, scale=0.1)
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            t[l + "self_attn." + n + ".weight"] = r(d, d)
            t[l + "self_attn." + n + ".bias"] = r(d, scale=0.1)
        t[l + "mlp.fc1.weight"], t[l + "mlp.fc1.bias"] = r(ff, d), r(ff, scale=0.1)
        t[l + "mlp.fc2.weight"], t[l + "mlp.fc2.bias"] = r(d, ff), r(d, scale=0.1)
    t[p + "post_layernorm.weight"], t[p + "post_layernorm.bias"] = norm(d), r(d, scale=0.1)
    H, V = TEXT["hidden"], TEXT["vocab"]
    t["multi_modal_projector.linear_1.weight"] = r(H, d)
    t["multi_modal_projector.linear_1.bias"] = r(H, scale=0.1)
    t["multi_modal_projector.linear_2.weight"] = r(H, H)
    t["multi_modal_projector.linear_2.bias"] = r(H, scale=0.1)
    t["image_newline"] = r(H, scale=1.0)
    q = "language_model.model."
    t[q + "embed_tokens.weight"] = r(V, H, scale=3.0)  # tokens dominate the residual
    # A quiet mask embedding: the masks' predictions then come from what they attend to (the
    # prompt and its vision features), so decoding trajectories tell a missing splice apart.
    t[q + "embed_tokens.weight"][MASK] = (t[q + "embed_tokens.weight"][MASK].float() * 0.02).to(torch.bfloat16)
    t[q + "norm.weight"] = norm(H)
    t["language_model.lm_head.weight"] = r(V, H, scale=1.0)  # logits spread (std ~8)
    nh, kvh, hd, inter = TEXT["heads"], TEXT["kv_heads"], TEXT["head_dim"], TEXT["inter"]
    for i in range(TEXT["layers"]):
        l = f"{q}layers.{i}."
        t[l + "input_layernorm.weight"] = norm(H)
        t[l + "post_attention_layernorm.weight"] = norm(H)
        t[l + "self_attn.q_proj.weight"] = r(nh * hd, H)
        t[l + "self_attn.k_proj.weight"] = r(kvh * hd, H)
        t[l + "self_attn.v_proj.weight"] = r(kvh * hd, H)
        t[l + "self_attn.o_proj.weight"] = r(H, nh * hd)
        t[l + "self_attn.q_norm.weight"] = norm(hd)
        t[l + "self_attn.k_norm.weight"] = norm(hd)
        t[l + "mlp.gate_proj.weight"] = r(inter, H)
        t[l + "mlp.up_proj.weight"] = r(inter, H)
        t[l + "mlp.down_proj.weight"] = r(H, inter)
    return t


def draw_image(w, h, seed, mode="RGB"):
    """A deterministic picture with gradients, edges and a little texture (exercises resampling)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    a = np.stack([255 * x / max(w - 1, 1), 255 * y / max(h - 1, 1),
                  127.5 + 127.5 * np.sin((x + 2 * y) / 9.0)], -1)
    img = Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")
    d = ImageDraw.Draw(img)
    for _ in range(6):
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        d.rectangle([x0, y0, x0 + int(rng.integers(5, w // 3 + 6)), y0 + int(rng.integers(5, h // 3 + 6))],
                    fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
    if mode == "RGBA":
        img = img.convert("RGBA")
        img.putalpha(Image.fromarray((np.arange(w * h) % 256).reshape(h, w).astype(np.uint8)))
    elif mode == "L":
        img = img.convert("L")
    return img


IMAGES = [  # name, size, mode, format
    ("wide", (500, 260), "RGB", "png"),
    ("tall", (180, 410), "RGB", "jpg"),
    ("square", (384, 384), "RGB", "png"),
    ("alpha", (90, 61), "RGBA", "png"),
    ("gray", (70, 130), "L", "png"),
    ("large", (1500, 1000), "RGB", "jpg"),  # 12 crops: anyres_max_9 downscale applies
]


def write_video(path, n_frames=10, w=64, h=48):
    import av
    with av.open(path, "w") as c:
        s = c.add_stream("ffv1", rate=5)
        s.width, s.height, s.pix_fmt = w, h, "bgr0"
        frames = []
        for i in range(n_frames):
            a = np.asarray(draw_image(w, h, 100 + i))
            frames.append(a)
            for p in s.encode(av.VideoFrame.from_ndarray(a, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    with av.open(path) as c:  # what a decoder reads back (lossless: equals `frames`)
        decoded = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    assert all((a == b).all() for a, b in zip(frames, decoded)) and len(decoded) == n_frames
    return decoded


def greedy_block_decode(W, ids, feats, tc, n_new, block=4):
    """Tokens of greedy block diffusion after `ids`: every step recomputes prompt + canvas up to
    the current block's end under the block-causal mask (what a prefix KV cache computes) and
    unmasks the most confident mask with its argmax."""
    x = list(ids) + [MASK] * n_new
    for start in range(len(ids) // block * block, len(x), block):
        end = start + block
        while MASK in x[start:end]:
            lg = ref.sdar_logits(W, ref.prompt_embeddings(W, x[:end], feats, IMAGE_TOKEN, VIDEO_TOKEN), tc, block)
            p = torch.softmax(lg[start:end], -1)
            conf, tok = p.max(-1)
            conf = torch.where(torch.tensor([t == MASK for t in x[start:end]]), conf, torch.tensor(-1.0))
            j = int(torch.argmax(conf))
            x[start + j] = int(tok[j])
    return x[len(ids):]


def sampled_rows(n, every=37, tail=8):
    return sorted(set(range(0, n, every)) | set(range(max(0, n - tail), n)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = args.out
    os.makedirs(os.path.join(out, "images"), exist_ok=True)
    cfg = config()
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
    json.dump({"bos_token_id": EOS, "eos_token_id": [EOS, 251], "pad_token_id": EOS},
              open(os.path.join(out, "generation_config.json"), "w"), indent=1)
    json.dump(preprocessor_config(), open(os.path.join(out, "preprocessor_config.json"), "w"), indent=1)
    json.dump({"image_token": "<|image_pad|>", "num_image_tokens": 729, "processor_class": "LlavaOnevisionProcessor",
               "video_token": "<|video_pad|>", "vision_aspect_ratio": "anyres_max_9",
               "vision_feature_select_strategy": "full"},
              open(os.path.join(out, "processor_config.json"), "w"), indent=1)
    gen = torch.Generator().manual_seed(23)
    t = weights(gen)
    save_file({k: v.contiguous() for k, v in t.items()}, os.path.join(out, "model.safetensors"),
              metadata={"format": "pt"})
    W = ref.Weights(t)
    vc = dict(image_size=384, patch_size=14, hidden_size=VISION["hidden"], num_heads=VISION["heads"],
              num_layers=VISION["layers"], feature_layer=-1, layer_norm_eps=1e-6, pinpoints=PINPOINTS,
              max_num_patches=9, image_mean=[0.5] * 3, image_std=[0.5] * 3, rescale_factor=1 / 255)

    meta = {"reference": f"tools/reference_sdar_vl.py, torch {torch.__version__}, fp32 on bf16 weights, "
                         "torchvision's uint8 antialiased bicubic", "images": {}, "cases": []}
    packed = {}
    for i, (name, (w, h), mode, fmt) in enumerate(IMAGES):
        file = f"images/{name}.{fmt}"
        img = draw_image(w, h, i, mode)
        img.save(os.path.join(out, file), quality=90 if name != "large" else 60) if fmt == "jpg" else img.save(os.path.join(out, file))
        img = Image.open(os.path.join(out, file))  # what the decoder sees (JPEG is lossy)
        img.load()
        pixels, orig_hw = ref.preprocess_image(img, vc)
        rgb = img.convert("RGB")
        best = ref.select_best_resolution(orig_hw, PINPOINTS)
        nh, nw = ref.patch_output_size(orig_hw, best)
        canvas = Image.new("RGB", (best[1], best[0]), (0, 0, 0))
        canvas.paste(ref.resize(rgb, (nh, nw)), ((best[1] - nw) // 2, (best[0] - nh) // 2))
        if pixels.shape[0] <= 3:  # the large image is checked through its features only (size)
            canvas.save(os.path.join(out, f"{name}.canvas.png"), optimize=True)
            ref.resize(rgb, (384, 384)).save(os.path.join(out, f"{name}.base.png"), optimize=True)
        feats = ref.pack_image(W, ref.project(W, ref.siglip_features(W, torch.from_numpy(pixels), vc)), orig_hw, vc)
        assert feats.shape[0] == ref.image_token_count(orig_hw, vc)
        packed[name] = feats
        rows = sampled_rows(feats.shape[0])
        np.save(os.path.join(out, f"features_{name}.npy"), feats[rows].numpy().astype(np.float32))
        meta["images"][name] = {"file": file, "height": orig_hw[0], "width": orig_hw[1],
                                "best_resolution": list(best), "crops": int(pixels.shape[0]),
                                "tokens": int(feats.shape[0]), "rows": rows,
                                "pixel_sum": float(pixels.astype(np.float64).sum())}

    frames = write_video(os.path.join(out, "video.mkv"))
    idx = ref.uniform_frame_indices(len(frames), 4)
    picked = np.stack([frames[i] for i in idx])
    # Exact integer checksums of the decoded RGB frames (plain sum, sum of value * (index % 251)).
    mix = (np.arange(picked[0].size) % 251).astype(np.int64)
    checksums = [[int(f.astype(np.int64).sum()), int((f.reshape(-1).astype(np.int64) * mix).sum())]
                 for f in picked]
    vfeats = ref.pack_video(W, ref.project(W, ref.siglip_features(W, torch.from_numpy(ref.preprocess_frames(picked, vc)), vc)), vc)
    vrows = sampled_rows(vfeats.shape[0], every=11)
    np.save(os.path.join(out, "features_video.npy"), vfeats[vrows].numpy().astype(np.float32))
    meta["video"] = {"file": "video.mkv", "frames": 10, "sampled": 4, "indices": idx, "frame_checksums": checksums,
                     "tokens": int(vfeats.shape[0]), "rows": vrows}

    # End-to-end prompts: text ids around the placeholders, expanded to the feature counts.
    rng = np.random.default_rng(7)
    def text(n):
        return [int(v) for v in rng.integers(0, 250, n)]
    cases = [("image", text(9) + [IMAGE_TOKEN] * packed["wide"].shape[0] + text(6), {"image": packed["wide"]}),
             ("video", text(5) + [VIDEO_TOKEN] * vfeats.shape[0] + text(7), {"video": vfeats}),
             ("image_video", text(3) + [IMAGE_TOKEN] * packed["alpha"].shape[0] + text(2) +
              [VIDEO_TOKEN] * vfeats.shape[0] + text(4), {"image": packed["alpha"], "video": vfeats})]
    tc = dict(TEXT)
    for name, ids, feats in cases:
        emb = ref.prompt_embeddings(W, ids, feats, IMAGE_TOKEN, VIDEO_TOKEN)
        logits = ref.sdar_logits(W, emb, tc, 4)
        rows = sampled_rows(len(ids), every=53, tail=12)
        np.save(os.path.join(out, f"logits_{name}.npy"), logits[rows].numpy().astype(np.float32))
        # Greedy block decoding (SDAR generate.py, low_confidence_static, one token per step):
        # the prompt's last partial block filled with masks, then one more block.
        gen = greedy_block_decode(W, ids, feats, tc, (-len(ids)) % 4 + 4)
        plain = greedy_block_decode(W, ids, {}, tc, (-len(ids)) % 4 + 4)
        print(name, "greedy", gen, "without features", plain)
        meta["cases"].append({"name": name, "ids": ids, "rows": rows, "logits": f"logits_{name}.npy",
                              "greedy_tokens": gen,
                              "images": ["wide"] if name == "image" else (["alpha"] if name == "image_video" else []),
                              "video": name != "image"})
    json.dump(meta, open(os.path.join(out, "reference.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
