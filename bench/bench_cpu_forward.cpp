// CPU forward benchmark: one forward of a ~0.6B random-weight Qwen3-shaped model (SDAR dialect,
// configs/qwen3-0.6b-sdar.json, bf16 weights kept as they are), next to what OpenBLAS itself
// reaches on a large square SGEMM and to the memory-bandwidth floor of a weight-streaming
// denoising step (4-64 rows: every weight byte read once per step).
//
//   build/bench_cpu_forward [--config configs/qwen3-0.6b-sdar.json] [--tokens 128,512] [--reps 3]
//                           [--rows 4,8,16,32,64] [--threads N] [--cpu-matmul amx|fp32|bf16]
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "backend/backend.h"
#include "backend/cpu/matmul_precision.h"
#include "core/thread_pool.h"
#include "io/json_file.h"
#include "model/random_model.h"

using namespace dllm;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// User + system CPU seconds of the process so far: on a shared machine (other jobs on the cores)
// wall time overstates a step, and CPU time per step shows what the step itself costs.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

template <class F>
double median_seconds(int reps, F f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto s = Clock::now();
    f();
    t.push_back(seconds_since(s));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double sgemm_peak_gflops(int n, int reps) {
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
              0.0f, c.data(), n);
  const double s = median_seconds(reps, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  });
  return 2.0 * n * n * double(n) / s / 1e9;
}

