#include "vision/video_decode.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
}

#include <memory>

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

// Opens the file and finds its best video stream.
FormatPtr open_input(const std::string& path, int& stream) {
  AVFormatContext* raw = nullptr;
  if (int e = avformat_open_input(&raw, path.c_str(), nullptr, nullptr); e < 0)
    fail(path, ": cannot open video: ", av_message(e));
  FormatPtr fmt(raw);
  if (int e = avformat_find_stream_info(fmt.get(), nullptr); e < 0)
    fail(path, ": cannot read video stream info: ", av_message(e));
  stream = av_find_best_stream(fmt.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (stream < 0) fail(path, ": no video stream");
  return fmt;
}

// Frames of the stream, counted by demuxing (no decode): one packet per frame.
int64_t count_frames(const std::string& path) {
  int stream = -1;
  FormatPtr fmt = open_input(path, stream);
  std::unique_ptr<AVPacket, PacketCloser> pkt(av_packet_alloc());
  int64_t n = 0;
  while (av_read_frame(fmt.get(), pkt.get()) >= 0) {
    if (pkt->stream_index == stream) ++n;
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

bool video_decoding_available() { return true; }

DecodedVideo read_video_file(const std::filesystem::path& path, int64_t frames,
                             const ImageLimits& limits) {
  const std::string p = path.string();
  if (frames < 1) fail("--frames must be at least 1 (got ", frames, ")");
  { RegularFile check(path); }  // refuses FIFOs, directories, devices with a clear message
  DecodedVideo video;
  video.total_frames = count_frames(p);
  if (video.total_frames == 0) fail(p, ": the video has no frames");
  video.indices = uniform_frame_indices(video.total_frames, frames);

  int stream = -1;
  FormatPtr fmt = open_input(p, stream);
  const AVCodecParameters* par = fmt->streams[stream]->codecpar;
  const AVCodec* codec = avcodec_find_decoder(par->codec_id);
  if (!codec) fail(p, ": no decoder for the video codec (id ", par->codec_id, ")");
  std::unique_ptr<AVCodecContext, CodecCloser> ctx(avcodec_alloc_context3(codec));
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
        video.frames.push_back(to_rgb(*frame, p, limits, sws));
        ++next;
      }
      ++decoded;
      av_frame_unref(frame.get());
    }
  };
  while (next < video.indices.size() && av_read_frame(fmt.get(), pkt.get()) >= 0) {
    if (pkt->stream_index == stream) {
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

}  // namespace dllm
