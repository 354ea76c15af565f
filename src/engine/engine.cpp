// The public Engine (include/dllm/engine.h): the model, its backend and KV pool, the text layer,
// and a background thread that steps the EngineCore while requests are queued or running.
#include "dllm/engine.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "attention/sparse_prefill_config.h"
#include "backend/backend.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "decode/decode_options.h"
#include "engine/engine_core.h"
#include "engine/request_params.h"
#include "engine/text_codec.h"
#include "engine/vision_request.h"
#include "io/json_file.h"
#include "vision/random_vision.h"

namespace dllm {

namespace {

// KV pool pages for the configuration: the explicit budget, or on CUDA what
// gpu_memory_utilization leaves after the weights and the largest forward's activations.
int64_t kv_pool_pages(const EngineConfig& cfg, Backend& backend) {
  int64_t bytes = cfg.kv_cache_bytes;
  const auto [free, total] = backend.device_memory();
  if (bytes < 0) fail("--kv-cache-memory must be positive (got ", bytes, ")");
  if (bytes == 0 && total > 0) {
    if (!(cfg.gpu_memory_utilization > 0 && cfg.gpu_memory_utilization <= 1))
      fail("--gpu-memory-utilization must be in (0, 1] (got ", cfg.gpu_memory_utilization, ")");
    const int64_t used = total - free;
    bytes = static_cast<int64_t>(cfg.gpu_memory_utilization * double(total)) - used -
            backend.activation_bytes(cfg.max_batch_rows);
    if (bytes <= 0)
      fail("no GPU memory is left for the KV cache (", used >> 20, " MiB in use of ", total >> 20,
           " MiB, --gpu-memory-utilization ", cfg.gpu_memory_utilization,
           "); raise it or lower --max-batch-rows");
  } else if (bytes == 0) {
    bytes = int64_t{1} << 30;
  }
  if (total > 0 && bytes > free)
    fail("--kv-cache-memory ", bytes >> 20, " MiB exceeds the GPU's free memory (", free >> 20,
         " MiB)");
  const int64_t page_bytes = backend.kv_bytes_per_slot() * cfg.kv_page_size;
  const int64_t pages = bytes / page_bytes;
  if (pages < 1)
    fail("--kv-cache-memory ", bytes, " bytes holds no KV page (", page_bytes, " bytes each)");
  return pages;
}

// Per request, on the engine thread: its text stream and who to tell.
struct RequestState {
  uint64_t id = 0;
  OutputCallback on_output;
  std::optional<TextStream> text;
  size_t kept = 0, shown = 0;  // tokens kept, bytes of text shown
  RequestResult result;

  // The text of the kept tokens not shown yet.
  std::string take_text(bool final) {
    const std::string_view v = text->visible(kept, final);
    std::string delta = v.size() > shown ? std::string(v.substr(shown)) : std::string();
    shown = std::max(shown, v.size());
    return delta;
  }
};

RequestStats to_public(const GenerationStats& s) {
  RequestStats r;
  r.prompt_tokens = s.prompt_tokens;
  r.generated_tokens = s.generated_tokens;
  r.forwards = s.forwards;
  r.query_rows = s.query_rows;
  r.prefix_cached_tokens = s.prefix_cached_tokens;
  r.preemptions = s.preemptions;
  r.queue_seconds = s.queue_seconds;
  r.first_token_seconds = s.first_token_seconds;
  r.seconds = s.seconds;
  for (const auto& m : s.decoder_metrics) r.metrics.push_back({m.name, m.value, m.is_count});
  r.speculative = s.speculative;
  r.verify_calls = s.speculation.verify_calls;
  r.accepted = s.speculation.accepted;
  r.rejected = s.speculation.rejected;
  return r;
}

// The sequence's sparse prefill: the engine's config and the prompt's modality map, its vision
// span from the first to the last image / video token.
std::shared_ptr<const SparsePrefillRequest> sparse_prefill_request(
    std::shared_ptr<const SparsePrefillConfig> config, const std::vector<Modality>& modality) {
  auto r = std::make_shared<SparsePrefillRequest>();
  r->config = std::move(config);
  for (Modality m : modality) r->modality.push_back(static_cast<uint8_t>(m));
  for (size_t i = 0; i < modality.size(); ++i)
    if (modality[i] != Modality::kText) {
      if (r->vision_end == 0) r->vision_begin = static_cast<int32_t>(i);
      r->vision_end = static_cast<int32_t>(i) + 1;
    }
  return r;
}

}  // namespace

struct Engine::Impl {
  EngineConfig config;
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<TextCodec> text;
  VisionSide vision;                                          // vision-language models only
  std::shared_ptr<const SparsePrefillConfig> sparse_prefill;  // --sparse-prefill
  // --sparse-prefill-dir: the configs requests choose by name (Request::sparse_prefill).
  std::map<std::string, std::shared_ptr<const SparsePrefillConfig>> named_sparse_prefill;
  std::unique_ptr<EngineCore> core;
  bool on_gpu = false;

