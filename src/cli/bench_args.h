// The options of `dllm bench`, shared by its modes (cmd_bench.cpp: single steps, whole
// generations, attention kernels; serve_bench.cpp: concurrent requests through the engine).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "backend/backend.h"
#include "model/model.h"

namespace dllm::cli {

struct BenchArgs {
  std::string shape, contexts = "4096", blocks = "32", device = "auto", json_out, step = "block";
  int reps = 20, prefill = 2048;
  int32_t threads = 0;           // --threads (0: the default, core/thread_pool.h)
  int32_t tensor_parallel = 1;   // --tensor-parallel
  bool expert_parallel = false;  // --expert-parallel
  // d2Cache / Fast-dLLM v1-style step: the --block query rows are canvas positions spread evenly
  // over the cached context, rewritten in place (write-at-slots) and attending bidirectionally
  // to the whole canvas, instead of a new block after it.
  bool at_slots = false;
  bool attention_rows = false;  // also return head-averaged attention rows (d2Cache's rollout)
  // Whole generations instead of single steps: comma-separated strategies run by the engine on
  // a synthetic prompt (decode_bench).
  std::string decode;
  int prompt_length = 512, max_tokens = 256;
  // The attention kernel alone (one layer's shapes, no model), as the peer times SDPA alone.
  bool attention_kernel = false;
  // With attention_kernel: the batched paged call for each of these sequence counts instead.
  std::string attention_batch;
  int page_size = 16;
  // The step bench: this many sequences in each step, each over its own cache of --context
  // random K/V (batched long-context decoding: 32 x 32K, MAGE vs exact).
  int sequences = 1;
  // Serving: comma-separated counts of concurrent requests (serve_bench.cpp), optionally with
  // finished blocks committed in the next block's first denoising forward.
  std::string concurrency;
  bool fuse_commit = false;
  // Sparse attention of --step block (attention/sparse_attention.h): step 1 (selection) and
  // steps 2..T (attending through the sets) are timed apart.
  // The sparse prefill kernel alone (sparse_prefill_bench.h): comma-separated patterns or "all",
  // for each prompt length, under the causal (1) or block-causal rule of block prefill_block.
  std::string sparse_prefill_kernel;
  std::string prefill_lengths = "32768,65536,131072,262144";
  int prefill_block = 1;
  std::string sparse_prefill_config;  // --sparse-prefill CONFIG.json: also time every layer of it
  std::string sparse = "none";
  int sparse_k = 1024, sparse_exact_layers = 2;
  int sparse_select_queries = 0;  // MAGE: select from this many of the block's query rows (0: all)
  // A vision-language shape's vision prompt end to end (vision_bench.h): a video file or a
  // directory of frame images, the frames sampled from it, and whole images (the first
  // `images` sampled files) for images/s.
  std::string video;
  int frames = 64, images = 0;
};

// Concurrent block-diffusion requests through the engine core for each --block and
// --concurrency: per-step time against the step's floor, tokens/s, the scheduler's host time.
void serving_bench(const BenchArgs& a, const Model& model, Backend& backend, nlohmann::json& out);

}  // namespace dllm::cli
