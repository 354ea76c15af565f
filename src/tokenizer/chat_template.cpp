#include "tokenizer/chat_template.h"

#include <algorithm>

#include "core/error.h"
#include "io/json_file.h"
#include "tokenizer/jinja/template.h"
#include "tokenizer/jinja/template_error.h"
#include "tokenizer/jinja/value.h"

namespace dllm {

namespace fs = std::filesystem;

namespace {

// Built-in templates, written as Jinja so they run through the same interpreter as the ones
// checkpoints ship. tools/make_chat_template_goldens.py reads them from this file (the
// R"jinja(...)jinja" literals) to render reference outputs with Python jinja2.

// LLaDA-8B-Instruct / LLaDA 1.5 (GSAI-ML): model-specs §4.4. The Llama-3 turn format with
// <|startoftext|> as BOS, as hard-coded by third-party LLaDA scripts and LLaDA's GUIDELINES.md:
// <|startoftext|><|start_header_id|>user<|end_header_id|>\n\n{content}<|eot_id|>
// <|start_header_id|>assistant<|end_header_id|>\n\n. System turns are rendered like every other
// turn, the Llama-3 way, and contents are trimmed as Llama-3's template does.
constexpr std::string_view kLladaTemplate = R"jinja({{- '<|startoftext|>' -}}
{%- for message in messages -%}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
{%- endif -%})jinja";

// LLaDA2.0 / LLaDA2.1-mini (inclusionAI, Ling-2.0 tokenizer): model-specs §6.4, the format used
// by dInfer's tests and benchmarks and the sglang docs:
// <role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>{prompt}<|role_end|>
// <role>ASSISTANT</role>. Without a system message the system turn is "detailed thinking off"
// ("on" when enable_thinking is true); a system message replaces it.
constexpr std::string_view kLlada2MoeTemplate = R"jinja({%- if messages[0]['role'] == 'system' -%}
    {%- set system_text = messages[0]['content'] -%}
    {%- set turns = messages[1:] -%}
{%- else -%}
    {%- set system_text = 'detailed thinking ' + ('on' if enable_thinking is defined and enable_thinking else 'off') -%}
    {%- set turns = messages -%}
{%- endif -%}
{{- '<role>SYSTEM</role>' + system_text + '<|role_end|>' -}}
{%- for message in turns -%}
    {%- if message['role'] == 'user' -%}
        {{- '<role>HUMAN</role>' + message['content'] + '<|role_end|>' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- '<role>ASSISTANT</role>' + message['content'] + '<|role_end|>' -}}
    {%- elif message['role'] == 'system' -%}
        {{- '<role>SYSTEM</role>' + message['content'] + '<|role_end|>' -}}
    {%- else -%}
        {{- raise_exception('LLaDA2 chat template: unsupported role ' ~ message['role']) -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<role>ASSISTANT</role>' -}}
{%- endif -%})jinja";

// WeDLM-8B / 7B (Tencent): model-specs §2.5, Qwen3 / Qwen2.5 chat format (ChatML), no default
// system prompt: <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n.
constexpr std::string_view kWedlmTemplate = R"jinja({%- for message in messages -%}
    {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%})jinja";

struct BuiltinTemplate {
  std::string_view family;
  std::string_view source;
};
constexpr BuiltinTemplate kBuiltinTemplates[] = {
    {"llada", kLladaTemplate}, {"llada2_moe", kLlada2MoeTemplate}, {"wedlm", kWedlmTemplate}};

constexpr std::string_view kSpecialTokenNames[] = {
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};

fs::path checkpoint_directory(const fs::path& path) {
  if (!fs::exists(path)) fail(path.string(), ": no such file or directory");
  if (fs::is_directory(path)) return path;
  const fs::path parent = path.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// A special token in tokenizer_config.json: a string or an AddedToken object {"content": ...}.
std::optional<std::string> token_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string())
    return value["content"].get<std::string>();
  return std::nullopt;
}

void read_special_tokens(const nlohmann::json& json, ChatTemplate::SpecialTokens& tokens) {
  for (std::string_view name : kSpecialTokenNames) {
    const std::string key(name);
    if (!json.contains(key)) continue;
    if (auto text = token_text(json[key])) tokens[key] = *text;
  }
}

// transformers' _alias_reasoning_fields: a message's reasoning, under whichever name it came, is
// also visible as `thinking` (first) and `reasoning_content`.
jinja::Value alias_reasoning(const jinja::Value& message) {
  const jinja::Value* reasoning = nullptr;
  for (const char* field : {"reasoning_content", "thinking", "reasoning"}) {
    if (const jinja::Value* value = message.as_dict().find(field); value && !value->is_none()) {
      reasoning = value;
      break;
    }
  }
  if (!reasoning) return message;
  jinja::Value aliased = jinja::make_dict();
  auto& entries = aliased.as_dict().entries;
  entries.emplace_back(jinja::Value("thinking"), *reasoning);
  for (const auto& [key, value] : message.as_dict().entries) aliased.as_dict().set(key, value);
  aliased.as_dict().set(jinja::Value("reasoning_content"), *reasoning);
  return aliased;
}

}  // namespace

