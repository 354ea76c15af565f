#!/usr/bin/env python3
"""Independent PyTorch reference of SDAR-VL (JetAstra/SDAR-VL, model-specs §7): the LLaVA-OneVision
image/video processor, the SigLIP tower, the projector, feature packing (anyres tiling, unpadding,
anyres_max downscale, image_newline; video 2x bilinear pooling + one newline) and the SDAR language
model under the block-causal prefill mask.

Written from the semantics of transformers' LlavaOnevision{ImageProcessor,Processor,Model} and
SiglipVisionModel and of SDAR-VL's modeling_llava_onevision.py (read, not copied). Resizing is
torchvision's uint8 antialiased bicubic (resize below), the fast processor's path that SDAR-VL's
preprocessor_config.json names; tools/compare_hf_processor.py checks it against transformers' own
processor. Used by tools/make_sdar_vl_fixture.py to write the committed goldens.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image


# ---------------------------------------------------------------- processor (images)

def select_best_resolution(orig_hw, pinpoints):
    oh, ow = orig_hw
    best, best_eff, best_waste = None, 0, float("inf")
    for h, w in pinpoints:
        scale = min(w / ow, h / oh)
        dw, dh = int(ow * scale), int(oh * scale)
        eff = min(dw * dh, ow * oh)
        waste = w * h - eff
        if eff > best_eff or (eff == best_eff and waste < best_waste):
            best, best_eff, best_waste = (h, w), eff, waste
    return best


def patch_output_size(orig_hw, target_hw):
    oh, ow = orig_hw
    th, tw = target_hw
    sw, sh = tw / ow, th / oh
    if sw < sh:
        return min(math.ceil(oh * sw), th), tw
    return th, min(math.ceil(ow * sh), tw)


def _cubic(x):
    """Keys' cubic with a = -0.5 (the antialiased bicubic filter of torch and PIL)."""
    a = -0.5
    x = abs(x)
    if x < 1:
        return ((a + 2) * x - (a + 3)) * x * x + 1
    if x < 2:
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return 0.0


def _int16_taps(n_in, n_out):
    """Per output pixel along one axis: (first input pixel, integer weights), and the weights'
    fixed-point precision. Weights as PIL's antialiased bicubic (support widened by the shrink
    factor, normalised per output pixel), rounded to int16 at the largest precision (at most 22
    bits) that keeps the largest weight below 2^15: torch's uint8 antialiased resize, which
    torchvision runs for uint8 images on the CPU (the fast processor SDAR-VL's
    preprocessor_config.json names)."""
    scale = n_in / n_out
    fs = max(scale, 1.0)
    support = 2.0 * fs
    inv = 1.0 / fs  # multiplied, not divided, as torch does (the last bits matter)
    window = int(math.ceil(support)) * 2 + 1
    rows, wmax = [], 0.0
    for o in range(n_out):
        c = (o + 0.5) * scale
        lo = max(int(c - support + 0.5), 0)
        n = min(min(int(c + support + 0.5), n_in) - lo, window)
        w = [_cubic((i + lo - c + 0.5) * inv) for i in range(n)]
        total = sum(w)
        if total != 0:
            w = [x / total for x in w]
        wmax = max([wmax] + w)
        rows.append((lo, w))
    bits = 0
    while bits < 22 and int(0.5 + wmax * (1 << (bits + 1))) < (1 << 15):
        bits += 1
    q = [(lo, [int(x * (1 << bits) - 0.5) if x < 0 else int(x * (1 << bits) + 0.5) for x in w])
         for lo, w in rows]
    return q, bits


def _resample_axis(a, axis, n_out):
    taps, bits = _int16_taps(a.shape[axis], n_out)
    a = np.moveaxis(a, axis, 0).astype(np.int64)
    out = np.empty((n_out,) + a.shape[1:], np.uint8)
    for o, (lo, w) in enumerate(taps):
        acc = np.full(a.shape[1:], 1 << (bits - 1), np.int64)
        for i, k in enumerate(w):
            acc += a[lo + i] * k
        out[o] = np.clip(acc >> bits, 0, 255)
    return np.moveaxis(out, 0, axis)


def resize(img, hw):
    """Bicubic resize of an 8-bit RGB PIL image to (height, width) as torchvision's
    F.resize(uint8 tensor, BICUBIC, antialias=True) computes it on the CPU (what
    LlavaOnevisionImageProcessorFast runs): the horizontal pass, rounded to 8 bits, then the
    vertical one, with torch's int16 weights (_int16_taps). It differs from Pillow's
    Image.resize (22-bit weights; Pillow 13 also runs the vertical pass first for some shapes)
    by a level or two on a few pixels in a thousand."""
    h, w = hw
    a = np.asarray(img.convert("RGB"))
    if a.shape[1] != w:
        a = _resample_axis(a, 1, w)
    if a.shape[0] != h:
        a = _resample_axis(a, 0, h)
    return Image.fromarray(np.ascontiguousarray(a), "RGB")


