// Autoregressive decoding (block size 1): the speed and quality baseline of every paper.
//   right-shifted families (Fast-dLLM v2): the last token's logit predicts the next token;
//     each forward appends one token.
//   position-aligned families (SDAR, WeDLM): a [MASK] at the next position predicts its token;
//     each forward appends the previous token and asks about one mask (a finished one-token
//     block committed in the same forward as the next block's only denoising step).
#pragma once

#include "decode/decoder.h"

namespace dllm {

class ArDecoder final : public Decoder {
 public:
  ArDecoder(const ModelConfig& config, const DecodeParams& params,
            const std::vector<int32_t>& prompt);

  bool plan(SequenceForward& fwd) override;
  void observe(const SequenceResult& result) override;
  std::vector<int32_t> canvas() const override { return final_; }
  int64_t cache_capacity() const override {
    return static_cast<int64_t>(prompt_.size()) + params_.max_tokens + 1;
  }

 private:
  DecodeParams params_;
  int32_t mask_id_;
  bool shifted_;
  std::vector<int32_t> prompt_;
};

}  // namespace dllm
