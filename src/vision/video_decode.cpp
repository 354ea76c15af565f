#include "vision/video_decode.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
}

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>

#include "core/error.h"
#include "io/regular_file.h"

namespace dllm {
namespace {

std::string av_message(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, buf, sizeof buf);
  return buf;
}

struct FormatCloser {
  void operator()(AVFormatContext* c) const { avformat_close_input(&c); }
};
struct CodecCloser {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FrameCloser {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketCloser {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct SwsCloser {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};
using FormatPtr = std::unique_ptr<AVFormatContext, FormatCloser>;

// Where the encoded video comes from: a file path, or bytes in memory read through a custom
// AVIOContext. Either way no other file or URL may be opened on the input's behalf (a playlist
// or concat demuxer naming one is refused by the empty protocol whitelist of memory input and
// the "file" one of files).
struct VideoSource {
  std::string name;                // in errors
  std::string path;                // a file, or empty:
  std::span<const uint8_t> bytes;  // the video in memory
};

// Reads the bytes of a memory source for FFmpeg (read and seek callbacks).
struct MemoryReader {
  std::span<const uint8_t> bytes;
  int64_t pos = 0;

  static int read(void* opaque, uint8_t* buf, int size) {
    auto* r = static_cast<MemoryReader*>(opaque);
    const int64_t left = static_cast<int64_t>(r->bytes.size()) - r->pos;
    if (left <= 0) return AVERROR_EOF;
    const int n = static_cast<int>(std::min<int64_t>(left, size));
    std::memcpy(buf, r->bytes.data() + r->pos, static_cast<size_t>(n));
    r->pos += n;
    return n;
  }
  static int64_t seek(void* opaque, int64_t offset, int whence) {
    auto* r = static_cast<MemoryReader*>(opaque);
    const auto size = static_cast<int64_t>(r->bytes.size());
    if (whence & AVSEEK_SIZE) return size;
    int64_t to = offset;
    switch (whence & ~AVSEEK_FORCE) {
      case SEEK_SET:
        break;
      case SEEK_CUR:
        to += r->pos;
        break;
      case SEEK_END:
        to += size;
        break;
      default:
        return AVERROR(EINVAL);
    }
    if (to < 0 || to > size) return AVERROR(EINVAL);
    r->pos = to;
    return to;
  }
};

// An opened input: the demuxer, and for memory sources the I/O context it reads through.
struct OpenedInput {
  MemoryReader reader;
  AVIOContext* io = nullptr;
  FormatPtr fmt;
  int stream = -1;

