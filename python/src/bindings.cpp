// dllm._dllm: the Python extension module, bindings of the public C++ API (include/dllm/ only).
// The user-facing API (LLM, SamplingParams, outputs) is the pure-Python layer in python/dllm/;
// this module gives it the Engine, the Request and result structs, and the error type.
//
// Threads: the engine's callbacks run on its own thread and never touch Python; they push each
// RequestOutput into the request's OutputQueue, which Python drains with the GIL released. So
// Python threads may submit and wait concurrently (their requests share the engine's forwards),
// and nothing in the engine ever waits for the GIL. Every call that can block (loading,
// waiting, closing) releases the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "dllm/engine.h"
#include "dllm/error.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// The outputs of one request, from the engine thread to Python.
class OutputQueue {
 public:
  void push(const dllm::RequestOutput& output) {
    {
      std::lock_guard lock(mutex_);
      outputs_.push_back(output);
    }
    ready_.notify_one();
  }

  // The next output, waiting at most `seconds`; nullopt when none came in time.
  std::optional<dllm::RequestOutput> pop(double seconds) {
    std::unique_lock lock(mutex_);
    if (!ready_.wait_for(lock, std::chrono::duration<double>(seconds),
                         [&] { return !outputs_.empty(); }))
      return std::nullopt;
    dllm::RequestOutput output = std::move(outputs_.front());
    outputs_.pop_front();
    return output;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<dllm::RequestOutput> outputs_;
};

// A submitted request: its engine id and its outputs.
struct Submission {
  uint64_t id = 0;
  std::shared_ptr<OutputQueue> outputs;

  // The next output (newly final tokens, or the end). Waits with the GIL released, in slices of
  // 50 ms so that Ctrl-C (a pending signal) interrupts the wait with KeyboardInterrupt.
  dllm::RequestOutput next_output() {
    for (;;) {
      std::optional<dllm::RequestOutput> output;
      {
        nb::gil_scoped_release released;
        output = outputs->pop(0.05);
      }
      if (output) return std::move(*output);
      if (PyErr_CheckSignals() != 0) throw nb::python_error();
    }
  }
};

// dllm::Engine with an explicit close(): Python's garbage collector may run the destructor at any
// time and on any thread, so LLM.close() / `with` end the engine deterministically instead. Each
// call holds its own reference while it runs with the GIL released, so a close() from another
// thread never frees the engine under a call in flight: the last reference destroys it.
class PyEngine {
 public:
  explicit PyEngine(const dllm::EngineConfig& config) {
    nb::gil_scoped_release released;  // loading reads the checkpoint, sizes the pool
    engine_ = std::make_shared<dllm::Engine>(config);
  }

  Submission submit(const dllm::Request& request) {
    Submission s;
    s.outputs = std::make_shared<OutputQueue>();
    std::shared_ptr<OutputQueue> queue = s.outputs;  // kept alive by the engine's callback
    std::shared_ptr<dllm::Engine> e = engine();
    nb::gil_scoped_release released;
    s.id = e->submit(request, [queue](const dllm::RequestOutput& o) { queue->push(o); });
    return s;
  }

  bool cancel(uint64_t id) { return engine()->cancel(id); }

  dllm::RequestResult wait(uint64_t id) {
    std::shared_ptr<dllm::Engine> e = engine();
    nb::gil_scoped_release released;
    return e->wait(id);
  }

  void close() {
    std::shared_ptr<dllm::Engine> e;
    {
      std::lock_guard lock(mutex_);
      e = std::move(engine_);
    }
    nb::gil_scoped_release released;
    e.reset();  // unless a call still runs: unfinished requests end "cancelled", thread joined
  }

  bool closed() const {
    std::lock_guard lock(mutex_);
    return engine_ == nullptr;
  }

