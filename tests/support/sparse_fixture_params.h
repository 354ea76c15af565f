// Sparse attention knobs and LLaDA2.x DecodeParams of the sparse trajectory fixtures
// (tools/reference_sparse_attention.py, tools/reference_llada2_methods.py write them); shared by
// the CPU parity tests and the GPU-vs-CPU test.
#pragma once

#include <nlohmann/json.hpp>

#include "attention/sparse_attention.h"
#include "decode/decoder.h"

namespace dllm::test {

inline SparseParams sparse_params_from(const nlohmann::json& sp) {
  SparseParams s;
  s.method = parse_sparse_method(sp["method"]);
  s.k = sp["k"];
  s.exact_layers = sp["exact_layers"];
  s.page_size = sp["page_size"];
  s.select_queries = sp["select_queries"];
  s.dense_fraction = sp["dense_fraction"];
  return s;
}

// A case of sparse/llada2-trajectories.json: LLaDA2.0 block diffusion or LLaDA2.1 token editing.
inline DecodeParams llada2_sparse_params_from(const nlohmann::json& c) {
  const auto& p = c["params"];
  DecodeParams d;
  d.strategy = p["strategy"];
  if (d.strategy == "edit") {
    d.editing_threshold = p["editing_threshold"];
    d.max_post_steps = p["max_post_steps"];
  }
  d.max_tokens = p["max_tokens"];
  d.block_length = p["block_length"];
  d.steps = p["steps"];
  d.threshold = p["threshold"];
  d.sampler.temperature = p["temperature"];
  d.sampler.top_k = p["top_k"];
  d.sampler.top_p = p["top_p"];
  d.seed = p["seed"];
  d.hf_sampling_quirk = p["hf_quirk"];
  d.sparse = sparse_params_from(c["sparse"]);
  return d;
}

}  // namespace dllm::test
