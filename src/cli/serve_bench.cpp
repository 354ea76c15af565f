// dllm bench --concurrency N,...: N block-diffusion requests at once through the engine core on
// random weights of a real model shape — what a server's steady state costs. Each request has a
// --prompt-length prompt and decodes --max-tokens tokens in blocks of --block with one token per
// step (steps = block length, static low-confidence remasking: random weights never pass a
// threshold, and a fixed schedule keeps runs comparable). Per step: the median time of the
// steady-state steps (every request in the forward, none prefilling), next to the floor of a
// step with N x block query rows
//   max(bytes of weights + every running sequence's visible K/V / copy bandwidth,
//       FLOPs of the step / measured GEMM rate);
// tokens/s in the steady state (tokens committed in those steps / their time) and over the whole
// run (all generated tokens / wall time, prefills included); the engine core's host time per step
// (scheduling, decoders, streaming; the backend's own preparation is part of its forward, and in
// the per-op profile). --sparse mage|quest|sparsed (--sparse-k, --sparse-exact-layers): every
// request decodes with that sparse attention (the floor still counts every visible key).
// --tensor-parallel N: the floor of N devices together (bytes and FLOPs split evenly; what a rank
// holds twice — norms, the replicated LM head — is the group's overhead above it).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>

#include "cli/bench_args.h"
#include "cli/cli_util.h"
#include "core/error.h"
#include "engine/engine_core.h"

