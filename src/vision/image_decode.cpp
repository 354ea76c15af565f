#include "vision/image_decode.h"

#include <jpeglib.h>
#include <png.h>
#include <webp/decode.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "io/regular_file.h"

namespace dllm {
namespace {

void check_dimensions(int64_t w, int64_t h, const std::string& source, const ImageLimits& lim) {
  if (w < 1 || h < 1) fail(source, ": image has no pixels (", w, "x", h, ")");
  if (w > lim.max_side || h > lim.max_side)
    fail(source, ": image is ", w, "x", h, "; each side must be at most ", lim.max_side, " pixels");
  if (w * h > lim.max_pixels)
    fail(source, ": image is ", w, "x", h, " = ", w * h, " pixels, more than the accepted ",
         lim.max_pixels, " (decompression bomb guard)");
}

// ---------------------------------------------------------------- JPEG

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (level -1: corrupt data, premature end) are counted, not printed; the caller refuses
// an image that had any.
void jpeg_count_warnings(j_common_ptr cinfo, int level) {
  if (level < 0) ++cinfo->err->num_warnings;
}

// A CMYK JPEG row as PIL converts it: PIL reads every CMYK JPEG as Adobe writes them, inverted
// ("CMYK;I": c = 255 - stored), then convert("RGB") takes r = (255 - k) - c (255 - k) / 255 with
// its rounded MULDIV255, i.e. r = stored_c * stored_k / 255 rounded as PIL does.
void inverted_cmyk_to_rgb(const uint8_t* cmyk, uint8_t* rgb, size_t width) {
  auto muldiv255 = [](int a, int b) {
    const int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
  };
  for (size_t x = 0; x < width; ++x, cmyk += 4, rgb += 3) {
    const int nk = cmyk[3];  // 255 - k with k = 255 - stored
    for (int c = 0; c < 3; ++c)
      rgb[c] = static_cast<uint8_t>(std::clamp(nk - muldiv255(255 - cmyk[c], nk), 0, 255));
  }
}

// libjpeg reports errors by longjmp; nothing with a destructor is created between setjmp and the
// calls that may jump (buffers are sized there but owned by the caller, the message is copied
// after).
bool decode_jpeg_into(jpeg_decompress_struct& cinfo, JpegError& err, std::span<const uint8_t> b,
                      RgbImage& out, std::vector<uint8_t>& cmyk_row, const std::string& source,
                      const ImageLimits& lim, std::string& error) {
  if (setjmp(err.jump)) {
    error = err.message;
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, b.data(), static_cast<unsigned long>(b.size()));
  jpeg_read_header(&cinfo, TRUE);
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  // Greyscale and YCbCr are converted to RGB by the library; CMYK (and YCCK) come out as CMYK
  // and are converted below.
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  check_dimensions(cinfo.image_width, cinfo.image_height, source, lim);
  jpeg_start_decompress(&cinfo);
  out = RgbImage(cinfo.output_width, cinfo.output_height);
  if (cmyk) cmyk_row.resize(static_cast<size_t>(cinfo.output_width) * 4);
  while (cinfo.output_scanline < cinfo.output_height) {
    const JDIMENSION y = cinfo.output_scanline;
    JSAMPROW row = cmyk ? cmyk_row.data() : out.row(y);
    jpeg_read_scanlines(&cinfo, &row, 1);
    if (cmyk) inverted_cmyk_to_rgb(cmyk_row.data(), out.row(y), cinfo.output_width);
  }
  jpeg_finish_decompress(&cinfo);
  return true;
}

RgbImage decode_jpeg(std::span<const uint8_t> bytes, const std::string& source,
                     const ImageLimits& lim) {
  jpeg_decompress_struct cinfo{};
  JpegError err{};
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  err.mgr.emit_message = jpeg_count_warnings;
  RgbImage out;
  std::vector<uint8_t> cmyk_row;
  std::string error;
  bool ok = false;
  try {
    ok = decode_jpeg_into(cinfo, err, bytes, out, cmyk_row, source, lim, error);
  } catch (...) {
    jpeg_destroy_decompress(&cinfo);
    throw;
  }
  // A truncated stream is not an error to libjpeg (it pads with grey and warns): refuse it.
  if (ok && err.mgr.num_warnings > 0) {
    ok = false;
    error = "corrupt or truncated JPEG data";
  }
  jpeg_destroy_decompress(&cinfo);
  if (!ok) fail(source, ": cannot decode JPEG: ", error);
  return out;
}

// ---------------------------------------------------------------- PNG

struct PngReader {
  std::span<const uint8_t> bytes;
  size_t offset = 0;
  char message[256] = {};
};

void png_read_bytes(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (n > r->bytes.size() - r->offset) png_error(png, "truncated PNG data");
  std::memcpy(out, r->bytes.data() + r->offset, n);
  r->offset += n;
}

void png_error_fn(png_structp png, png_const_charp msg) {
  auto* r = static_cast<PngReader*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof r->message, "%s", msg);
  png_longjmp(png, 1);
}

void png_warning_fn(png_structp, png_const_charp) {}

bool decode_png_into(png_structp png, png_infop info, PngReader& reader, RgbImage& out,
                     const ImageLimits& lim, bool& too_large) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, &reader, png_read_bytes);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (w < 1 || h < 1 || w > lim.max_side || h > lim.max_side || int64_t{w} * h > lim.max_pixels) {
    too_large = true;
    return false;
  }
  // PIL's convert("RGB"): palette and grey expanded, alpha (and tRNS) dropped, 16-bit cut.
  png_set_expand(png);
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_gray_to_rgb(png);
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != w * 3) png_error(png, "unexpected PNG row layout");
  out = RgbImage(w, h);
  for (int p = 0; p < passes; ++p)
    for (png_uint_32 y = 0; y < h; ++y) png_read_row(png, out.row(y), nullptr);
  png_read_end(png, nullptr);
  return true;
}

