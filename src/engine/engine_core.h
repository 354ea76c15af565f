// EngineCore: the token-level serving loop (nano-vllm's LLMEngine). Requests come in as prompt ids
// with resolved decoding parameters; each step() is schedule (what runs), one forward over every
// scheduled sequence on the backend (how it runs), postprocess (decoders observe, tokens stream,
// finished sequences leave). Single-threaded: the public Engine (include/dllm/engine.h) runs it on
// its background thread; tests and tools drive it directly.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "backend/backend.h"
#include "engine/generation.h"
#include "engine/scheduler.h"
#include "engine/step_log.h"

namespace dllm {

// Engine-wide counters since construction.
struct EngineCounters {
  int64_t steps = 0;               // forwards run (one per step with work)
  int64_t rows = 0;                // query rows forwarded
  int64_t sequences_in_steps = 0;  // sum over steps of the sequences in the forward
  int64_t committed_tokens = 0;    // final tokens streamed
  int64_t finished = 0, cancelled = 0, errors = 0;
  int64_t preemptions = 0;
  double forward_seconds = 0;   // in Backend::forward
  double schedule_seconds = 0;  // scheduling and postprocessing on the host
};

class EngineCore {
 public:
  EngineCore(const Model& model, Backend& backend, const SchedulerConfig& config = {});

  const Model& model() const { return model_; }
  Backend& backend() { return backend_; }

  // Queues a request; its callbacks run on the thread that calls step().
  void add(SequenceRequest request);
  // Cancels a request at once (between steps): reported as "cancelled", its memory freed.
  bool cancel(uint64_t id);
  bool idle() const { return scheduler_.idle(); }
  size_t waiting() const { return scheduler_.waiting(); }
  size_t running() const { return scheduler_.running(); }
  const EngineCounters& counters() const { return counters_; }
  const KvPool& kv_pool() const { return pool_; }

  // One step: schedule, one forward, postprocess. False when nothing could run.
  bool step();

  // Runs one request to completion (with any others queued alongside): the single-request call
  // of tests and tools. A `trace` also receives each forward's MoE routing
  // (SequenceRequest::trace_routing).
  GenerationResult generate(const GenerationRequest& request, const TokenCallback& on_tokens = {},
                            const TraceCallback& trace = {}, const StopRule& stop_rule = {});

 private:
  // The batch's forwards flattened into one backend call; results in the same order.
  std::vector<SequenceResult> run(StepBatch& batch);

  const Model& model_;
  Backend& backend_;
  KvPool& pool_;
  Scheduler scheduler_;
  EngineCounters counters_;
  std::unique_ptr<StepLog> step_log_;  // DLLM_STEP_LOG
  uint64_t arrivals_ = 0;
  uint64_t next_internal_id_ = uint64_t{1} << 62;  // ids of generate() calls
};

}  // namespace dllm
