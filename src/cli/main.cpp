// dllm: one binary, subcommands per job (info, forward, ...). Errors from bad input are printed as
// one line naming what is wrong, with exit status 1.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"dllm: inference engine for diffusion language models"};
  app.require_subcommand(1);
  dllm::cli::add_info_command(app);
  dllm::cli::add_forward_command(app);
  dllm::cli::add_search_patterns_command(app);
  dllm::cli::add_generate_command(app);
  dllm::cli::add_tokenize_command(app);
  dllm::cli::add_detokenize_command(app);
  dllm::cli::add_chat_template_command(app);
  dllm::cli::add_bench_command(app);
  dllm::cli::add_serve_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const dllm::Error& e) {
    std::fprintf(stderr, "dllm: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dllm: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
