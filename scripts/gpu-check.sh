#!/usr/bin/env bash
# On the GPU machine: GPU tests (+ compute-sanitizer memcheck), benchmarks and the peer baseline,
# results under $OUT (default build/gpu-check). One call does everything; see docs/benchmarks.md.
#
# The GPU machine cannot install packages. If gpu-bundle/ (scripts/make-gpu-bundle.sh, built on a
# machine with the apt dependencies) is present, its binaries are used; otherwise this builds with
# CMake, which needs the dependencies installed.
#   GPU_CHECK_SHAPES="configs/sdar-8b.json" GPU_CHECK_CONTEXTS="4096,32768,131072" GPU_CHECK_BLOCKS="32 4"
#   GPU_CHECK_DECODE="full,fastdllm,dllmcache,d2cache" (strategies of the whole-generation bench)
#   GPU_CHECK_NCU=1 (Nsight Compute on the attention kernel)
#   GPU_CHECK_PARTS="tests steps serving peer s2d2 wedlm d2cache refs" (the default: all; a device
#   call is limited to 10 minutes, so a full check may need two calls with different parts)
#   GPU_CHECK_SERVING_SHAPES="configs/sdar-8b.json configs/sdar-4b.json"
#   GPU_CHECK_CONCURRENCY="1,8,32,128" (requests of the serving benchmark)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu-check}
mkdir -p "$OUT"
SHAPES=${GPU_CHECK_SHAPES:-configs/sdar-8b.json}
CONTEXTS=${GPU_CHECK_CONTEXTS:-4096,32768,131072}
BLOCKS=${GPU_CHECK_BLOCKS:-32 4}
PARTS=" ${GPU_CHECK_PARTS:-tests steps serving peer s2d2 wedlm d2cache refs} "
part() { [[ "$PARTS" == *" $1 "* ]]; }
status=0

