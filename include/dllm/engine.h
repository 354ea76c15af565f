// dllm's public C++ API: load a diffusion language model, submit requests, receive their tokens
// as they become final, cancel, read statistics. The `dllm` command line, the HTTP server and the
// Python bindings use only this header.
//
//   dllm::Engine engine({.model = "models/tiny-block"});
//   dllm::Request r;
//   r.messages_json = R"([{"role": "user", "content": "What is 2 + 3?"}])";
//   r.max_tokens = 64;
//   dllm::RequestResult out = engine.generate(r, [](const dllm::RequestOutput& o) {
//     std::cout << o.text << std::flush;  // streamed: the text of newly final tokens
//   });
//
// An Engine runs one background thread that steps every running request through one forward per
// step (continuous batching over a paged KV pool): submit() and cancel() are thread-safe and
// return at once; callbacks run on the engine thread and should return quickly. A request's ids
// do not depend on what else runs with it (the RNG is keyed by the request, never by its batch
// slot). Invalid requests are rejected by submit() with a dllm::Error naming the parameter;
// failures while a request runs end that request alone (finish_reason "error").
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dllm/error.h"

namespace dllm {

struct EngineConfig {
  std::string model;            // checkpoint directory (config.json, safetensors, tokenizer.json)
  std::string device = "auto";  // auto (CUDA when available) | cpu | cuda
  // Tensor parallel: the model's heads and FFN features split over this many ranks (GPUs
  // 0..N-1 joined by NCCL; on the CPU, threads of one process — the reference path, no faster).
  // 1: one device. KV memory (kv_cache_bytes, gpu_memory_utilization) is per device.
  int32_t tensor_parallel = 1;
  // With tensor_parallel > 1, MoE layers split their routed experts over the ranks, each whole
  // (expert parallel), instead of every expert's features (tensor parallel inside the experts).
  bool expert_parallel = false;
  // KV pool size in bytes; 0: gpu_memory_utilization on CUDA, 1 GiB on the CPU.
  int64_t kv_cache_bytes = 0;
  // CUDA, when kv_cache_bytes is 0: the share of the GPU's total memory the engine may hold in
  // all (weights, activations and the KV pool), as vLLM's --gpu-memory-utilization.
  double gpu_memory_utilization = 0.9;
  int32_t kv_page_size = 16;       // slots per KV page (a power of two)
  int32_t max_running = 256;       // sequences in one forward at most
  int64_t max_batch_rows = 16384;  // query rows in one forward (a single longer plan runs alone)
  bool prefix_sharing = true;      // reuse the K/V of identical prompt prefixes across requests
  // CPU threads of the process (the CPU forward, host statistics), 1..256; 0: OMP_NUM_THREADS
  // when set, else every CPU the process may run on. One pool serves the whole process.
  int32_t threads = 0;
  // Benchmarks: a config.json of a model shape (configs/sdar-8b.json) whose weights are drawn at
  // random, as `dllm bench` builds them, instead of loading `model`'s weights; `model` still
  // gives the tokenizer and chat template (if any).
  std::string random_weights;
  // MMInference / MInference sparse prefill: a pattern config (JSON, either published format;
  // docs/mminference.md) applied to every prompt's prefill from position 0 under the causal or
  // block-causal rule, on the CPU and the CUDA backend; turns prefix sharing off (a shared
  // prefix's K/V would come from a different attention than the rest of the prompt).
  std::string sparse_prefill;
  // Sparse prefill configs requests may choose by name (Request::sparse_prefill): every *.json
  // file of this directory, loaded and checked against the model at construction, named by its
  // file name without .json. As vLLM's --lora-modules, a request names a config the server was
  // started with, never a path. Also turns prefix sharing off.
  std::string sparse_prefill_dir;
};

// An encoded image or video (the bytes of a JPEG / PNG / WebP file, or of any video container
// FFmpeg reads: MP4, Matroska, WebM, ...) held in memory.
struct MediaBytes {
  std::string data;
  // Names it in errors ("messages[0].content[1]"); empty: "image_bytes[i]" / "video_bytes[i]".
  std::string name;
};
using ImageBytes = MediaBytes;
using VideoBytes = MediaBytes;

struct Request {
  // The prompt, given exactly one way:
  std::vector<int32_t> prompt_ids;        // token ids, used as they are
  std::string prompt;                     // raw text, tokenized without special tokens added
  std::string messages_json;              // chat: a JSON array of {"role", "content"} messages,
                                          // rendered by the checkpoint's chat template
  std::string chat_template_kwargs_json;  // extra template variables, e.g. {"enable_thinking":
                                          // false}
  // Vision-language models (SDAR-VL): pictures and videos for the prompt's <|image_pad|> and
  // <|video_pad|> placeholders, in order, one placeholder token per item (the chat template
  // writes one for each {"type": "image"} / {"type": "video"} content part). Each placeholder is
  // expanded to the item's feature count and its embeddings replaced by the features; the
  // result's prompt_ids show the expansion. Files are read when the request is submitted.
  // Images come from files or from memory (image_bytes), not both in one request; so do videos.
  std::vector<std::string> image_files;  // JPEG, PNG or WebP
  std::vector<ImageBytes> image_bytes;   // encoded images held in memory (a server's data: URLs)
  std::vector<std::string> video_files;  // any container / codec FFmpeg decodes
  std::vector<VideoBytes> video_bytes;   // encoded videos held in memory
  int32_t video_frames = 32;             // frames sampled uniformly from each video, 1..1024

