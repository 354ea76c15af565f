// Vision prompts (SDAR-VL) on the CUDA backend: the vision kernels against the CPU ops on random
// inputs; the CUDA encoder's features against the CPU encoder's and the reference's (bf16
// tolerance), its heads padded as the kernels need; its packing on the device against the host's;
// the CPU encoder's features spliced into the bf16 forward (CudaBackend::splice_input_embeddings)
// give the reference logits within 1e-2, batched with a text-only sequence as alone; the engine
// decodes a vision request on the GPU (its encoder the CUDA one).
#include <gtest/gtest.h>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "backend/backend.h"
#include "backend/cpu/cpu_vision_ops.h"
#include "backend/cuda/feature_packing_kernels.h"
#include "core/dtype.h"
#include "cuda/cuda_test_util.h"
#include "dllm/engine.h"
#include "io/json_file.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "support/safetensors_writer.h"
#include "support/test_paths.h"
#include "vision/feature_packing.h"
#include "vision/image_decode.h"
#include "vision/image_processor.h"
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

TEST(CudaVision, KernelsMatchTheCpuOps) {
  std::mt19937 rng(23);
  const int rows = 37;
  // LayerNorm with bias (rows of an offset mean, as a residual stream has): a warp a row for
  // widths of whole 16-byte vectors, a block a row otherwise.
  for (int dim : {1152, 75}) {
    std::vector<float> x = test::random_floats(size_t(rows) * dim, rng, 3.0f);
    for (float& v : x) v += 5.0f;
    const std::vector<float> w = test::random_floats(dim, rng), b = test::random_floats(dim, rng);
    std::vector<float> want(x.size());
    cpu::layer_norm(x.data(), w.data(), b.data(), want.data(), rows, dim, 1e-6f);
    auto dx = test::to_device(x), dw = test::to_device(w), db = test::to_device(b);
    cuda::DeviceBuffer<cuda::bf16> out(x.size(), "test output");
    cuda::layer_norm(dx.get(), dw.get(), db.get(), out.get(), rows, dim, 1e-6f, nullptr);
    EXPECT_LE(rel_error(test::bf16_to_floats(test::to_host(out)), want), 4e-3) << dim;
  }

  // Bias + activation over a strided input: 4 columns a thread where widths allow, else 1.
  for (int cols : {300, 303}) {
    const int stride = cols + 17 - cols % 4;
    const std::vector<float> in = test::random_floats(size_t(rows) * stride, rng, 2.0f);
    const std::vector<float> bias = test::random_floats(cols, rng);
    auto din = test::to_device(in), dbias = test::to_device(bias);
    for (auto act :
         {cuda::Activation::kNone, cuda::Activation::kGeluTanh, cuda::Activation::kGeluErf}) {
      std::vector<float> ref(size_t(rows) * cols);
      for (int r = 0; r < rows; ++r)
        for (int j = 0; j < cols; ++j)
          ref[size_t(r) * cols + j] = in[size_t(r) * stride + j] + bias[j];
      if (act == cuda::Activation::kGeluTanh) cpu::gelu_tanh(ref.data(), int64_t(ref.size()));
      if (act == cuda::Activation::kGeluErf) cpu::gelu_erf(ref.data(), int64_t(ref.size()));
      cuda::DeviceBuffer<cuda::bf16> o(ref.size(), "test output");
      cuda::bias_activation(din.get(), stride, dbias.get(), act, o.get(), rows, cols, nullptr);
      EXPECT_LE(rel_error(test::bf16_to_floats(test::to_host(o)), ref), 4e-3)
          << cols << " " << int(act);
    }
  }

  // Bias into padded heads (SigLIP's 72-wide heads in 128-wide slots): the pad left as it was.
  {
    const int heads = 3, head_dim = 72, padded = 128, stride = 3 * heads * head_dim;
    const std::vector<float> in = test::random_floats(size_t(rows) * stride, rng, 2.0f);
    const std::vector<float> bias = test::random_floats(heads * head_dim, rng);
    std::vector<float> ref(size_t(rows) * heads * padded, 7.0f);  // the pad's old value
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < head_dim; ++i)
          ref[(size_t(r) * heads + h) * padded + i] =
              in[size_t(r) * stride + h * head_dim + i] + bias[h * head_dim + i];
    auto din = test::to_device(in), dbias = test::to_device(bias);
    auto o = test::to_device(std::vector<cuda::bf16>(ref.size(), __float2bfloat16(7.0f)));
    cuda::bias_to_padded_heads(din.get(), stride, dbias.get(), o.get(), rows, heads, head_dim,
                               padded, nullptr);
    EXPECT_LE(rel_error(test::bf16_to_floats(test::to_host(o)), ref), 4e-3);
  }

  // Periodic row adds.
  for (int cols : {300, 303}) {
    const int period = 5;
    const std::vector<float> table = test::random_floats(size_t(period) * cols, rng);
    std::vector<float> acc = test::random_floats(size_t(rows) * cols, rng), ref = acc;
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < cols; ++j)
        ref[size_t(r) * cols + j] += table[size_t(r % period) * cols + j];
    auto dacc = test::to_device(acc), dtable = test::to_device(table);
    cuda::add_rows_periodic(dacc.get(), dtable.get(), rows, cols, period, nullptr);
    EXPECT_LE(rel_error(test::to_host(dacc), ref), 1e-7) << cols;
  }

  // Patch unfolding: 2 crops of 28 x 28 in 14 x 14 patches.
  const int crops = 2, side = 28, patch = 14, per = side / patch, k = 3 * patch * patch;
  std::vector<float> pixels = test::random_floats(size_t(crops) * 3 * side * side, rng);
  test::round_bf16(pixels);  // exact in bf16: the unfolding must move values, not change them
  std::vector<float> cols_want(size_t(crops) * per * per * k);
  for (int c = 0; c < crops; ++c)
    for (int py = 0; py < per; ++py)
      for (int px = 0; px < per; ++px)
        for (int ch = 0; ch < 3; ++ch)
          for (int ky = 0; ky < patch; ++ky)
            for (int kx = 0; kx < patch; ++kx)
              cols_want[(size_t(c) * per * per + py * per + px) * k + (ch * patch + ky) * patch +
                        kx] =
                  pixels[((size_t(c) * 3 + ch) * side + py * patch + ky) * side + px * patch + kx];
  auto dpix = test::to_device(pixels);
  cuda::DeviceBuffer<cuda::bf16> dcols(cols_want.size(), "test output");
  cuda::unfold_patches(dpix.get(), crops, side, patch, dcols.get(), nullptr);
  EXPECT_EQ(test::bf16_to_floats(test::to_host(dcols)), cols_want);
}

