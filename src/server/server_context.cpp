#include "server/server_context.h"

#include <algorithm>
#include <filesystem>

namespace dllm::server {

namespace {

std::string default_model_name(const ModelInfo& info) {
  std::filesystem::path p(info.dir);
  if (p.filename().empty()) p = p.parent_path();  // "models/tiny-block/"
  return p.filename().empty() ? std::string("dllm") : p.filename().string();
}

}  // namespace

ServerContext::ServerContext(Engine& e, const ServerOptions& o)
    : engine(e),
      options(o),
      info(e.model_info()),
      model_name(o.served_model_name.empty() ? default_model_name(info) : o.served_model_name),
      max_prompt_tokens(o.max_prompt_tokens > 0 ? o.max_prompt_tokens : info.context_length),
      admission(o.max_running + o.max_queued) {
  parse.served_model = model_name;
  for (std::string name : Engine::option_names()) {
    std::replace(name.begin(), name.end(), '_', '-');
    parse.option_names.insert(name);
  }
  for (const std::string& name : e.sparse_prefill_names()) parse.sparse_prefill_names.insert(name);
  parse.vocab_size = info.vocab_size;
  parse.context_length = info.context_length;
  parse.max_choices = o.max_choices;
  parse.accepts_images = info.has_vision;
  parse.max_images = o.max_images_per_request;
  parse.max_videos = o.max_videos_per_request;
  parse.video_frames = o.video_frames;
  parse.media.max_image_bytes = static_cast<size_t>(o.max_image_mib * double(1 << 20));
  parse.media.max_video_bytes = static_cast<size_t>(o.max_video_mib * double(1 << 20));
  if (!o.allowed_local_media_path.empty())
    parse.media.allowed_local_media_path = canonical_media_root(o.allowed_local_media_path);
}

}  // namespace dllm::server