  std::string strategy;               // empty: the family's default (block, full, wedlm, ...)
  std::optional<int32_t> max_tokens;  // generated tokens at most (full diffusion: the canvas)
  std::optional<float> temperature;   // 0: greedy (the default)
  std::optional<int32_t> top_k;       // 0: off
  std::optional<float> top_p;         // 1: off
  // Sampling seed: repeated requests with the same seed give the same result; without one each
  // request draws from its own random stream. Either way the result does not depend on what
  // else runs in the same batch.
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;        // stop strings, excluded from the output
  std::vector<int32_t> stop_token_ids;  // in addition to the checkpoint's own stop ids
  bool ignore_eos = false;              // generate max_tokens tokens whatever comes
  // Strategy knobs by name, values as on the command line: {"block-length", "32"},
  // {"threshold", "0.9"}, {"verify-policy", "score"}, ... ('_' and '-' are the same);
  // option_names() lists them.
  std::map<std::string, std::string> options;
  bool trace = false;  // emit the decoder's canvas after every forward (RequestOutput::canvas)
  // MMInference sparse prefill of this request's prompt: empty, the engine's
  // (EngineConfig::sparse_prefill, if any); "none", a dense prefill; otherwise the name of a
  // config of EngineConfig::sparse_prefill_dir (Engine::sparse_prefill_names()).
  std::string sparse_prefill;
};

struct Metric {
  std::string name;
  double value = 0;
  bool is_count = false;  // an integer count
};

struct RequestStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t forwards = 0;              // model forwards this request took part in
  int64_t query_rows = 0;            // query rows it forwarded
  int64_t prefix_cached_tokens = 0;  // prompt tokens reused from the prefix cache
  int64_t preemptions = 0;           // times it was preempted and recomputed
  double queue_seconds = 0;          // submit to first scheduled
  double first_token_seconds = -1;   // submit to the first streamed token (-1: none)
  double seconds = 0;                // submit to finish
  std::vector<Metric> metrics;       // strategy-specific (WeDLM's p_cache, ...)
  // Speculative decoding (S2D2): verification forwards (forwards = draft + verify), tokens
  // accepted as drafted, rejections.
  bool speculative = false;
  int64_t verify_calls = 0, accepted = 0, rejected = 0;
};