  std::shared_ptr<dllm::Engine> engine() const {
    std::lock_guard lock(mutex_);
    if (!engine_) throw dllm::Error("the engine is closed (LLM.close() was called)");
    return engine_;
  }

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<dllm::Engine> engine_;
};

void bind_config(nb::module_& m) {
  nb::class_<dllm::EngineConfig>(m, "EngineConfig", "dllm::EngineConfig (include/dllm/engine.h).")
      .def(nb::init<>())
      .def_rw("model", &dllm::EngineConfig::model)
      .def_rw("device", &dllm::EngineConfig::device)
      .def_rw("kv_cache_bytes", &dllm::EngineConfig::kv_cache_bytes)
      .def_rw("gpu_memory_utilization", &dllm::EngineConfig::gpu_memory_utilization)
      .def_rw("kv_page_size", &dllm::EngineConfig::kv_page_size)
      .def_rw("max_running", &dllm::EngineConfig::max_running)
      .def_rw("max_batch_rows", &dllm::EngineConfig::max_batch_rows)
      .def_rw("prefix_sharing", &dllm::EngineConfig::prefix_sharing)
      .def_rw("threads", &dllm::EngineConfig::threads)
      .def_rw("random_weights", &dllm::EngineConfig::random_weights);
}

void bind_request(nb::module_& m) {
  nb::class_<dllm::Request>(m, "Request", "dllm::Request (include/dllm/engine.h).")
      .def(nb::init<>())
      .def_rw("prompt_ids", &dllm::Request::prompt_ids)
      .def_rw("prompt", &dllm::Request::prompt)
      .def_rw("messages_json", &dllm::Request::messages_json)
      .def_rw("chat_template_kwargs_json", &dllm::Request::chat_template_kwargs_json)
      .def_rw("strategy", &dllm::Request::strategy)
      .def_rw("max_tokens", &dllm::Request::max_tokens)
      .def_rw("temperature", &dllm::Request::temperature)
      .def_rw("top_k", &dllm::Request::top_k)
      .def_rw("top_p", &dllm::Request::top_p)
      .def_rw("seed", &dllm::Request::seed)
      .def_rw("stop", &dllm::Request::stop)
      .def_rw("stop_token_ids", &dllm::Request::stop_token_ids)
      .def_rw("ignore_eos", &dllm::Request::ignore_eos)
      .def_rw("options", &dllm::Request::options)
      .def_rw("trace", &dllm::Request::trace)
      .def_rw("image_files", &dllm::Request::image_files)
      .def_rw("video_files", &dllm::Request::video_files)
      .def_rw("video_frames", &dllm::Request::video_frames)
      // Encoded media travel as Python bytes (a std::string member would be read as UTF-8 text).
      .def(
          "add_image_bytes",
          [](dllm::Request& r, const nb::bytes& data, const std::string& name) {
            r.image_bytes.push_back({std::string(data.c_str(), data.size()), name});
          },
          "data"_a, "name"_a = "",
          "Appends an encoded image (JPEG / PNG / WebP bytes) for the next <|image_pad|>.")
      .def(
          "add_video_bytes",
          [](dllm::Request& r, const nb::bytes& data, const std::string& name) {
            r.video_bytes.push_back({std::string(data.c_str(), data.size()), name});
          },
          "data"_a, "name"_a = "",
          "Appends an encoded video (any container FFmpeg reads) for the next <|video_pad|>.");
}

void bind_results(nb::module_& m) {
  nb::class_<dllm::Metric>(m, "Metric")
      .def_ro("name", &dllm::Metric::name)
      .def_ro("value", &dllm::Metric::value)
      .def_ro("is_count", &dllm::Metric::is_count);
  nb::class_<dllm::RequestStats>(m, "RequestStats")
      .def_ro("prompt_tokens", &dllm::RequestStats::prompt_tokens)
      .def_ro("generated_tokens", &dllm::RequestStats::generated_tokens)
      .def_ro("forwards", &dllm::RequestStats::forwards)
      .def_ro("query_rows", &dllm::RequestStats::query_rows)
      .def_ro("prefix_cached_tokens", &dllm::RequestStats::prefix_cached_tokens)
      .def_ro("preemptions", &dllm::RequestStats::preemptions)
      .def_ro("queue_seconds", &dllm::RequestStats::queue_seconds)
      .def_ro("first_token_seconds", &dllm::RequestStats::first_token_seconds)
      .def_ro("seconds", &dllm::RequestStats::seconds)
      .def_ro("metrics", &dllm::RequestStats::metrics)
      .def_ro("speculative", &dllm::RequestStats::speculative)
      .def_ro("verify_calls", &dllm::RequestStats::verify_calls)
      .def_ro("accepted", &dllm::RequestStats::accepted)
      .def_ro("rejected", &dllm::RequestStats::rejected);
  nb::class_<dllm::RequestOutput>(m, "RequestOutput")
      .def_ro("id", &dllm::RequestOutput::id)
      .def_ro("token_ids", &dllm::RequestOutput::token_ids)
      .def_ro("text", &dllm::RequestOutput::text)
      .def_ro("trace_forward", &dllm::RequestOutput::trace_forward)
      .def_ro("canvas", &dllm::RequestOutput::canvas)
      .def_ro("finished", &dllm::RequestOutput::finished)
      .def_ro("finish_reason", &dllm::RequestOutput::finish_reason)
      .def_ro("error", &dllm::RequestOutput::error);
  nb::class_<dllm::RequestResult>(m, "RequestResult")
      .def_ro("id", &dllm::RequestResult::id)
      .def_ro("prompt_ids", &dllm::RequestResult::prompt_ids)
      .def_ro("token_ids", &dllm::RequestResult::token_ids)
      .def_ro("text", &dllm::RequestResult::text)
      .def_ro("finish_reason", &dllm::RequestResult::finish_reason)
      .def_ro("error", &dllm::RequestResult::error)
      .def_ro("strategy", &dllm::RequestResult::strategy)
      .def_ro("stats", &dllm::RequestResult::stats);
  nb::class_<dllm::EngineStats>(m, "EngineStats")
      .def_ro("waiting", &dllm::EngineStats::waiting)
      .def_ro("running", &dllm::EngineStats::running)
      .def_ro("finished", &dllm::EngineStats::finished)
      .def_ro("cancelled", &dllm::EngineStats::cancelled)
      .def_ro("errors", &dllm::EngineStats::errors)
      .def_ro("steps", &dllm::EngineStats::steps)
      .def_ro("rows", &dllm::EngineStats::rows)
      .def_ro("sequences_per_step", &dllm::EngineStats::sequences_per_step)
      .def_ro("committed_tokens", &dllm::EngineStats::committed_tokens)
      .def_ro("preemptions", &dllm::EngineStats::preemptions)
      .def_ro("prompt_tokens", &dllm::EngineStats::prompt_tokens)
      .def_ro("prefix_cached_tokens", &dllm::EngineStats::prefix_cached_tokens)
      .def_ro("kv_pages", &dllm::EngineStats::kv_pages)
      .def_ro("kv_pages_used", &dllm::EngineStats::kv_pages_used)
      .def_ro("kv_page_size", &dllm::EngineStats::kv_page_size)
      .def_ro("forward_seconds", &dllm::EngineStats::forward_seconds)
      .def_ro("schedule_seconds", &dllm::EngineStats::schedule_seconds);
  nb::class_<dllm::ModelInfo>(m, "ModelInfo")
      .def_ro("dir", &dllm::ModelInfo::dir)
      .def_ro("family", &dllm::ModelInfo::family)
      .def_ro("model_type", &dllm::ModelInfo::model_type)
      .def_ro("default_strategy", &dllm::ModelInfo::default_strategy)
      .def_ro("device", &dllm::ModelInfo::device)
      .def_ro("vocab_size", &dllm::ModelInfo::vocab_size)
      .def_ro("context_length", &dllm::ModelInfo::context_length)
      .def_ro("parameters", &dllm::ModelInfo::parameters)
      .def_ro("mask_token_id", &dllm::ModelInfo::mask_token_id)
      .def_ro("has_tokenizer", &dllm::ModelInfo::has_tokenizer)
      .def_ro("has_chat_template", &dllm::ModelInfo::has_chat_template)
      .def_ro("has_vision", &dllm::ModelInfo::has_vision);
}

void bind_engine(nb::module_& m) {
  nb::class_<Submission>(m, "Submission", "A submitted request: its id and its stream of outputs.")
      .def_ro("id", &Submission::id)
      .def("next_output", &Submission::next_output,
           "The next output of the request (newly final tokens, or its end); blocks with the GIL "
           "released.");
  nb::class_<PyEngine>(m, "Engine", "dllm::Engine (include/dllm/engine.h).")
      .def(nb::init<const dllm::EngineConfig&>(), "config"_a)
      .def("submit", &PyEngine::submit, "request"_a)
      .def("cancel", &PyEngine::cancel, "id"_a)
      .def("wait", &PyEngine::wait, "id"_a)
      .def("close", &PyEngine::close)
      .def_prop_ro("closed", &PyEngine::closed)
      .def("stats", [](const PyEngine& e) { return e.engine()->stats(); })
      .def("model_info", [](const PyEngine& e) { return e.engine()->model_info(); })
      .def("tokenize",
           [](const PyEngine& e, const std::string& text) { return e.engine()->tokenize(text); },
           "text"_a)
      .def("detokenize",
           [](const PyEngine& e, const std::vector<int32_t>& ids, bool skip_special_tokens) {
             return e.engine()->detokenize(ids, skip_special_tokens);
           },
           "ids"_a, "skip_special_tokens"_a = true)
      .def("apply_chat_template",
           [](const PyEngine& e, const std::string& messages_json, bool add_generation_prompt,
              const std::string& kwargs_json) {
             return e.engine()->apply_chat_template(messages_json, add_generation_prompt,
                                                   kwargs_json);
           },
           "messages_json"_a, "add_generation_prompt"_a = true, "kwargs_json"_a = "")
      .def("prompt_token_ids",
           [](const PyEngine& e, const dllm::Request& request) {
             std::shared_ptr<dllm::Engine> engine = e.engine();
             nb::gil_scoped_release released;  // decodes images and videos
             return engine->prompt_token_ids(request);
           },
           "request"_a)
      .def_static("option_names", &dllm::Engine::option_names);
}

}  // namespace

NB_MODULE(_dllm, m) {
  m.doc() = "Bindings of dllm's public C++ API (include/dllm/); use the `dllm` package instead.";
  // dllm::Error (a bad file, field, parameter or request) -> dllm.Error; nanobind maps the
  // standard exceptions (std::bad_alloc -> MemoryError, std::invalid_argument -> ValueError,
  // any other std::exception -> RuntimeError), so no C++ exception reaches Python as an abort.
  nb::exception<dllm::Error>(m, "Error", PyExc_RuntimeError);
  bind_config(m);
  bind_request(m);
  bind_results(m);
  bind_engine(m);
}
