// dllm chat-template: print the prompt a conversation becomes under a checkpoint's chat template,
// byte for byte (for checking templates against Hugging Face's apply_chat_template).
#include <cstdio>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "core/error.h"
#include "io/json_file.h"
#include "tokenizer/chat_template.h"

namespace dllm::cli {

namespace {

struct ChatTemplateOptions {
  std::string tokenizer;
  std::string messages_file;
  bool no_generation_prompt = false;
  std::string enable_thinking;
  std::string builtin;
};

void run_chat_template(const ChatTemplateOptions& options) {
  if (options.tokenizer.empty() && options.builtin.empty())
    fail("chat-template needs --tokenizer PATH or --builtin FAMILY");

  // The file is a list of messages, or {"messages": [...], other template variables}.
  // Parsed with the request-body nesting limit: the file is as untrusted as a request.
  nlohmann::ordered_json input = parse_json_text<nlohmann::ordered_json>(
      read_text_file(options.messages_file), "messages file " + options.messages_file);
  nlohmann::ordered_json messages;
  nlohmann::ordered_json extra_vars = nlohmann::ordered_json::object();
  if (input.is_array()) {
    messages = std::move(input);
  } else if (input.is_object() && input.contains("messages")) {
    messages = input["messages"];
    for (const auto& [key, value] : input.items())
      if (key != "messages") extra_vars[key] = value;
  } else {
    fail("messages file ", options.messages_file,
         ": expected a JSON list of messages or an object with \"messages\"");
  }
  if (!messages.is_array() || messages.empty())
    fail("messages file ", options.messages_file, ": \"messages\" must be a non-empty list");
  for (size_t i = 0; i < messages.size(); ++i)
    if (!messages[i].is_object())
      fail("messages file ", options.messages_file, ": message ", i, " is not a JSON object");
  if (!options.enable_thinking.empty()) {
    if (options.enable_thinking != "true" && options.enable_thinking != "false")
      fail("--enable-thinking must be true or false, got '", options.enable_thinking, "'");
    extra_vars["enable_thinking"] = options.enable_thinking == "true";
  }

  std::optional<ChatTemplate> tmpl;
  if (!options.builtin.empty()) {
    tmpl = ChatTemplate::builtin(options.builtin);
    if (!options.tokenizer.empty())
      tmpl->set_special_tokens(ChatTemplate::load_special_tokens(options.tokenizer));
  } else {
    tmpl = ChatTemplate::load(options.tokenizer);
  }
  const std::string prompt = tmpl->render(messages, !options.no_generation_prompt, extra_vars);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

void add_chat_template_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat-template",
                                 "Render a conversation with a chat template and print the prompt");
  auto options = std::make_shared<ChatTemplateOptions>();
  cmd->add_option("--tokenizer", options->tokenizer,
                  "Checkpoint directory, or its tokenizer_config.json / tokenizer.json");
  cmd->add_option(
         "--messages", options->messages_file,
         "JSON file: a list of {role, content} messages, or {\"messages\": [...], other variables}")
      ->required();
  cmd->add_flag("--no-generation-prompt", options->no_generation_prompt,
                "Do not append the assistant header that prompts a reply");
  cmd->add_option("--enable-thinking", options->enable_thinking,
                  "Set enable_thinking (true|false)");
  cmd->add_option("--builtin", options->builtin,
                  "Use the built-in template of a family (llada, llada2_moe, wedlm)");
  cmd->callback([options] { run_chat_template(*options); });
}

}  // namespace dllm::cli
