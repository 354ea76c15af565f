// Requests and results as JSON objects: one line of `dllm generate --requests FILE.jsonl` in, one
// line of its output (and `--format json`) out.
//
// Request keys: exactly one of "prompt" (text), "prompt_ids" (token ids) or "messages" (chat,
// through the checkpoint's template); "chat_template_kwargs", "strategy", "max_tokens",
// "temperature", "top_k", "top_p", "seed", "stop" (a string or a list), "stop_token_ids",
// "ignore_eos", "custom_id" (copied to the result); every other key is a strategy knob by its
// command-line name ("block_length": 32, "threshold": 0.9, "verify_policy": "score", ...).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "dllm/engine.h"

namespace dllm::cli {

// Error naming the key at fault.
Request request_from_json(const nlohmann::json& j);

nlohmann::ordered_json result_to_json(const RequestResult& r);

}  // namespace dllm::cli
