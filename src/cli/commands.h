// Each `dllm` subcommand lives in its own cmd_*.cpp and registers itself here.
#pragma once

#include <CLI/CLI.hpp>

namespace dllm::cli {

void add_info_command(CLI::App& app);
void add_forward_command(CLI::App& app);
void add_search_patterns_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_detokenize_command(CLI::App& app);
void add_chat_template_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_serve_command(CLI::App& app);

}  // namespace dllm::cli
