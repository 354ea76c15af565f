#include "engine/engine.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace dllm {

GenerationResult Engine::generate(const GenerationRequest& request, const TokenCallback& on_tokens,
                                  const TraceCallback& trace, const StopRule& stop_rule) {
  const auto t0 = std::chrono::steady_clock::now();
  auto decoder = make_decoder(model_.config(), request.params, request.prompt);
  const int64_t capacity = decoder->cache_capacity();
  auto cache = capacity > 0 ? backend_.create_cache(capacity) : nullptr;
  auto state = backend_.create_method_state();
  const size_t max_tokens = static_cast<size_t>(request.params.max_tokens);

  GenerationResult out;
  out.finish_reason = "length";
  size_t emitted = 0;
  bool done = false;
  while (!done) {
    std::vector<SequenceForward> fwds(1);
    fwds[0].cache = cache.get();
    fwds[0].state = state.get();
    if (!decoder->plan_step(fwds)) break;
    const auto results = backend_.forward(fwds);
    for (const auto& f : fwds) out.stats.query_rows += static_cast<int64_t>(f.tokens.size());
    decoder->observe_step(results);
    if (trace) trace(*decoder);

    // Apply stop ids, stop rule and max_tokens to the final tokens; stream what survives.
    const auto& fin = decoder->final_tokens();
    size_t keep = fin.size();
    for (size_t i = emitted; i < fin.size(); ++i) {
      if (std::find(request.stop_ids.begin(), request.stop_ids.end(), fin[i]) !=
          request.stop_ids.end()) {
        keep = i;
        out.finish_reason = "stop";
        done = true;
        break;
      }
    }
    if (keep >= max_tokens) {  // a stop token past max_tokens does not count
      out.finish_reason = "length";
      keep = max_tokens;
      done = true;
    }
    if (stop_rule) {
      const int64_t cut = stop_rule(std::span(fin.data(), keep));
      if (cut >= 0) {
        keep = std::min(keep, static_cast<size_t>(cut));
        out.finish_reason = "stop";
        done = true;
      }
    }
    if (keep > emitted) {
      if (on_tokens) on_tokens(std::span(fin.data() + emitted, keep - emitted));
      out.ids.insert(out.ids.end(), fin.begin() + static_cast<std::ptrdiff_t>(emitted),
                     fin.begin() + static_cast<std::ptrdiff_t>(keep));
      emitted = keep;
    }
  }
  out.stats.prompt_tokens = static_cast<int64_t>(request.prompt.size());
  out.stats.generated_tokens = static_cast<int64_t>(out.ids.size());
  out.stats.forwards = decoder->forwards();
  out.stats.decoder_metrics = decoder->metrics(out.stats.generated_tokens);
  if (const SpeculationStats* spec = decoder->speculation()) {
    out.stats.speculative = true;
    out.stats.speculation = *spec;
  }
  out.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace dllm