// The fixture's images as crops, in the reference's order of cases.
std::vector<PixelCrops> fixture_crops(const VisionModel& vision) {
  std::vector<PixelCrops> out;
  for (const char* name : {"wide.png", "tall.jpg", "square.png", "gray.png", "alpha.png"})
    out.push_back(preprocess_image(read_image_file(fixture() / "images" / name), vision.config));
  return out;
}

TEST(CudaVision, EncoderMatchesTheCpuEncoder) {
  auto model = Model::load(fixture());
  auto vision = VisionModel::load(*model);
  auto cpu = make_cpu_vision_encoder(*vision);
  // The fixture's heads are 16 wide (the kernels take that as it is); padded to 32, 64 and 128
  // they must give the same features (SigLIP-so400m's 72-wide heads run padded to 128).
  for (int min_head_dim : {0, 32, 64, 128}) {
    auto gpu = make_cuda_vision_encoder(*vision, min_head_dim);
    for (const PixelCrops& crops : fixture_crops(*vision)) {
      const std::vector<float> want = cpu->encode(crops);
      const std::vector<float> got = gpu->encode(crops);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_LE(rel_error(got, want), 1e-2)
          << crops.crops << " crops, head_dim >= " << min_head_dim;
    }
  }
  // More crops than one chunk (8): the images' crops together give what each gives alone (up to
  // the low bits a GEMM of other rows may differ in; a chunk offset wrong would be O(1)).
  auto gpu = make_cuda_vision_encoder(*vision);
  PixelCrops many;
  std::vector<float> one_by_one;
  for (const PixelCrops& c : fixture_crops(*vision)) {
    many.crops += c.crops;
    many.side = c.side;
    many.values.insert(many.values.end(), c.values.begin(), c.values.end());
    const auto f = gpu->encode(c);
    one_by_one.insert(one_by_one.end(), f.begin(), f.end());
  }
  ASSERT_GT(many.crops, 8);
  EXPECT_LE(rel_error(gpu->encode(many), one_by_one), 5e-3);
}

std::vector<float> image_newline(const VisionModel& vision) {
  const TensorEntry& nl = *vision.tensors.image_newline;
  std::vector<float> out(static_cast<size_t>(nl.numel()));
  convert_to_f32(*nl.dtype, nl.data, out.data(), out.size());
  return out;
}

