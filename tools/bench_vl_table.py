#!/usr/bin/env python3
"""The markdown table of tools/bench_vl_gpu.sh: dllm's and transformers' vision-prompt
benchmarks (the JSON of `dllm bench --video --json` and tools/bench_vl_torch.py --json) side by
side, with the speed-up of dllm per stage (the issue's goal: >= 5x end to end).

  python3 tools/bench_vl_table.py dllm.json torch.json
"""
import json
import sys


def row(path):
    with open(path) as f:
        return json.load(f)["rows"][0]


def main():
    ours, peer = row(sys.argv[1]), row(sys.argv[2])
    print(f"SDAR-VL shape {ours['shape']}: {ours['frames']} frames, {ours['prompt_tokens']} "
          f"prompt tokens; dllm on {ours['device']}, {peer['side']} on {peer['device']} "
          f"(decoder: {peer.get('decoder')}; processor: {peer.get('video_processor')})\n")
    print("| stage | dllm | transformers | dllm speed-up |")
    print("|---|---|---|---|")
    stages = [("decode ms", "decode_ms"), ("preprocess ms", "preprocess_ms"),
              ("encode ms (tower + projector)", "encode_ms"), ("pack ms (pool + newline)", "pack_ms"),
              ("LLM prefill ms", "prefill_ms"), ("end to end ms", "end_to_end_ms")]
    for name, key in stages:
        a, b = ours.get(key), peer.get(key)
        if a is None or b is None:
            # None: pooled and newline-appended inside the encode stage (transformers'
            # get_video_features; dllm's encode_video since it packs on the device).
            print(f"| {name} | {fmt(a) if a is not None else 'in encode'} | "
                  f"{fmt(b) if b is not None else 'in encode'} | |")
        else:
            print(f"| {name} | {a:.1f} | {b:.1f} | {b / a:.2f}x |")
        if key == "pack_ms":
            # transformers' get_video_features pools and appends the newline inside its encode.
            a = ours["encode_ms"] + (ours.get("pack_ms") or 0)
            b = peer["encode_ms"] + (peer.get("pack_ms") or 0)
            print(f"| encode + pack ms | {a:.1f} | {b:.1f} | {b / a:.2f}x |")
    for name, key in (("frames/s (encoder)", "frames_per_s"), ("images/s (anyres, whole images)",
                                                               "images_per_s"),
                      ("image crops/s", "image_crops_per_s")):
        a, b = ours.get(key), peer.get(key)
        if a is not None and b is not None:
            print(f"| {name} | {a:.1f} | {b:.1f} | {a / b:.2f}x |")
    if "images" in ours:
        print(f"\nimages: {ours['images']} ({ours['image_crops']} crops for dllm, "
              f"{peer.get('image_crops')} for transformers: its processor pads every image to "
              "the batch's largest crop count)")


def fmt(x):
    return "-" if x is None else f"{x:.1f}"


if __name__ == "__main__":
    main()
