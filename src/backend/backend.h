// Backend: runs model forwards on one kind of hardware. The CPU backend (cpu/) is the reference;
// the CUDA backend implements the same contract.
#pragma once

#include <memory>
#include <span>
#include <string>
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
};

// Validates one request against the model; shared by every backend.
void validate_forward(const ModelConfig& config, const SequenceForward& seq, size_t index);

std::unique_ptr<Backend> make_cpu_backend(const Model& model);

}  // namespace dllm
