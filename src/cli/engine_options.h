// Command-line options shared by the subcommands that run the engine (generate, serve, bench):
// the model, the device and the serving engine's memory and batching limits.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "dllm/engine.h"

namespace dllm::cli {

// The embedded default model (models/tiny-block, trained by tools/train/train.py) when -m is not
// given: $DLLM_DEFAULT_MODEL, next to the executable (an install or a build tree), or the source
// tree this binary was built from.
std::string default_model_dir();

// --threads N (1..kMaxThreads, core/thread_pool.h), checked when parsed.
CLI::Option* add_threads_option(CLI::App& cmd, int32_t& threads);
// --tensor-parallel N (1..64) into `world`.
CLI::Option* add_tensor_parallel_option(CLI::App& cmd, int32_t& world);
CLI::Option* add_expert_parallel_option(CLI::App& cmd, bool& on);

// --cpu-matmul amx|fp32|bf16 (backend/cpu/matmul_precision.h), applied process-wide when parsed.
CLI::Option* add_cpu_matmul_option(CLI::App& cmd);

// -m/--model, --device, --tensor-parallel, --kv-cache-memory, --gpu-memory-utilization,
// --kv-page-size,
// --max-running, --max-batch-rows, --threads, --no-prefix-sharing, --random-weights.
void add_engine_options(CLI::App& cmd, EngineConfig& config);
// Fills in the default model when none was given.
void finish_engine_config(EngineConfig& config);

}  // namespace dllm::cli
