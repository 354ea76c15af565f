#include "support/engine_runs.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>

#include "support/test_paths.h"

namespace dllm::test {

namespace {

SequenceRequest to_request(const EngineCase& c, uint64_t id, EngineOutcome& out) {
  SequenceRequest r;
  r.id = id;
  r.prompt = c.prompt;
  r.params = c.params;
  r.callbacks.on_finish = [&out](GenerationResult&& g) {
    out.ids = g.ids;
    out.finish_reason = g.finish_reason;
    out.error = g.error;
    out.preemptions = g.stats.preemptions;
    out.prefix_cached_tokens = g.stats.prefix_cached_tokens;
    if (g.stats.prefix_cached_tokens > 0) mark_reused_prefix(out.trace);
    ++out.finishes;
  };
  r.callbacks.on_trace = [&out](const Decoder& d, std::span<const SequenceResult> results) {
    record_forward(out.trace, d, results);
  };
  r.trace_routing = true;
  return r;
}

}  // namespace

std::vector<EngineCase> mixed_cases(const Model& model, const std::vector<std::string>& strategies,
                                    int n, int spread) {
  std::vector<std::vector<int32_t>> prompts;
  const auto path = fixtures_dir() / "heldout" / "add3.jsonl";
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    prompts.push_back(nlohmann::json::parse(line)["prompt_ids"].get<std::vector<int32_t>>());
  if (prompts.empty()) throw std::runtime_error("no prompts in " + path.string());
  const ModelConfig& c = model.config();
  std::vector<EngineCase> cases;
  for (int i = 0; i < n; ++i) {
    EngineCase e;
    e.prompt = prompts[static_cast<size_t>(i) % prompts.size()];
    // Lengthen some prompts so that prefills of different sizes share forwards.
    for (int k = 0; k < (i % 4) * 5; ++k)
      e.prompt.insert(e.prompt.begin(), e.prompt[static_cast<size_t>(k) % e.prompt.size()]);
    DecodeParams p;
    p.strategy = strategies[static_cast<size_t>(i) % strategies.size()];
    // "block+mage": block diffusion with sparse attention, k small enough to select.
    if (const size_t plus = p.strategy.find('+'); plus != std::string::npos) {
      p.sparse.method = parse_sparse_method(p.strategy.substr(plus + 1));
      p.sparse.k = 8;
      p.sparse.page_size = 4;
      p.strategy.resize(plus);
    }
    p.max_tokens = 6 + (i * 7) % 15;
    if (p.strategy == "full" || p.strategy == "d2cache" || p.strategy == "fastdllm" ||
        p.strategy == "dllmcache")
      p.max_tokens = 16;  // LLaDA-style strategies decode whole blocks of the canvas
    if (i % 3 == 2 && p.strategy != "d2cache" && p.strategy != "fastdllm" &&
        p.strategy != "dllmcache") {
      p.sampler.temperature = 0.8f;
      p.seed = 1000 + static_cast<uint64_t>(i);
    }
    p.sampler.top_p = -1.0f;
    p.sequence_id = static_cast<uint32_t>(i);
    e.params = resolve_decode_params(c, p, static_cast<int64_t>(e.prompt.size()));
    e.arrival_step = spread > 0 ? (i * 5) % spread : 0;
    cases.push_back(std::move(e));
  }
  return cases;
}

std::vector<EngineCase> llada2_cases(const Model& model) {
  std::mt19937 rng(5);
  std::vector<EngineCase> cases;
  for (int i = 0; i < 14; ++i) {
    EngineCase e;
    for (int k = 0; k < 3 + (i * 7) % 36; ++k) e.prompt.push_back(int32_t(rng() % 290));
    DecodeParams p;
    p.strategy = i % 2 ? "edit" : "block";
    p.max_tokens = 8 + (i * 5) % 30;
    if (i % 4 < 2) p.block_length = 8;
    if (i % 3 == 2) {
      p.sampler.temperature = 0.8f;
      p.seed = 100 + uint64_t(i);
    }
    if (i % 5 == 3) {
      p.hf_sampling_quirk = true;
      p.seed = 7 + uint64_t(i);
    }
    if (i % 4 == 3) p.edit_mode = "q";
    p.sampler.top_p = -1.0f;
    p.sequence_id = uint32_t(i);
    e.params = resolve_decode_params(model.config(), p, int64_t(e.prompt.size()));
    e.arrival_step = (i * 3) % 7;
    cases.push_back(std::move(e));
  }
  // S2D2 (draft, 2L verify with a custom mask, commit) and MAGE on block diffusion and token
  // editing (select at a block's first forward, attend through the sets after) among them.
  for (int i = 0; i < 8; ++i) {
    EngineCase e;
    for (int k = 0; k < 17 + (i * 11) % 40; ++k) e.prompt.push_back(int32_t(rng() % 290));
    DecodeParams p;
    p.strategy = i % 2 ? "s2d2" : i % 4 == 2 ? "edit" : "block";
    if (p.strategy != "s2d2") {
      p.sparse.method = SparseMethod::kMage;
      p.sparse.k = 8 + i;
      p.sparse.exact_layers = i % 4 == 0 ? 0 : 1;
    }
    p.max_tokens = 10 + (i * 7) % 25;
    if (i % 4 < 2) p.block_length = 8;
    if (i % 3 == 1) {
      p.sampler.temperature = 0.9f;
      p.seed = 300 + uint64_t(i);
    }
    if (i == 5) p.hf_sampling_quirk = true;
    p.sampler.top_p = -1.0f;
    p.sequence_id = uint32_t(20 + i);
    e.params = resolve_decode_params(model.config(), p, int64_t(e.prompt.size()));
    e.arrival_step = (i * 5) % 9;
    cases.push_back(std::move(e));
  }
  // S2D2 over LLaDA2.1 token editing (draft, 2L verify, post-mask editing forwards, commit).
  for (int i = 0; i < 6; ++i) {
    EngineCase e;
    for (int k = 0; k < 3 + (i * 13) % 40; ++k) e.prompt.push_back(int32_t(rng() % 290));
    DecodeParams p;
    p.strategy = "s2d2";
    p.edit_mode = i % 2 ? "q" : "s";
    if (i % 3 == 0) p.editing_threshold = 0.05f;
    p.max_tokens = 9 + (i * 7) % 25;
    if (i % 4 < 2) p.block_length = 8;
    if (i % 3 == 1) {
      p.sampler.temperature = 0.9f;
      p.seed = 500 + uint64_t(i);
    }
    if (i == 4) p.hf_sampling_quirk = true;
    if (i == 5) {
      p.s2d2.policy = "score";
      p.s2d2.estimator = "soft-entropy";
      p.s2d2.score_type = "static";
      p.s2d2.score_cost = 0.6f;
    }
    p.sampler.top_p = -1.0f;
    p.sequence_id = uint32_t(40 + i);
    e.params = resolve_decode_params(model.config(), p, int64_t(e.prompt.size()));
    e.arrival_step = (i * 4) % 7;
    cases.push_back(std::move(e));
  }
  return cases;
}

std::vector<EngineOutcome> run_alone(const Model& model, Backend& backend,
                                     const std::vector<EngineCase>& cases) {
  std::vector<EngineOutcome> out(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    EngineCore core(model, backend);
    core.add(to_request(cases[i], i, out[i]));
    while (!core.idle()) core.step();
  }
  return out;
}

std::vector<EngineOutcome> run_together(EngineCore& core, const std::vector<EngineCase>& cases) {
  std::vector<EngineOutcome> out(cases.size());
  size_t added = 0;
  std::vector<size_t> order(cases.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return cases[a].arrival_step < cases[b].arrival_step;
  });
  for (int step = 0; added < cases.size() || !core.idle(); ++step) {
    while (added < cases.size() && cases[order[added]].arrival_step <= step) {
      const size_t i = order[added++];
      core.add(to_request(cases[i], i, out[i]));
    }
    core.step();
  }
  return out;
}

}  // namespace dllm::test