{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; date -u; } | tee "$OUT/machine.txt"
[ -f gpu-bundle.tar.xz ] && [ ! -d gpu-bundle ] && tar xJf gpu-bundle.tar.xz
if [ -d gpu-bundle ]; then
  BIN=$PWD/gpu-bundle/bin
  export LD_LIBRARY_PATH=$PWD/gpu-bundle/lib:${LD_LIBRARY_PATH:-}
  # cuBLAS from the machine's CUDA toolkit or PyTorch's wheel; NCCL (loaded by --tensor-parallel
  # and CudaTensorParallel.*) from the toolkit or PyPI's nvidia-nccl-cu13.
  nvidia_dir=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__file__))' 2>/dev/null)
  for d in /usr/local/cuda/lib64 "$nvidia_dir/cu13/lib" "$nvidia_dir/nccl/lib"; do
    [ -d "$d" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
  done
  export DLLM_FIXTURES_DIR=$PWD/tests/fixtures DLLM_MODELS_DIR=$PWD/models DLLM_BINARY=$BIN/dllm
  echo "using prebuilt gpu-bundle/ (ldd check:)"; ldd "$BIN/dllm_cuda_tests" | grep -i "not found" || echo "  all libraries found"
  if part tests; then
    "$BIN/dllm_cuda_tests" 2>&1 | tee "$OUT/cuda_tests.log" | tail -30 || status=1
    grep -q "PASSED" "$OUT/cuda_tests.log" && ! grep -q "FAILED" "$OUT/cuda_tests.log" || status=1
    compute-sanitizer --tool memcheck --error-exitcode 1 "$BIN/dllm_cuda_tests" \
      --gtest_filter='CudaKernels.*:CudaAttentionBatch.*:CudaBackend.ForwardContract*:CudaBackend.Batch*:CudaD2Cache.*:CudaDllmCache.*:CudaS2d2.SpanVerify*:CudaEngineMemory.*:CudaMoe*:CudaSparseSelect.*:CudaMage.BudgetCovering*:CudaMage.BatchedWith*:CudaMage.SideStream*:CudaVision.*' \
      > "$OUT/memcheck.log" 2>&1 && echo "memcheck: clean" || { echo "memcheck: ERRORS (see memcheck.log)"; tail -20 "$OUT/memcheck.log"; status=1; }
  fi
else
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDLLM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null &&
    cmake --build build-gpu -j"$(nproc)" || exit 1
  BIN=$PWD/build-gpu
  ctest --test-dir build-gpu -L cuda --output-on-failure 2>&1 | tee "$OUT/cuda_tests.log" | tail -30 || status=1
  compute-sanitizer --tool memcheck --error-exitcode 1 build-gpu/tests/dllm_cuda_tests \
    > "$OUT/memcheck.log" 2>&1 && echo "memcheck: clean" || { echo "memcheck: ERRORS"; status=1; }
  BIN=$PWD/build-gpu
fi

if part steps; then
  for shape in $SHAPES; do
    "$BIN/dllm" bench --device cuda --shape "$shape" --block "${BLOCKS// /,}" --context "$CONTEXTS" --reps 20 \
      --json "$OUT/bench-$(basename "$shape" .json).json" 2>&1 | tee -a "$OUT/bench.md"
    # The attention kernel alone on one layer's shapes (as the peer times SDPA alone).
    "$BIN/dllm" bench --device cuda --shape "$shape" --attention-kernel --block "${BLOCKS// /,}" \
      --context "$CONTEXTS" --reps 50 --json "$OUT/attention-$(basename "$shape" .json).json" 2>&1 | tee -a "$OUT/bench.md"
  done
fi
if part serving; then
  # Many requests at once through the engine (1K prompts, one token per step, blocks of 4 and 32):
  # per-step time against the step's floor, tokens/s, the scheduler's host time per step.
  for shape in ${GPU_CHECK_SERVING_SHAPES:-configs/sdar-8b.json configs/sdar-4b.json}; do
    "$BIN/dllm" bench --device cuda --shape "$shape" --concurrency "${GPU_CHECK_CONCURRENCY:-1,8,32,128}" \
      --block "${BLOCKS// /,}" --prompt-length 1024 --max-tokens 64 \
      --json "$OUT/serving-$(basename "$shape" .json).json" 2>&1 | tee -a "$OUT/serving.md" || status=1
  done
fi
if part peer; then
  for shape in $SHAPES; do
    for b in $BLOCKS; do
      python3 tools/bench_torch.py --shape "$shape" --block "$b" --context "$CONTEXTS" --reps 10 \
        --json "$OUT/peer-$(basename "$shape" .json)-b$b.json" 2>&1 | tee -a "$OUT/peer.md"
    done
  done
fi
if part s2d2; then
  # S2D2: the 2L verifier forward (2 x block rows, custom mask) next to the draft step above, and
  # whole generations (draft + verify forwards) next to the block decoder's.
  "$BIN/dllm" bench --device cuda --shape configs/sdar-8b.json --step verify --block 32,16,4 \
    --context 4096,32768 --reps 20 --prefill 0 --json "$OUT/bench-s2d2-verify.json" 2>&1 | tee -a "$OUT/bench.md"
  "$BIN/dllm" bench --device cuda --shape configs/sdar-8b.json --decode block,s2d2 --prompt-length 4096 \
    --max-tokens 128 --json "$OUT/bench-decode-sdar-8b.json" 2>&1 | tee -a "$OUT/bench.md"
  # The embedded model through the CLI on both devices (ids side by side).
  for strategy in s2d2 block; do
    for dev in cpu cuda; do
      printf '%s %s: ' "$strategy" "$dev"
      "$BIN/dllm" generate -m models/tiny-block --strategy "$strategy" --device "$dev" --format json --max-tokens 32 \
        -p "Q: What is 123 + 456? A:" 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["ids"], d["stats"].get("decoder_metrics", ""))'
    done
  done 2>&1 | tee "$OUT/s2d2-generate.txt"
