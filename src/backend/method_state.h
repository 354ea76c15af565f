// MethodState: what a decoding method keeps on the backend between one sequence's forwards —
// S2D2's kept draft rows (SequenceForward::retain_logits / verify), dLLM-Cache's per-layer
// attention and FFN outputs. Each backend subclasses it with its own storage; the sequence owns
// it (Backend::create_method_state) and names it in every forward (SequenceForward::state), so
// the KV cache holds K/V only and a finished or preempted sequence frees it with itself.
#pragma once

namespace dllm {

class MethodState {
 public:
  virtual ~MethodState() = default;
};

}  // namespace dllm
