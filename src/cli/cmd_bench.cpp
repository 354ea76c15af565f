// dllm bench: speed of one denoising step on random weights of a real model shape, next to the
// memory-bandwidth floor (weight bytes + visible K/V bytes) / measured copy bandwidth.
//   dllm bench --shape configs/sdar-8b.json --block 32 --context 4096,32768,131072
//   dllm bench --shape configs/wedlm-8b.json --step causal --block 32   (a WeDLM window, W = 16)
//   dllm bench --shape configs/wedlm-8b.json --step causal --block 1    (an autoregressive step)
//   dllm bench --shape configs/sdar-8b.json --step verify --block 32     (an S2D2 verifier forward)
//   dllm bench --shape configs/sdar-8b.json --attention-kernel --block 32 --context 32768
//                                                       (one layer's attention kernel alone)
//   dllm bench --shape configs/sdar-8b.json --attention-kernel --attention-batch 1,8,32,128
//              --block 4,32 --context 1024,4096       (one batched paged call over many sequences)
//   dllm bench --device cuda --shape configs/sdar-vl-8b.json --video FRAMES_DIR --frames 64
//              --images 16                            (a video prompt end to end, vision_bench.h)
//   dllm bench --device cuda --shape configs/sdar-8b.json --sparse-prefill-kernel all
//              --prefill-lengths 32768,65536,131072,262144 (MMInference sparse prefill vs dense)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "backend/backend.h"
#include "cli/bench_args.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/sparse_prefill_bench.h"
#include "cli/vision_bench.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "decode/s2d2_verify.h"
#include "engine/engine_core.h"
#include "io/json_file.h"
#include "model/families/family.h"
#include "model/random_model.h"

