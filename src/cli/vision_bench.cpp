#include "cli/vision_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <numeric>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/json_file.h"
#include "kv/kv_cache.h"
#include "vision/image_decode.h"
#include "vision/random_vision.h"
#include "vision/video_decode.h"
#include "vision/vision_prompt.h"

namespace dllm::cli {

namespace {

namespace fs = std::filesystem;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The sampled frames of `path`: a video through FFmpeg (read_video_file), or a directory of
// image files (one frame each, name order) sampled by the same uniform rule — what a build
// without FFmpeg (the GPU bundle) can time.
std::vector<RgbImage> read_frames(const std::string& path, int64_t frames) {
  if (!fs::is_directory(path)) return read_video_file(path, frames).frames;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(path))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) fail("--video ", path, ": the directory holds no frame files");
  // Decoded in parallel, as FFmpeg's frame threads decode a video file.
  const std::vector<int64_t> picked =
      uniform_frame_indices(static_cast<int64_t>(files.size()), frames);
  std::vector<RgbImage> out(picked.size());
  parallel_for(static_cast<int64_t>(picked.size()), [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i)
      out[static_cast<size_t>(i)] =
          read_image_file(files[static_cast<size_t>(picked[static_cast<size_t>(i)])]);
  });
  return out;
}

std::vector<float> to_f32(const TensorEntry& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  convert_to_f32(*t.dtype, t.data, out.data(), out.size());
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A chat-like prompt: `text` ids before and after one <|video_pad|> placeholder (ordinary ids of
// the vocabulary, never a placeholder).
std::vector<int32_t> video_prompt_ids(const VisionConfig& vc, int64_t vocab, int text) {
  auto text_id = [&](int64_t i) {
    int64_t id = (i * 7919) % vocab;
    while (id == vc.image_token_id || id == vc.video_token_id) id = (id + 1) % vocab;
    return static_cast<int32_t>(id);
  };
  std::vector<int32_t> ids;
  for (int i = 0; i < text; ++i) ids.push_back(text_id(i));
  ids.push_back(static_cast<int32_t>(vc.video_token_id));
  for (int i = 0; i < text; ++i) ids.push_back(text_id(text + i));
  return ids;
}

// The prompt's prefill as the engine plans it for a block-diffusion model: every prompt token
// committed into the cache under the block-causal rule, the features replacing the placeholders'
// embeddings.
double prefill_ms(Backend& backend, KvCache& cache, const VisionPrompt& vp, int64_t block) {
  SequenceForward pre;
  pre.cache = &cache;
  pre.tokens = vp.prompt.ids;
  pre.positions.resize(pre.tokens.size());
  std::iota(pre.positions.begin(), pre.positions.end(), 0);
  pre.rule = block > 0 ? AttentionRule::block_causal(block) : AttentionRule::causal();
  pre.write = CacheWrite::kAppend;
  pre.input_embeddings = vp.embeddings;
  pre.output_rows = {static_cast<int32_t>(pre.tokens.size()) - 1};
  pre.want_stats = true;  // one row back: the forward has finished when it returns
  cache.truncate(0);
  const double s = now_s();
  backend.forward(std::span(&pre, 1));
  return (now_s() - s) * 1e3;
}

}  // namespace

nlohmann::json vision_bench(const BenchArgs& a, const std::string& device) {
  if (a.frames < 1 || a.frames > 1024) fail("--frames must be in 1..1024 (got ", a.frames, ")");
  if (a.images < 0) fail("--images must be >= 0 (got ", a.images, ")");
  if (a.reps < 1) fail("--reps must be >= 1 (got ", a.reps, ")");
  const double t0 = now_s();
  const RandomVisionLanguageModel rv =
      make_random_vision_language_model(read_json_file(a.shape), 1234);
  if (!rv.vision)
    fail("--video / --images need a vision-language shape (model_type sdar_v); ", a.shape,
         " has none");
  const VisionModel& vision = *rv.vision;
  const VisionConfig& vc = vision.config;
  auto backend = make_backend(*rv.model, device);
  auto encoder =
      device == "cuda" ? make_cuda_vision_encoder(vision) : make_cpu_vision_encoder(vision);
  std::fprintf(stderr, "bench: %s (%.2f B + %.2f B vision parameters) on %s, set up in %.1f s\n",
               a.shape.c_str(), rv.model->parameter_count() / 1e9, vision.parameter_count() / 1e9,
               backend->name().c_str(), now_s() - t0);

  const std::vector<int32_t> ids = video_prompt_ids(vc, rv.model->config().vocab_size, 32);
  const int64_t tokens = static_cast<int64_t>(ids.size()) - 1 + video_token_count(a.frames, vc);
  auto cache = backend->create_cache(tokens + 64);
  const int64_t block = rv.model->config().block_size;
  const std::vector<float> newline = to_f32(*vision.tensors.image_newline);
  std::vector<double> decode, preprocess, encode, prefill, total;
  int64_t frames = 0;
  for (int rep = -1; rep < a.reps; ++rep) {  // rep -1: warm-up (allocations, first launches)
    // The stages one by one, each through the engine's own function.
    const double s = now_s();
    VisionItems items;
    items.videos.push_back(read_frames(a.video, a.frames));
    const double t_decode = now_s();
    const PixelCrops crops = preprocess_frames(items.videos[0], vc);
    const double t_pre = now_s();
    // Encode and pack are one call (VisionEncoder::encode_video): the CUDA encoder pools on the
    // device and brings back only the packed rows, so there is no host pack stage left to time.
    frames = static_cast<int64_t>(items.videos[0].size());
    encoder->encode_video(crops, frames, newline);
    const double t_enc = now_s();
    const double t_prefill =
        prefill_ms(*backend, *cache, build_vision_prompt(ids, items, vision, *encoder), block);
    // End to end as a request runs it: decode, build_vision_prompt (preprocess + encode + pack +
    // scatter), prefill.
    const double e = now_s();
    VisionItems again;
    again.videos.push_back(read_frames(a.video, a.frames));
    const VisionPrompt vp = build_vision_prompt(ids, again, vision, *encoder);
    const double e_ms = (now_s() - e) * 1e3 + prefill_ms(*backend, *cache, vp, block);
    if (rep < 0) continue;
    decode.push_back((t_decode - s) * 1e3);
    preprocess.push_back((t_pre - t_decode) * 1e3);
    encode.push_back((t_enc - t_pre) * 1e3);
    prefill.push_back(t_prefill);
    total.push_back(e_ms);
  }
  nlohmann::json r = {{"side", "dllm"},
                      {"device", backend->name()},
                      {"shape", a.shape},
                      {"frames", frames},
                      {"prompt_tokens", tokens},
                      {"decode_ms", median(decode)},
                      {"preprocess_ms", median(preprocess)},
                      {"encode_ms", median(encode)},
                      {"frames_per_s", frames / (median(encode) * 1e-3)},
                      {"note", "encode_ms includes pooling + image_newline (pack)"},
                      {"prefill_ms", median(prefill)},
                      {"end_to_end_ms", median(total)}};
  if (a.images > 0) {
    // Whole images as a request's images run (encode_images: preprocess (anyres: base crop +
    // tiles), encode + pack; the next image preprocessed while one encodes).
    std::vector<RgbImage> images = read_frames(a.video, a.images);
    int64_t crops = 0;
    for (const RgbImage& img : images) {  // the base crop and the pinpoint canvas's tiles
      const FeatureGrid g = image_feature_grid({img.height, img.width}, vc);
      crops += 1 + g.tiles_high * g.tiles_wide;
    }
    std::vector<double> times;
    for (int rep = -1; rep < a.reps; ++rep) {
      const double s = now_s();
      encode_images(*encoder, images, newline);
      if (rep >= 0) times.push_back(now_s() - s);
    }
    r["images"] = static_cast<int64_t>(images.size());
    r["image_crops"] = crops;
    r["images_per_s"] = static_cast<double>(images.size()) / median(times);
    r["image_crops_per_s"] = static_cast<double>(crops) / median(times);
  }
  std::printf("\n%s vision prompt on %s: %lld frames, %lld prompt tokens, median of %d\n\n",
              a.shape.c_str(), backend->name().c_str(), static_cast<long long>(frames),
              static_cast<long long>(tokens), a.reps);
  std::printf(
      "| decode ms | preprocess ms | encode + pack ms (frames/s) | prefill ms | "
      "end to end ms | images/s |\n|---|---|---|---|---|---|\n");
  char images_per_s[32] = "-";
  if (r.contains("images_per_s"))
    std::snprintf(images_per_s, sizeof images_per_s, "%.1f", r["images_per_s"].get<double>());
  std::printf("| %.1f | %.1f | %.1f (%.1f) | %.1f | %.1f | %s |\n", r["decode_ms"].get<double>(),
              r["preprocess_ms"].get<double>(), r["encode_ms"].get<double>(),
              r["frames_per_s"].get<double>(), r["prefill_ms"].get<double>(),
              r["end_to_end_ms"].get<double>(), images_per_s);
  return r;
}

}  // namespace dllm::cli