  mutable std::mutex mu;
  std::condition_variable work_cv, done_cv;
  std::deque<SequenceRequest> inbox;
  std::vector<uint64_t> cancels;
  std::map<uint64_t, std::optional<RequestResult>> results;  // submitted, not yet waited for
  EngineStats snapshot;
  int64_t prompt_tokens = 0, prefix_cached_tokens = 0;  // engine thread only
  bool core_idle = true, stopping = false;
  uint64_t next_id = 0;
  std::thread thread;

  void loop();
  void publish_stats();
  SequenceRequest make_sequence(const Request& request, uint64_t id, OutputCallback cb);
  std::shared_ptr<const SparsePrefillConfig> request_sparse_prefill(const Request& r) const;
  void load_sparse_prefill(const EngineConfig& config);
};

std::shared_ptr<const SparsePrefillConfig> Engine::Impl::request_sparse_prefill(
    const Request& r) const {
  if (r.sparse_prefill.empty()) return sparse_prefill;
  if (r.sparse_prefill == "none") return nullptr;
  const auto it = named_sparse_prefill.find(r.sparse_prefill);
  if (it != named_sparse_prefill.end()) return it->second;
  std::string names = "none";
  for (const auto& [name, config] : named_sparse_prefill) names += ", " + name;
  fail("sparse_prefill: unknown config '", r.sparse_prefill, "' (accepted: ", names,
       named_sparse_prefill.empty() ? "; start the engine with --sparse-prefill-dir to add some"
                                    : "",
       ")");
}

// --sparse-prefill and --sparse-prefill-dir, each config checked against the model.
void Engine::Impl::load_sparse_prefill(const EngineConfig& config) {
  const auto load = [&](const std::filesystem::path& path) {
    auto sp = std::make_shared<SparsePrefillConfig>(load_sparse_prefill_config(path));
    check_config_fits(*sp, static_cast<int>(model->config().num_layers),
                      static_cast<int>(model->config().num_heads), path.string());
    return sp;
  };
  if (!config.sparse_prefill.empty()) sparse_prefill = load(config.sparse_prefill);
  if (config.sparse_prefill_dir.empty()) return;
  const std::filesystem::path dir = config.sparse_prefill_dir;
  if (!std::filesystem::is_directory(dir))
    fail("--sparse-prefill-dir: '", dir.string(), "' is not a directory");
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".json") {
      const std::string name = entry.path().stem().string();
      if (name == "none")
        fail("--sparse-prefill-dir: '", entry.path().string(),
             "' is named 'none', which means a dense prefill");
      named_sparse_prefill[name] = load(entry.path());
    }
}

SequenceRequest Engine::Impl::make_sequence(const Request& request, uint64_t id,
                                            OutputCallback on_output) {
  // A vision prompt is resolved as the prompt ids it expands to (context limits count them).
  std::optional<VisionPrompt> vp;
  Request expanded;
  if (has_vision_inputs(request)) {
    vp = prepare_vision_prompt(request, *text, vision);
    expanded = request;
    expanded.prompt_ids = vp->prompt.ids;
    expanded.prompt.clear();
    expanded.messages_json.clear();
  }
  ResolvedRequest rr = resolve_request(vp ? expanded : request, *model, *text, id, on_gpu);
  auto st = std::make_shared<RequestState>();
  st->id = id;
  st->on_output = std::move(on_output);
  st->text.emplace(text->tokenizer() ? &*text->tokenizer() : nullptr, request.stop);
  st->result.id = id;
  st->result.prompt_ids = rr.prompt;
  st->result.strategy = rr.params.strategy;

  SequenceRequest seq;
  seq.id = id;
  seq.prompt = std::move(rr.prompt);
  if (vp) {
    seq.input_embeddings = vp->embeddings;
    seq.modality = std::move(vp->prompt.modality);
  }
  if (auto config = request_sparse_prefill(request))
    seq.sparse_prefill = sparse_prefill_request(std::move(config), seq.modality);
  seq.params = std::move(rr.params);
  seq.stop_ids = std::move(rr.stop_ids);
  SequenceCallbacks& cb = seq.callbacks;
  cb.on_tokens = [st](std::span<const int32_t> ids) {
    st->kept += ids.size();
    RequestOutput o;
    o.id = st->id;
    o.token_ids.assign(ids.begin(), ids.end());
    o.text = st->take_text(false);
    if (st->on_output) st->on_output(o);
  };
  if (request.trace)
    cb.on_trace = [st](const Decoder& d, std::span<const SequenceResult>) {
      RequestOutput o;
      o.id = st->id;
      o.trace_forward = d.forwards();
      o.canvas = d.canvas();
      if (st->on_output) st->on_output(o);
    };
  cb.stop_rule = [st](std::span<const int32_t> fin) { return st->text->update(fin); };
  cb.on_finish = [this, st](GenerationResult&& g) {
    st->text->finish();
    RequestOutput o;
    o.id = st->id;
    o.text = st->take_text(true);
    o.finished = true;
    o.finish_reason = g.finish_reason;
    o.error = g.error;
    if (st->on_output) st->on_output(o);
    RequestResult& r = st->result;
    r.token_ids = std::move(g.ids);
    r.text = std::string(st->text->visible(st->kept, true));
    r.finish_reason = g.finish_reason;
    r.error = g.error;
    r.stats = to_public(g.stats);
    prompt_tokens += g.stats.prompt_tokens;
    prefix_cached_tokens += g.stats.prefix_cached_tokens;
    publish_stats();  // a waiter woken below sees statistics that count this request
    std::lock_guard lk(mu);
    if (auto it = results.find(st->id); it != results.end()) it->second = std::move(r);
    done_cv.notify_all();
  };
  return seq;
}

