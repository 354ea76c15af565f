// Base64 (RFC 4648 §4, the standard alphabet) for data: URLs. Strict: any character outside the
// alphabet, padding anywhere but the end, or a length no encoder produces is an error naming
// its offset (a client that sends garbage learns where).
#pragma once

#include <string>
#include <string_view>

namespace dllm::server {

// The decoded bytes; the trailing '=' padding may be left out. Error (dllm::Error) otherwise.
std::string base64_decode(std::string_view text);
// Bytes the decoded text will have (for size limits before decoding), padding ignored.
size_t base64_decoded_size(std::string_view text);

}  // namespace dllm::server