// Read bandwidth: sum a buffer much larger than the caches. Eight independent accumulators per
// thread so the adds vectorise and the loop waits on memory, not on add latency.
double read_bandwidth_gbs() {
  std::vector<float> buf(size_t(1) << 28, 1.0f);  // 1 GiB
  volatile float sink = 0;
  const double s = median_seconds(3, [&] {
    float acc = 0;
#pragma omp parallel reduction(+ : acc)
    {
      float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma omp for
      for (size_t i = 0; i < buf.size(); i += 8)
        for (int k = 0; k < 8; ++k) part[k] += buf[i + k];
      for (float p : part) acc += p;
    }
    sink = acc;
  });
  (void)sink;
  return double(buf.size()) * 4 / s / 1e9;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  size_t p = 0;
  while (p < s.size()) {
    size_t q = s.find(',', p);
    if (q == std::string::npos) q = s.size();
    out.push_back(std::stoi(s.substr(p, q - p)));
    p = q + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path = std::string(DLLM_SOURCE_DIR) + "/configs/qwen3-0.6b-sdar.json";
  std::vector<int> token_counts = {128, 512};
  std::vector<int> step_rows = {4, 8, 16, 32, 64};
  int reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--config") config_path = argv[i + 1];
    if (k == "--tokens") token_counts = parse_list(argv[i + 1]);
    if (k == "--rows") step_rows = parse_list(argv[i + 1]);
    if (k == "--reps") reps = std::stoi(argv[i + 1]);
    if (k == "--threads") set_num_threads(std::stoi(argv[i + 1]));
    if (k == "--cpu-matmul")
      dllm::cpu::set_matmul_precision(dllm::cpu::parse_matmul_precision(argv[i + 1]));
  }
  std::printf("threads: %d (dllm pool), %d (OpenMP: OpenBLAS, bandwidth probe), OpenBLAS: %s\n",
              num_threads(), omp_get_max_threads(), openblas_get_config());
  std::printf("--cpu-matmul %s\n", dllm::cpu::matmul_precision_name(dllm::cpu::matmul_precision()));

  const double peak = sgemm_peak_gflops(2048, 5);
  std::printf("OpenBLAS SGEMM 2048^3 peak: %.1f GFLOP/s\n", peak);
  const double bw = read_bandwidth_gbs();
  std::printf("memory read bandwidth: %.1f GB/s\n", bw);

  auto t0 = Clock::now();
  auto model = make_random_model(read_json_file(config_path), 42);
  auto backend = make_cpu_backend(*model);
  const ModelConfig& c = model->config();
  std::printf("model: %s, %.3f B parameters (bf16, kept as they are), built in %.1f s\n",
              config_path.c_str(), model->parameter_count() / 1e9, seconds_since(t0));

  // FLOPs of the linear layers per token (the embedding is a lookup; the LM head runs on 1 row).
  const double layer_params =
      double(c.num_layers) * (double(c.hidden_size) * (2 * c.q_dim() + 2 * c.kv_dim()) +
                              3.0 * c.hidden_size * c.intermediate_size);
  const double head_flops = 2.0 * c.vocab_size * c.hidden_size;
  // Bytes a step streams: every layer weight and the LM head, in bf16.
  const double weight_bytes = (layer_params + double(c.vocab_size) * c.hidden_size) * 2;

  std::printf(
      "\n| forward | tokens | ms | GEMM GFLOP | GFLOP/s | vs SGEMM peak "
      "|\n|---|---|---|---|---|---|\n");
  for (int n : token_counts) {
    SequenceForward f;
    for (int i = 0; i < n; ++i) {
      f.tokens.push_back((i * 7919) % int(c.vocab_size));
      f.positions.push_back(i);
    }
    f.rule = AttentionRule::block_causal(c.block_size);
    f.output_rows = {n - 1};
    f.want_stats = true;
    const double s = median_seconds(reps, [&] { backend->forward(std::span(&f, 1)); });
    // Attention products: 2 * n * n * head_dim * heads * 2 (scores + values), all keys computed.
    const double attn = 4.0 * n * double(n) * c.head_dim * c.num_heads * c.num_layers;
    const double gflop = (2.0 * n * layer_params + head_flops + attn) / 1e9;
    std::printf("| prefill | %d | %.1f | %.1f | %.1f | %.0f%% |\n", n, s * 1e3, gflop, gflop / s,
                100 * gflop / s / peak);
  }

  // A denoising step: a block of B queries over a 512-token cached prefix, no cache write. It must
  // stream every bf16 weight once: the floor is weight bytes / read bandwidth.
  auto cache = backend->create_cache(1024);
  SequenceForward pre;
  pre.cache = cache.get();
  for (int i = 0; i < 512; ++i) {
    pre.tokens.push_back((i * 31) % int(c.vocab_size));
    pre.positions.push_back(i);
  }
  pre.rule = AttentionRule::block_causal(c.block_size);
  pre.write = CacheWrite::kAppend;
  backend->forward(std::span(&pre, 1));
  std::printf(
      "\n| denoising step | block | ms/step | CPU ms/step | floor ms (weights/bandwidth) | x floor "
      "| GFLOP/s |\n|---|---|---|---|---|---|---|\n");
  for (int b : step_rows) {
    SequenceForward f;
    f.cache = cache.get();
    for (int i = 0; i < b; ++i) {
      f.tokens.push_back(int(c.mask_token_id));
      f.positions.push_back(512 + i);
    }
    f.rule = AttentionRule::bidirectional();  // the block sees the whole prefix and itself
    f.want_stats = true;
    f.output_rows.resize(size_t(b));
    std::iota(f.output_rows.begin(), f.output_rows.end(), 0);
    const double cpu0 = cpu_seconds();
    const double s = median_seconds(reps + 2, [&] { backend->forward(std::span(&f, 1)); });
    const double cpu_s = (cpu_seconds() - cpu0) / (reps + 2);
    const double floor_s = weight_bytes / (bw * 1e9);
    const double gflop = (2.0 * b * layer_params + b * head_flops) / 1e9;
    std::printf("| 512 cached | %d | %.1f | %.1f | %.1f | %.2f | %.1f |\n", b, s * 1e3, cpu_s * 1e3,
                floor_s * 1e3, s / floor_s, gflop / s);
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf("\npeak resident memory: %.2f GB (the 1 GiB bandwidth probe buffer included)\n",
              usage.ru_maxrss / 1e6);
  return 0;
}
