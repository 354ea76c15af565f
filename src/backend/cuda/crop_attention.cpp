#include "backend/cuda/crop_attention.h"

#include <algorithm>
#include <span>

#include "backend/cuda/weight_upload.h"
#include "core/error.h"

namespace dllm::cuda {

CropAttention::CropAttention(int max_crops, int rows_per_crop, int heads, int head_dim, float scale,
                             cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(max_crops) * rows_per_crop;
  shape_.heads = heads;
  shape_.kv_heads = heads;
  shape_.head_dim = head_dim;
  shape_.pool_slots = rows;  // the chunk's k / v rows: crop c's keys are its rows
  shape_.scale = scale;
  std::vector<int32_t> crop_rows(static_cast<size_t>(rows)), staging;
  for (int64_t r = 0; r < rows; ++r) crop_rows[static_cast<size_t>(r)] = static_cast<int32_t>(r);
  std::vector<AttentionBatchSeq> seqs;
  int64_t partial_rows = 0;
  for (int c = 0; c < max_crops; ++c) {
    AttentionBatchSeq s;
    s.n_q = rows_per_crop;
    s.n_keys = rows_per_crop;  // no cache entries: the keys are the crop's own queries'
    s.key_slots = std::span<const int32_t>(crop_rows).subspan(
        static_cast<size_t>(c) * rows_per_crop, static_cast<size_t>(rows_per_crop));
    s.kind = MaskKind::kBidirectional;
    seqs.push_back(s);
    plans_.push_back(attention_batch_plan(seqs, shape_, staging));
    partial_rows = std::max(partial_rows, plans_.back().need.partial_rows);
  }
  regions_ = upload(staging, "vision attention plans");
  std::vector<int32_t> positions(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    positions[static_cast<size_t>(r)] = static_cast<int32_t>(r % rows_per_crop);
  positions_ = upload(positions, "vision patch positions");
  attention_batch_workspace_ensure(
      workspace_, attention_batch_workspace_floats(partial_rows, head_dim), stream);
}

void CropAttention::run(const bf16* q, const bf16* k, const bf16* v, bf16* out, int crops,
                        cudaStream_t stream) {
  if (crops < 1 || crops > static_cast<int>(plans_.size()))
    fail("CropAttention: ", crops, " crops (planned for 1..", plans_.size(), ")");
  const AttentionBatchPlan& plan = plans_[static_cast<size_t>(crops - 1)];
  AttentionBatchParams p;
  p.q = q;
  p.k_pool = k;
  p.v_pool = v;
  p.slot_positions = positions_.get();
  p.q_positions = positions_.get();
  p.plan = regions_.get() + plan.offset;
  p.workspace = workspace_.get();
  p.out = out;
  p.shape = shape_;
  p.capacity = plan.need;
  attention_batch(p, stream);
}

}  // namespace dllm::cuda
