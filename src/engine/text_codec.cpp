#include "engine/text_codec.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dllm {

TextCodec::TextCodec(const Model& model, std::filesystem::path text_dir)
    : model_(model), dir_(text_dir.empty() ? model.dir() : std::move(text_dir)) {
  const auto& dir = dir_;
  if (!dir.empty() && std::filesystem::exists(dir / "tokenizer.json"))
    tokenizer_ = Tokenizer::load(dir);
  if (!dir.empty()) chat_template_ = ChatTemplate::load_if_present(dir);
  if (!chat_template_) {
    const auto builtins = ChatTemplate::builtin_families();
    const std::string& family = model.config().family;
    if (std::find(builtins.begin(), builtins.end(), family) != builtins.end())
      chat_template_ = ChatTemplate::builtin(family);
  }
  if (chat_template_ && !dir.empty()) {
    auto special = ChatTemplate::load_special_tokens(dir);
    if (!special.empty()) chat_template_->set_special_tokens(std::move(special));
  }
}

const Tokenizer& TextCodec::require_tokenizer() const {
  if (!tokenizer_)
    fail(dir_.string(),
         ": the checkpoint has no tokenizer.json; pass the prompt as token ids");
  return *tokenizer_;
}

std::string TextCodec::render_chat(const std::string& messages_json, bool add_generation_prompt,
                                   const std::string& kwargs_json) const {
  if (!chat_template_) fail(dir_.string(), ": the checkpoint has no chat template");
  nlohmann::ordered_json messages, vars = nlohmann::ordered_json::object();
  try {
    messages = nlohmann::ordered_json::parse(messages_json);
    if (!kwargs_json.empty()) vars = nlohmann::ordered_json::parse(kwargs_json);
  } catch (const nlohmann::json::exception& e) {
    fail("chat messages or template arguments are not valid JSON: ", e.what());
  }
  if (!messages.is_array() || messages.empty())
    fail("chat messages must be a non-empty JSON array of {\"role\", \"content\"} objects");
  if (!vars.is_object()) fail("chat template arguments must be a JSON object");
  return chat_template_->render(messages, add_generation_prompt, vars);
}

std::vector<int32_t> TextCodec::prompt_ids(const Request& r) const {
  const int n_sources = !r.prompt_ids.empty() + !r.prompt.empty() + !r.messages_json.empty();
  if (n_sources == 0) fail("the prompt is empty");
  if (n_sources > 1) fail("give the prompt one way: text, chat messages or prompt ids");
  if (!r.prompt_ids.empty()) return r.prompt_ids;
  const Tokenizer& tok = require_tokenizer();
  if (!r.messages_json.empty())
    return tok.encode(render_chat(r.messages_json, /*add_generation_prompt=*/true,
                                  r.chat_template_kwargs_json));
  return tok.encode(r.prompt);
}

std::vector<int64_t> TextCodec::stop_ids() const {
  std::vector<int64_t> ids = model_.config().stop_token_ids;
  if (tokenizer_)
    for (const char* t : {"<|im_end|>", "<|eot_id|>", "<|role_end|>"})
      if (auto id = tokenizer_->token_to_id(t); id && *id < model_.config().vocab_size &&
                                                std::find(ids.begin(), ids.end(), *id) == ids.end())
        ids.push_back(*id);
  return ids;
}

TextStream::TextStream(const Tokenizer* tokenizer, std::vector<std::string> stops)
    : stops_(std::move(stops)) {
  if (tokenizer) detok_.emplace(*tokenizer, /*skip_special_tokens=*/true), tok_ = tokenizer;
  for (const auto& s : stops_) holdback_ = std::max(holdback_, s.size() ? s.size() - 1 : 0);
}

int64_t TextStream::update(std::span<const int32_t> fin) {
  if (!detok_) return -1;
  for (; seen_ < fin.size(); ++seen_) {
    const int32_t id = fin[seen_];
    if (tok_->has_token(id)) text_ += detok_->push(id);
    token_end_.push_back(text_.size());
    for (const auto& s : stops_) {
      if (s.empty()) continue;
      const size_t from = search_from_ > s.size() ? search_from_ - s.size() : 0;
      const size_t at = text_.find(s, from);
      if (at != std::string::npos && (!stop_at_ || at < *stop_at_)) stop_at_ = at;
    }
    search_from_ = text_.size();
    if (stop_at_) return static_cast<int64_t>(seen_ + 1);
  }
  return -1;
}

std::string_view TextStream::visible(size_t n, bool final) const {
  if (!detok_ || n == 0) return {};
  size_t end = token_end_[n - 1];
  if (stop_at_)
    end = std::min(end, *stop_at_);
  else if (!final)
    end = end > holdback_ ? end - holdback_ : 0;
  return std::string_view(text_).substr(0, end);
}

void TextStream::finish() {
  if (detok_ && !stop_at_) {
    text_ += detok_->flush();
    if (!token_end_.empty()) token_end_.back() = text_.size();
  }
}

}  // namespace dllm
