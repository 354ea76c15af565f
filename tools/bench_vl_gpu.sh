#!/usr/bin/env bash
# On the GPU machine: issue 23's benchmark bar — an SDAR-VL-8B-shaped 64-frame video prompt end to
# end (decode + preprocess + encode + prefill) and images/s, dllm (`dllm bench --video`,
# src/cli/vision_bench.h) next to transformers (tools/bench_vl_torch.py) on random weights of
# the same shape, one after the other in separate processes (each holds its own 17 GB of
# weights). The input is a directory of JPEG frames made here (tools/make_vl_bench_frames.py):
# the GPU bundle is built without FFmpeg, so both sides decode the same JPEG files (dllm:
# libjpeg-turbo; transformers: PIL) — VIDEO=FILE times a video file instead where both can.
# Results under $OUT (default build/vl-gpu): dllm.json, torch.json, table.md.
#   OUT=... SHAPE=configs/sdar-vl-8b.json FRAMES=64 IMAGES=16 REPS=3 tools/bench_vl_gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/vl-gpu}
SHAPE=${SHAPE:-configs/sdar-vl-8b.json}
FRAMES=${FRAMES:-64}
IMAGES=${IMAGES:-16}
REPS=${REPS:-3}
DEVICE=${DEVICE:-cuda}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
# The prebuilt bundle (scripts/make-gpu-bundle.sh) when there is one, as scripts/gpu-check.sh.
[ -f gpu-bundle.tar.xz ] && [ ! -d gpu-bundle ] && tar xJf gpu-bundle.tar.xz
if [ -n "${DLLM:-}" ]; then
  :
elif [ -d gpu-bundle ]; then
  DLLM=$PWD/gpu-bundle/bin/dllm
  export LD_LIBRARY_PATH=$PWD/gpu-bundle/lib:${LD_LIBRARY_PATH:-}
  for d in /usr/local/cuda/lib64 $($PYTHON -c 'import nvidia, os; print(os.path.dirname(nvidia.__file__))' 2>/dev/null)/cu13/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
  done
else
  DLLM=$PWD/build/dllm
fi
VIDEO=${VIDEO:-$OUT/frames}
[ -e "$VIDEO" ] || $PYTHON tools/make_vl_bench_frames.py "$VIDEO" --count 128 --width 640 --height 360
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null || true; date -u; } | tee "$OUT/machine.txt"
# Each side on its own: one failing still leaves the other's numbers.
rm -f "$OUT/dllm.json" "$OUT/torch.json"
"$DLLM" bench --device "$DEVICE" --shape "$SHAPE" --video "$VIDEO" --frames "$FRAMES" \
  --images "$IMAGES" --reps "$REPS" --json "$OUT/dllm.json" 2>&1 | tee "$OUT/dllm.txt" ||
  echo "dllm side failed (see $OUT/dllm.txt)"
$PYTHON tools/bench_vl_torch.py --device "$DEVICE" --shape "$SHAPE" --video "$VIDEO" \
  --frames "$FRAMES" --images "$IMAGES" --reps "$REPS" --json "$OUT/torch.json" 2>&1 |
  grep -v -i warn | tee "$OUT/torch.txt" || echo "transformers side failed (see $OUT/torch.txt)"
if [ -f "$OUT/dllm.json" ] && [ -f "$OUT/torch.json" ]; then
  $PYTHON tools/bench_vl_table.py "$OUT/dllm.json" "$OUT/torch.json" | tee "$OUT/table.md"
fi