void Engine::Impl::publish_stats() {
  const EngineCounters& c = core->counters();
  EngineStats s;
  s.waiting = static_cast<int64_t>(core->waiting());
  s.running = static_cast<int64_t>(core->running());
  s.finished = c.finished;
  s.cancelled = c.cancelled;
  s.errors = c.errors;
  s.steps = c.steps;
  s.rows = c.rows;
  s.sequences_per_step = c.steps ? double(c.sequences_in_steps) / double(c.steps) : 0.0;
  s.committed_tokens = c.committed_tokens;
  s.preemptions = c.preemptions;
  s.prompt_tokens = prompt_tokens;
  s.prefix_cached_tokens = prefix_cached_tokens;
  const KvPool& pool = core->kv_pool();
  s.kv_pages = pool.num_pages();
  s.kv_pages_used = pool.used_pages();
  s.kv_page_size = pool.page_size();
  s.forward_seconds = c.forward_seconds;
  s.schedule_seconds = c.schedule_seconds;
  std::lock_guard lk(mu);
  snapshot = s;
  core_idle = core->idle();
}

void Engine::Impl::loop() {
  for (;;) {
    std::deque<SequenceRequest> added;
    std::vector<uint64_t> cancelled;
    {
      std::unique_lock lk(mu);
      work_cv.wait(lk,
                   [&] { return stopping || !inbox.empty() || !cancels.empty() || !core_idle; });
      if (stopping) break;
      added.swap(inbox);
      cancelled.swap(cancels);
      core_idle = false;
    }
    for (auto& r : added) core->add(std::move(r));
    for (uint64_t id : cancelled) core->cancel(id);
    const bool ran = core->step();
    publish_stats();
    // Nothing could run although requests wait: let the pool drain before trying again.
    if (!ran && !core->idle()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Shutdown: whatever is left ends "cancelled".
  std::vector<uint64_t> ids;
  {
    std::lock_guard lk(mu);
    for (auto& r : inbox) core->add(std::move(r));
    inbox.clear();
    for (const auto& [id, r] : results)
      if (!r) ids.push_back(id);
  }
  for (uint64_t id : ids) core->cancel(id);
}

Engine::Engine(const EngineConfig& config) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.config = config;
  if (config.model.empty()) fail("no model directory given");
  if (config.max_running <= 0)
    fail("--max-running must be positive (got ", config.max_running, ")");
  if (config.max_batch_rows <= 0)
    fail("--max-batch-rows must be positive (got ", config.max_batch_rows, ")");
  const int32_t ps = config.kv_page_size;
  if (ps < 8 || ps > 256 || (ps & (ps - 1)) != 0)
    fail("--kv-page-size must be a power of two from 8 to 256 (got ", ps, ")");
  if (config.threads != 0) set_num_threads(config.threads, "--threads");
  // Random weights of a vision-language shape draw the vision tower's too.
  std::unique_ptr<VisionModel> random_vision;
  if (config.random_weights.empty()) {
    m.model = Model::load(config.model);
  } else {
    auto random = make_random_vision_language_model(read_json_file(config.random_weights),
                                                    /*seed=*/1234);
    m.model = std::move(random.model);
    random_vision = std::move(random.vision);
  }
  if (config.tensor_parallel != 1 &&
      (!config.sparse_prefill.empty() || !config.sparse_prefill_dir.empty()))
    fail(
        "--sparse-prefill does not combine with --tensor-parallel (its patterns are per query "
        "head of the whole model)");
  m.backend = make_backend(*m.model, config.device, config.tensor_parallel, config.expert_parallel);
  m.on_gpu = m.backend->name().rfind("cuda", 0) == 0;
  m.text = std::make_unique<TextCodec>(*m.model, config.model);
  m.vision = random_vision ? make_vision_side(std::move(random_vision), m.on_gpu)
                           : load_vision_side(*m.model, m.on_gpu);
  m.load_sparse_prefill(config);
  m.backend->create_kv_pool(kv_pool_pages(config, *m.backend), config.kv_page_size);
  SchedulerConfig sc;
  sc.max_running = config.max_running;
  sc.max_batch_rows = config.max_batch_rows;
  sc.prefix_sharing = config.prefix_sharing && !m.sparse_prefill && m.named_sparse_prefill.empty();
  m.core = std::make_unique<EngineCore>(*m.model, *m.backend, sc);
  m.publish_stats();
  m.thread = std::thread([&m] { m.loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard lk(impl_->mu);
    impl_->stopping = true;
  }
  impl_->work_cv.notify_all();
  impl_->thread.join();
}

uint64_t Engine::submit(const Request& request, OutputCallback on_output) {
  Impl& m = *impl_;
  uint64_t id;
  {
    std::lock_guard lk(m.mu);
    id = m.next_id++;
  }
  // Tokenizing, rendering and validating run on the caller's thread.
  SequenceRequest seq = m.make_sequence(request, id, std::move(on_output));
  {
    std::lock_guard lk(m.mu);
    m.results.emplace(id, std::nullopt);
    m.inbox.push_back(std::move(seq));
  }
  m.work_cv.notify_one();
  return id;
}

bool Engine::cancel(uint64_t id) {
  Impl& m = *impl_;
  {
    std::lock_guard lk(m.mu);
    const auto it = m.results.find(id);
    if (it == m.results.end() || it->second) return false;
    m.cancels.push_back(id);
  }
  m.work_cv.notify_one();
  return true;
}

RequestResult Engine::wait(uint64_t id) {
  Impl& m = *impl_;
  std::unique_lock lk(m.mu);
  if (!m.results.count(id)) fail("request ", id, " is unknown or was already waited for");
  m.done_cv.wait(lk, [&] { return m.results.at(id).has_value(); });
  RequestResult r = std::move(*m.results.at(id));
  m.results.erase(id);
  return r;
}

RequestResult Engine::generate(const Request& request, OutputCallback on_output) {
  return wait(submit(request, std::move(on_output)));
}

EngineStats Engine::stats() const {
  std::lock_guard lk(impl_->mu);
  return impl_->snapshot;
}

ModelInfo Engine::model_info() const {
  const Impl& m = *impl_;
  const ModelConfig& c = m.model->config();
  ModelInfo i;
  i.dir = m.config.random_weights.empty() ? m.model->dir().string() : m.config.model;
  i.family = c.family;
  i.model_type = c.model_type;
  i.device = m.backend->name();
  i.vocab_size = c.vocab_size;
  i.mask_token_id = c.mask_token_id;
  i.context_length = c.max_position_embeddings;
  i.parameters = m.model->parameter_count();
  i.has_tokenizer = m.text->tokenizer().has_value();
  i.has_chat_template = m.text->chat_template().has_value();
  i.has_vision = m.vision.model != nullptr;
  try {
    i.default_strategy = resolve_decode_params(c, DecodeParams{}, 1).strategy;
  } catch (const Error&) {
  }
  return i;
}

std::vector<int32_t> Engine::tokenize(const std::string& text) const {
  return impl_->text->require_tokenizer().encode(text);
}

std::vector<int32_t> Engine::prompt_token_ids(const Request& request) const {
  if (has_vision_inputs(request))
    return expand_vision_prompt(request, *impl_->text, impl_->vision).ids;
  return impl_->text->prompt_ids(request);
}

std::string Engine::detokenize(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  return impl_->text->require_tokenizer().decode(ids, skip_special_tokens);
}

std::string Engine::apply_chat_template(const std::string& messages_json,
                                        bool add_generation_prompt,
                                        const std::string& kwargs_json) const {
  return impl_->text->render_chat(messages_json, add_generation_prompt, kwargs_json);
}

std::vector<std::string> Engine::sparse_prefill_names() const {
  std::vector<std::string> names = {"none"};
  for (const auto& [name, config] : impl_->named_sparse_prefill) names.push_back(name);
  return names;
}

std::vector<std::string> Engine::option_names() {
  std::vector<std::string> names;
  for (const DecodeOption& o : decode_options()) names.push_back(o.name);
  return names;
}

}  // namespace dllm
