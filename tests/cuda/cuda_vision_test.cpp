// Vision prompts (SDAR-VL) on the CUDA backend: the CPU encoder's features spliced into the bf16
// forward (CudaBackend::splice_input_embeddings) give the reference logits within 1e-2, batched
// with a text-only sequence as alone; the engine decodes a vision request on the GPU.
#include <cstdio>
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "cuda/cuda_test_util.h"
#include "dllm/engine.h"
#include "io/json_file.h"
#include "io/npy.h"
#include "support/test_paths.h"
#include "vision/image_decode.h"
#include "vision/video_decode.h"
#include "vision/vision_prompt.h"

namespace dllm {
namespace {

using test::rel_error;

std::filesystem::path fixture() {
  return test::model_fixture("sdar-vl-tiny");
}

std::vector<int32_t> collapse(const std::vector<int32_t>& expanded) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < expanded.size(); ++i)
    if (!(i > 0 && expanded[i] == expanded[i - 1] && (expanded[i] == 300 || expanded[i] == 301)))
      ids.push_back(expanded[i]);
  return ids;
}

TEST(CudaVision, PromptLogitsMatchTheReference) {
  auto model = Model::load(fixture());
  auto vision = VisionModel::load(*model);
  auto encoder = make_cpu_vision_encoder(*vision);
  auto gpu = make_cuda_backend(*model);
  const auto ref = read_json_file(fixture() / "reference.json");
  int video_cases_left_out = 0;
  for (const auto& c : ref["cases"]) {
    // The GPU bundle is built without FFmpeg (-DDLLM_VIDEO=OFF): its video cases run in the CPU
    // suite (VisionParity.*), whose features these would splice the same way as an image's.
    if (c["video"].get<bool>() && !video_decoding_available()) {
      ++video_cases_left_out;
      continue;
    }
    VisionItems items;
    for (const auto& name : c["images"])
      items.images.push_back(read_image_file(
          fixture() / ref["images"][name.get<std::string>()]["file"].get<std::string>()));
    if (c["video"].get<bool>())
      items.videos.push_back(
          read_video_file(fixture() / "video.mkv", ref["video"]["sampled"]).frames);
    const auto vp = build_vision_prompt(collapse(c["ids"].get<std::vector<int32_t>>()), items,
                                        *vision, *encoder);
    SequenceForward f;
    f.tokens = vp.prompt.ids;
    for (size_t i = 0; i < f.tokens.size(); ++i) f.positions.push_back(static_cast<int32_t>(i));
    f.rule = AttentionRule::block_causal(4);
    f.input_embeddings = vp.embeddings;
    f.want_logits = true;
    for (int64_t r : c["rows"].get<std::vector<int64_t>>()) f.output_rows.push_back(int32_t(r));
    // A text-only sequence in the same batch must not disturb it (nor take its features).
    SequenceForward text;
    text.tokens = {5, 17, 42, 7, 9};
    text.positions = {0, 1, 2, 3, 4};
    text.rule = AttentionRule::block_causal(4);
    text.want_logits = true;
    text.output_rows = {0, 4};
    const std::vector<SequenceForward> batch = {text, f};
    const auto results = gpu->forward(batch);
    const NpyArray want = read_npy(fixture() / c["logits"].get<std::string>());
    EXPECT_LE(rel_error(results[1].logits, want.f32), 1e-2) << c["name"];
    const auto alone = gpu->forward(std::span(&text, 1))[0].logits;
    EXPECT_LE(rel_error(results[0].logits, alone), 1e-3) << c["name"];
  }
  if (video_cases_left_out > 0)
    std::printf("[ note ] %d video case(s) not run: this build has no video decoding\n",
                video_cases_left_out);
}

TEST(CudaVision, EngineDecodesAVisionRequestOnTheGpu) {
  Engine engine({.model = fixture().string(), .device = "cuda"});
  const auto ref = read_json_file(fixture() / "reference.json");
  const auto& c = ref["cases"][0];
  Request r;
  r.prompt_ids = collapse(c["ids"].get<std::vector<int32_t>>());
  r.image_files = {(fixture() / "images/wide.png").string()};
  r.max_tokens = static_cast<int32_t>(c["greedy_tokens"].size());
  r.ignore_eos = true;
  r.options = {{"remasking", "low_confidence_static"}};
  const RequestResult out = engine.generate(r);
  ASSERT_EQ(out.finish_reason, "length") << out.error;
  EXPECT_EQ(out.stats.prompt_tokens, static_cast<int64_t>(c["ids"].size()));
  // bf16 may flip a near tie; the reference trajectory's tokens are expected here.
  EXPECT_EQ(out.token_ids, c["greedy_tokens"].get<std::vector<int32_t>>());
}

}  // namespace
}  // namespace dllm
