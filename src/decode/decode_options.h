// The decoding knobs a request may set, by name: one table for the command line's flags
// (--block-length 32), the batch file's and the HTTP server's JSON keys (block_length) and the
// Python keyword arguments. Values are parsed strictly — a whole number, a finite number, true or
// false, one of the listed words — and an error names the knob, the value and what is accepted.
// Ranges that depend on the family or on other knobs are checked by resolve_decode_params().
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "decode/decoder.h"

namespace dllm {

struct DecodeOption {
  std::string name;   // "block-length": --block-length on the CLI, block_length in JSON
  std::string help;   // one line for --help
  std::string group;  // CLI help group ("" for the common knobs)
  bool flag = false;  // a switch: no value on the CLI, true / false elsewhere
  std::function<void(DecodeParams& params, const std::string& value)> apply;
};

// Every knob, in --help order.
const std::vector<DecodeOption>& decode_options();

// Sets the knobs in `options` ('_' and '-' spell the same name); Error for an unknown name or a
// malformed value, and for S2D2 knobs given to another strategy.
void apply_decode_options(DecodeParams& params, const std::map<std::string, std::string>& options);

// "block_length" -> "block-length".
std::string canonical_option_name(std::string_view name);

}  // namespace dllm
