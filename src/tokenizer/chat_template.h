// Chat templates: turn a list of {role, content} messages into the prompt text a chat model was
// trained on, exactly as Hugging Face transformers' apply_chat_template(..., tokenize=False) does.
// The template is the checkpoint's own Jinja source (chat_template.jinja or tokenizer_config.json),
// or a built-in one for families whose checkpoints ship none.
//
//   auto tmpl = ChatTemplate::load("/models/SDAR-8B-Chat");
//   std::string prompt = tmpl.render(messages, /*add_generation_prompt=*/true,
//                                    {{"enable_thinking", false}});
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dllm {

namespace jinja {
class Template;
}

class ChatTemplate {
 public:
  // Special tokens a template may use: bos_token, eos_token, unk_token, sep_token, pad_token,
  // cls_token, mask_token (those that are set).
  using SpecialTokens = std::map<std::string, std::string>;

  // Loads the template a checkpoint ships. `path` is the checkpoint directory or a file in it
  // (tokenizer_config.json, tokenizer.json, ...). As in transformers, chat_template.jinja and
  // additional_chat_templates/*.jinja take precedence over tokenizer_config.json's
  // "chat_template" (a string, or a list of {name, template}); of several named templates
  // "default" is used, or "tool_use" when tools are given. Throws dllm::Error naming the
  // directory when there is none, or naming the file on errors.
  static ChatTemplate load(const std::filesystem::path& path);
  // Same, but nullopt when the checkpoint ships no chat template.
  static std::optional<ChatTemplate> load_if_present(const std::filesystem::path& path);

  // Built-in template of a model family whose checkpoints ship none: "llada", "llada2_moe",
  // "wedlm". Throws dllm::Error for other names.
  static ChatTemplate builtin(std::string_view family);
  static std::vector<std::string> builtin_families();

  // A template from Jinja source; `origin` names it in error messages. A syntax error is
  // reported by render(), with the template's name and line.
  static ChatTemplate from_source(std::string_view source, std::string origin,
                                  SpecialTokens special_tokens = {});

  // Special tokens from a checkpoint's tokenizer_config.json (strings or {"content": ...}
  // objects; special_tokens_map.json for old checkpoints). Empty when there is no such file.
  static SpecialTokens load_special_tokens(const std::filesystem::path& path);

  // Renders `messages` (a non-empty JSON array of message objects) like apply_chat_template:
  // message keys whose value is null are dropped, reasoning fields are aliased
  // (reasoning_content / thinking / reasoning), and the template sees `messages`,
  // `add_generation_prompt`, the special tokens, `tools` and `documents` (none unless given) and
  // every entry of `extra_vars` (a JSON object: enable_thinking, tools, ...; absent names are
  // undefined in the template). Throws dllm::Error naming the template and line on failure.
  std::string render(
      const nlohmann::ordered_json& messages, bool add_generation_prompt,
      const nlohmann::ordered_json& extra_vars = nlohmann::ordered_json::object()) const;
  // Same for nlohmann::json input; note that nlohmann::json sorts object keys, which changes
  // the output of templates that print dicts (e.g. tool schemas through tojson).
  std::string render(const nlohmann::json& messages, bool add_generation_prompt,
                     const nlohmann::json& extra_vars = nlohmann::json::object()) const;

  // Where the template came from: "chat template in /m/tokenizer_config.json", "built-in ...".
  const std::string& origin() const { return origin_; }
  // Source of the default template.
  const std::string& source() const { return default_source_; }
  const SpecialTokens& special_tokens() const { return special_tokens_; }
  void set_special_tokens(SpecialTokens tokens) { special_tokens_ = std::move(tokens); }

 private:
  ChatTemplate() = default;
  std::string render_checked(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                             const nlohmann::ordered_json& extra_vars) const;

  // A parsed template, or the syntax error that parsing it raised. The error is raised when the
  // template is rendered, not when it is loaded: requests that never render it (generate
  // --prompt-ids, tokenize) work with a checkpoint whose template is broken.
  struct Parsed;
  static std::shared_ptr<const Parsed> parse(std::string_view source, const std::string& origin);

  std::string origin_;
  std::string default_source_;
  std::shared_ptr<const Parsed> default_template_;   // may be null (only named ones)
  std::shared_ptr<const Parsed> tool_use_template_;  // used when tools are given
  SpecialTokens special_tokens_;
};

}  // namespace dllm
