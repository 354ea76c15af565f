// Backend: runs model forwards on one kind of hardware. The CPU backend (cpu/) is the reference;
// the CUDA backend implements the same contract.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/forward_batch.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace dllm {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // A cache for one sequence, sized for `capacity` slots up front (it grows if needed).
  virtual std::unique_ptr<KvCache> create_cache(int64_t capacity) = 0;
  // Runs one forward over a batch of sequences. Invalid requests (ids out of vocabulary, bad
  // positions, slots out of range, ...) throw Error before any cache is modified.
  virtual std::vector<SequenceResult> forward(std::span<const SequenceForward> batch) = 0;

  // Benchmarks: fills slots [0, n) of `cache` with random K/V at positions 0..n-1 and commits
  // them, so long contexts can be timed without prefilling them.
  virtual void fill_cache_random(KvCache& cache, int64_t n, uint64_t seed) = 0;
  // Benchmarks: per-op time accounting of the following forwards (ms per op class), where the
  // backend supports it; empty otherwise.
  virtual void set_profiling(bool on) { (void)on; }
  virtual std::vector<std::pair<std::string, double>> profile() const { return {}; }
};

// Validates one request against the model; shared by every backend.
void validate_forward(const ModelConfig& config, const SequenceForward& seq, size_t index);

std::unique_ptr<Backend> make_cpu_backend(const Model& model);
// The CUDA backend on `device` (Error when built without CUDA or no such device).
std::unique_ptr<Backend> make_cuda_backend(const Model& model, int device = 0);
// True when this build has the CUDA backend and a GPU is visible.
bool cuda_available();
// Bytes per second a large device-to-device copy moves on `device` ("cpu" or "cuda"), counting
// bytes read plus bytes written: the bandwidth a memory-bound step can hope for.
double measure_copy_bandwidth(const std::string& device);
// Microseconds per call of the CUDA attention kernel alone (key splits + combine) on one layer's
// shapes: a block-causal block of n_q queries after `context` cached keys, every call reading its
// K/V from device memory (not L2). Error when built without CUDA.
double time_cuda_attention_kernel(int n_q, int context, int heads, int kv_heads, int head_dim,
                                  int reps);
// Microseconds per batched attention call (attention_batch: one call for every sequence of a
// step) on one layer's shapes: `seqs` sequences, each a block-causal block of n_q queries after
// `context` cached keys, their K/V in one paged pool (pages of page_size slots, shuffled over the
// pool), every call reading from device memory. Error when built without CUDA.
double time_cuda_attention_batch(int seqs, int n_q, int context, int heads, int kv_heads,
                                 int head_dim, int page_size, int reps);
// "cpu", "cuda" or "auto" (CUDA when available, else CPU).
std::unique_ptr<Backend> make_backend(const Model& model, const std::string& device);

}  // namespace dllm