  OpenedInput() = default;
  OpenedInput(const OpenedInput&) = delete;
  OpenedInput& operator=(const OpenedInput&) = delete;
  ~OpenedInput() {
    fmt.reset();  // before the I/O context it reads through (custom I/O is not closed by it)
    if (io) {
      av_freep(&io->buffer);
      avio_context_free(&io);
    }
  }
};

// Opens the source and finds its best video stream.
std::unique_ptr<OpenedInput> open_input(const VideoSource& src) {
  auto in = std::make_unique<OpenedInput>();
  AVFormatContext* raw = avformat_alloc_context();
  if (!raw) fail(src.name, ": out of memory opening the video");
  AVDictionary* opts = nullptr;
  if (src.path.empty()) {
    constexpr int kBuffer = 1 << 16;
    in->reader.bytes = src.bytes;
    auto* buffer = static_cast<uint8_t*>(av_malloc(kBuffer));
    in->io = buffer ? avio_alloc_context(buffer, kBuffer, 0, &in->reader, &MemoryReader::read,
                                         nullptr, &MemoryReader::seek)
                    : nullptr;
    if (!in->io) {
      av_free(buffer);
      avformat_free_context(raw);
      fail(src.name, ": out of memory opening the video");
    }
    raw->pb = in->io;
    raw->flags |= AVFMT_FLAG_CUSTOM_IO;
    av_dict_set(&opts, "protocol_whitelist", "none", 0);
  } else {
    av_dict_set(&opts, "protocol_whitelist", "file", 0);
  }
  // avformat_open_input frees the context itself on failure.
  const int e = avformat_open_input(&raw, src.path.empty() ? "" : src.path.c_str(), nullptr, &opts);
  av_dict_free(&opts);
  if (e < 0) fail(src.name, ": cannot open video: ", av_message(e));
  in->fmt.reset(raw);
  if (int e2 = avformat_find_stream_info(in->fmt.get(), nullptr); e2 < 0)
    fail(src.name, ": cannot read video stream info: ", av_message(e2));
  in->stream = av_find_best_stream(in->fmt.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (in->stream < 0) fail(src.name, ": no video stream");
  return in;
}

// Frames of the stream, counted by demuxing (no decode): one packet per frame.
int64_t count_frames(const VideoSource& src) {
  const auto in = open_input(src);
  std::unique_ptr<AVPacket, PacketCloser> pkt(av_packet_alloc());
  int64_t n = 0;
  while (av_read_frame(in->fmt.get(), pkt.get()) >= 0) {
    if (pkt->stream_index == in->stream) ++n;
    av_packet_unref(pkt.get());
  }
  return n;
}

RgbImage to_rgb(const AVFrame& f, const std::string& path, const ImageLimits& lim,
                std::unique_ptr<SwsContext, SwsCloser>& sws) {
  if (f.width < 1 || f.height < 1 || f.width > lim.max_side || f.height > lim.max_side ||
      int64_t{f.width} * f.height > lim.max_pixels)
    fail(path, ": video frame is ", f.width, "x", f.height, ", outside the accepted size");
  sws.reset(sws_getCachedContext(sws.release(), f.width, f.height,
                                 static_cast<AVPixelFormat>(f.format), f.width, f.height,
                                 AV_PIX_FMT_RGB24, SWS_BILINEAR,  // PyAV's default
                                 nullptr, nullptr, nullptr));
  if (!sws) fail(path, ": cannot convert video frames of pixel format ", f.format, " to RGB");
  RgbImage out(f.width, f.height);
  uint8_t* dst[4] = {out.pixels.data(), nullptr, nullptr, nullptr};
  int stride[4] = {f.width * 3, 0, 0, 0};
  sws_scale(sws.get(), f.data, f.linesize, 0, f.height, dst, stride);
  return out;
}

}  // namespace

bool video_decoding_available() {
  return true;
}

namespace {

DecodedVideo decode_video(const VideoSource& src, int64_t frames, const ImageLimits& limits) {
  const std::string& p = src.name;
  if (frames < 1) fail("--frames must be at least 1 (got ", frames, ")");
  DecodedVideo video;
  video.total_frames = count_frames(src);
  if (video.total_frames == 0) fail(p, ": the video has no frames");
  video.indices = uniform_frame_indices(video.total_frames, frames);

  const auto in = open_input(src);
  const AVCodecParameters* par = in->fmt->streams[in->stream]->codecpar;
  const AVCodec* codec = avcodec_find_decoder(par->codec_id);
  if (!codec) fail(p, ": no decoder for the video codec (id ", par->codec_id, ")");
  std::unique_ptr<AVCodecContext, CodecCloser> ctx(avcodec_alloc_context3(codec));
  ctx->thread_count = 0;  // as many decoder threads as FFmpeg finds cores (same frames)
  if (avcodec_parameters_to_context(ctx.get(), par) < 0 ||
      avcodec_open2(ctx.get(), codec, nullptr) < 0)
    fail(p, ": cannot open the video decoder");
  std::unique_ptr<AVPacket, PacketCloser> pkt(av_packet_alloc());
  std::unique_ptr<AVFrame, FrameCloser> frame(av_frame_alloc());
  std::unique_ptr<SwsContext, SwsCloser> sws;
  int64_t decoded = 0;
  size_t next = 0;
  auto drain = [&] {
    while (next < video.indices.size()) {
      const int e = avcodec_receive_frame(ctx.get(), frame.get());
      if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) return;
      if (e < 0) fail(p, ": video decode error: ", av_message(e));
      if (decoded == video.indices[next]) {
        // Checked before the frame's RGB copy is made: the first frame's size tells.
        const int64_t frame_bytes = int64_t{frame->width} * frame->height * 3;
        if (frame_bytes * static_cast<int64_t>(video.indices.size()) > limits.max_video_bytes)
          fail(p, ": ", video.indices.size(), " frames of ", frame->width, "x", frame->height,
               " would take more than ", limits.max_video_bytes >> 20,
               " MiB as RGB; ask for fewer frames");
        video.frames.push_back(to_rgb(*frame, p, limits, sws));
        ++next;
      }
      ++decoded;
      av_frame_unref(frame.get());
    }
  };
  while (next < video.indices.size() && av_read_frame(in->fmt.get(), pkt.get()) >= 0) {
    if (pkt->stream_index == in->stream) {
      const int e = avcodec_send_packet(ctx.get(), pkt.get());
      if (e < 0 && e != AVERROR(EAGAIN)) fail(p, ": video decode error: ", av_message(e));
    }
    av_packet_unref(pkt.get());
    drain();
  }
  avcodec_send_packet(ctx.get(), nullptr);  // flush the decoder's delayed frames
  drain();
  // Fewer decodable frames than packets (a damaged file): sample what there is.
  if (video.frames.size() < video.indices.size()) {
    if (video.frames.empty()) fail(p, ": no video frame could be decoded");
    video.indices.resize(video.frames.size());
  }
  return video;
}

}  // namespace

DecodedVideo read_video_file(const std::filesystem::path& path, int64_t frames,
                             const ImageLimits& limits) {
  { RegularFile check(path); }  // refuses FIFOs, directories, devices with a clear message
  return decode_video({.name = path.string(), .path = path.string(), .bytes = {}}, frames, limits);
}

DecodedVideo decode_video(std::span<const uint8_t> bytes, const std::string& source, int64_t frames,
                          const ImageLimits& limits) {
  if (bytes.empty()) fail(source, ": the video is empty");
  return decode_video({.name = source, .path = {}, .bytes = bytes}, frames, limits);
}

}  // namespace dllm
