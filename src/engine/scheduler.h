// Scheduler: what runs in the next forward (nano-vllm's split — the scheduler decides what runs,
// the decoders how each sequence runs, the KV pool holds the memory).
//   running sequences are planned first, oldest first, while the batch has rows to spare;
//   a plan that needs more pages than are available preempts the newest running sequences not
//     yet planned this step (recompute: their memory is freed, they wait at the front);
//   then waiting sequences are admitted, first come first served, while their first plan fits;
//   a sequence whose decoder is done, or that stops, leaves at once, freeing its pages.
// Sequences of any strategy and family's decoder share one forward; nothing waits for a batch to
// finish in lock-step.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <vector>

#include "backend/backend.h"
#include "engine/sequence.h"

namespace dllm {

struct SchedulerConfig {
  int32_t max_running = 256;       // sequences in one forward at most
  int64_t max_batch_rows = 16384;  // query rows per forward (soft: one plan may go past it)
  bool prefix_sharing = true;      // automatic prefix sharing of prompt pages
};

// One step's work: the sequences that run and, in order, their planned forwards.
struct StepBatch {
  std::vector<Sequence*> sequences;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, const ModelConfig& model, Backend& backend);

  void add(std::unique_ptr<Sequence> seq);
  // Cancels a waiting or running sequence (reported as "cancelled"); false when unknown.
  bool cancel(uint64_t id);
  bool idle() const { return waiting_.empty() && running_.empty(); }
  size_t waiting() const { return waiting_.size(); }
  size_t running() const { return running_.size(); }

  StepBatch schedule();
  // After the forward: observes each sequence's results (one per planned forward, in order) and
  // retires finished ones.
  void postprocess(StepBatch& batch, std::span<const SequenceResult> results);
  // Ends every sequence of the batch with `error` (a failed forward).
  void fail_batch(StepBatch& batch, const std::string& error);

  int64_t preemptions() const { return preemptions_; }

 private:
  // Plans `seq` and reserves its pages, preempting newer unplanned sequences for room; false
  // when the sequence itself had to wait (preempted) or finished (done or invalid).
  bool plan_running(Sequence& seq, const std::set<Sequence*>& planned);
  // Starts the first waiting sequence: admitted (now running), no room yet (still waiting), or
  // failed (finished with an error and removed — `seq` is gone).
  enum class Admission { kAdmitted, kNoRoom, kFailed };
  Admission admit(Sequence& seq);
  void preempt(Sequence& seq);
  // Takes the sequence out of the running list, then ends it (frees its memory, reports).
  void retire(Sequence& seq, std::string reason, std::string error);
  // Pages the whole request needs at most; Error when the pool can never hold it.
  void check_fits(Sequence& seq) const;

  SchedulerConfig config_;
  const ModelConfig& model_;
  Backend& backend_;
  KvPool& pool_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // in admission order
  int64_t preemptions_ = 0;
};

}  // namespace dllm