namespace dllm::cli {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median ms of `reps` forwards of `batch` (after one warm-up).
double median_forward_ms(Backend& backend, std::span<const SequenceForward> batch, int reps) {
  backend.forward(batch);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const double s = now_s();
    backend.forward(batch);
    times.push_back((now_s() - s) * 1e3);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// One profiled forward of `batch` (per-op event times in backend.profile(); the caller turns
// profiling off after reading them). A profiled forward runs eagerly, not as a graph, so a kernel
// it meets for the first time loads after its op's start event was recorded: an unwarmed LM head
// read 4.7 ms in a 3.45 ms step (LLaDA2-mini, H200, 2026-11-30). A first profiled forward is
// thrown away.
void profile_forward(Backend& backend, std::span<const SequenceForward> batch) {
  backend.set_profiling(true);
  backend.forward(batch);
  backend.set_profiling(true);  // clears the warm-up's times
  backend.forward(batch);
}

void write_json(const BenchArgs& a, const std::string& device, const nlohmann::json& rows) {
  std::FILE* f = std::fopen(a.json_out.c_str(), "w");
  if (!f) fail(a.json_out, ": cannot open for writing");
  const std::string s =
      nlohmann::json({{"shape", a.shape}, {"device", device}, {"rows", rows}}).dump(1);
  std::fwrite(s.data(), 1, s.size(), f);
  std::fclose(f);
}

// Full generations with each strategy (d2Cache and its baselines on a LLaDA/Dream shape): the
// engine's own loop, so every step has the rows, caches and host work the strategy really uses.
// With random weights no token is ever confident, so the threshold rules fall back to one token
// per step for every strategy alike: compare ms per step and rows per step, not tokens/s.
void decode_bench(const BenchArgs& a, const Model& model, Backend& backend,
                  const std::string& device, nlohmann::json& out) {
  const ModelConfig& c = model.config();
  if (a.prompt_length <= 0 || a.max_tokens <= 0)
    fail("--prompt-length and --max-tokens must be positive");
  std::vector<int32_t> prompt(static_cast<size_t>(a.prompt_length));
  for (size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<int32_t>((i * 7919 + 11) % static_cast<size_t>(c.vocab_size));
  std::printf("\n%s on %s: prompt %d, %d generated tokens\n\n", a.shape.c_str(), device.c_str(),
              a.prompt_length, a.max_tokens);
  std::printf("| strategy | forwards | ms/forward | rows/forward | %% of canvas | s in all |\n");
  std::printf("|---|---|---|---|---|---|\n");
  const double canvas = a.prompt_length + a.max_tokens;
  for (const std::string& strategy : parse_string_list(a.decode, "--decode")) {
    DecodeParams d;
    d.strategy = strategy;
    d.max_tokens = a.max_tokens;
    GenerationRequest req;
    req.prompt = prompt;
    req.params = resolve_decode_params(c, d, a.prompt_length);
    EngineCore engine(model, backend);
    engine.generate(req);  // warm-up: allocations, graph capture
    const GenerationResult r = engine.generate(req);
    const double f = static_cast<double>(r.stats.forwards);
    const double rows = static_cast<double>(r.stats.query_rows) / f;
    std::printf("| %s | %lld | %.2f | %.1f | %.1f | %.2f |\n", strategy.c_str(),
                static_cast<long long>(r.stats.forwards), r.stats.seconds * 1e3 / f, rows,
                100.0 * rows / canvas, r.stats.seconds);
    std::fflush(stdout);
    out.push_back({{"strategy", strategy},
                   {"prompt_length", a.prompt_length},
                   {"max_tokens", a.max_tokens},
                   {"forwards", r.stats.forwards},
                   {"ms_per_forward", r.stats.seconds * 1e3 / f},
                   {"rows_per_forward", rows},
                   {"canvas_fraction", rows / canvas},
                   {"seconds", r.stats.seconds}});
  }
}

// The CUDA attention kernel alone for each block and context: one layer's K/V streamed per call
// (block-causal block after the context), against the measured copy bandwidth.
void attention_kernel_bench(const BenchArgs& a, const std::string& device,
                            const std::vector<int32_t>& blocks,
                            const std::vector<int32_t>& contexts) {
  if (device != "cuda") fail("--attention-kernel times the CUDA kernel (--device cuda, a GPU)");
  const nlohmann::json j = read_json_file(a.shape);
  const ModelConfig c = find_family(j, a.shape).parse_config(j, a.shape);
  const double bw = measure_copy_bandwidth("cuda");
  std::printf(
      "\n%s attention kernel (%lld/%lld heads, head_dim %lld): copy bandwidth %.0f GB/s\n\n",
      a.shape.c_str(), static_cast<long long>(c.num_heads), static_cast<long long>(c.num_kv_heads),
      static_cast<long long>(c.head_dim), bw / 1e9);
  std::printf(
      "| context | block | us/call | K/V MB | GB/s | %% of copy |\n|---|---|---|---|---|---|\n");
  nlohmann::json rows = nlohmann::json::array();
  for (int32_t block : blocks)
    for (int32_t ctx : contexts) {
      const double us = time_cuda_attention_kernel(block, ctx, static_cast<int>(c.num_heads),
                                                   static_cast<int>(c.num_kv_heads),
                                                   static_cast<int>(c.head_dim), a.reps);
      const double bytes = 2.0 * (ctx + block) * c.num_kv_heads * c.head_dim * 2.0;
      const double gbs = bytes / (us * 1e-6) / 1e9;
      std::printf("| %d | %d | %.1f | %.1f | %.0f | %.0f%% |\n", ctx, block, us, bytes / 1e6, gbs,
                  100.0 * gbs * 1e9 / bw);
      std::fflush(stdout);
      rows.push_back({{"context", ctx},
                      {"block", block},
                      {"us_per_call", us},
                      {"kv_bytes", bytes},
                      {"gbs", gbs},
                      {"copy_gbs", bw / 1e9}});
    }
  if (!a.json_out.empty()) write_json(a, "cuda", rows);
}

// One batched paged attention call (every sequence of a step) for each sequence count, block and
// context: K/V bytes of all sequences against the measured copy bandwidth.
void attention_batch_bench(const BenchArgs& a, const std::string& device,
                           const std::vector<int32_t>& blocks,
                           const std::vector<int32_t>& contexts) {
  if (device != "cuda") fail("--attention-batch times the CUDA kernels (--device cuda, a GPU)");
  const auto counts = parse_int_list(a.attention_batch, "--attention-batch");
  const nlohmann::json j = read_json_file(a.shape);
  const ModelConfig c = find_family(j, a.shape).parse_config(j, a.shape);
  const double bw = measure_copy_bandwidth("cuda");
  std::printf(
      "\n%s batched paged attention (%lld/%lld heads, head_dim %lld, pages of %d): copy "
      "bandwidth %.0f GB/s\n\n",
      a.shape.c_str(), static_cast<long long>(c.num_heads), static_cast<long long>(c.num_kv_heads),
      static_cast<long long>(c.head_dim), a.page_size, bw / 1e9);
  std::printf(
      "| sequences | context | block | us/call | K/V MB | GB/s | %% of copy |\n"
      "|---|---|---|---|---|---|---|\n");
  nlohmann::json rows = nlohmann::json::array();
  for (int32_t n : counts)
    for (int32_t block : blocks)
      for (int32_t ctx : contexts) {
        const double us = time_cuda_attention_batch(
            n, block, ctx, static_cast<int>(c.num_heads), static_cast<int>(c.num_kv_heads),
            static_cast<int>(c.head_dim), a.page_size, a.reps);
        const double bytes = 2.0 * n * (ctx + block) * c.num_kv_heads * c.head_dim * 2.0;
        const double gbs = bytes / (us * 1e-6) / 1e9;
        std::printf("| %d | %d | %d | %.1f | %.1f | %.0f | %.0f%% |\n", n, ctx, block, us,
                    bytes / 1e6, gbs, 100.0 * gbs * 1e9 / bw);
        std::fflush(stdout);
        rows.push_back({{"sequences", n},
                        {"context", ctx},
                        {"block", block},
                        {"us_per_call", us},
                        {"kv_bytes", bytes},
                        {"gbs", gbs},
                        {"copy_gbs", bw / 1e9}});
      }
  if (!a.json_out.empty()) write_json(a, "cuda", rows);
}

void run_bench(const BenchArgs& a) {
  if (a.shape.empty()) fail("--shape FILE is required (e.g. configs/sdar-8b.json)");
  const auto blocks = parse_int_list(a.blocks, "--block");
  for (int32_t b : blocks)
    if (b <= 0) fail("--block values must be positive");
  if (a.reps <= 0) fail("--reps must be positive");
  if (a.step != "block" && a.step != "causal" && a.step != "verify")
    fail("--step must be block, causal or verify (got '", a.step, "')");
  if (a.at_slots && a.step != "block")
    fail("--write-at-slots is its own step kind; it does not combine with --step ", a.step);
  if (a.attention_rows && !a.at_slots)
    fail("--attention-rows needs --write-at-slots (a bidirectional canvas step)");
  const SparseMethod sparse = parse_sparse_method(a.sparse);
  if (sparse != SparseMethod::kNone && (a.step != "block" || a.at_slots))
    fail("--sparse ", a.sparse, " times --step block (a block-diffusion denoising step)");
  if (a.sparse_k < 1) fail("--sparse-k must be positive (got ", a.sparse_k, ")");
  if (a.sparse_exact_layers < 0)
    fail("--sparse-exact-layers must be >= 0 (got ", a.sparse_exact_layers, ")");
  if (a.sparse_select_queries < 0)
    fail("--sparse-select-queries must be >= 0 (got ", a.sparse_select_queries, ")");
  const auto contexts = parse_int_list(a.contexts, "--context");
  for (int32_t c : contexts)
    if (c < 0) fail("--context values must be >= 0");
  const std::string device = a.device == "auto" ? (cuda_available() ? "cuda" : "cpu") : a.device;
  if (!a.sparse_prefill_kernel.empty()) {
    const nlohmann::json rows = sparse_prefill_bench(a, device);
    if (!a.json_out.empty()) write_json(a, "cuda", rows);
    return;
  }
  if (a.attention_kernel) {
    if (a.attention_batch.empty())
      attention_kernel_bench(a, device, blocks, contexts);
    else
      attention_batch_bench(a, device, blocks, contexts);
    return;
  }

  if (a.threads != 0) set_num_threads(a.threads);
  if (!a.video.empty()) {
    const nlohmann::json r = vision_bench(a, device);
    if (!a.json_out.empty())
      write_json(a, r["device"].get<std::string>(), nlohmann::json::array({r}));
    return;
  }
  double t0 = now_s();
  const nlohmann::json shape = read_json_file(a.shape);
  const bool fits = random_weights_fit_in_memory(shape);
  if (!fits)
    std::fprintf(stderr,
                 "bench: %s's distinct random weights would take over half of this machine's "
                 "memory: one random buffer per tensor shape instead (the GPU holds every tensor; "
                 "timings are the same)\n",
                 a.shape.c_str());
  auto model = make_random_model(
      shape, 1234, {}, fits ? RandomWeightStorage::kDistinct : RandomWeightStorage::kSharedByShape);
  auto backend = make_backend(*model, device, a.tensor_parallel, a.expert_parallel);
  const ModelConfig& c = model->config();
  std::fprintf(stderr, "bench: %s (%.2f B parameters) on %s, set up in %.1f s\n", a.shape.c_str(),
               model->parameter_count() / 1e9, backend->name().c_str(), now_s() - t0);
  if (!a.concurrency.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    serving_bench(a, *model, *backend, rows);
    if (!a.json_out.empty()) write_json(a, backend->name(), rows);
    return;
  }
  if (!a.decode.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    decode_bench(a, *model, *backend, device, rows);
    if (!a.json_out.empty()) write_json(a, backend->name(), rows);
    return;
  }
  const double bw = measure_copy_bandwidth(device);
  // Bytes a step must read: every weight once, as stored (bf16 random weights; the CPU GEMM widens
  // them in registers), and the K/V of every visible token (bf16 on the GPU, fp32 on the CPU),
  // all layers.
  const double weight_elem = double(model->weight_bytes()) / double(model->parameter_count());
  const double weight_bytes = double(model->weight_bytes());
  const double kv_bytes_per_token = 2.0 * c.num_layers * c.kv_dim() * (device == "cuda" ? 2 : 4);
  // --tensor-parallel N: N GPUs' bandwidth together; on the CPU the ranks are threads sharing one
  // memory.
  const int devices = device == "cuda" ? a.tensor_parallel : 1;

  nlohmann::json rows = nlohmann::json::array();
  std::printf("\n%s on %s: copy bandwidth %.0f GB/s, weights %.2f GB, K/V %.1f KB/token%s\n\n",
              a.shape.c_str(), backend->name().c_str(), bw / 1e9, weight_bytes / 1e9,
              kv_bytes_per_token / 1e3,
              a.sequences > 1
                  ? cat(", ", a.sequences, " sequences a step (each its own context)").c_str()
                  : "");
  std::printf(
      "| context | block | ms/step (median) | floor ms | x floor | attention GB/s (%% of copy) | "
      "prefill tok/s |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  // --sequences caches of the longest context plus its block at most: the pool holds that (the
  // backend's default pool, a quarter of free memory up to 8 GiB, stops an 8B shape short of 64K).
  if (a.sequences < 1 || a.sequences > 4096)
    fail("--sequences must be in [1, 4096] (got ", a.sequences, ")");
  const int64_t longest = int64_t{*std::max_element(contexts.begin(), contexts.end())} +
                          *std::max_element(blocks.begin(), blocks.end());
  backend->create_kv_pool(a.sequences * ((longest + a.page_size - 1) / a.page_size + 1),
                          a.page_size);
  for (int32_t block : blocks)
    for (int32_t ctx : contexts) {
      if (a.at_slots && block > ctx)
        fail("--write-at-slots: --block ", block, " exceeds --context ", ctx,
             " (the rows are positions of the cached canvas)");
      auto cache = backend->create_cache(ctx + block);
      // Prefill speed on a fresh cache (at most --prefill tokens), then a random context of ctx.
      double prefill_tps = 0;
      const int pf = std::min<int>(ctx, a.prefill);
      if (pf > 0) {
        SequenceForward pre;
        pre.cache = cache.get();
        for (int i = 0; i < pf; ++i) {
          pre.tokens.push_back((i * 7919) % static_cast<int>(c.vocab_size));
          pre.positions.push_back(i);
        }
        pre.rule = AttentionRule::causal();
        pre.write = CacheWrite::kAppend;
        backend->forward(std::span(&pre, 1));  // warm-up (allocations)
        cache->truncate(0);
        const double s = now_s();
        backend->forward(std::span(&pre, 1));
        prefill_tps = pf / (now_s() - s);
      }
      backend->fill_cache_random(*cache, ctx, 99);
      // The other sequences of a batched step: caches of their own random contexts.
      std::vector<std::unique_ptr<KvCache>> more_caches;
      for (int si = 1; si < a.sequences; ++si) {
        more_caches.push_back(backend->create_cache(ctx + block));
        backend->fill_cache_random(*more_caches.back(), ctx, 99 + static_cast<uint64_t>(si));
      }

      SequenceForward step;
      step.cache = cache.get();
      for (int i = 0; i < block; ++i) {
        step.tokens.push_back(c.mask_token_id >= 0 ? static_cast<int32_t>(c.mask_token_id) : 0);
        step.positions.push_back(ctx + i);
      }
      int32_t out_first = 0;  // output rows: the last --block query rows
      if (a.step == "verify") {
        // S2D2's verifier for a span covering the whole block (SDAR, method-specs §5.2): the
        // draft-filled block, then one [MASK] per block position, under the 2L mask.
        std::vector<int32_t> span(static_cast<size_t>(block));
        std::iota(span.begin(), span.end(), 0);
        for (int i = 0; i < block; ++i) {
          step.tokens[static_cast<size_t>(i)] = (i * 7919 + 13) % static_cast<int>(c.vocab_size);
          step.tokens.push_back(c.mask_token_id >= 0 ? static_cast<int32_t>(c.mask_token_id) : 0);
          step.positions.push_back(ctx + i);
        }
        step.rule = AttentionRule::custom(verifier_mask_2l(ctx, block, span));
        out_first = block;
      } else if (a.at_slots) {
        // Evenly spread canvas positions (the rows a d2Cache step recomputes are scattered).
        for (int i = 0; i < block; ++i)
          step.positions[static_cast<size_t>(i)] =
              static_cast<int32_t>(static_cast<int64_t>(i) * ctx / block);
        step.rule = AttentionRule::bidirectional();
        step.write = CacheWrite::kAtSlots;
        step.write_slots = step.positions;
      } else if (a.step == "block") {
        step.rule = AttentionRule::block_causal(block);  // a denoising step: no cache write
      } else {
        // A WeDLM window (2W causal rows) or an AR token: K/V written after the prefix, none
        // committed, so every repetition sees the same context.
        step.rule = AttentionRule::causal();
        step.write = CacheWrite::kAppend;
        step.append_count = 0;
      }
      step.want_attention_rows = a.attention_rows;
      step.output_rows.resize(static_cast<size_t>(block));
      std::iota(step.output_rows.begin(), step.output_rows.end(), out_first);
      step.want_stats = true;
      // Sparse: step 1 selects (Quest: and attends), the steps after it attend through the sets.
      std::vector<std::unique_ptr<MethodState>> states;
      double step1_ms = 0;
      nlohmann::json step1_ops = nlohmann::json::object();
      if (sparse != SparseMethod::kNone) {
        step.sparse = SparseStep{};
        step.sparse->k = a.sparse_k;
        step.sparse->exact_layers = a.sparse_exact_layers;
        step.sparse->select_queries = a.sparse_select_queries;
        step.sparse->select = sparse;
        step.sparse->attend_selected = sparse == SparseMethod::kQuest;
      }
      // The step of every sequence: the same rows over its own cache (and method state).
      std::vector<SequenceForward> batch(static_cast<size_t>(a.sequences), step);
      for (int si = 0; si < a.sequences; ++si) {
        SequenceForward& f = batch[static_cast<size_t>(si)];
        if (si > 0) f.cache = more_caches[static_cast<size_t>(si - 1)].get();
        if (f.sparse) f.state = states.emplace_back(backend->create_method_state()).get();
      }
      if (sparse != SparseMethod::kNone) {
        step1_ms = median_forward_ms(*backend, batch, a.reps);
        // Step 1's event-timed ops (the selection shows as "sparse selection" where it runs on
        // the main stream: DLLM_MAGE_SIDE_STREAM=0).
        profile_forward(*backend, batch);
        for (const auto& [op, t] : backend->profile()) step1_ops[op] = t;
        backend->set_profiling(false);
        for (SequenceForward& f : batch) {
          f.sparse->select = sparse == SparseMethod::kQuest ? sparse : SparseMethod::kNone;
          f.sparse->attend_selected = true;
        }
      }
      for (int i = 0; i < 2; ++i) backend->forward(batch);
      const double ms = median_forward_ms(*backend, batch, a.reps);
      const int64_t keys =
          a.sequences * (a.at_slots ? ctx : ctx + static_cast<int64_t>(step.tokens.size()));

      profile_forward(*backend, batch);
      const auto prof = backend->profile();
      const std::optional<double> moe_touched = backend->profiled_moe_experts_touched();
      backend->set_profiling(false);
      // MoE: only the experts this step's rows route to, as counted where the backend counts
      // them (Model::parameters_read).
      const int64_t step_rows = a.sequences * static_cast<int64_t>(step.tokens.size());
      const double step_weight_bytes = model->parameters_read(step_rows, moe_touched) * weight_elem;
      // What tensor-parallel ranks replicate is overhead, not floor.
      const double floor_ms =
          (step_weight_bytes + kv_bytes_per_token * keys) / (bw * devices) * 1e3;
      if (moe_touched)
        std::fprintf(stderr,
                     "  moe: %.1f experts with rows per MoE layer at %lld rows (the floor's)\n",
                     *moe_touched, static_cast<long long>(step_rows));
      double attn_ms = 0, prof_total = 0;
      for (const auto& [op, t] : prof) {
        prof_total += t;
        if (op == "attention") attn_ms = t;
      }
      const double attn_gbs = attn_ms > 0 ? kv_bytes_per_token * keys / (attn_ms * 1e-3) / 1e9 : 0;
      std::printf("| %d | %d | %.2f | %.2f | %.2f | %.0f (%.0f%%) | %.0f |\n", ctx, block, ms,
                  floor_ms, ms / floor_ms, attn_gbs, 100.0 * attn_gbs * 1e9 / bw, prefill_tps);
      nlohmann::json row = {{"context", ctx},
                            {"block", block},
                            {"write_at_slots", a.at_slots},
                            {"ms_per_step", ms},
                            {"floor_ms", floor_ms},
                            {"x_floor", ms / floor_ms},
                            {"attention_gbs", attn_gbs},
                            {"prefill_tokens_per_s", prefill_tps},
                            {"copy_gbs", bw / 1e9},
                            {"sequences", a.sequences}};
      if (moe_touched) row["moe_experts_touched_per_layer"] = *moe_touched;
      if (sparse != SparseMethod::kNone) {
        row["sparse"] = a.sparse;
        row["sparse_k"] = a.sparse_k;
        row["step1_ms"] = step1_ms;  // ms_per_step: the steps after it
        row["step1_ops_ms"] = step1_ops;
        std::printf("  sparse %s k=%d: step 1 (selection) %.2f ms, steps 2..T %.2f ms\n",
                    a.sparse.c_str(), a.sparse_k, step1_ms, ms);
        std::printf("  step 1 ops (ms):");
        for (const auto& [op, t] : step1_ops.items())
          std::printf(" %s %.3f;", op.c_str(), t.get<double>());
        std::printf("\n");
      }
      if (a.sequences > 1) {  // one token a sequence a step; a block's first step may select
        const double block_ms = (sparse != SparseMethod::kNone ? step1_ms : ms) + (block - 1) * ms;
        row["tokens_per_s"] = a.sequences * block / (block_ms * 1e-3);
        std::printf("  %d sequences: %.0f tokens/s over a block of %d steps\n", a.sequences,
                    row["tokens_per_s"].get<double>(), block);
      }
      nlohmann::json ops = nlohmann::json::object();
      for (const auto& [op, t] : prof) ops[op] = t;
      ops["launch gaps + host"] = std::max(0.0, ms - prof_total);
      row["ops_ms"] = ops;
      rows.push_back(row);
    }
  // Where the time goes, per context (event-timed ops of one step; the rest is launch gaps and
  // host work between kernels).
  for (const auto& r : rows) {
    std::printf("\nper-op breakdown, context %d, block %d (%.2f ms/step):\n",
                r["context"].get<int>(), r["block"].get<int>(), r["ms_per_step"].get<double>());
    for (auto it = r["ops_ms"].begin(); it != r["ops_ms"].end(); ++it)
      std::printf("  %-28s %8.3f ms  %5.1f%%\n", it.key().c_str(), it.value().get<double>(),
                  100.0 * it.value().get<double>() / r["ms_per_step"].get<double>());
  }
  if (!a.json_out.empty()) write_json(a, backend->name(), rows);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("bench", "Time a denoising step on random weights of a real model shape");
  auto a = std::make_shared<BenchArgs>();
  cmd->add_option("--shape", a->shape, "Model shape: a config.json (configs/*.json)")->required();
  cmd->add_option("--block", a->blocks,
                  "Comma-separated query rows per denoising step (default 32); one model set-up "
                  "for all");
  cmd->add_option("--step", a->step,
                  "block: a denoising step (block-causal, no cache write; default) | causal: "
                  "causal rows appended after the context (WeDLM window of --block = 2W rows, or "
                  "an AR step with --block 1) | verify: S2D2's 2L verifier of a span of --block "
                  "tokens (2 x --block rows, custom mask)");
  cmd->add_option("--context", a->contexts,
                  "Comma-separated cached context lengths (default 4096)");
  cmd->add_flag("--write-at-slots", a->at_slots,
                "d2Cache-like step: the --block rows are scattered canvas positions inside the "
                "context, refreshed in place, bidirectional over the whole canvas");
  cmd->add_flag("--attention-rows", a->attention_rows,
                "Also compute the head-averaged attention rows d2Cache's rollout reads "
                "(bidirectional, with --write-at-slots)");
  cmd->add_flag("--attention-kernel", a->attention_kernel,
                "Time the CUDA attention kernel alone on one layer's shapes (no model; as the "
                "peer times SDPA alone)");
  cmd->add_option("--attention-batch", a->attention_batch,
                  "With --attention-kernel: time one batched paged attention call over this many "
                  "sequences (comma-separated counts), each a --block block after --context keys");
  cmd->add_option("--sparse-prefill-kernel", a->sparse_prefill_kernel,
                  "Time the MMInference sparse prefill kernel alone on one layer: comma-separated "
                  "patterns (dense, a_shape, tri_shape, vertical_slash, block_sparse, grid, "
                  "grid_hline, q_boundary, 2d_boundary) or all, against the dense plan, on a "
                  "video-like prompt");
  cmd->add_option("--prefill-lengths", a->prefill_lengths,
                  "--sparse-prefill-kernel: comma-separated prompt lengths (default "
                  "32768,65536,131072,262144)");
  cmd->add_option("--sparse-prefill", a->sparse_prefill_config,
                  "--sparse-prefill-kernel: also time every layer of this MInference / "
                  "MMInference pattern config (JSON) against dense x layers");
  cmd->add_option("--prefill-block", a->prefill_block,
                  "--sparse-prefill-kernel: 1 = causal, B = block-causal with block B (SDAR: 4)");
  cmd->add_option("--sequences", a->sequences,
                  "Step bench: N sequences in every step, each over its own --context of random "
                  "K/V (batched long context; default 1)");
  cmd->add_option("--page-size", a->page_size,
                  "KV pool page size in slots for steps and --attention-batch (default 16)");
  cmd->add_option("--decode", a->decode,
                  "Time whole generations instead of steps: comma-separated strategies (e.g. "
                  "full,fastdllm,dllmcache,d2cache on a LLaDA/Dream shape)");
  cmd->add_option("--concurrency", a->concurrency,
                  "Serving: comma-separated counts of concurrent requests run through the engine "
                  "(block diffusion, one token per step, --block block length, --prompt-length "
                  "prompts, --max-tokens each): ms per step, tokens/s, host time, floor");
  cmd->add_flag("--fuse-commit", a->fuse_commit,
                "--concurrency: commit finished blocks in the next block's first denoising step");
  cmd->add_option("--prompt-length", a->prompt_length,
                  "--decode / --concurrency: prompt tokens (default 512)");
  cmd->add_option("--max-tokens", a->max_tokens,
                  "--decode / --concurrency: generated tokens (default 256)");
  cmd->add_option("--sparse", a->sparse,
                  "--step block: none (default) | mage | quest | sparsed sparse attention; step 1 "
                  "(selection) and steps 2..T are timed apart. --concurrency: every request "
                  "decodes with it");
  cmd->add_option("--sparse-k", a->sparse_k, "--sparse: prefix keys per layer and KV head (1024)");
  cmd->add_option("--sparse-exact-layers", a->sparse_exact_layers,
                  "--sparse: the first N layers attend exactly (default 2)");
  cmd->add_option("--sparse-select-queries", a->sparse_select_queries,
                  "--sparse mage: select from this many of the block's query rows, spread over "
                  "it (default 0: all of them)");
  cmd->add_option("--video", a->video,
                  "Time a vision-language shape's video prompt end to end (decode, preprocess, "
                  "encode, pack, prefill): a video file (FFmpeg builds) or a directory of frame "
                  "images");
  cmd->add_option("--frames", a->frames, "--video: frames sampled uniformly (default 64)");
  cmd->add_option("--images", a->images,
                  "--video: also time N whole images (anyres), the first N sampled frames: "
                  "images/s");
  cmd->add_option("--device", a->device, "auto | cpu | cuda");
  add_tensor_parallel_option(*cmd, a->tensor_parallel);
  add_expert_parallel_option(*cmd, a->expert_parallel);
  add_threads_option(*cmd, a->threads);
  add_cpu_matmul_option(*cmd);
  cmd->add_option("--reps", a->reps, "Timed repetitions per context (default 20)");
  cmd->add_option("--prefill", a->prefill, "Tokens of the timed prefill (default 2048)");
  cmd->add_option("--json", a->json_out, "Also write the results as JSON");
  cmd->callback([a] { run_bench(*a); });
}

}  // namespace dllm::cli
