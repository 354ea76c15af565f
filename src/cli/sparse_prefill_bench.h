// `dllm bench --sparse-prefill-kernel` (sparse_prefill_bench.cpp): dense vs each MMInference
// pattern's prefill attention on one layer of --shape, a video-like prompt of each
// --prefill-lengths; prints a table and returns its rows.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "cli/bench_args.h"

namespace dllm::cli {

nlohmann::json sparse_prefill_bench(const BenchArgs& a, const std::string& device);

}  // namespace dllm::cli
