#!/usr/bin/env bash
# Trains issue 21's long-context model (tiny-long: SDAR, ~20 M parameters, needles up to 16K
# tokens) in one device call and leaves in $OUT what the device tool returns (at most 8 files of
# 16 MiB each): the checkpoint's bf16 shards and index, config.json, generation_config.json,
# log.json (its model_config rebuilds train_config.json) and the training log. The tokenizer
# files are the data's tokenizer/ (copy them beside the shards here).
#
#   here:   python3 tools/train/make_data.py --src SRC_ROOT --out gpu-run/long-data \
#               --tokenizer-out gpu-run/long-data-tok          (apt-get download dict-gcide
#               wordnet-base fortunes fortunes-min; dpkg -x each into SRC_ROOT)
#   device: BUDGET=480 OUT=$OUT tools/train/gpu_train_long.sh gpu-run/long-data
#           (carry gpu-run; move models/ and the 11 MB Qwen3 tokenizer fixture aside for the call:
#           the tree that travels is limited to 64 MiB). LONG_EVERY / LONG_ROWS: how often a batch
#           is 16K-token needle rows, and how many (attention through flex_attention block masks).
#           MIX: the short rows' task weights; EXTRA: more train.py options; SEED: the batch
#           stream's seed (give each stage its own: batches are a function of (seed, step)).
#
# The model of 2026-11-29 (H200, ~350K tokens/s) came from three calls, each stage starting from
# the previous one's weights with a fresh optimizer (docs/benchmarks.md, "the long-context model"):
#   1. BUDGET=500 (defaults: prose, chat and tasks)                               1409 steps
#   2. BUDGET=500 MIX=needle=0.6,kv=0.25,copy=0.05,add=0.05,sort=0.05
#      EXTRA="--init STAGE1 --prose-frac 0 --chat-prose-frac 0 --warmup 30 --lr 1.5e-3"   1535 steps
#   3. BUDGET=180, stage 2's MIX, EXTRA as stage 2 with --init STAGE2 --warmup 20 --lr 8e-4   471 steps
# (stages 2 and 3 ran before SEED existed, both with seed 1234). A task-only stage needs no prose
# or chat training files, so its data folder and the checkpoint fit the 64 MiB together.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
data=${1:?usage: gpu_train_long.sh DATA_DIR (OUT=... for the results)}
out=${OUT:?OUT must name the folder the results go to}
work=${WORK:-/tmp/long-train}
export PYTHONUNBUFFERED=1
python3 "$here/train.py" --model tiny-long --data "$data" --out "$work" \
  --layers 8 --hidden 384 --heads 12 --kv-heads 4 --inter 1536 \
  --max-positions 20480 --rope-theta 1000000 \
  --rows "${ROWS:-64}" --seq-len 1024 --long-every "${LONG_EVERY:-2}" --long-rows "${LONG_ROWS:-8}" \
  --long-len 16384 --long-task needle --flex-pad 512 \
  --mix "${MIX:-needle=0.5,kv=0.2,copy=0.1,add=0.1,sort=0.1}" ${EXTRA:-} \
  --time-budget "${BUDGET:-480}" --reserve "${RESERVE:-90}" --workers 12 --seed "${SEED:-1234}" --calib-steps 40 \
  --quick-eval-tasks "${QUICK_EVAL:-needle_4k,needle_8k,needle_16k}" --quick-eval-n 20 \
  --max-shard-mb 15 --save-every 1000000 2>&1 | tee "$out/train.log"
ckpt=$work/tiny-long
cp "$ckpt"/model*.safetensors* "$ckpt"/config.json "$ckpt"/generation_config.json "$ckpt"/log.json \
  "$out"/