// One streamed event of a request: newly final tokens and their text, or its end.
struct RequestOutput {
  uint64_t id = 0;
  std::vector<int32_t> token_ids;  // newly final tokens (stop tokens excluded)
  std::string text;                // their text, UTF-8 complete (a stop string is held back)
  // Request::trace, after every forward: its number (1, 2, ...) and the generated region then
  // (masks where undecided); 0 and empty otherwise.
  int64_t trace_forward = 0;
  std::vector<int32_t> canvas;
  bool finished = false;
  std::string finish_reason;  // finished: stop | length | cancelled | error
  std::string error;          // finish_reason error: what went wrong
};

struct RequestResult {
  uint64_t id = 0;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> token_ids;  // generated tokens, stop token excluded
  std::string text;                // their text, special tokens skipped, cut before a stop string
  std::string finish_reason;       // stop | length | cancelled | error
  std::string error;
  std::string strategy;  // as resolved
  RequestStats stats;
};

struct EngineStats {
  int64_t waiting = 0, running = 0;  // requests now
  int64_t finished = 0, cancelled = 0, errors = 0;
  int64_t steps = 0;              // forwards run
  int64_t rows = 0;               // query rows forwarded
  double sequences_per_step = 0;  // mean sequences sharing a forward
  int64_t committed_tokens = 0;   // tokens streamed to requests
  int64_t preemptions = 0;
  int64_t prompt_tokens = 0, prefix_cached_tokens = 0;
  int64_t kv_pages = 0, kv_pages_used = 0, kv_page_size = 0;
  double forward_seconds = 0;   // in model forwards
  double schedule_seconds = 0;  // scheduling and output processing on the host
};

struct ModelInfo {
  std::string dir, family, model_type, default_strategy, device;
  int64_t vocab_size = 0, context_length = 0, parameters = 0;
  int64_t mask_token_id = -1;  // the undecided token of RequestOutput::canvas (-1: none)
  bool has_tokenizer = false, has_chat_template = false;
  bool has_vision = false;  // takes images and videos (Request::image_files, ...)
};

using OutputCallback = std::function<void(const RequestOutput&)>;

class Engine {
 public:
  // Loads the model and sizes the KV pool; Error naming the file or setting at fault.
  explicit Engine(const EngineConfig& config);
  ~Engine();  // unfinished requests end "cancelled"
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request and returns its id at once; Error when the request is invalid.
  uint64_t submit(const Request& request, OutputCallback on_output = {});
  // Ends a waiting or running request before its next step ("cancelled"); false if unknown or
  // already finished.
  bool cancel(uint64_t id);
  // Blocks until the request has finished and returns its result (once per id).
  RequestResult wait(uint64_t id);
  // submit + wait.
  RequestResult generate(const Request& request, OutputCallback on_output = {});

  EngineStats stats() const;
  ModelInfo model_info() const;

  // The checkpoint's tokenizer and chat template (servers' /tokenize, /detokenize). Error when
  // the checkpoint has none.
  std::vector<int32_t> tokenize(const std::string& text) const;
  std::string detokenize(const std::vector<int32_t>& ids, bool skip_special_tokens = true) const;
  std::string apply_chat_template(const std::string& messages_json, bool add_generation_prompt,
                                  const std::string& kwargs_json = {}) const;
  // The prompt of `request` as the model sees it (a server's /tokenize): its ids, text or
  // messages tokenized as submit() would, each image / video placeholder expanded to the item's
  // feature count. Decodes the images and videos (for their sizes and frame counts) but encodes
  // nothing. Error as submit() gives for a bad prompt or media.
  std::vector<int32_t> prompt_token_ids(const Request& request) const;

  // Names of the strategy knobs Request::options accepts.
  static std::vector<std::string> option_names();
  // Values Request::sparse_prefill accepts besides empty: "none" and the configs loaded from
  // EngineConfig::sparse_prefill_dir, sorted.
  std::vector<std::string> sparse_prefill_names() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace dllm
