// dllm tokenize / dllm detokenize: the tokenizer from the command line, for checking prompts and
// comparing with Hugging Face.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/error.h"
#include "io/json_file.h"
#include "tokenizer/tokenizer.h"

namespace dllm::cli {

namespace {

struct TokenizeOptions {
  std::string tokenizer;
  std::string text;
  std::string file;
};

void run_tokenize(const TokenizeOptions& o, bool have_text) {
  const std::string text = have_text ? o.text : read_text_file(o.file);
  const Tokenizer tokenizer = Tokenizer::load(o.tokenizer);
  std::string line;
  for (int32_t id : tokenizer.encode(text)) {
    if (!line.empty()) line += ' ';
    line += std::to_string(id);
  }
  std::printf("%s\n", line.c_str());
}

struct DetokenizeOptions {
  std::string tokenizer;
  std::string ids;
  bool skip_special_tokens = false;
};

void run_detokenize(const DetokenizeOptions& o) {
  const std::vector<int32_t> ids =
      o.ids.empty() ? std::vector<int32_t>{} : parse_int_list(o.ids, "--ids");
  const Tokenizer tokenizer = Tokenizer::load(o.tokenizer);
  const std::string text = tokenizer.decode(ids, o.skip_special_tokens);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "Print the token ids of a text, space-separated");
  auto o = std::make_shared<TokenizeOptions>();
  cmd->add_option("--tokenizer", o->tokenizer, "Checkpoint directory or tokenizer.json")
      ->required();
  auto* text = cmd->add_option("--text", o->text, "Text to encode");
  auto* file = cmd->add_option("--file", o->file, "File whose contents to encode");
  text->excludes(file);
  file->excludes(text);
  cmd->callback([o, text, file] {
    if (text->count() == 0 && file->count() == 0) fail("tokenize: give --text or --file");
    run_tokenize(*o, text->count() > 0);
  });
}

void add_detokenize_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("detokenize", "Print the text of comma-separated token ids");
  auto o = std::make_shared<DetokenizeOptions>();
  cmd->add_option("--tokenizer", o->tokenizer, "Checkpoint directory or tokenizer.json")
      ->required();
  cmd->add_option("--ids", o->ids, "Token ids, e.g. 9707,11,1879")->required();
  cmd->add_flag("--skip-special-tokens", o->skip_special_tokens,
                "Drop special added tokens (like Hugging Face skip_special_tokens=True)");
  cmd->callback([o] { run_detokenize(*o); });
}

}  // namespace dllm::cli