RgbImage decode_png(std::span<const uint8_t> bytes, const std::string& source,
                    const ImageLimits& lim) {
  PngReader reader{bytes};
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, png_error_fn, png_warning_fn);
  if (!png) fail(source, ": cannot decode PNG: out of memory");
  png_infop info = png_create_info_struct(png);
  // Bounds libpng itself enforces before allocating (chunk sizes, row width).
  png_set_user_limits(png, static_cast<png_uint_32>(lim.max_side),
                      static_cast<png_uint_32>(lim.max_side));
  png_set_chunk_malloc_max(png, 64u << 20);
  RgbImage out;
  bool too_large = false;
  const bool ok = info && decode_png_into(png, info, reader, out, lim, too_large);
  int64_t w = info ? png_get_image_width(png, info) : 0;
  int64_t h = info ? png_get_image_height(png, info) : 0;
  png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
  if (too_large) check_dimensions(w, h, source, lim);
  if (!ok) fail(source, ": cannot decode PNG: ", reader.message[0] ? reader.message : "error");
  return out;
}

// ---------------------------------------------------------------- WebP

// A still WebP (lossy VP8 or lossless VP8L, with or without alpha) through libwebp's simple
// decoder, straight to RGB: alpha dropped as PIL's convert("RGB"), the colour channels as
// decoded (not premultiplied). Animated files are refused (PIL would show the first frame
// composited onto its canvas; nobody sends those to a VLM).
RgbImage decode_webp(std::span<const uint8_t> bytes, const std::string& source,
                     const ImageLimits& lim) {
  WebPBitstreamFeatures f{};
  const VP8StatusCode status = WebPGetFeatures(bytes.data(), bytes.size(), &f);
  if (status != VP8_STATUS_OK)
    fail(source, ": cannot decode WebP: ",
         status == VP8_STATUS_NOT_ENOUGH_DATA ? "truncated data" : "invalid header");
  if (f.has_animation) fail(source, ": animated WebP is not supported (a still image is)");
  check_dimensions(f.width, f.height, source, lim);
  RgbImage out(f.width, f.height);
  if (!WebPDecodeRGBInto(bytes.data(), bytes.size(), out.pixels.data(), out.pixels.size(),
                         static_cast<int>(f.width * 3)))
    fail(source, ": cannot decode WebP: corrupt or truncated data");
  return out;
}

bool starts_with(std::span<const uint8_t> b, std::initializer_list<uint8_t> magic) {
  if (b.size() < magic.size()) return false;
  return std::equal(magic.begin(), magic.end(), b.begin());
}

}  // namespace

RgbImage decode_image(std::span<const uint8_t> bytes, const std::string& source,
                      const ImageLimits& limits) {
  if (starts_with(bytes, {0xFF, 0xD8, 0xFF})) return decode_jpeg(bytes, source, limits);
  if (starts_with(bytes, {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'}))
    return decode_png(bytes, source, limits);
  if (starts_with(bytes, {'R', 'I', 'F', 'F'}) && bytes.size() >= 12 &&
      std::memcmp(bytes.data() + 8, "WEBP", 4) == 0)
    return decode_webp(bytes, source, limits);
  fail(source, ": not a JPEG, PNG or WebP image (", bytes.size(), " bytes, unknown signature)");
}

RgbImage read_image_file(const std::filesystem::path& path, const ImageLimits& limits) {
  const std::string data = RegularFile(path).read_all();
  return decode_image(std::span(reinterpret_cast<const uint8_t*>(data.data()), data.size()),
                      path.string(), limits);
}

}  // namespace dllm
