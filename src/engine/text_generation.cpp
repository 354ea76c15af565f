#include "engine/text_generation.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "tokenizer/streaming_detokenizer.h"

namespace dllm {

TextGenerator::TextGenerator(const Model& model, Backend& backend)
    : model_(model), engine_(model, backend) {
  const auto& dir = model.dir();
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

std::vector<int32_t> TextGenerator::prompt_ids(const TextRequest& r) const {
  const int n_sources = !r.prompt_ids.empty() + !r.prompt.empty() + r.messages.has_value();
  if (n_sources == 0) fail("the prompt is empty");
  if (n_sources > 1) fail("give the prompt one way: text, chat messages or prompt ids");
  if (!r.prompt_ids.empty()) return r.prompt_ids;
  if (!tokenizer_)
    fail(model_.dir().string(),
         ": the checkpoint has no tokenizer.json; pass the prompt as token ids");
  std::string text = r.prompt;
  if (r.messages) {
    if (!chat_template_) fail(model_.dir().string(), ": the checkpoint has no chat template");
    text = chat_template_->render(*r.messages, /*add_generation_prompt=*/true, r.template_vars);
  }
  return tokenizer_->encode(text);
}

std::vector<int64_t> TextGenerator::stop_ids() const {
  std::vector<int64_t> ids = model_.config().stop_token_ids;
  if (tokenizer_)
    for (const char* t : {"<|im_end|>", "<|eot_id|>", "<|role_end|>"})
      if (auto id = tokenizer_->token_to_id(t); id && *id < model_.config().vocab_size &&
                                                std::find(ids.begin(), ids.end(), *id) == ids.end())
        ids.push_back(*id);
  return ids;
}

namespace {

// Incremental detokenization of the final tokens with stop-string search; what may still turn
// into a stop string is held back from the stream.
class StopStringTracker {
 public:
  StopStringTracker(const Tokenizer* tokenizer, std::vector<std::string> stops)
      : stops_(std::move(stops)) {
    if (tokenizer) detok_.emplace(*tokenizer, /*skip_special_tokens=*/true), tok_ = tokenizer;
    for (const auto& s : stops_) holdback_ = std::max(holdback_, s.size() ? s.size() - 1 : 0);
  }

  // Consumes final tokens; returns how many to keep when a stop string appeared, else -1.
  int64_t update(std::span<const int32_t> fin) {
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

  // Text of the first `n` kept tokens that can be shown now.
  std::string_view visible(size_t n, bool final) const {
    if (!detok_ || n == 0) return {};
    size_t end = token_end_[n - 1];
    if (stop_at_)
      end = std::min(end, *stop_at_);
    else if (!final)
      end = end > holdback_ ? end - holdback_ : 0;
    return std::string_view(text_).substr(0, end);
  }
  void finish() {
    if (detok_ && !stop_at_) {
      text_ += detok_->flush();
      if (!token_end_.empty()) token_end_.back() = text_.size();
    }
  }

 private:
  std::optional<StreamingDetokenizer> detok_;
  const Tokenizer* tok_ = nullptr;
  std::vector<std::string> stops_;
  size_t holdback_ = 0;
  std::string text_;
  std::vector<size_t> token_end_;
  size_t seen_ = 0, search_from_ = 0;
  std::optional<size_t> stop_at_;
};

}  // namespace

TextResult TextGenerator::generate(const TextRequest& request, const TextCallback& on_text,
                                   const TraceCallback& trace) {
  if (!request.stop.empty() && !tokenizer_)
    fail("stop strings need the checkpoint's tokenizer.json");
  TextResult out;
  out.prompt_ids = prompt_ids(request);
  GenerationRequest req;
  req.prompt = out.prompt_ids;
  req.params = resolve_decode_params(model_.config(), request.params,
                                     static_cast<int64_t>(req.prompt.size()));
  req.stop_ids = stop_ids();
  out.params = req.params;

  StopStringTracker stops(tokenizer_ ? &*tokenizer_ : nullptr, request.stop);
  size_t kept = 0, shown = 0;
  auto show = [&](bool final) {
    const std::string_view v = stops.visible(kept, final);
    if (v.size() > shown && on_text) on_text(v.substr(shown));
    shown = std::max(shown, v.size());
  };
  const GenerationResult r = engine_.generate(
      req,
      [&](std::span<const int32_t> ids) {
        kept += ids.size();
        show(false);
      },
      trace, [&](std::span<const int32_t> fin) { return stops.update(fin); });
  stops.finish();
  show(true);
  out.ids = r.ids;
  out.text = std::string(stops.visible(kept, true));
  out.finish_reason = r.finish_reason;
  out.stats = r.stats;
  return out;
}

}  // namespace dllm
