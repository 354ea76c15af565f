// The C++ LLaVA-OneVision processor against the independent Python reference
// (tools/reference_sdar_vl.py, torchvision's uint8 antialiased bicubic): decoded images, the
// resized and letterboxed anyres canvas and the base crop byte for byte, the normalised crops' sum,
// the pinpoint and the token count of every test image; bad images get clear errors.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "support/video_refusal.h"
#include "vision/image_decode.h"
#include "vision/image_processor.h"
#include "vision/resize_bicubic.h"
#include "vision/video_decode.h"
#include "vision_test_util.h"

namespace dllm {
namespace {

size_t count_differing(const RgbImage& a, const RgbImage& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) n += a.pixels[i] != b.pixels[i];
  return n;
}

class ImageProcessorParity : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = Model::load(test::sdar_vl_fixture());
    vision_ = VisionModel::load(*model_);
    ref_ = test::sdar_vl_reference();
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<VisionModel> vision_;
  nlohmann::json ref_;
};

TEST_F(ImageProcessorParity, CanvasAndBaseCropMatchTheReferenceByteForByte) {
  const auto dir = test::sdar_vl_fixture();
  int checked = 0;
  for (const auto& [name, info] : ref_["images"].items()) {
    const RgbImage img = read_image_file(dir / info["file"].get<std::string>());
    ASSERT_EQ(img.height, info["height"].get<int64_t>()) << name;
    ASSERT_EQ(img.width, info["width"].get<int64_t>()) << name;
    const Size2 best = select_best_resolution({img.height, img.width}, vision_->config);
    EXPECT_EQ(best.height, info["best_resolution"][0].get<int64_t>()) << name;
    EXPECT_EQ(best.width, info["best_resolution"][1].get<int64_t>()) << name;
    EXPECT_EQ(image_token_count({img.height, img.width}, vision_->config),
              info["tokens"].get<int64_t>())
        << name;
    if (!std::filesystem::exists(dir / (name + ".canvas.png"))) continue;
    const RgbImage canvas = anyres_canvas(img, vision_->config);
    const RgbImage want_canvas = read_image_file(dir / (name + ".canvas.png"));
    ASSERT_EQ(canvas.width, want_canvas.width) << name;
    ASSERT_EQ(canvas.height, want_canvas.height) << name;
    EXPECT_EQ(count_differing(canvas, want_canvas), 0u) << name << " canvas";
    const RgbImage base = resize_bicubic(img, 384, 384);
    EXPECT_EQ(count_differing(base, read_image_file(dir / (name + ".base.png"))), 0u)
        << name << " base crop";
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

TEST_F(ImageProcessorParity, NormalisedCropsMatchTheReference) {
  for (const auto& [name, info] : ref_["images"].items()) {
    const RgbImage img = read_image_file(test::sdar_vl_fixture() / info["file"].get<std::string>());
    const PixelCrops crops = preprocess_image(img, vision_->config);
    EXPECT_EQ(crops.crops, info["crops"].get<int64_t>()) << name;
    double sum = 0;
    for (float v : crops.values) sum += v;
    const double want = info["pixel_sum"].get<double>();
    // Sums of 10^6 values each within 1 ulp of the reference's.
    EXPECT_NEAR(sum, want, 1e-3 * std::max(1.0, std::abs(want)) + 0.5) << name;
  }
}

TEST_F(ImageProcessorParity, VideoFramesAreSampledAndDecodedAsTheReference) {
  const auto& v = ref_["video"];
  const auto path = test::sdar_vl_fixture() / v["file"].get<std::string>();
  if (!video_decoding_available()) {
    EXPECT_TRUE(test::refuses_video([&] { read_video_file(path, v["sampled"]); }, path.string()));
    return;
  }
  const DecodedVideo video = read_video_file(path, v["sampled"]);
  EXPECT_EQ(video.total_frames, v["frames"].get<int64_t>());
  EXPECT_EQ(video.indices, v["indices"].get<std::vector<int64_t>>());
  ASSERT_EQ(video.frames.size(), v["frame_checksums"].size());
  for (size_t f = 0; f < video.frames.size(); ++f) {
    int64_t plain = 0, weighted = 0;
    const auto& px = video.frames[f].pixels;
    for (size_t i = 0; i < px.size(); ++i) {
      plain += px[i];
      weighted += int64_t{px[i]} * static_cast<int64_t>(i % 251);
    }
    EXPECT_EQ(plain, v["frame_checksums"][f][0].get<int64_t>()) << "frame " << f;
    EXPECT_EQ(weighted, v["frame_checksums"][f][1].get<int64_t>()) << "frame " << f;
  }
}

TEST(UniformFrameIndices, AreNumpyLinspaceTruncated) {
  EXPECT_EQ(uniform_frame_indices(10, 4), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(uniform_frame_indices(100, 3), (std::vector<int64_t>{0, 49, 99}));
  EXPECT_EQ(uniform_frame_indices(7, 1), (std::vector<int64_t>{0}));
  EXPECT_EQ(uniform_frame_indices(3, 8), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(uniform_frame_indices(32, 8), (std::vector<int64_t>{0, 4, 8, 13, 17, 22, 26, 31}));
}

// Naive bicubic (double, no fixed point) bounds the fixed-point kernel: within 1 level.
TEST(ResizeBicubic, AgreesWithAFloatingPointResamplerWithinOneLevel) {
  RgbImage img(37, 23);
  uint32_t s = 12345;
  for (auto& p : img.pixels) p = static_cast<uint8_t>((s = s * 1664525u + 1013904223u) >> 24);
  for (auto [w, h] : {std::pair{37, 23}, std::pair{20, 50}, std::pair{90, 11}}) {
    const RgbImage out = resize_bicubic(img, w, h);
    ASSERT_EQ(out.width, w);
    ASSERT_EQ(out.height, h);
    if (w == 37 && h == 23) {
      EXPECT_EQ(out.pixels, img.pixels);
      continue;
    }
    // Two separable passes in double, rounded once at the end.
    auto taps = [](int64_t in, int64_t n_out, int64_t o,
                   std::vector<std::pair<int64_t, double>>& t) {
      const double scale = double(in) / n_out, fs = std::max(scale, 1.0), sup = 2 * fs;
      const double c = (o + 0.5) * scale;
      t.clear();
      double tot = 0;
      for (int64_t i = std::max<int64_t>(0, int64_t(c - sup + 0.5));
           i < std::min<int64_t>(in, int64_t(c + sup + 0.5)); ++i) {
        double x = std::abs((i - c + 0.5) / fs), k = 0;
        if (x < 1)
          k = (1.5 * x - 2.5) * x * x + 1;
        else if (x < 2)
          k = ((-0.5 * x + 2.5) * x - 4) * x + 2;
        t.emplace_back(i, k);
        tot += k;
      }
      for (auto& [i, k] : t) k /= tot;
    };
    std::vector<std::pair<int64_t, double>> ty, tx;
    int64_t worst = 0;
    for (int64_t y = 0; y < h; ++y) {
      taps(img.height, h, y, ty);
      for (int64_t x = 0; x < w; ++x) {
        taps(img.width, w, x, tx);
        for (int c = 0; c < 3; ++c) {
          double v = 0;
          for (auto [iy, ky] : ty) {
            double row = 0;
            for (auto [ix, kx] : tx) row += kx * img.row(iy)[ix * 3 + c];
            v += ky * std::clamp(std::round(row), 0.0, 255.0);
          }
          const int64_t want = static_cast<int64_t>(std::clamp(std::round(v), 0.0, 255.0));
          worst = std::max<int64_t>(worst, std::abs(want - out.row(y)[x * 3 + c]));
        }
      }
    }
    EXPECT_LE(worst, 1) << w << "x" << h;
  }
}

std::vector<uint8_t> file_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

void expect_decode_error(std::span<const uint8_t> bytes, const std::string& needle,
                         const ImageLimits& limits = {}) {
  try {
    decode_image(bytes, "test image", limits);
    ADD_FAILURE() << "decoded; expected an error with: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test image"), std::string::npos) << e.what();
  }
}

TEST(ImageDecode, BadImagesGetClearErrors) {
  const auto dir = test::sdar_vl_fixture() / "images";
  const auto png = file_bytes(dir / "wide.png"), jpg = file_bytes(dir / "tall.jpg");
  ASSERT_GT(png.size(), 100u) << dir;  // the slices below need the fixture files
  ASSERT_GT(jpg.size(), 100u) << dir;
  expect_decode_error(std::span(png).first(png.size() / 2), "PNG");
  expect_decode_error(std::span(jpg).first(jpg.size() / 2), "JPEG");
  expect_decode_error(std::span(png).first(5), "not a JPEG, PNG or WebP");
  const std::vector<uint8_t> text = {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'};
  expect_decode_error(text, "not a JPEG, PNG or WebP");
  const std::vector<uint8_t> webp = {'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'};
  expect_decode_error(webp, "cannot decode WebP");
  expect_decode_error({}, "not a JPEG, PNG or WebP");
  // A decompression bomb is refused from its header, before pixels are allocated.
  expect_decode_error(png, "decompression bomb", ImageLimits{16384, 1000});
  expect_decode_error(jpg, "at most 100", ImageLimits{100, 1 << 26});
  // Flipped bytes in the compressed data.
  auto corrupt = png;
  for (size_t i = 100; i < corrupt.size(); i += 7) corrupt[i] ^= 0x5a;
  expect_decode_error(corrupt, "PNG");
}

TEST(ImageDecode, GreyAndAlphaImagesBecomeRgbLikePilConvert) {
  // Covered byte for byte by the canvas test (gray.png, alpha.png); here: the sizes.
  const auto dir = test::sdar_vl_fixture() / "images";
  const RgbImage g = read_image_file(dir / "gray.png");
  EXPECT_EQ(g.width, 70);
  EXPECT_EQ(g.height, 130);
  for (size_t i = 0; i < g.pixels.size(); i += 3) {
    ASSERT_EQ(g.pixels[i], g.pixels[i + 1]);
    ASSERT_EQ(g.pixels[i], g.pixels[i + 2]);
  }
}

TEST(VideoDecode, BadVideosGetClearErrors) {
  const auto dir = test::temp_dir("video-decode");
  std::ofstream(dir / "junk.mp4") << "this is not a video at all";
  for (auto [path, needle] : {std::pair{dir / "junk.mp4", std::string("junk.mp4")},
                              std::pair{dir / "missing.mp4", std::string("missing.mp4")},
                              std::pair{dir, dir.filename().string()}}) {
    try {
      read_video_file(path, 4);
      ADD_FAILURE() << path << " decoded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(read_video_file(test::sdar_vl_fixture() / "video.mkv", 0), Error);
}

// A video held in memory (a server's data: URL) decodes as its file does; bad bytes are errors
// naming the source, never a crash.
TEST(VideoDecode, BytesInMemoryDecodeAsTheirFile) {
  const auto path = test::sdar_vl_fixture() / "video.mkv";
  const std::vector<uint8_t> bytes = file_bytes(path);
  if (!video_decoding_available()) {  // both entry points refuse, each naming its source
    EXPECT_TRUE(test::refuses_video([&] { read_video_file(path, 4); }, path.string()));
    EXPECT_TRUE(test::refuses_video([&] { decode_video(bytes, "messages[0].content[0]", 4); },
                                    "messages[0].content[0]"));
    return;
  }
  for (int64_t frames : {1, 4, 32}) {
    const DecodedVideo from_file = read_video_file(path, frames);
    const DecodedVideo from_memory = decode_video(bytes, "messages[0].content[0]", frames);
    EXPECT_EQ(from_memory.total_frames, from_file.total_frames);
    EXPECT_EQ(from_memory.indices, from_file.indices);
    ASSERT_EQ(from_memory.frames.size(), from_file.frames.size());
    for (size_t f = 0; f < from_file.frames.size(); ++f)
      EXPECT_EQ(from_memory.frames[f].pixels, from_file.frames[f].pixels) << frames << " " << f;
  }
  // The sampled frames' RGB bytes are bounded: 3 frames of 64x48 fit in 3 x 9216 bytes, 4 not.
  ImageLimits small;
  small.max_video_bytes = 3 * 64 * 48 * 3;
  EXPECT_EQ(decode_video(bytes, "v", 3, small).frames.size(), 3u);
  try {
    decode_video(bytes, "v", 4, small);
    ADD_FAILURE() << "4 frames decoded past the limit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("v: 4 frames of 64x48 would take more than"),
              std::string::npos)
        << e.what();
  }
  const std::string junk = "this is not a video at all";
  for (const auto& bad : {std::vector<uint8_t>(junk.begin(), junk.end()), std::vector<uint8_t>{},
                          std::vector<uint8_t>(bytes.begin(), bytes.begin() + 200)}) {
    try {
      decode_video(bad, "messages[0].content[3]", 4);
      ADD_FAILURE() << bad.size() << " bytes decoded";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("messages[0].content[3]: ", 0), 0u) << e.what();
    }
  }
}

}  // namespace
}  // namespace dllm
