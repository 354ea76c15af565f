#!/usr/bin/env bash
# One command that trains the three embedded models concurrently on one GPU (how models/ was
# made: one H100, BUDGET=400 seconds of training each, ~7 minutes in all).
#   python3 tools/train/make_data.py --out build/train-data        # once, on any machine
#   BUDGET=400 OUT=/tmp/out tools/train/gpu_train.sh build/train-data
# Writes OUT/<model>/ (the checkpoint in the family's format, log.json, loss.png, train.log).
# MODELS="tiny-full" retrains one model only.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
data=${1:-build/train-data}
OUT=${OUT:-build/train-out}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
for m in ${MODELS:-tiny-block tiny-full tiny-causal}; do
  python3 "$here/train.py" --model "$m" --data "$data" --out "$OUT" --layers 6 --hidden 256 --heads 8 \
    --kv-heads 2 --inter 768 --time-budget "${BUDGET:-400}" --workers 3 --seed 1234 \
    > "$OUT/$m.train.log" 2>&1 &
done
wait
status=0
for m in ${MODELS:-tiny-block tiny-full tiny-causal}; do
  tail -n 3 "$OUT/$m.train.log"
  [ -f "$OUT/$m/model.safetensors" ] || status=1
done
exit $status