fi
if part wedlm; then
  # WeDLM: a window step (W = 16: 2W causal rows appended after the context) against the
  # autoregressive step, on a WeDLM-8B-shaped model.
  "$BIN/dllm" bench --device cuda --shape configs/wedlm-8b.json --step causal --block 32,1 \
    --context 4096,32768 --reps 20 --json "$OUT/bench-wedlm-8b-causal.json" 2>&1 | tee -a "$OUT/bench.md"
fi
if part d2cache; then
  # d2Cache and its baselines on a 768-token canvas (prompt 512 + gen 256), LLaDA-8B / Dream-7B
  # shapes. Single steps: rows recomputed = 768 (vanilla), 64 and 32, and 64 with the attention
  # rows the rollout reads. Whole generations through the engine: every strategy's real steps
  # (vanilla full diffusion, Fast-dLLM v1 dual cache, dLLM-Cache, d2Cache).
  for shape in configs/llada-8b.json configs/dream-7b.json; do
    name=$(basename "$shape" .json)
    "$BIN/dllm" bench --device cuda --shape "$shape" --write-at-slots --block 768,64,32 --context 768 \
      --reps 20 --prefill 0 --json "$OUT/bench-d2c-$name-steps.json" 2>&1 | tee -a "$OUT/bench-d2cache.md" || status=1
    "$BIN/dllm" bench --device cuda --shape "$shape" --write-at-slots --attention-rows --block 64 --context 768 \
      --reps 20 --prefill 0 --json "$OUT/bench-d2c-$name-r64-rows.json" 2>&1 | tee -a "$OUT/bench-d2cache.md" || status=1
    "$BIN/dllm" bench --device cuda --shape "$shape" --decode "${GPU_CHECK_DECODE:-full,fastdllm,dllmcache,d2cache}" \
      --prompt-length 512 --max-tokens 256 --json "$OUT/bench-decode-$name.json" 2>&1 | tee -a "$OUT/bench-d2cache.md" || status=1
  done
fi
# Optional: Nsight Compute on the attention kernel of one denoising step (GPU_CHECK_NCU=1).
if [ "${GPU_CHECK_NCU:-0}" = 1 ]; then
  for b in 4 32; do
    ncu --kernel-name regex:flash_attention --launch-skip 40 --launch-count 1 --section SpeedOfLight \
      --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
      "$BIN/dllm" bench --device cuda --shape configs/sdar-8b.json --block $b --context 32768 --reps 1 --prefill 0 \
      > "$OUT/ncu-attention-b$b.txt" 2>&1 || true
  done
fi

if part refs; then
  # Reference decoding trajectories made here, next to transformers (tests/fixtures/trajectories).
  mkdir -p "$OUT/trajectories"
  PYTHONUNBUFFERED=1 python3 tools/reference_decode.py --out "$OUT/trajectories" > "$OUT/reference_decode.log" 2>&1 &&
    PYTHONUNBUFFERED=1 python3 tools/reference_full_diffusion.py --out "$OUT/trajectories" \
      > "$OUT/reference_full_diffusion.log" 2>&1 &&
    PYTHONUNBUFFERED=1 python3 tools/reference_wedlm.py --out "$OUT/trajectories" \
      > "$OUT/reference_wedlm.log" 2>&1 &&
    PYTHONUNBUFFERED=1 python3 tools/reference_d2cache.py --out "$OUT/trajectories" \
      > "$OUT/reference_d2cache.log" 2>&1 &&
    PYTHONUNBUFFERED=1 python3 tools/reference_s2d2.py --out "$OUT/trajectories" > "$OUT/reference_s2d2.log" 2>&1 &&
    tar czf "$OUT/trajectories.tgz" -C "$OUT" trajectories && rm -rf "$OUT/trajectories" || status=1
fi
# Everything in one archive too (the device tool returns at most 8 files).
tar czf "$OUT.tgz" -C "$(dirname "$OUT")" "$(basename "$OUT")" && mv "$OUT.tgz" "$OUT/all-results.tgz"
echo "gpu-check: exit status $status"
exit $status
