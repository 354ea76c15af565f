#include "tokenizer/jinja/limits.h"

#include "tokenizer/jinja/template_error.h"

namespace dllm::jinja {

void check_string_bytes(uint64_t bytes, std::string_view what) {
  if (bytes > kMaxStringBytes)
    throw_error("template limit max_string_bytes (", kMaxStringBytes, ") exceeded: ", what,
                " would be ", bytes, " bytes");
}

void check_list_items(uint64_t items, std::string_view what) {
  if (items > kMaxListItems)
    throw_error("template limit max_list_items (", kMaxListItems, ") exceeded: ", what,
                " would have ", items, " items");
}

}  // namespace dllm::jinja
