// Sparse attention in the CUDA forward (method-specs §1.4, §1.6, §6.2): MAGE and SparseD (Quest
// selects on the CPU backend only so far). The CPU backend's cpu_sparse.cpp is the reference;
// this is the same contract on the device:
//   - a selecting forward (MAGE: the block's first step; SparseD: its capture step) attends
//     exactly; in every layer past the exact ones, after the layer's exact attention, each KV
//     head's top-k prefix slots are selected from the block's queries (prefix-only LSE, handed
//     over by the exact attention — SparseD: with the block's own keys folded in —, score sums,
//     radix top-k: sparse_select.h) into the sequence's CudaMethodState — on a second stream,
//     beside the main stream's next kernels (the paper's dual-stream design);
//   - an attending forward reads, in those layers, each KV head's selected slots, the slots
//     committed since the selection and the block's own keys, through the batched flash kernels'
//     per-KV-head key lists (AttentionBatchSeq::device_keys), filled on the device from the
//     stored sets at each layer's start.
// A sequence's selection and keys depend on its own rows and cache only (batch-invariant), and
// a prefix of at most k keys is attended densely — the exact plan, so k >= N is exact to the bit.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>

#include "backend/cuda/attention_batch_layout.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sparse_select.h"
#include "core/error.h"

namespace dllm::cuda_backend {

namespace {

// What the CUDA Quest takes: a selection kept and attended in the same forward. A partial last
// page of the prefix is a page like the others, of its keys alone (as on the CPU); the key lists
// hold the masked slot for its missing keys, which hides them by its position — what the
// block-causal rule reads of cached keys, the others do not.
void check_quest(const SequenceForward& seq, size_t index) {
  const SparseStep& sp = *seq.sparse;
  if (!sp.attend_selected || !sp.keep_selection)
    fail("forward request ", index,
         ": on the CUDA backend quest selects, keeps and attends its sets in the same forward");
  if (sp.page_size <= 0) fail("forward request ", index, ": quest needs a positive page size");
  const int64_t n_prefix = seq.cache ? seq.cache->length() : 0;
  if (n_prefix > sp.k && n_prefix % sp.page_size != 0 &&
      seq.rule.kind != AttentionKind::kBlockCausal)
    fail("forward request ", index, ": quest on the CUDA backend over a partial last page (",
         n_prefix, " cached slots, page size ", sp.page_size, ") needs the block-causal rule (got ",
         seq.rule.to_string(), ")");
}

// MAGE's and SparseD's selection on the GPU averages over at most kMaxSelectionRows rows (one
// score-sum block's); more fail that request here instead of the step's batch in forward().
void check_selection_rows(const SequenceForward& seq, size_t index, int64_t group) {
  const SparseStep& sp = *seq.sparse;
  const bool mage = sp.select == SparseMethod::kMage;
  if (!mage && sp.select != SparseMethod::kSparseD) return;
  const int64_t n_prefix = seq.cache ? seq.cache->length() : 0;
  if (n_prefix <= sp.k) return;  // dense: no selection (§1.5)
  const int64_t rows = static_cast<int64_t>(seq.tokens.size());
  const int64_t used =
      static_cast<int64_t>(selection_query_rows(rows, mage ? sp.select_queries : 0).size());
  const int64_t most = cuda::kMaxSelectionRows / group;
  if (used <= most) return;
  const std::string remedy = mage ? "pass --sparse-select-queries 1.." + std::to_string(most)
                                  : "use a block of at most " + std::to_string(most) + " tokens";
  fail("forward request ", index, ": the GPU's ", mage ? "MAGE" : "SparseD",
       " selection averages over at most ", most, " query rows (", cuda::kMaxSelectionRows,
       " rows / ", group, " query heads per KV head); this forward selects from ", used, " — ",
       remedy);
}

}  // namespace

void CudaBackend::plan_sparse(PlannedSequence& p, size_t index) {
  const SequenceForward& seq = *p.seq;
  const SparseStep& sp = *seq.sparse;
  auto& st = static_cast<CudaMethodState&>(*seq.state);
  const int64_t n_prefix = p.cache->length();
  if (seq.rule.kind == AttentionKind::kCustom)
    fail("forward request ", index, ": sparse attention takes no custom attention mask");
  if (sp.select == SparseMethod::kQuest) {
    plan_quest(p, index);
    return;
  }
  if (sp.select != SparseMethod::kNone && sp.attend_selected)
    fail("forward request ", index,
         ": on the CUDA backend a forward either selects or attends through stored sets, not both "
         "(MAGE's schedule)");
  p.sparse_first_layer = sp.exact_layers;
  if (sp.select != SparseMethod::kNone) {
    check_selection_rows(*p.seq, index, config_.num_heads / config_.num_kv_heads);
    p.sparse_prefix = n_prefix;
    p.sparse_k = sp.k;
    // N <= k: dense, no selection (§1.5). The state takes the new selection once the forward
    // has run (finish_sparse()). MAGE: the prefix-only softmax of the chosen queries; SparseD:
    // every query's softmax over every key it sees (cpu_sparse.cpp).
    p.sparse_select = n_prefix > sp.k;
    p.sparse_full_softmax = sp.select == SparseMethod::kSparseD;
    if (p.sparse_select)
      p.select_rows =
          selection_query_rows(p.rows, sp.select == SparseMethod::kMage ? sp.select_queries : 0);
    return;
  }
  if (!sp.attend_selected) return;
  if (!st.sparse_selected || st.sparse_first_layer > sp.exact_layers)
    fail("forward request ", index,
         ": sparse attention attends stored index sets, but no selection is stored for layers >= ",
         sp.exact_layers);
  if (st.sparse_prefix > n_prefix)
    fail("forward request ", index, ": the stored sparse selection covers ", st.sparse_prefix,
         " cached slots but the cache holds ", n_prefix);
  if (st.sparse_dense) return;  // every prefix key: the exact plan
  p.sparse_attend = true;
  p.sparse_k = st.sparse_k;
  p.sparse_prefix = st.sparse_prefix;
  p.sparse_keys = st.sparse_k + (n_prefix - st.sparse_prefix) + p.rows;
}

void CudaBackend::check_forward(const SequenceForward& seq, size_t index) const {
  if (!seq.sparse) return;
  if (seq.sparse->select == SparseMethod::kQuest) check_quest(seq, index);
  check_selection_rows(seq, index, config_.num_heads / config_.num_kv_heads);
}

// Quest (§6.1) selects and attends in every forward: each sparse layer picks k / page pages
// from its own queries right before its attention. A prefix of at most k keys is attended
// densely (the exact plan), as on the CPU.
void CudaBackend::plan_quest(PlannedSequence& p, size_t index) {
  const SparseStep& sp = *p.seq->sparse;
  const int64_t n_prefix = p.cache->length();
  check_quest(*p.seq, index);
  p.sparse_first_layer = sp.exact_layers;
  p.sparse_prefix = n_prefix;
  if (n_prefix <= sp.k) return;  // dense: the exact plan
  const int64_t pages = std::max<int64_t>(1, sp.k / sp.page_size);
  p.quest_select = true;
  p.quest_page = sp.page_size;
  p.sparse_attend = true;
  p.sparse_k = pages * sp.page_size;
  p.sparse_keys = p.sparse_k + p.rows;
}

const cuda::AttentionBatchPlan& CudaBackend::layer_attention(const ForwardPlan& plan,
                                                             int64_t layer) const {
  if (plan.attention_of_layer.empty()) return plan.attention;
  return plan.layer_attentions[static_cast<size_t>(plan.attention_of_layer[layer])].plan;
}

const cuda::AttentionBatchCapacity& CudaBackend::layer_capacity(const ForwardPlan& plan,
                                                                int64_t layer) const {
  if (plan.attention_of_layer.empty()) return plan.capacity;
  return plan.layer_attentions[static_cast<size_t>(plan.attention_of_layer[layer])].capacity;
}

float* CudaBackend::layer_prefix_ml(const ForwardPlan& plan, int64_t layer) {
  if (plan.capacity.prefix_rows == 0) return nullptr;
  return sel_prefix_ml_.get() + layer * plan.capacity.prefix_rows * 2;
}

// The pages holding a selecting sequence's prefix, at p.prefix_pages_at (prefix_keys() reads
// them).
void CudaBackend::stage_prefix_pages(PlannedSequence& p, std::vector<int32_t>& ints) {
  const int64_t page_size = kv_pool().page_size();
  const auto table = p.cache->pages();
  p.prefix_pages_at = ints.size();
  ints.insert(ints.end(), table.begin(),
              table.begin() + (p.sparse_prefix + page_size - 1) / page_size);
}

cuda::PrefixPages CudaBackend::prefix_keys(const PlannedSequence& p) {
  cuda::PrefixPages pages;
  pages.pages = lane_->ints.get() + p.prefix_pages_at;
  pages.shift = kv_page_shift();
  return pages;
}

int CudaBackend::kv_page_shift() {
  return cuda::page_shift_of(static_cast<int>(kv_pool().page_size()));  // a power of two (KvPool)
}

void CudaBackend::stage_sparse(ForwardPlan& plan) {
  std::vector<int32_t>& ints = plan.ints;
  const ModelConfig& c = config_;
  const int page_size = kv_pool().page_size();
  // Selection: each selecting sequence's rows, its prefix's physical slots and its lane.
  int selecting = 0;
  for (PlannedSequence& p : plan.seqs) {
    if (!p.sparse_select) continue;
    auto& st = static_cast<CudaMethodState&>(*p.seq->state);
    if (p.seq->sparse->keep_selection)
      st.sparse_sets.ensure(static_cast<size_t>(c.num_layers * c.num_kv_heads * p.sparse_k),
                            "sparse index sets");
    p.sparse_sets_out = p.seq->sparse->keep_selection ? st.sparse_sets.get() : nullptr;
    if (!p.sparse_sets_out) {  // each its own scratch: the lanes select at once
      p.scratch_sets_at = plan.scratch_sets;
      plan.scratch_sets += static_cast<size_t>(c.num_layers * c.num_kv_heads * p.sparse_k);
    }
    p.select_q_row = plan.select_q_rows;
    plan.select_q_rows += p.rows;
    // A lane of its own for the score sums over K (from handed-over scores: the score stream).
    if (p.sparse_first_layer < c.num_layers) {
      p.select_lane = select_side_stream_ && !p.select_from_scores ? selecting++ % kSelectLanes : 0;
      plan.select_lanes = std::max(plan.select_lanes, p.select_lane + 1);
    }
    const int64_t rows = std::max<int64_t>(c.num_layers - p.sparse_first_layer, 0) * c.num_kv_heads;
    p.select_scores_at = plan.select_scores;
    plan.select_scores += static_cast<size_t>(rows * p.sparse_prefix);
    p.select_topk_at = plan.select_topk;
    plan.select_topk +=
        cuda::top_k_workspace_ints(static_cast<int>(p.sparse_prefix), static_cast<int>(rows));
    p.select_rows_at = ints.size();
    ints.insert(ints.end(), p.select_rows.begin(), p.select_rows.end());
    stage_prefix_pages(p, ints);
  }
  plan.top_k_in_runs = top_k_runs_for(plan);
  // Quest: the prefix's physical slots, and the sequence's pages and slots of this forward.
  for (PlannedSequence& p : plan.seqs) {
    if (!p.quest_select) continue;
    auto& st = static_cast<CudaMethodState&>(*p.seq->state);
    const size_t sets = static_cast<size_t>(c.num_layers * c.num_kv_heads);
    st.sparse_sets.ensure(sets * static_cast<size_t>(p.sparse_k), "sparse index sets");
    st.quest_pages.ensure(sets * static_cast<size_t>(p.sparse_k / p.quest_page), "quest pages");
    stage_prefix_pages(p, ints);
  }
  // Attending: per layer, which sequences read gathered keys (1) or leave their rows to the
  // sparse prefill kernel (2, cuda_sparse_prefill.cpp); one plan per distinct pattern.
  bool any_attend = false;
  for (const PlannedSequence& p : plan.seqs) any_attend = any_attend || p.sparse_attend;
  if (!any_attend && !plan.any_sparse_prefill) return;
  if (plan.any_reuse)  // its layers re-plan from plan.attention_seqs (cuda_layers.cpp)
    fail(
        "forward: sparse attention (MAGE, SparseD or sparse prefill) and dLLM-Cache cannot share "
        "a CUDA batch yet");
  for (PlannedSequence& p : plan.seqs) {
    if (!p.sparse_attend) continue;
    p.sparse_pages_at = ints.size();
    const int64_t pages = (p.n_keys + page_size - 1) / page_size;
    const auto table = p.cache->pages();
    ints.insert(ints.end(), table.begin(), table.begin() + pages);
  }
  constexpr uint8_t kGathered = 1, kElsewhere = 2;
  std::vector<std::vector<uint8_t>> patterns;
  plan.attention_of_layer.resize(static_cast<size_t>(c.num_layers));
  for (int64_t li = 0; li < c.num_layers; ++li) {
    std::vector<uint8_t> pattern;
    for (const PlannedSequence& p : plan.seqs)
      pattern.push_back(p.sparse_attend && li >= p.sparse_first_layer ? kGathered
                        : p.sparse_prefill_at(li)                     ? kElsewhere
                                                                      : 0);
    auto it = std::find(patterns.begin(), patterns.end(), pattern);
    if (it == patterns.end()) it = patterns.insert(patterns.end(), pattern);
    plan.attention_of_layer[static_cast<size_t>(li)] = static_cast<int32_t>(it - patterns.begin());
  }
  for (const std::vector<uint8_t>& pattern : patterns) {
    std::vector<cuda::AttentionBatchSeq> seqs = plan.attention_seqs;
    for (size_t si = 0; si < seqs.size(); ++si) {
      seqs[si].attended_elsewhere = pattern[si] == kElsewhere;
      if (pattern[si] != kGathered) continue;
      seqs[si].n_keys = static_cast<int>(plan.seqs[si].sparse_keys);
      seqs[si].device_keys = true;
    }
    LayerAttention la;
    la.plan = cuda::attention_batch_plan(seqs, attention_shape(), ints);
    la.sparse_table_at = ints.size();
    for (size_t si = 0; si < seqs.size(); ++si) {
      if (pattern[si] != kGathered) continue;
      const PlannedSequence& p = plan.seqs[si];
      namespace S = cuda::sparse_keys;
      int32_t e[S::kInts] = {};
      const auto& st = static_cast<CudaMethodState&>(*p.seq->state);
      const int32_t* sets = p.quest_select ? st.quest_pages.get() : st.sparse_sets.get();
      const uint64_t addr = reinterpret_cast<uintptr_t>(sets);
      e[S::kSetsLo] = static_cast<int32_t>(static_cast<uint32_t>(addr));
      e[S::kSetsHi] = static_cast<int32_t>(static_cast<uint32_t>(addr >> 32));
      e[S::kK] = static_cast<int32_t>(p.sparse_k);
      e[S::kSelPrefix] = static_cast<int32_t>(p.sparse_prefix);
      e[S::kNKeys] = static_cast<int32_t>(p.sparse_keys);
      e[S::kKeysAt] = static_cast<int32_t>(la.plan.offset + la.plan.device_keys_at[si]);
      e[S::kPagesAt] = static_cast<int32_t>(p.sparse_pages_at);
      e[S::kFirstLayer] = 0;  // the pattern already says which layers
      e[S::kSetPage] = p.quest_select ? static_cast<int32_t>(p.quest_page) : 1;
      ints.insert(ints.end(), e, e + S::kInts);
      ++la.sparse_count;
    }
    const cuda::AttentionBatchCapacity& n = la.plan.need;
    plan.capacity.q_rows = std::max(plan.capacity.q_rows, n.q_rows);
    plan.capacity.mma_items = std::max(plan.capacity.mma_items, n.mma_items);
    plan.capacity.sm90_items = std::max(plan.capacity.sm90_items, n.sm90_items);
    plan.capacity.sm90_ws_items = std::max(plan.capacity.sm90_ws_items, n.sm90_ws_items);
    plan.capacity.partial_rows = std::max(plan.capacity.partial_rows, n.partial_rows);
    plan.capacity.prefix_rows = std::max(plan.capacity.prefix_rows, n.prefix_rows);
    plan.capacity.prefix_score_floats =
        std::max(plan.capacity.prefix_score_floats, n.prefix_score_floats);
    plan.capacity.combine = plan.capacity.combine || n.combine;
    plan.capacity.ws_block_causal = plan.capacity.ws_block_causal || n.ws_block_causal;
    plan.layer_attentions.push_back(std::move(la));
  }
}

void CudaBackend::enqueue_sparse_keys(const ForwardPlan& plan, int64_t layer) {
  if (plan.attention_of_layer.empty()) return;
  const LayerAttention& la =
      plan.layer_attentions[static_cast<size_t>(plan.attention_of_layer[layer])];
  if (la.sparse_count == 0) return;
  const int shift = kv_page_shift();
  op_begin("sparse keys");
  cuda::sparse_gather_keys(lane_->ints.get(), lane_->ints.get() + la.sparse_table_at,
                           la.sparse_count, static_cast<int>(config_.num_kv_heads),
                           static_cast<int>(layer), shift, static_cast<int>(masked_slot()),
                           lane_->stream);
  op_end();
}

// The score sums' parameters of a selecting sequence in `layer`, its rows' lse at `lse`.
cuda::ScoreSumParams CudaBackend::score_sum_params(const ForwardPlan& plan,
                                                   const PlannedSequence& p, int64_t layer,
                                                   float* lse) {
  const ModelConfig& c = config_;
  const int hkv = static_cast<int>(c.num_kv_heads);
  const int64_t qd = c.q_dim();
  cuda::ScoreSumParams sp;
  // Beside the main stream the selection reads its copy of the layer's queries.
  const bool copied = select_side_stream_ && !p.select_from_scores;
  sp.q = copied ? sel_q_.get() + (layer * plan.select_q_rows + p.select_q_row) * qd
                : lane_->q.get() + p.row_offset * qd;
  sp.lse = lse;
  sp.k_cache = k_pool(layer);
  sp.prefix = prefix_keys(p);
  sp.rows_used = lane_->ints.get() + p.select_rows_at;
  sp.scores = sel_layer_scores_.get() + p.select_scores_at +
              (layer - p.sparse_first_layer) * hkv * p.sparse_prefix;
  sp.n_rows_used = static_cast<int>(p.select_rows.size());
  sp.n_prefix = static_cast<int>(p.sparse_prefix);
  sp.heads = static_cast<int>(c.num_heads);
  sp.kv_heads = hkv;
  sp.head_dim = static_cast<int>(c.head_dim);
  sp.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  sp.rows_per_warp = mage_score_rows_;
  return sp;
}

// The rows' prefix-only lse, into `lse` (sp.lse): merged from the exact pass's hand-over (§1.6
// step 1) or from a pass over K of the selection's own; SparseD's rows then fold the block's own
// keys in.
void CudaBackend::enqueue_selection_lse(const ForwardPlan& plan, const PlannedSequence& p,
                                        int64_t layer, const cuda::ScoreSumParams& sp, float* lse,
                                        float* workspace, cudaStream_t s) {
  const size_t si = static_cast<size_t>(&p - plan.seqs.data());
  const cuda::AttentionBatchPlan& ap = layer_attention(plan, layer);
  if (plan.attention_seqs[si].prefix_lse) {
    cuda::mage_prefix_lse_from_attention(sp, layer_prefix_ml(plan, layer) + ap.prefix_row[si] * 2,
                                         ap.splits[si], static_cast<int>(p.rows), lse, s);
  } else {
    cuda::mage_prefix_lse(sp, lse, workspace, s);
  }
  if (!p.sparse_full_softmax) return;
  cuda::BlockKeys b;
  b.slots = lane_->ints.get() + plan.slots_at + p.row_offset;
  b.positions = lane_->ints.get() + plan.positions_at + p.row_offset;
  b.n = static_cast<int>(p.rows);
  b.kind = plan.attention_seqs[si].kind;
  b.block_size = static_cast<int>(p.seq->rule.block_size);
  cuda::fold_block_keys_lse(sp, b, lse, s);
}

// A sequence whose exact pass handed its few selection rows' raw prefix scores over: its score
// sums on stream s (the score stream, or the main one), from the layer's slot. MAGE's rows'
// prefix-only (m, l) come from the same scores in chunks (sel_score_ml_), which the sums merge;
// SparseD's lse folds the block's keys in first, in the region after the lanes' (Quest's
// selection on the main stream uses only sel_ws_'s).
void CudaBackend::select_from_handed_scores(const ForwardPlan& plan, const PlannedSequence& p,
                                            int64_t layer, cudaStream_t s) {
  const size_t si = static_cast<size_t>(&p - plan.seqs.data());
  const cuda::AttentionBatchPlan& ap = layer_attention(plan, layer);
  const cuda::AttentionBatchSeq& a = plan.attention_seqs[si];
  float* lse = sel_lse_.get() + sel_quest_region_ * sel_lse_lane_;
  const cuda::ScoreSumParams sp = score_sum_params(plan, p, layer, lse);
  cuda::HandedScores hs;
  hs.raw = layer_prefix_scores(plan, layer) + ap.prefix_scores_at[si];
  hs.stride = cuda::batch_layout::prefix_score_stride(a.n_keys - a.n_q);
  // Profiled on the main stream only (DLLM_MAGE_SIDE_STREAM=0), per part.
  const bool profiled = !select_side_stream_;
  if (p.sparse_full_softmax) {
    if (profiled) op_begin("sparse selection: prefix lse");
    enqueue_selection_lse(plan, p, layer, sp, lse, nullptr, s);
    if (profiled) op_end();
  } else {
    if (profiled) op_begin("sparse selection: prefix lse");
    cuda::mage_prefix_ml_from_scores(sp, hs, sel_score_ml_.get(), s);
    if (profiled) op_end();
    hs.prefix_ml = sel_score_ml_.get();
    hs.splits = cuda::prefix_ml_chunks(sp.n_prefix);
    hs.ml_of_used_rows = true;
  }
  if (profiled) op_begin("sparse selection: score sums");
  cuda::mage_score_sum_from_scores(sp, hs, s);
  if (profiled) op_end();
}

int CudaBackend::score_slots(const ForwardPlan& plan) const {
  if (score_slots_ > 0) return score_slots_;
  const int64_t bytes = plan.capacity.prefix_score_floats * static_cast<int64_t>(sizeof(float));
  const int64_t fit = bytes > 0 ? kScoreSlotBytes / bytes : kMaxScoreSlots;
  return static_cast<int>(std::clamp<int64_t>(fit, kMinScoreSlots, kMaxScoreSlots));
}

float* CudaBackend::layer_prefix_scores(const ForwardPlan& plan, int64_t layer) {
  if (plan.capacity.prefix_score_floats == 0) return nullptr;
  return sel_prefix_scores_.get() + (layer % score_slots(plan)) * plan.capacity.prefix_score_floats;
}

// Layer `layer`'s attention writes the handed-over scores into the slot whose sums ran
// score_slots(plan) layers before: the main stream waits for them (long done by then). An event
// never recorded (no sums in that slot yet) is no wait.
void CudaBackend::wait_score_slot(const ForwardPlan& plan, int64_t layer) {
  if (!select_side_stream_ || plan.capacity.prefix_score_floats == 0 || layer < score_slots(plan) ||
      score_slot_events_.empty())
    return;
  DLLM_CUDA_CHECK(cudaStreamWaitEvent(
      lane_->stream, score_slot_events_[static_cast<size_t>(layer % score_slots(plan))]));
}

// The selection's side streams and events, made with the first selection: the lanes, the score
// stream, at the lowest priority (behind the forward: cuda_backend.cpp), an event per layer
// (main -> lanes), per lane (joins) and per score slot.
void CudaBackend::ensure_select_streams() {
  if (!select_streams_.empty()) return;
  const ModelConfig& c = config_;
  int least = 0, greatest = 0;
  DLLM_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  select_streams_.resize(kSelectLanes + 1);  // the lanes, then the score stream
  for (cudaStream_t& lane : select_streams_)
    DLLM_CUDA_CHECK(cudaStreamCreateWithPriority(&lane, cudaStreamNonBlocking, least));
  score_stream_ = select_streams_.back();
  select_events_.resize(static_cast<size_t>(c.num_layers + kSelectLanes + 1));
  score_slot_events_.resize(static_cast<size_t>(std::max(score_slots_, kMaxScoreSlots)));
  for (auto* events : {&select_events_, &score_slot_events_})
    for (cudaEvent_t& e : *events)
      DLLM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

// The layer's sums of the sequences that select from handed-over scores: on the score stream once
// the layer's attention is done (its event), then the slot's event for the attention that next
// writes the slot; on the main stream without the side streams.
void CudaBackend::enqueue_handed_score_sums(const ForwardPlan& plan, int64_t layer) {
  bool any = false;
  for (const PlannedSequence& p : plan.seqs) {
    if (!p.select_from_scores || p.select_lane < 0 || layer < p.sparse_first_layer) continue;
    const cudaStream_t s = selection_stream(p);
    if (select_side_stream_ && !any)
      DLLM_CUDA_CHECK(cudaStreamWaitEvent(s, select_events_[static_cast<size_t>(layer)]));
    any = true;
    select_from_handed_scores(plan, p, layer, s);
  }
  if (!any || !select_side_stream_) return;
  score_stream_used_ = true;
  DLLM_CUDA_CHECK(cudaEventRecord(
      score_slot_events_[static_cast<size_t>(layer % score_slots(plan))], score_stream_));
}

void CudaBackend::enqueue_sparse_selection(const ForwardPlan& plan, int64_t layer) {
  const ModelConfig& c = config_;
  const int64_t qd = c.q_dim();
  bool any = false;
  for (const PlannedSequence& p : plan.seqs)
    any = any || (p.select_lane >= 0 && layer >= p.sparse_first_layer);
  if (!any) return;
  if (select_side_stream_) {  // hand this layer's queries (or scores) over (§1.6)
    ensure_select_streams();
    for (const PlannedSequence& p : plan.seqs)
      if (p.select_lane >= 0 && layer >= p.sparse_first_layer && !p.select_from_scores)
        DLLM_CUDA_CHECK(cudaMemcpyAsync(
            sel_q_.get() + (layer * plan.select_q_rows + p.select_q_row) * qd,
            lane_->q.get() + p.row_offset * qd, static_cast<size_t>(p.rows * qd) * sizeof(bf16),
            cudaMemcpyDeviceToDevice, lane_->stream));
    DLLM_CUDA_CHECK(cudaEventRecord(select_events_[static_cast<size_t>(layer)], lane_->stream));
  }
  enqueue_handed_score_sums(plan, layer);
  for (const PlannedSequence& p : plan.seqs) {
    if (p.select_lane < 0 || layer < p.sparse_first_layer || p.select_from_scores) continue;
    const int lane = p.select_lane;
    const cudaStream_t s = selection_stream(p);
    if (select_side_stream_) {
      if (lane >= select_lanes_used_) select_lanes_used_ = lane + 1;
      DLLM_CUDA_CHECK(cudaStreamWaitEvent(s, select_events_[static_cast<size_t>(layer)]));
    }
    float* lse = sel_lse_.get() + lane * sel_lse_lane_;
    const cuda::ScoreSumParams sp = score_sum_params(plan, p, layer, lse);
    // Profiled on the main stream only (DLLM_MAGE_SIDE_STREAM=0), per part.
    if (!select_side_stream_) op_begin("sparse selection: prefix lse");
    enqueue_selection_lse(plan, p, layer, sp, lse, sel_ws_.get() + lane * sel_ws_lane_, s);
    if (!select_side_stream_) {
      op_end();
      op_begin("sparse selection: score sums");
    }
    cuda::mage_score_sum(sp, s);
    if (!select_side_stream_) op_end();
  }
  enqueue_layer_run_top_k(plan, layer);
}

// The top-k of every sparse layer and KV head of [from, to) of a selecting sequence in one call,
// on the stream its score sums ran on: per layer it was five launches a sequence (1.24 ms of a
// lone SDAR-8B 32K step's selection, 28.6 ms of 32 sequences', 2026-11-29).
void CudaBackend::enqueue_sparse_top_k(const PlannedSequence& p, int64_t from, int64_t to) {
  const int64_t hkv = config_.num_kv_heads;
  const int64_t first = std::max(from, p.sparse_first_layer);
  if (p.select_lane < 0 || first >= to) return;
  const cudaStream_t s = selection_stream(p);
  if (!select_side_stream_) op_begin("sparse selection: top-k");
  int32_t* sets = p.sparse_sets_out ? p.sparse_sets_out : sel_sets_.get() + p.scratch_sets_at;
  const int n = static_cast<int>(p.sparse_prefix);
  const int64_t rows_before = (first - p.sparse_first_layer) * hkv;
  cuda::sparse_top_k(sel_layer_scores_.get() + p.select_scores_at + rows_before * n, n,
                     static_cast<int>(p.sparse_k), static_cast<int>((to - first) * hkv),
                     sets + first * hkv * p.sparse_k,
                     sel_layer_topk_.get() + p.select_topk_at +
                         cuda::top_k_workspace_ints(n, static_cast<int>(rows_before)),
                     s);
  if (!select_side_stream_) op_end();
}

// A lone sequence selecting from handed-over scores has each run of top_k_layers_ layers' top-k
// done after the run's last score sums, beside the next layers. All of them after the outputs left
// ~0.25 ms of SDAR-8B's 128K step 1 (15.25 -> 14.97 ms with runs of 4 or 8 layers; 32K unchanged),
// but with 32 such sequences (FDv2-7B, 32K) runs cost their launches: step 1 116.9 -> 119.9 ms
// (2026-11-30). DLLM_MAGE_TOPK_LAYERS set: runs for any number (tests); 0: none.
bool CudaBackend::top_k_runs_for(const ForwardPlan& plan) const {
  if (top_k_layers_ <= 0) return false;
  const auto handed = std::count_if(plan.seqs.begin(), plan.seqs.end(),
                                    [](const PlannedSequence& p) { return p.select_from_scores; });
  return handed > 0 && (handed == 1 || top_k_runs_forced_);
}

void CudaBackend::enqueue_layer_run_top_k(const ForwardPlan& plan, int64_t layer) {
  if (!plan.top_k_in_runs || (layer + 1) % top_k_layers_ != 0) return;
  for (const PlannedSequence& p : plan.seqs)
    if (p.select_from_scores) enqueue_sparse_top_k(p, layer + 1 - top_k_layers_, layer + 1);
}

// After the outputs: the layers no run covered.
void CudaBackend::enqueue_remaining_top_k(const ForwardPlan& plan) {
  const int64_t layers = config_.num_layers;
  const int64_t runs_end = plan.top_k_in_runs ? layers / top_k_layers_ * top_k_layers_ : 0;
  for (const PlannedSequence& p : plan.seqs)
    enqueue_sparse_top_k(p, p.select_from_scores ? runs_end : 0, layers);
}

// Quest's selection of one layer, on the main stream after the layer's queries and before its
// attention: page scores from the page bounds, the top k / page pages per KV head (the key
// lists read them: enqueue_sparse_keys after this), and their slots for the results.
void CudaBackend::enqueue_quest_selection(const ForwardPlan& plan, int64_t layer) {
  const ModelConfig& c = config_;
  const int hkv = static_cast<int>(c.num_kv_heads);
  for (const PlannedSequence& p : plan.seqs) {
    if (!p.quest_select || layer < p.sparse_first_layer) continue;
    auto& st = static_cast<CudaMethodState&>(*p.seq->state);
    cuda::QuestParams qp;
    qp.q = lane_->q.get() + p.row_offset * c.q_dim();
    qp.k_cache = k_pool(layer);
    qp.prefix = prefix_keys(p);
    qp.signs = sel_ws_.get() + sel_quest_region_ * sel_ws_lane_;
    qp.scores = quest_scores_.get();
    qp.n_rows = static_cast<int>(p.rows);
    qp.n_prefix = static_cast<int>(p.sparse_prefix);
    qp.page_size = static_cast<int>(p.quest_page);
    qp.heads = static_cast<int>(c.num_heads);
    qp.kv_heads = hkv;
    qp.head_dim = static_cast<int>(c.head_dim);
    const int n_top = static_cast<int>(p.sparse_k / p.quest_page);
    op_begin("quest selection");
    cuda::quest_page_scores(qp, lane_->stream);
    cuda::sparse_top_k(qp.scores, cuda::quest_pages(qp.n_prefix, qp.page_size), n_top, hkv,
                       st.quest_pages.get() + layer * hkv * n_top, quest_topk_ws_.get(),
                       lane_->stream);
    op_end();
  }
}

// After the key lists (which read the pages) and before the attention: the pages' slots, the
// sets the results and the state report (one kernel between the lists and the attention, which
// reads its lists before its programmatic-launch wait).
void CudaBackend::expand_quest_sets(const ForwardPlan& plan, int64_t layer) {
  const int hkv = static_cast<int>(config_.num_kv_heads);
  for (const PlannedSequence& p : plan.seqs) {
    if (!p.quest_select || layer < p.sparse_first_layer) continue;
    auto& st = static_cast<CudaMethodState&>(*p.seq->state);
    const int n_top = static_cast<int>(p.sparse_k / p.quest_page);
    op_begin("quest selection");
    cuda::quest_expand_pages(st.quest_pages.get() + layer * hkv * n_top, hkv, n_top,
                             static_cast<int>(p.quest_page),
                             st.sparse_sets.get() + layer * hkv * p.sparse_k, lane_->stream);
    op_end();
  }
}

cudaStream_t CudaBackend::selection_stream(const PlannedSequence& p) {
  if (!select_side_stream_) return lane_->stream;
  return p.select_from_scores ? score_stream_ : select_streams_[static_cast<size_t>(p.select_lane)];
}

void CudaBackend::join_sparse_selection() {
  // Only the streams this forward forked: inside a graph capture, one outside it cannot join.
  const size_t joins = select_events_.size() - kSelectLanes - 1;
  auto join = [&](size_t stream) {
    cudaEvent_t done = select_events_[joins + stream];
    DLLM_CUDA_CHECK(cudaEventRecord(done, select_streams_[stream]));
    DLLM_CUDA_CHECK(cudaStreamWaitEvent(lane_->stream, done));
  };
  for (int lane = 0; lane < select_lanes_used_; ++lane) join(static_cast<size_t>(lane));
  if (score_stream_used_) join(kSelectLanes);
  select_lanes_used_ = 0;
  score_stream_used_ = false;
}

void CudaBackend::finish_sparse(const PlannedSequence& p, SequenceResult& r) {
  const ModelConfig& c = config_;
  const int64_t hkv = c.num_kv_heads;
  const SparseStep& sp = *p.seq->sparse;
  if (sp.select == SparseMethod::kNone) {
    if (sp.want_selection) r.sparse_selection.assign(static_cast<size_t>(c.num_layers * hkv), {});
    return;
  }
  // MAGE / SparseD select into sparse_sets_out (or scratch), Quest into its state's sets.
  const bool selected = p.sparse_select || p.quest_select;
  auto& st = static_cast<CudaMethodState&>(*p.seq->state);
  if (sp.keep_selection) {
    st.sparse_selected = true;
    st.sparse_dense = !selected;
    st.sparse_k = p.sparse_k;
    st.sparse_prefix = p.sparse_prefix;
    st.sparse_first_layer = p.sparse_first_layer;
  }
  if (!sp.want_selection) return;
  r.sparse_selection.assign(static_cast<size_t>(c.num_layers * hkv), SparseSet{});
  std::vector<int32_t> host;
  if (selected) {
    const int32_t* sets = p.quest_select      ? st.sparse_sets.get()
                          : p.sparse_sets_out ? p.sparse_sets_out
                                              : sel_sets_.get() + p.scratch_sets_at;
    host.resize(static_cast<size_t>(c.num_layers * hkv * p.sparse_k));
    DLLM_CUDA_CHECK(
        cudaMemcpy(host.data(), sets, host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
  }
  for (int64_t li = p.sparse_first_layer; li < c.num_layers; ++li)
    for (int64_t h = 0; h < hkv; ++h) {
      SparseSet& s = r.sparse_selection[static_cast<size_t>(li * hkv + h)];
      s.prefix = p.sparse_prefix;
      s.dense = !selected;
      if (!selected) continue;
      const auto first = host.begin() + (li * hkv + h) * p.sparse_k;
      // Quest's partial last page: its slots past the prefix were no keys (masked in the lists).
      std::copy_if(first, first + p.sparse_k, std::back_inserter(s.slots),
                   [&](int32_t slot) { return slot < p.sparse_prefix; });
    }
}

}  // namespace dllm::cuda_backend
