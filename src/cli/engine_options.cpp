#include "cli/engine_options.h"

#include "backend/cpu/matmul_precision.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

namespace dllm::cli {

std::string default_model_dir() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("DLLM_DEFAULT_MODEL")) candidates.emplace_back(env);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / "models" / "tiny-block");
    candidates.push_back(exe.parent_path().parent_path() / "models" / "tiny-block");
    candidates.push_back(exe.parent_path().parent_path() / "share" / "dllm" / "models" /
                         "tiny-block");
  }
  candidates.push_back(fs::path(DLLM_SOURCE_DIR) / "models" / "tiny-block");
  for (const auto& c : candidates)
    if (fs::is_regular_file(c / "config.json", ec)) return c.string();
  std::string tried;
  for (const auto& c : candidates) tried += "\n  " + c.string();
  fail(
      "no -m MODEL_DIR given and the embedded default model models/tiny-block was not found; "
      "tried:",
      tried);
}

CLI::Option* add_threads_option(CLI::App& cmd, int32_t& threads) {
  return cmd.add_option_function<int32_t>(
      "--threads",
      [&threads](const int32_t& n) {
        if (n < 1 || n > kMaxThreads)
          fail("--threads must be between 1 and ", kMaxThreads, " (got ", n, ")");
        threads = n;
      },
      "CPU threads (default: OMP_NUM_THREADS if set, else every CPU this process may use)");
}

CLI::Option* add_cpu_matmul_option(CLI::App& cmd) {
  return cmd.add_option_function<std::string>(
      "--cpu-matmul",
      [](const std::string& text) {
        cpu::set_matmul_precision(cpu::parse_matmul_precision(text.c_str()));
      },
      "CPU products with bf16 weights: amx (default where the CPU has AMX-BF16: exact fp32 "
      "products on tiles for matrices of >= 2^20 weights, fp32 accuracy, batch invariant; "
      "backend/cpu/gemm_amx.h) | fp32 (the "
      "default elsewhere: exact products on FMA kernels, the same bits on every CPU) | bf16 "
      "(activations rounded to bf16, AVX512-BF16 dot products: bf16 accuracy; "
      "backend/cpu/gemm_bf16.h)");
}

CLI::Option* add_tensor_parallel_option(CLI::App& cmd, int32_t& world) {
  return cmd.add_option_function<int32_t>(
      "--tensor-parallel",
      [&world](const int32_t& n) {
        if (n < 1 || n > 64) fail("--tensor-parallel must be in [1, 64] (got ", n, ")");
        world = n;
      },
      "Split the model over N ranks, Megatron style: GPUs 0..N-1 joined by NCCL (on the CPU, "
      "N threads: the reference path, no faster). Default 1");
}

CLI::Option* add_expert_parallel_option(CLI::App& cmd, bool& on) {
  return cmd.add_flag("--expert-parallel", on,
                      "With --tensor-parallel N: MoE layers give each rank whole experts (1/N of "
                      "them) instead of 1/N of every expert's features");
}

void add_engine_options(CLI::App& cmd, EngineConfig& c) {
  cmd.add_option("-m,--model", c.model,
                 "Checkpoint directory (default: the embedded models/tiny-block)");
  cmd.add_option("--device", c.device, "auto (CUDA when available) | cpu | cuda");
  const char* g = "Engine";
  add_tensor_parallel_option(cmd, c.tensor_parallel)->group(g);
  add_expert_parallel_option(cmd, c.expert_parallel)->group(g);
  cmd.add_option_function<double>(
         "--kv-cache-memory",
         [&c](const double& gib) {
           if (!(gib > 0) || gib > 1e6)
             fail("--kv-cache-memory must be a positive number of GiB (got ", gib, ")");
           c.kv_cache_bytes = static_cast<int64_t>(gib * double(int64_t{1} << 30));
         },
         "KV pool size in GiB (default: what --gpu-memory-utilization leaves on CUDA, 1 GiB on "
         "the CPU)")
      ->group(g);
  cmd.add_option("--gpu-memory-utilization", c.gpu_memory_utilization,
                 "Share of the GPU's memory the engine may use in all (default 0.9)")
      ->group(g);
  cmd.add_option("--kv-page-size", c.kv_page_size, "Slots per KV page, a power of two (16)")
      ->group(g);
  cmd.add_option("--max-running", c.max_running, "Sequences in one forward at most (256)")
      ->group(g);
  cmd.add_option("--max-batch-rows", c.max_batch_rows, "Query rows in one forward (16384)")
      ->group(g);
  add_threads_option(cmd, c.threads)->group(g);
  add_cpu_matmul_option(cmd)->group(g);
  cmd.add_flag("--no-prefix-sharing{false}", c.prefix_sharing,
               "Do not reuse the K/V of identical prompt prefixes across requests")
      ->group(g);
  cmd.add_option("--sparse-prefill", c.sparse_prefill,
                 "MMInference / MInference sparse prefill: a pattern config (JSON; "
                 "docs/mminference.md) for the prompt's prefill (CPU and CUDA backends; turns "
                 "prefix sharing off)")
      ->check(CLI::ExistingFile)
      ->group(g);
  cmd.add_option("--sparse-prefill-dir", c.sparse_prefill_dir,
                 "Sparse prefill configs requests may name (the server's \"sparse_prefill\" "
                 "field): every DIR/NAME.json, loaded at start (turns prefix sharing off)")
      ->check(CLI::ExistingDirectory)
      ->group(g);
  cmd.add_option("--random-weights", c.random_weights,
                 "Benchmarks: random weights of this config.json's shape (configs/sdar-8b.json); "
                 "-m then gives only the tokenizer")
      ->group(g);
}

void finish_engine_config(EngineConfig& c) {
  if (c.model.empty()) c.model = default_model_dir();
}

}  // namespace dllm::cli
