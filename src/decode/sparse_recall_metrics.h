// The per-request metrics of MAGE's recall diagnostic (--sparse-recall; SparseSchedule): the
// mean recall of a block's first selection against the exact top-k of its later steps, and how
// many steps it averages (none when every prefix was at most k keys: attended densely).
#pragma once

#include <vector>

#include "attention/sparse_schedule.h"
#include "decode/decoder.h"

namespace dllm {

inline void append_recall_metrics(const SparseSchedule& schedule,
                                  std::vector<DecoderMetric>& metrics) {
  if (!schedule.measuring_recall()) return;
  if (schedule.recall_steps() > 0)
    metrics.push_back({"mage_recall", schedule.mean_recall(), false});
  metrics.push_back({"mage_recall_steps", static_cast<double>(schedule.recall_steps()), true});
}

}  // namespace dllm