namespace dllm::cli {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of every thread of the process: on a shared machine a single-threaded step's CPU time
// is what it costs, its wall time also counts the other processes' time slices.
double cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

SequenceRequest bench_request(const Model& model, uint64_t id, int32_t block, const BenchArgs& a) {
  const ModelConfig& c = model.config();
  const int prompt_length = a.prompt_length;
  SequenceRequest r;
  r.id = id;
  for (int i = 0; i < prompt_length; ++i)  // distinct prompts: no prefix sharing between them
    r.prompt.push_back(static_cast<int32_t>((i * 7919 + id * 104729 + 11) %
                                            static_cast<uint64_t>(c.vocab_size - 1)));
  DecodeParams p;
  p.strategy = "block";
  p.block_length = block;
  p.steps = block;
  if (c.family == "fast_dllm_v2") {  // its sub-blocks decode until done: a threshold no
    p.steps = 0;                     // probability passes commits one token per step
    p.threshold = 1.0f;
  } else if (c.family == "llada2_moe") {     // dynamic only; a threshold no probability passes
    p.remasking = "low_confidence_dynamic";  // commits the schedule's one token per step
    p.threshold = 1.0f;
  } else {
    p.remasking = "low_confidence_static";
  }
  p.max_tokens = a.max_tokens;
  p.fuse_commit = a.fuse_commit;
  p.sparse.method = parse_sparse_method(a.sparse);  // --sparse: e.g. MAGE against exact
  p.sparse.k = a.sparse_k;
  p.sparse.exact_layers = a.sparse_exact_layers;
  p.sparse.select_queries = a.sparse_select_queries;
  p.sequence_id = static_cast<uint32_t>(id);
  r.params = resolve_decode_params(c, p, prompt_length);
  return r;  // no stop ids: every request generates max_tokens
}

struct RunTimes {
  std::vector<double> full_steps_ms;  // steps in which every request takes part
  double full_seconds = 0;            // ... in all, and the tokens they committed
  double full_cpu_seconds = 0;        // ... their CPU time (all threads)
  int64_t full_tokens = 0;
  int64_t steps = 0;
  double seconds = 0, host_seconds = 0;
  int64_t generated = 0;
};

RunTimes run_requests(EngineCore& core, const Model& model, int n, int32_t block,
                      const BenchArgs& a, uint64_t first_id) {
  int64_t generated = 0;
  for (int i = 0; i < n; ++i) {
    SequenceRequest r = bench_request(model, first_id + i, block, a);
    r.callbacks.on_finish = [&](GenerationResult&& g) {
      if (g.finish_reason == "error") fail("bench request: ", g.error);
      generated += static_cast<int64_t>(g.ids.size());
    };
    core.add(std::move(r));
  }
  RunTimes t;
  const double host0 = core.counters().schedule_seconds;
  const double t0 = now_s();
  while (!core.idle()) {
    const EngineCounters before = core.counters();
    const double s = now_s(), cpu = cpu_s();
    if (!core.step()) fail("bench: the engine could not schedule the requests");
    const double ms = (now_s() - s) * 1e3, cpu_step = cpu_s() - cpu;
    ++t.steps;
    const EngineCounters& after = core.counters();
    // Every request in the forward, none of them prefilling (a step of the steady state).
    if (after.sequences_in_steps - before.sequences_in_steps == n &&
        after.rows - before.rows <= int64_t{2} * n * block) {
      t.full_steps_ms.push_back(ms);
      t.full_seconds += ms * 1e-3;
      t.full_cpu_seconds += cpu_step;
      t.full_tokens += after.committed_tokens - before.committed_tokens;
    }
  }
  t.seconds = now_s() - t0;
  t.host_seconds = core.counters().schedule_seconds - host0;
  t.generated = generated;
  return t;
}

// Per-op time of a few full steps (profiled: events around each op class, no graphs): where a
// step's time goes. The requests are cancelled afterwards.
std::vector<std::pair<std::string, double>> profile_full_steps(
    EngineCore& core, const Model& model, int n, int32_t block, const BenchArgs& a,
    uint64_t first_id, int steps, double& wall_ms, std::optional<double>& moe_touched) {
  for (int i = 0; i < n; ++i) core.add(bench_request(model, first_id + i, block, a));
  for (int guard = 0; guard < 10000 && !core.idle(); ++guard) {  // until every request denoises
    const EngineCounters before = core.counters();
    core.step();
    const EngineCounters& after = core.counters();
    if (after.sequences_in_steps - before.sequences_in_steps == n &&
        after.rows - before.rows <= int64_t{2} * n * block)
      break;
  }
  Backend& backend = core.backend();
  // A warm-up step first: the eager (profiled) path loads a kernel it meets for the first time
  // inside that kernel's op events (cmd_bench.cpp, profile_forward).
  backend.set_profiling(true);
  core.step();
  backend.set_profiling(true);  // clears the warm-up's times
  const double t0 = now_s();
  for (int s = 0; s < steps; ++s) core.step();
  wall_ms = (now_s() - t0) * 1e3 / steps;
  auto prof = backend.profile();
  moe_touched = backend.profiled_moe_experts_touched();
  backend.set_profiling(false);
  for (auto& [op, ms] : prof) ms /= steps;
  for (int i = 0; i < n; ++i) core.cancel(first_id + i);
  return prof;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

void serving_bench(const BenchArgs& a, const Model& model, Backend& backend, nlohmann::json& out) {
  const ModelConfig& c = model.config();
  const auto counts = parse_int_list(a.concurrency, "--concurrency");
  const auto blocks = parse_int_list(a.blocks, "--block");
  if (a.prompt_length <= 0 || a.max_tokens <= 0)
    fail("--prompt-length and --max-tokens must be positive");
  int32_t max_n = 0, max_block = 0;
  for (int32_t n : counts) {
    if (n <= 0) fail("--concurrency values must be positive");
    max_n = std::max(max_n, n);
  }
  for (int32_t b : blocks) max_block = std::max(max_block, b);
  const bool gpu = backend.name().rfind("cuda", 0) == 0;
  const std::string device = gpu ? "cuda" : "cpu";
  // The pool holds every request at its largest.
  const int64_t slots_each = a.prompt_length + a.max_tokens + 4 * max_block + 64;
  const int32_t page = 16;
  if (!backend.has_kv_pool())
    backend.create_kv_pool(int64_t{max_n} * ((slots_each + page - 1) / page + 1), page);
  const double bw = measure_copy_bandwidth(device), gemm = measure_gemm_rate(device);
  // Weights as stored (bf16 random weights, widened in registers by the CPU GEMM); K/V bf16 on
  // the GPU, fp32 on the CPU. On the CPU tensor-parallel ranks are threads sharing one memory.
  const double weight_elem = double(model.weight_bytes()) / double(model.parameter_count());
  const double kv_per_token = 2.0 * c.num_layers * c.kv_dim() * (gpu ? 2 : 4);
  const int devices = gpu ? a.tensor_parallel : 1;
  std::printf(
      "\n%s on %s: prompt %d, %d generated tokens per request, one token per step%s; sparse "
      "attention %s (k %d); copy %.0f GB/s, GEMM %.1f TFLOP/s per device\n\n",
      a.shape.c_str(), backend.name().c_str(), a.prompt_length, a.max_tokens,
      a.fuse_commit ? ", commits fused into the next block's first step" : "", a.sparse.c_str(),
      a.sparse_k, bw / 1e9, gemm / 1e12);
  std::printf(
      "| block | requests | ms/step | floor ms | x floor | steady tokens/s | run tokens/s | host "
      "ms/step (%% of step) | steps |\n|---|---|---|---|---|---|---|---|---|\n");
  uint64_t next_id = 0;
  for (int32_t block : blocks)
    for (int32_t n : counts) {
      SchedulerConfig sc;
      sc.max_running = n;
      sc.max_batch_rows = std::max<int64_t>(int64_t{n} * block, 16384);  // prefills: a few a step
      sc.prefix_sharing = false;
      EngineCore core(model, backend, sc);
      run_requests(core, model, n, block, a, next_id);  // warm-up: buffers, captured graphs
      next_id += static_cast<uint64_t>(n);
      const RunTimes t = run_requests(core, model, n, block, a, next_id);
      next_id += static_cast<uint64_t>(n);
      double profiled_ms = 0;
      std::optional<double> moe_touched;  // routed experts with rows per MoE layer
      const auto ops =
          profile_full_steps(core, model, n, block, a, next_id, 4, profiled_ms, moe_touched);
      next_id += static_cast<uint64_t>(n);
      const double ms = median(t.full_steps_ms);
      // The floor of a full step halfway through the generation.
      const double keys = a.prompt_length + a.max_tokens / 2.0 + block;
      const double rows = double(n) * block;
      // MoE: only the experts the rows route to, as counted in the profiled steps where the
      // backend counts them (Model::parameters_read).
      const double bytes = model.parameters_read(int64_t{n} * block, moe_touched) * weight_elem +
                           kv_per_token * keys * n;
      const double flops = 2.0 * model.parameters_per_row() * rows +
                           4.0 * rows * keys * double(c.num_heads * c.head_dim * c.num_layers);
      const double floor_ms = std::max(bytes / bw, flops / gemm) / devices * 1e3;
      const double tps = double(t.generated) / t.seconds;
      const double steady_tps = t.full_seconds > 0 ? double(t.full_tokens) / t.full_seconds : 0;
      const double host_ms = t.host_seconds * 1e3 / double(t.steps);
      std::printf("| %d | %d | %.2f | %.2f | %.2f | %.0f | %.0f | %.3f (%.1f%%) | %lld |\n", block,
                  n, ms, floor_ms, ms > 0 ? ms / floor_ms : 0.0, steady_tps, tps, host_ms,
                  ms > 0 ? 100.0 * host_ms / ms : 0.0, static_cast<long long>(t.steps));
      std::fflush(stdout);
      out.push_back({{"block", block},
                     {"requests", n},
                     {"prompt_length", a.prompt_length},
                     {"max_tokens", a.max_tokens},
                     {"fuse_commit", a.fuse_commit},
                     {"sparse", a.sparse},
                     {"sparse_k", a.sparse_k},
                     {"ms_per_step", ms},
                     {"floor_ms", floor_ms},
                     {"floor_bytes", bytes},
                     {"floor_flops", flops},
                     {"tokens_per_second", tps},
                     {"steady_tokens_per_second", steady_tps},
                     {"host_ms_per_step", host_ms},
                     {"steps", t.steps},
                     {"seconds", t.seconds},
                     {"copy_gbs", bw / 1e9},
                     {"gemm_tflops", gemm / 1e12}});
      nlohmann::json prof = nlohmann::json::object();
      std::string line;
      double sum = 0;
      for (const auto& [op, op_ms] : ops) {
        prof[op] = op_ms;
        sum += op_ms;
        line += "  " + op + " " + std::to_string(op_ms).substr(0, 6);
      }
      prof["wall (profiled, no graphs)"] = profiled_ms;
      out.back()["profile_ms"] = prof;
      if (moe_touched) out.back()["moe_experts_touched_per_layer"] = *moe_touched;
      std::fprintf(stderr, "  block %d x %d profiled step %.2f ms (ops %.2f):%s\n", block, n,
                   profiled_ms, sum, line.c_str());
      const double cpu_tps =
          t.full_cpu_seconds > 0 ? double(t.full_tokens) / t.full_cpu_seconds : 0;
      out.back()["steady_tokens_per_cpu_second"] = cpu_tps;
      std::fprintf(stderr,
                   "  block %d x %d steady state: %.0f tokens per CPU second (all threads)\n",
                   block, n, cpu_tps);
    }
}

}  // namespace dllm::cli