struct ChatTemplate::Parsed {
  std::shared_ptr<const jinja::Template> tmpl;
  std::string error;  // the syntax error, when tmpl is null

  const jinja::Template& get() const {
    if (!tmpl) throw Error(error);
    return *tmpl;
  }
};

std::shared_ptr<const ChatTemplate::Parsed> ChatTemplate::parse(std::string_view source,
                                                                const std::string& origin) {
  auto parsed = std::make_shared<Parsed>();
  try {
    parsed->tmpl = std::make_shared<const jinja::Template>(source, origin);
  } catch (const Error& e) {
    parsed->error = e.what();  // names the template and the line already
  }
  return parsed;
}

ChatTemplate ChatTemplate::from_source(std::string_view source, std::string origin,
                                       SpecialTokens special_tokens) {
  ChatTemplate tmpl;
  tmpl.origin_ = std::move(origin);
  tmpl.default_source_ = std::string(source);
  tmpl.default_template_ = parse(source, tmpl.origin_);
  tmpl.special_tokens_ = std::move(special_tokens);
  return tmpl;
}

ChatTemplate ChatTemplate::builtin(std::string_view family) {
  for (const BuiltinTemplate& builtin : kBuiltinTemplates)
    if (builtin.family == family)
      return from_source(builtin.source, cat("built-in chat template '", family, "'"));
  std::string known;
  for (const BuiltinTemplate& builtin : kBuiltinTemplates)
    known += (known.empty() ? "" : ", ") + std::string(builtin.family);
  fail("no built-in chat template for family '", family, "' (built-in: ", known, ")");
}

std::vector<std::string> ChatTemplate::builtin_families() {
  std::vector<std::string> families;
  for (const BuiltinTemplate& builtin : kBuiltinTemplates) families.emplace_back(builtin.family);
  return families;
}

ChatTemplate::SpecialTokens ChatTemplate::load_special_tokens(const fs::path& path) {
  const fs::path dir = checkpoint_directory(path);
  SpecialTokens tokens;
  const auto config = read_json_file_if_exists(dir / "tokenizer_config.json");
  if (config) read_special_tokens(*config, tokens);
  // transformers reads the legacy special_tokens_map.json only for configs without
  // added_tokens_decoder, and lets it override.
  if (!config || !config->contains("added_tokens_decoder"))
    if (auto legacy = read_json_file_if_exists(dir / "special_tokens_map.json"))
      read_special_tokens(*legacy, tokens);
  return tokens;
}

std::optional<ChatTemplate> ChatTemplate::load_if_present(const fs::path& path) {
  const fs::path dir = checkpoint_directory(path);
  struct Named {
    std::string source;
    std::string origin;
  };
  std::map<std::string, Named> templates;
  // Separate .jinja files win over the tokenizer config, as in transformers.
  if (const fs::path file = dir / "chat_template.jinja"; fs::exists(file))
    templates["default"] = {read_text_file(file), cat("chat template ", file.string())};
  if (const fs::path folder = dir / "additional_chat_templates"; fs::is_directory(folder)) {
    for (const auto& entry : fs::directory_iterator(folder)) {
      if (entry.path().extension() != ".jinja") continue;
      templates[entry.path().stem().string()] = {read_text_file(entry.path()),
                                                 cat("chat template ", entry.path().string())};
    }
  }
  const fs::path config_path = dir / "tokenizer_config.json";
  if (templates.empty()) {
    if (auto config = read_json_file_if_exists(config_path);
        config && config->contains("chat_template")) {
      const nlohmann::json& chat_template = (*config)["chat_template"];
      const std::string origin = cat("chat template in ", config_path.string());
      if (chat_template.is_string()) {
        templates["default"] = {chat_template.get<std::string>(), origin};
      } else if (chat_template.is_array()) {
        for (const auto& item : chat_template) {
          if (!item.is_object() || !item.contains("name") || !item["name"].is_string() ||
              !item.contains("template") || !item["template"].is_string())
            fail(config_path.string(),
                 ": chat_template list entries must be {\"name\": ..., \"template\": ...}");
          const std::string name = item["name"].get<std::string>();
          templates[name] = {item["template"].get<std::string>(), cat(origin, " ('", name, "')")};
        }
      } else if (!chat_template.is_null()) {
        fail(config_path.string(), ": chat_template must be a string or a list of named templates");
      }
    }
  }
  if (templates.empty()) return std::nullopt;

  ChatTemplate tmpl;
  tmpl.special_tokens_ = load_special_tokens(dir);
  if (auto it = templates.find("default"); it != templates.end()) {
    tmpl.origin_ = it->second.origin;
    tmpl.default_source_ = it->second.source;
    tmpl.default_template_ = parse(it->second.source, it->second.origin);
  }
  if (auto it = templates.find("tool_use"); it != templates.end()) {
    tmpl.tool_use_template_ = parse(it->second.source, it->second.origin);
    if (!tmpl.default_template_) tmpl.origin_ = it->second.origin;
  }
  if (!tmpl.default_template_ && !tmpl.tool_use_template_) {
    std::string names;
    for (const auto& [name, named] : templates) names += (names.empty() ? "" : ", ") + name;
    fail(dir.string(), ": has chat templates (", names, ") but none named 'default'");
  }
  return tmpl;
}