// A picture of w x h with a gradient pattern (anyres cases the fixture's files lack).
RgbImage pattern_image(int64_t w, int64_t h) {
  RgbImage img(w, h);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < 3; ++c)
        img.row(y)[x * 3 + c] = uint8_t((x * 7 + y * 13 + c * 50) % 256);
  return img;
}

TEST(CudaVision, PackingKernelsMatchTheHostResize) {
  // The same float operations in the same order as cpu::bilinear_resize, none fused: the same
  // bits (the host build does not contract to FMA either). Pooling 27 -> 14 (video), a shrink of
  // an odd grid and an enlargement, written with a gap after each row (an image's newlines).
  std::mt19937 rng(14);
  struct Case {
    int grids, h, w, oh, ow, gap;
  };
  for (const Case& k :
       {Case{3, 27, 27, 14, 14, 0}, Case{1, 50, 33, 29, 20, 1}, Case{2, 5, 7, 9, 11, 2}}) {
    const int c = 40;
    const std::vector<float> in = test::random_floats(size_t(k.grids) * k.h * k.w * c, rng, 2.0f);
    const int64_t row = int64_t(k.ow + k.gap) * c, grid = row * k.oh;
    std::vector<float> want(size_t(k.grids * grid), 0.0f);
    std::vector<float> packed(size_t(k.oh) * k.ow * c);
    for (int g = 0; g < k.grids; ++g) {
      cpu::bilinear_resize(in.data() + size_t(g) * k.h * k.w * c, k.h, k.w, c, packed.data(), k.oh,
                           k.ow);
      for (int y = 0; y < k.oh; ++y)
        std::copy_n(packed.data() + size_t(y) * k.ow * c, k.ow * c,
                    want.data() + g * grid + y * row);
    }
    auto din = test::to_device(in);
    auto dout = test::to_device(std::vector<float>(want.size(), 0.0f));
    cuda::bilinear_resize(din.get(), k.grids, k.h, k.w, c, dout.get(), k.oh, k.ow, {grid, row},
                          nullptr);
    EXPECT_EQ(rel_error(test::to_host(dout), want), 0.0)
        << k.h << "x" << k.w << " -> " << k.oh << "x" << k.ow;
  }
}

TEST(CudaVision, PackedImageRowsMatchTheHostPacking) {
  auto model = Model::load(fixture());
  auto vision = VisionModel::load(*model);
  const VisionConfig& vc = vision->config;
  const std::vector<float> newline = image_newline(*vision);
  auto cpu = make_cpu_vision_encoder(*vision);
  auto gpu = make_cuda_vision_encoder(*vision);
  std::vector<std::pair<std::string, RgbImage>> images;
  for (const char* name :
       {"wide.png", "tall.jpg", "square.png", "gray.png", "alpha.png", "large.jpg"})
    images.emplace_back(name, read_image_file(fixture() / "images" / name));
  // 2 x 4 tiles (9 crops: two chunks of the encoder, unshrunk), 6 x 1 (tall), 4 x 4 (shrunk).
  images.emplace_back("1536x768", pattern_image(1536, 768));
  images.emplace_back("300x1700", pattern_image(300, 1700));
  images.emplace_back("1500x1500", pattern_image(1500, 1500));
  int shrunk = 0, multi_chunk = 0;
  for (const auto& [name, img] : images) {
    const Size2 size{img.height, img.width};
    const PixelCrops crops = preprocess_image(img, vc);
    shrunk += image_feature_grid(size, vc).downscaled;
    multi_chunk += crops.crops > 8;
    const std::vector<float> got = gpu->encode_image(crops, size, newline);
    // The GPU's own features packed on the host: the same bits (copies, and the shrink's
    // arithmetic as the host's).
    const std::vector<float> host = pack_image_features(gpu->encode(crops), size, newline, vc);
    ASSERT_EQ(got.size(), host.size()) << name;
    EXPECT_EQ(rel_error(got, host), 0.0) << name;
    EXPECT_LE(rel_error(got, cpu->encode_image(crops, size, newline)), 1e-2) << name;
  }
  EXPECT_GE(shrunk, 1);       // anyres_max_9's bilinear shrink
  EXPECT_GE(multi_chunk, 2);  // tiles gathered from more than one chunk of crops
}

