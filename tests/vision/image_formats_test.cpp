// Image formats beyond plain JPEG / PNG (tests/fixtures/images, written by Pillow:
// tools/make_image_decode_fixtures.py): CMYK JPEG, EXIF-rotated JPEG, lossy / lossless / alpha
// WebP decode to exactly the RGB picture Pillow makes of them (Image.open, convert("RGB"), no EXIF
// rotation: SDAR-VL's generate.py hands Image.open's result to the processor as it is); animated
// and damaged WebP files are clear errors.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "support/test_paths.h"
#include "vision/image_decode.h"

namespace dllm {
namespace {

std::filesystem::path image(const std::string& name) {
  return test::fixtures_dir() / "images" / name;
}

std::vector<uint8_t> file_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

void expect_like_pillow(const std::string& name) {
  const RgbImage got = read_image_file(image(name));
  const RgbImage want = read_image_file(image(name + ".rgb.png"));  // Pillow's, lossless
  ASSERT_EQ(got.width, want.width) << name;
  ASSERT_EQ(got.height, want.height) << name;
  size_t differing = 0;
  for (size_t i = 0; i < got.pixels.size(); ++i) differing += got.pixels[i] != want.pixels[i];
  EXPECT_EQ(differing, 0u) << name << ": " << differing << " of " << got.pixels.size()
                           << " samples differ from Pillow's";
}

TEST(ImageFormats, CmykJpegIsConvertedAsPillowDoes) {
  expect_like_pillow("cmyk.jpg");
}

TEST(ImageFormats, ExifOrientationIsNotApplied) {
  // Stored 40 x 24 with orientation 6 ("rotate 90"): Pillow's Image.open keeps it 40 x 24.
  expect_like_pillow("exif_rotated.jpg");
  EXPECT_EQ(read_image_file(image("exif_rotated.jpg")).width, 40);
}

TEST(ImageFormats, WebpLossyLosslessAndAlphaDecodeAsPillow) {
  expect_like_pillow("lossy.webp");
  expect_like_pillow("lossless.webp");
  expect_like_pillow("alpha.webp");
}

TEST(ImageFormats, BadWebpFilesGetClearErrors) {
  auto expect_error = [](std::span<const uint8_t> bytes, const std::string& needle,
                         const ImageLimits& limits = {}) {
    try {
      decode_image(bytes, "test.webp", limits);
      ADD_FAILURE() << "decoded; expected an error with: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("test.webp"), std::string::npos) << e.what();
    }
  };
  expect_error(file_bytes(image("animated.webp")), "animated WebP is not supported");
  for (const char* name : {"lossy.webp", "lossless.webp", "alpha.webp"}) {
    const auto webp = file_bytes(image(name));
    ASSERT_GT(webp.size(), 100u) << name;
    expect_error(std::span(webp).first(webp.size() / 2), "cannot decode WebP");
    expect_error(std::span(webp).first(14), "cannot decode WebP");
    expect_error(webp, "decompression bomb", ImageLimits{16384, 100});
    auto corrupt = webp;
    for (size_t i = 40; i < corrupt.size(); i += 5) corrupt[i] ^= 0x5a;
    try {  // flipped bits may still decode (lossy data has no checksum); it must not crash
      decode_image(corrupt, "test.webp");
    } catch (const Error&) {
    }
  }
  const std::vector<uint8_t> header_only = {'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'};
  expect_error(header_only, "cannot decode WebP");
}

}  // namespace
}  // namespace dllm
