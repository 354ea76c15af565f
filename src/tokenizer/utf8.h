// UTF-8 helpers for the tokenizer: validation, code point iteration, and lossy decoding with the
// same replacement rule as Rust's String::from_utf8_lossy (which Hugging Face decoders use), so our
// decoded text matches theirs byte for byte even when ids end inside a multi-byte character.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dllm::utf8 {

// Length of the well-formed UTF-8 sequence starting at text[pos], or 0 if the bytes there are not a
// complete, well-formed sequence (bad lead byte, bad continuation, overlong, surrogate, truncated).
size_t sequence_length(std::string_view text, size_t pos);

// True if every byte is below 0x80 (checked 8 bytes at a time).
bool is_ascii(std::string_view text);

// Offset of the first byte that is not part of well-formed UTF-8, or npos if the text is valid.
size_t find_invalid(std::string_view text);

// Decodes the code point at text[pos] (which must start a well-formed sequence) and advances pos.
char32_t next_code_point(std::string_view text, size_t& pos);

void append_code_point(char32_t cp, std::string& out);

// Appends bytes as text: well-formed sequences are copied, each maximal ill-formed subpart becomes
// one U+FFFD (Unicode "best practice", identical to from_utf8_lossy).
void append_lossy(std::string_view bytes, std::string& out);

// Number of bytes at the end of `bytes` that form the start of a well-formed sequence cut short by
// the end of the buffer (0..3). A streaming decoder holds these back until more bytes arrive.
size_t incomplete_tail_length(std::string_view bytes);

}  // namespace dllm::utf8