TEST(CudaVision, PackedVideoRowsMatchTheHostPackingAndFrameByFrame) {
  auto model = Model::load(fixture());
  auto vision = VisionModel::load(*model);
  const VisionConfig& vc = vision->config;
  const std::vector<float> newline = image_newline(*vision);
  const int64_t D = vc.text_hidden_size, per_frame = vc.pooled_side() * vc.pooled_side() * D;
  // 12 frames (two chunks of 8): the fixture's images twice, each resized to the crop.
  std::vector<RgbImage> frames;
  for (int rep = 0; rep < 2; ++rep)
    for (const char* name :
         {"wide.png", "tall.jpg", "square.png", "gray.png", "alpha.png", "large.jpg"})
      frames.push_back(read_image_file(fixture() / "images" / name));
  const auto n = static_cast<int64_t>(frames.size());
  const PixelCrops crops = preprocess_frames(frames, vc);
  auto cpu = make_cpu_vision_encoder(*vision);
  auto gpu = make_cuda_vision_encoder(*vision);
  const std::vector<float> got = gpu->encode_video(crops, n, newline);
  const std::vector<float> host = pack_video_features(gpu->encode(crops), n, newline, vc);
  ASSERT_EQ(got.size(), host.size());
  EXPECT_EQ(rel_error(got, host), 0.0);
  EXPECT_LE(rel_error(got, cpu->encode_video(crops, n, newline)), 1e-2);
  // From the frames, preprocessed a chunk at a time beside the encoding: the same bits.
  EXPECT_EQ(gpu->encode_video_frames(frames, newline), got);
  // Each frame alone: its pooled rows (up to the low bits a GEMM over other rows may differ in)
  // and the newline.
  for (int64_t f = 0; f < n; ++f) {
    const std::vector<float> one =
        gpu->encode_video(preprocess_frames({frames[size_t(f)]}, vc), 1, newline);
    ASSERT_EQ(int64_t(one.size()), per_frame + D);
    const std::vector<float> in_batch(got.begin() + f * per_frame,
                                      got.begin() + (f + 1) * per_frame);
    EXPECT_LE(rel_error(std::vector<float>(one.begin(), one.end() - D), in_batch), 5e-3) << f;
    EXPECT_EQ(std::vector<float>(one.end() - D, one.end()), newline);
  }
}

// The fixture's language model with a SigLIP tower of another shape and random weights, scaled
// as tools/make_sdar_vl_fixture.py draws them.
struct TowerShape {
  int64_t hidden, heads, intermediate, layers;
};
std::filesystem::path tower_checkpoint(const TowerShape& shape) {
  const auto dir = test::temp_dir("vision-tower");
  const SafetensorsFile src(fixture() / "model.safetensors");
  std::vector<test::RawTensor> out;
  for (const TensorEntry& t : src.tensors())
    if (t.name.rfind("language_model.", 0) == 0 || t.name == "image_newline")
      out.push_back(
          {t.name, t.dtype_name, t.shape, std::vector<unsigned char>(t.data, t.data + t.nbytes)});
  std::mt19937 rng(72);
  auto add = [&](const std::string& name, std::vector<int64_t> dims, float scale, float mean = 0) {
    std::vector<float> v = test::random_floats(size_t(HostTensor::count(dims)), rng, scale);
    for (float& x : v) x += mean;
    out.push_back(test::bf16_tensor(name, dims, v));
  };
  const int64_t d = shape.hidden, ff = shape.intermediate, text = 64;
  const std::string p = "vision_tower.vision_model.";
  add(p + "embeddings.patch_embedding.weight", {d, 3, 14, 14}, 1.0f / std::sqrt(588.0f));
  add(p + "embeddings.patch_embedding.bias", {d}, 0.1f);
  add(p + "embeddings.position_embedding.weight", {729, d}, 0.5f);
  for (int64_t i = 0; i < shape.layers; ++i) {
    const std::string l = p + "encoder.layers." + std::to_string(i) + ".";
    for (const char* n : {"layer_norm1", "layer_norm2"}) {
      add(l + n + ".weight", {d}, 0.1f, 1.0f);
      add(l + n + ".bias", {d}, 0.1f);
    }
    for (const char* n : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      add(l + "self_attn." + n + ".weight", {d, d}, 1.0f / std::sqrt(float(d)));
      add(l + "self_attn." + n + ".bias", {d}, 0.1f);
    }
    add(l + "mlp.fc1.weight", {ff, d}, 1.0f / std::sqrt(float(d)));
    add(l + "mlp.fc1.bias", {ff}, 0.1f);
    add(l + "mlp.fc2.weight", {d, ff}, 1.0f / std::sqrt(float(ff)));
    add(l + "mlp.fc2.bias", {d}, 0.1f);
  }
  add(p + "post_layernorm.weight", {d}, 0.1f, 1.0f);
  add(p + "post_layernorm.bias", {d}, 0.1f);
  add("multi_modal_projector.linear_1.weight", {text, d}, 1.0f / std::sqrt(float(d)));
  add("multi_modal_projector.linear_1.bias", {text}, 0.1f);
  add("multi_modal_projector.linear_2.weight", {text, text}, 1.0f / std::sqrt(float(text)));
  add("multi_modal_projector.linear_2.bias", {text}, 0.1f);
  test::write_file(dir / "model.safetensors", test::safetensors_bytes(out));
  nlohmann::json config = read_json_file(fixture() / "config.json");
  config["vision_config"]["hidden_size"] = d;
  config["vision_config"]["num_attention_heads"] = shape.heads;
  config["vision_config"]["intermediate_size"] = ff;
  config["vision_config"]["num_hidden_layers"] = shape.layers;
  std::ofstream(dir / "config.json") << config.dump();
  std::filesystem::copy_file(fixture() / "preprocessor_config.json",
                             dir / "preprocessor_config.json");
  return dir;
}