ChatTemplate ChatTemplate::load(const fs::path& path) {
  if (auto tmpl = load_if_present(path)) return std::move(*tmpl);
  fail(
      checkpoint_directory(path).string(),
      ": no chat template (no chat_template.jinja and no \"chat_template\" in "
      "tokenizer_config.json); "
      "use a built-in one (",
      [] {
        std::string names;
        for (const std::string& family : builtin_families())
          names += (names.empty() ? "" : ", ") + family;
        return names;
      }(),
      ")");
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra_vars) const {
  if (!messages.is_array()) fail(origin_, ": messages must be a JSON array of message objects");
  if (messages.empty()) fail(origin_, ": cannot render an empty conversation");
  if (!extra_vars.is_null() && !extra_vars.is_object())
    fail(origin_, ": extra template variables must be a JSON object");

  try {
    return render_checked(messages, add_generation_prompt, extra_vars);
  } catch (const jinja::TemplateError& e) {  // from converting the JSON input (too deeply nested)
    fail(origin_, ": messages or template variables: ", e.what());
  }
}

std::string ChatTemplate::render_checked(const nlohmann::ordered_json& messages,
                                         bool add_generation_prompt,
                                         const nlohmann::ordered_json& extra_vars) const {
  std::vector<jinja::Value> chat;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].is_object()) fail(origin_, ": message ", i, " is not a JSON object");
    // Like apply_chat_template, drop null fields (content: null, tool_calls: null, ...).
    jinja::Value message = jinja::make_dict();
    for (const auto& [key, value] : messages[i].items())
      if (!value.is_null())
        message.as_dict().entries.emplace_back(jinja::Value(key), jinja::from_json(value));
    chat.push_back(alias_reasoning(message));
  }

  jinja::Value variables = jinja::make_dict();
  jinja::DictData& vars = variables.as_dict();
  for (const auto& [name, text] : special_tokens_) vars.set(jinja::Value(name), jinja::Value(text));
  bool has_tools = false;
  if (extra_vars.is_object()) {
    for (const auto& [key, value] : extra_vars.items()) {
      if (key == "messages" || key == "add_generation_prompt")
        fail(origin_, ": '", key, "' cannot be passed as an extra template variable");
      vars.set(jinja::Value(key), jinja::from_json(value));
      has_tools = has_tools || (key == "tools" && !value.is_null());
    }
  }
  if (!vars.find("tools")) vars.set(jinja::Value("tools"), jinja::Value::none());
  if (!vars.find("documents")) vars.set(jinja::Value("documents"), jinja::Value::none());
  vars.set(jinja::Value("messages"), jinja::make_list(std::move(chat)));
  vars.set(jinja::Value("add_generation_prompt"), jinja::Value(add_generation_prompt));

  const Parsed* tmpl =
      has_tools && tool_use_template_ ? tool_use_template_.get() : default_template_.get();
  if (!tmpl) fail(origin_, ": no 'default' chat template (only 'tool_use', which needs tools)");
  // Raises a stored syntax error; renders report their own errors as dllm::Error.
  return tmpl->get().render(variables);
}

namespace {
// True when `value` nests deeper than `limit`; recursion stops at the limit, so the check itself
// cannot overflow the stack the way dump() below would.
bool nests_deeper_than(const nlohmann::json& value, int limit) {
  if (!value.is_structured()) return false;
  if (limit <= 0) return true;
  for (const auto& child : value)
    if (nests_deeper_than(child, limit - 1)) return true;
  return false;
}
}  // namespace

std::string ChatTemplate::render(const nlohmann::json& messages, bool add_generation_prompt,
                                 const nlohmann::json& extra_vars) const {
  constexpr int kMaxNesting = 256;  // far above kJsonDepthLimit, far below the stack's limit
  if (nests_deeper_than(messages, kMaxNesting) || nests_deeper_than(extra_vars, kMaxNesting))
    fail(origin_, ": messages or template variables nested too deeply (more than ", kMaxNesting,
         " levels)");
  return render(nlohmann::ordered_json::parse(messages.dump()), add_generation_prompt,
                nlohmann::ordered_json::parse(extra_vars.dump()));
}

}  // namespace dllm