def normalize(img, vc):
    a = np.asarray(img, dtype=np.float32)  # [H, W, 3] uint8 values
    a = a * np.float32(vc["rescale_factor"])
    a = (a - np.array(vc["image_mean"], np.float32)) / np.array(vc["image_std"], np.float32)
    return a.transpose(2, 0, 1)  # [3, H, W]


def preprocess_image(img, vc):
    """-> pixel_values [1 + tiles, 3, S, S] float32 (base image first), (height, width)."""
    img = img.convert("RGB")
    ow, oh = img.size
    S = vc["image_size"]
    best = select_best_resolution((oh, ow), vc["pinpoints"])
    nh, nw = patch_output_size((oh, ow), best)
    resized = resize(img, (nh, nw))
    canvas = Image.new("RGB", (best[1], best[0]), (0, 0, 0))
    canvas.paste(resized, ((best[1] - nw) // 2, (best[0] - nh) // 2))  # extra pixel right/bottom
    crops = [resize(img, (S, S))]
    for y in range(0, best[0], S):
        for x in range(0, best[1], S):
            crops.append(canvas.crop((x, y, x + S, y + S)))
    return np.stack([normalize(c, vc) for c in crops]), (oh, ow)


def preprocess_frames(frames, vc):
    """frames: list of HxWx3 uint8 -> [n, 3, S, S] (each frame resized to S x S)."""
    S = vc["image_size"]
    return np.stack([normalize(resize(Image.fromarray(f), (S, S)), vc) for f in frames])


def uniform_frame_indices(total, n):
    """n frames spread evenly over [0, total - 1] (np.linspace, truncated), all when n >= total."""
    if n >= total:
        return list(range(total))
    return [int(i) for i in np.linspace(0, total - 1, n)]


def image_token_count(orig_hw, vc):
    """Number of <|image_pad|> tokens the processor writes for an image of this size."""
    side = vc["image_size"] // vc["patch_size"]
    best = select_best_resolution(orig_hw, vc["pinpoints"])
    rows, cols = side * (best[0] // vc["image_size"]), side * (best[1] // vc["image_size"])
    rows, cols = unpad_shape(orig_hw, rows, cols)
    ratio = math.sqrt(rows * cols / (vc["max_num_patches"] * side * side))
    if ratio > 1.1:
        rows, cols = int(rows // ratio), int(cols // ratio)
    return side * side + rows * cols + rows


def unpad_shape(orig_hw, rows, cols):
    oh, ow = orig_hw
    if ow / oh > cols / rows:
        new_rows = int(round(oh * (cols / ow), 7))
        pad = (rows - new_rows) // 2
        return rows - 2 * pad, cols
    new_cols = int(round(ow * (rows / oh), 7))
    pad = (cols - new_cols) // 2
    return rows, cols - 2 * pad


# ---------------------------------------------------------------- model

def bf16(t):
    return t.to(torch.bfloat16).to(torch.float32)


class Weights:
    def __init__(self, tensors):
        self.t = {k: v.to(torch.float32) for k, v in tensors.items()}

    def __getitem__(self, k):
        return self.t[k]


def siglip_features(W, pixels, vc):
    """pixels [n, 3, S, S] -> hidden state after vision_feature_layer, [n, side*side, d]."""
    p = "vision_tower.vision_model."
    x = F.conv2d(pixels, W[p + "embeddings.patch_embedding.weight"], W[p + "embeddings.patch_embedding.bias"],
                 stride=vc["patch_size"])
    x = x.flatten(2).transpose(1, 2) + W[p + "embeddings.position_embedding.weight"][None]
    d, heads = vc["hidden_size"], vc["num_heads"]
    hd = d // heads
    n_layers = vc["num_layers"] + 1 + vc["feature_layer"] if vc["feature_layer"] < 0 else vc["feature_layer"]
    for i in range(n_layers):
        l = f"{p}encoder.layers.{i}."
        h = F.layer_norm(x, (d,), W[l + "layer_norm1.weight"], W[l + "layer_norm1.bias"], vc["layer_norm_eps"])
        q = F.linear(h, W[l + "self_attn.q_proj.weight"], W[l + "self_attn.q_proj.bias"])
        k = F.linear(h, W[l + "self_attn.k_proj.weight"], W[l + "self_attn.k_proj.bias"])
        v = F.linear(h, W[l + "self_attn.v_proj.weight"], W[l + "self_attn.v_proj.bias"])
        n, t, _ = q.shape
        q, k, v = (z.view(n, t, heads, hd).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) * hd ** -0.5, dim=-1) @ v
        att = att.transpose(1, 2).reshape(n, t, d)
        x = x + F.linear(att, W[l + "self_attn.out_proj.weight"], W[l + "self_attn.out_proj.bias"])
        h = F.layer_norm(x, (d,), W[l + "layer_norm2.weight"], W[l + "layer_norm2.bias"], vc["layer_norm_eps"])
        h = F.gelu(F.linear(h, W[l + "mlp.fc1.weight"], W[l + "mlp.fc1.bias"]), approximate="tanh")
        x = x + F.linear(h, W[l + "mlp.fc2.weight"], W[l + "mlp.fc2.bias"])
    return x


def project(W, feats):
    h = F.linear(feats, W["multi_modal_projector.linear_1.weight"], W["multi_modal_projector.linear_1.bias"])
    return F.linear(F.gelu(h), W["multi_modal_projector.linear_2.weight"], W["multi_modal_projector.linear_2.bias"])


def pack_image(W, proj, orig_hw, vc):
    """proj [1 + tiles, side*side, D] -> [tokens, D]: base crop, then the unpadded tile grid row by
    row with image_newline after each row (after an anyres_max downscale when too large)."""
    side = vc["image_size"] // vc["patch_size"]
    best = select_best_resolution(orig_hw, vc["pinpoints"])
    gh, gw = best[0] // vc["image_size"], best[1] // vc["image_size"]
    D = proj.shape[-1]
    grid = proj[1:].view(gh, gw, side, side, D).permute(4, 0, 2, 1, 3).reshape(D, gh * side, gw * side)
    rows, cols = unpad_shape(orig_hw, gh * side, gw * side)
    top, left = (gh * side - rows) // 2, (gw * side - cols) // 2
    grid = grid[:, top:top + rows, left:left + cols]
    ratio = math.sqrt(rows * cols / (vc["max_num_patches"] * side * side))
    if ratio > 1.1:
        grid = F.interpolate(grid[None], [int(rows // ratio), int(cols // ratio)], mode="bilinear")[0]
    nl = W["image_newline"][:, None, None].expand(D, grid.shape[1], 1)
    grid = torch.cat([grid, nl], dim=-1).flatten(1, 2).transpose(0, 1)
    return torch.cat([proj[0], grid], dim=0)


def pack_video(W, proj, vc):
    """proj [frames, side*side, D] -> [frames * pooled^2 + 1, D]."""
    side = vc["image_size"] // vc["patch_size"]
    n, _, D = proj.shape
    g = proj.view(n, side, side, D).permute(0, 3, 1, 2)
    g = F.interpolate(g, size=[math.ceil(side / 2), math.ceil(side / 2)], mode="bilinear")
    g = g.permute(0, 2, 3, 1).reshape(-1, D)
    return torch.cat([g, W["image_newline"][None]], dim=0)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, pos, theta):
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    ang = pos[:, None].float() * inv[None]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def sdar_logits(W, embeds, tc, block):
    """Qwen3 layers over input embeddings [n, H] at positions 0..n-1, block-causal mask."""
    n = embeds.shape[0]
    pos = torch.arange(n)
    blk = pos // block
    allowed = blk[None, :] <= blk[:, None]
    x = embeds
    p = "language_model.model."
    H, nh, kvh, hd = tc["hidden"], tc["heads"], tc["kv_heads"], tc["head_dim"]
    for i in range(tc["layers"]):
        l = f"{p}layers.{i}."
        h = rms_norm(x, W[l + "input_layernorm.weight"], tc["eps"])
        q = F.linear(h, W[l + "self_attn.q_proj.weight"]).view(n, nh, hd)
        k = F.linear(h, W[l + "self_attn.k_proj.weight"]).view(n, kvh, hd)
        v = F.linear(h, W[l + "self_attn.v_proj.weight"]).view(n, kvh, hd)
        q = rope(rms_norm(q, W[l + "self_attn.q_norm.weight"], tc["eps"]).transpose(0, 1), pos, tc["theta"])
        k = rope(rms_norm(k, W[l + "self_attn.k_norm.weight"], tc["eps"]).transpose(0, 1), pos, tc["theta"])
        v = v.transpose(0, 1)
        rep = nh // kvh
        k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
        s = (q @ k.transpose(-1, -2)) * hd ** -0.5
        s = s.masked_fill(~allowed[None], float("-inf"))
        o = (torch.softmax(s, -1) @ v).transpose(0, 1).reshape(n, nh * hd)
        x = x + F.linear(o, W[l + "self_attn.o_proj.weight"])
        h = rms_norm(x, W[l + "post_attention_layernorm.weight"], tc["eps"])
        x = x + F.linear(F.silu(F.linear(h, W[l + "mlp.gate_proj.weight"])) * F.linear(h, W[l + "mlp.up_proj.weight"]),
                         W[l + "mlp.down_proj.weight"])
    x = rms_norm(x, W[p + "norm.weight"], tc["eps"])
    return F.linear(x, W["language_model.lm_head.weight"])


def prompt_embeddings(W, ids, features, image_token, video_token):
    """Token embeddings with the image then video features scattered over their placeholders
    (masked_scatter order: image features over image tokens, video features over video tokens)."""
    ids = torch.tensor(ids)
    e = W["language_model.model.embed_tokens.weight"][ids].clone()
    for tok, feats in ((image_token, features.get("image")), (video_token, features.get("video"))):
        if feats is None:
            continue
        idx = (ids == tok).nonzero().flatten()
        assert len(idx) == feats.shape[0], (len(idx), feats.shape)
        e[idx] = feats
    return e