TEST(CudaVision, So400mHeadWidthRunsPaddedAndMatchesTheCpuEncoder) {
  // SigLIP-so400m's head width (72: two heads of a 144-wide tower), one layer: padded to 128.
  auto model = Model::load(tower_checkpoint({144, 2, 64, 1}));
  auto vision = VisionModel::load(*model);
  ASSERT_EQ(vision->config.hidden_size / vision->config.num_heads, 72);
  auto cpu = make_cpu_vision_encoder(*vision);
  auto gpu = make_cuda_vision_encoder(*vision);
  for (const PixelCrops& crops : fixture_crops(*vision)) {
    const std::vector<float> want = cpu->encode(crops);
    EXPECT_LE(rel_error(gpu->encode(crops), want), 1e-2) << crops.crops << " crops";
  }
}

// The SigLIP-so400m tower at its real size (27 layers, 1152 wide, 16 heads of 72 padded to 128,
// MLP 4304; random weights; the projector to the fixture's 64-wide text side): finite features,
// and every encode of the same 16 crops gives the same bits. Its own suite, so that
// scripts/gpu-check.sh's memcheck of CudaVision.* leaves it out. (Its speed is `dllm bench --shape
// ... --video`'s, docs/benchmarks.md; this test used to print a throughput.)
TEST(CudaVisionFullSize, So400mTowerRepeatsItsBits) {
  auto model = Model::load(tower_checkpoint({1152, 16, 4304, 27}));
  auto vision = VisionModel::load(*model);
  auto gpu = make_cuda_vision_encoder(*vision);
  PixelCrops crops;
  crops.side = vision->config.image_size;
  crops.crops = 16;
  std::mt19937 rng(5);
  crops.values = test::random_floats(size_t(crops.crops * 3 * crops.side * crops.side), rng);
  const std::vector<float> first = gpu->encode(crops);
  for (float v : first) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(gpu->encode(crops), first);
}

TEST(CudaVision, EncoderFeaturesMatchTheReference) {
  // The reference's packed image features (transformers' SigLIP and projector,
  // tools/make_sdar_vl_fixture.py) at its sampled rows, within bf16's 1e-2.
  auto model = Model::load(fixture());
  auto vision = VisionModel::load(*model);
  auto gpu = make_cuda_vision_encoder(*vision);
  const auto ref = read_json_file(fixture() / "reference.json");
  const std::vector<float> newline = image_newline(*vision);
  const int64_t D = vision->config.text_hidden_size;
  for (const char* name : {"wide", "tall", "square", "alpha", "gray", "large"}) {
    const auto& info = ref["images"][name];
    const RgbImage img = read_image_file(fixture() / info["file"].get<std::string>());
    const std::vector<float> feats =
        gpu->encode_image(preprocess_image(img, vision->config), {img.height, img.width}, newline);
    ASSERT_EQ(static_cast<int64_t>(feats.size()), info["tokens"].get<int64_t>() * D) << name;
    std::vector<float> picked;
    for (int64_t r : info["rows"].get<std::vector<int64_t>>())
      picked.insert(picked.end(), feats.begin() + r * D, feats.begin() + (r + 1) * D);
    const NpyArray want = read_npy(fixture() / (std::string("features_") + name + ".npy"));
    EXPECT_LE(rel_error(picked, want.f32), 1e-2) << name;
  }
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
  // bf16 may flip a near tie; the reference trajectory's tokens are expected here (the
  // engine on the GPU encodes with the CUDA encoder).
  EXPECT_EQ(out.token_ids, c["greedy_tokens"].get<std::vector<int32_t>>());
}

}  // namespace
}  // namespace dllm
