#include "support/fake_backend.h"

#include "core/error.h"

namespace dllm::test {

std::vector<SequenceResult> FakeBackend::forward(std::span<const SequenceForward> batch) {
  std::vector<SequenceResult> out;
  for (const auto& seq : batch) {
    calls.push_back(seq);
    SequenceResult r;
    if (seq.want_stats)
      for (size_t i = 0; i < seq.output_rows.size(); ++i) {
        const int32_t pos = seq.rng_positions.empty()
                                ? seq.positions[static_cast<size_t>(seq.output_rows[i])]
                                : seq.rng_positions[i];
        r.stats.push_back(script_(seq, pos));
      }
    if (seq.want_logits) {
      if (!logits_) fail("FakeBackend: this test scripted no logits");
      for (int32_t row : seq.output_rows) {
        const auto l = logits_(seq, row);
        r.logits.insert(r.logits.end(), l.begin(), l.end());
      }
    }
    if (seq.cache && seq.write == CacheWrite::kAppend) {
      const int64_t n =
          seq.append_count >= 0 ? seq.append_count : static_cast<int64_t>(seq.tokens.size());
      seq.cache->reserve(seq.cache->length() + static_cast<int64_t>(seq.tokens.size()));
      seq.cache->set_length(seq.cache->length() + n);
    }
    out.push_back(std::move(r));
  }
  return out;
}

TokenStats stats(int32_t token, float p) {
  TokenStats s;
  s.argmax = s.token = token;
  s.p_max = s.p_token = s.p_token_tempered = s.p_token_raw = p;
  return s;
}

}  // namespace dllm::test
