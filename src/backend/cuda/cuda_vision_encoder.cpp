// The SigLIP tower and projector on the GPU (VisionEncoder, vision/vision_encoder.h), the CPU
// encoder's computation in bf16 with fp32 accumulation and an fp32 residual stream, as the
// language model's CUDA path does:
//   patch embedding   unfold_patches, then one GEMM over every patch of the chunk; + the
//                     position table (patch bias folded in, fp32)
//   each layer        LayerNorm -> one q|k|v GEMM -> bias -> bidirectional flash attention within
//                     each crop, the chunk's crops in one batched call (crop_attention.h, the
//                     language model's batched kernels) -> out GEMM accumulated
//                     into the residual -> + bias; LayerNorm -> fc1 GEMM -> bias + GELU(tanh)
//                     -> fc2 GEMM accumulated -> + bias
//   projector         linear_1 -> bias + GELU(erf) -> linear_2 -> bias
// The attention kernels take head_dim 16, 32, 64 or 128; SigLIP-so400m's heads are 72 wide, so
// each head is padded with zero dimensions to the next size the kernels take: the q|k|v GEMM
// runs on the heads' own rows and the bias kernel writes each head into its padded place, the
// pad staying zero (q·k and the V sum are unchanged); the out projection's columns of the pad
// are zero (the pad's outputs, all zero, contribute nothing). The softmax
// scale stays 1/sqrt(72). Crops run in chunks of kChunkCrops, their buffers allocated once at
// construction (before the engine sizes its KV pool from the free memory). encode_image /
// encode_video pack each chunk's features on the device as it is done (cuda_feature_packer.h)
// and bring back only the packed rows.
#include <cmath>
#include <cstring>
#include <mutex>

#include "backend/cuda/crop_attention.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_feature_packer.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/weight_upload.h"
#include "core/error.h"
#include "core/host_tensor.h"
#include "vision/vision_encoder.h"

namespace dllm {

namespace {

using cuda::bf16;
using cuda::DeviceBuffer;

constexpr int kChunkCrops = 8;

// The smallest head width the attention kernels take that holds `head_dim` (and `at_least`).
int padded_head_dim(int64_t head_dim, int at_least) {
  for (int d : {16, 32, 64, 128})
    if (head_dim <= d && at_least <= d) return d;
  fail("CUDA vision encoder: head_dim ", head_dim, " is wider than the attention kernels' 128");
}

// The columns of a [rows, heads * head_dim] projection spread to heads * padded, the pad zero.
std::vector<float> pad_head_columns(const HostTensor& w, int64_t rows, int64_t heads,
                                    int64_t head_dim, int64_t padded) {
  std::vector<float> out(static_cast<size_t>(rows * heads * padded), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h)
      std::copy_n(w.ptr() + r * heads * head_dim + h * head_dim, head_dim,
                  out.data() + (r * heads + h) * padded);
  return out;
}

std::vector<float> host_vector(const HostTensor& t) {
  return std::vector<float>(t.ptr(), t.ptr() + t.numel());
}

// Copies a chunk of normalised crops into a pixel slot (CudaVisionEncoder::for_each_chunk).
struct CopyCrops {
  const PixelCrops& crops;
  int64_t crop_values;
  void operator()(float* slot, int64_t first, int chunk) const {
    std::memcpy(slot, crops.values.data() + first * crop_values,
                chunk * crop_values * sizeof(float));
  }
};

struct GpuVisionLayer {
  DeviceBuffer<float> ln1_w, ln1_b, qkv_b, out_b, ln2_w, ln2_b, fc1_b, fc2_b;
  DeviceBuffer<bf16> qkv_w, out_w, fc1_w, fc2_w;  // out's columns padded per head
};

class CudaVisionEncoder final : public VisionEncoder {
 public:
  CudaVisionEncoder(const VisionModel& vm, int min_attention_head_dim) : vc_(vm.config) {
    DLLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    DLLM_CUBLAS_CHECK(cublasCreate(&cublas_));
    DLLM_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    d_ = static_cast<int>(vc_.hidden_size);
    heads_ = static_cast<int>(vc_.num_heads);
    if (d_ % heads_ != 0) fail("CUDA vision encoder: hidden ", d_, " not divisible by ", heads_);
    head_dim_ = d_ / heads_;
    hp_ = padded_head_dim(head_dim_, min_attention_head_dim);
    n_ = static_cast<int>(vc_.patches_per_crop());
    upload_weights(vm.tensors);
    allocate();
  }

  ~CudaVisionEncoder() override {
    for (cudaEvent_t e : slot_uploaded_)
      if (e) cudaEventDestroy(e);
    if (cublas_) cublasDestroy(cublas_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  const VisionConfig& config() const override { return vc_; }

  std::vector<float> encode(const PixelCrops& crops) override {
    const int64_t th = vc_.text_hidden_size;
    std::vector<float> out(static_cast<size_t>(crops.crops * n_ * th));
    std::lock_guard lk(mu_);  // requests are submitted from many threads; one set of buffers
    for_each_chunk(crops.crops, copy_from(crops), [&](int64_t first, int chunk) {
      DLLM_CUDA_CHECK(cudaMemcpyAsync(out.data() + first * n_ * th, proj_out_.get(),
                                      static_cast<size_t>(chunk) * n_ * th * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream_));
    });
    DLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return out;
  }

  std::vector<float> encode_image(const PixelCrops& crops, Size2 image,
                                  std::span<const float> newline) override {
    std::lock_guard lk(mu_);
    packer_->start_image(image, crops.crops, newline);
    return pack(crops.crops, copy_from(crops));
  }

  std::vector<float> encode_video(const PixelCrops& frames, int64_t count,
                                  std::span<const float> newline) override {
    if (count != frames.crops)
      fail("encode_video: ", frames.crops, " crops for ", count, " frames");
    std::lock_guard lk(mu_);
    packer_->start_video(count, newline);
    return pack(count, copy_from(frames));
  }

  std::vector<float> encode_video_frames(std::span<const RgbImage> frames,
                                         std::span<const float> newline) override {
    const auto count = static_cast<int64_t>(frames.size());
    std::lock_guard lk(mu_);
    packer_->start_video(count, newline);
    return pack(count, [&](float* slot, int64_t first, int chunk) {
      preprocess_frames_into(frames.subspan(static_cast<size_t>(first), static_cast<size_t>(chunk)),
                             vc_, slot);
    });
  }

 private:
  void upload_weights(const VisionTensors& t) {
    using cuda::upload;
    using cuda::upload_bf16;
    using cuda::upload_f32;
    patch_w_ = upload_bf16({t.patch_w}, "the vision patch embedding");
    // Position embeddings with the patch bias folded in (one add per patch row), fp32.
    std::vector<float> pos = host_vector(to_f32(t.position));
    const HostTensor pb = to_f32(t.patch_b);
    for (size_t i = 0; i < pos.size(); ++i) pos[i] += pb.ptr()[i % static_cast<size_t>(d_)];
    position_ = upload(pos, "the vision position embeddings");
    for (const VisionLayerTensors& l : t.layers) {
      GpuVisionLayer g;
      g.ln1_w = upload_f32(l.ln1_w, "vision layer norms");
      g.ln1_b = upload_f32(l.ln1_b, "vision layer norms");
      g.ln2_w = upload_f32(l.ln2_w, "vision layer norms");
      g.ln2_b = upload_f32(l.ln2_b, "vision layer norms");
      // q|k|v unpadded: the bias kernel spreads each head into its padded place.
      g.qkv_w = upload_bf16({l.q_w, l.k_w, l.v_w}, "vision q/k/v projections");
      std::vector<float> qkv_b;
      for (const TensorEntry* b : {l.q_b, l.k_b, l.v_b}) {
        const std::vector<float> part = host_vector(to_f32(b));
        qkv_b.insert(qkv_b.end(), part.begin(), part.end());
      }
      g.qkv_b = upload(qkv_b, "vision q/k/v biases");
      g.out_w = upload_bf16(pad_head_columns(to_f32(l.out_w), d_, heads_, head_dim_, hp_),
                            "vision output projections");
      g.out_b = upload_f32(l.out_b, "vision output biases");
      g.fc1_w = upload_bf16({l.fc1_w}, "vision MLPs");
      g.fc1_b = upload_f32(l.fc1_b, "vision MLP biases");
      g.fc2_w = upload_bf16({l.fc2_w}, "vision MLPs");
      g.fc2_b = upload_f32(l.fc2_b, "vision MLP biases");
      layers_.push_back(std::move(g));
    }
    proj1_w_ = upload_bf16({t.proj1_w}, "the multimodal projector");
    proj2_w_ = upload_bf16({t.proj2_w}, "the multimodal projector");
    if (t.proj1_b) proj1_b_ = upload_f32(t.proj1_b, "the multimodal projector's biases");
    if (t.proj2_b) proj2_b_ = upload_f32(t.proj2_b, "the multimodal projector's biases");
  }

  void allocate() {
    const size_t m = static_cast<size_t>(kChunkCrops) * n_;
    const size_t ff = static_cast<size_t>(vc_.intermediate_size);
    const size_t th = static_cast<size_t>(vc_.text_hidden_size);
    const size_t hq = static_cast<size_t>(heads_) * hp_;
    const size_t k = static_cast<size_t>(3 * vc_.patch_size * vc_.patch_size);
    const size_t chunk_pixels =
        static_cast<size_t>(kChunkCrops) * 3 * vc_.image_size * vc_.image_size;
    pixels_.resize(chunk_pixels, "vision pixels");
    pixel_slots_.ensure(2 * chunk_pixels);
    for (cudaEvent_t& e : slot_uploaded_)
      DLLM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    x_.resize(m * d_, "the vision residual stream");
    // One fp32 scratch for every GEMM output that goes through a bias kernel.
    scratch_.resize(m * std::max({static_cast<size_t>(3 * d_), ff, th}), "vision GEMM outputs");
    xn_.resize(m * std::max({k, static_cast<size_t>(d_), ff, th}), "vision activations");
    q_.resize(m * hq, "vision queries");
    k_.resize(m * hq, "vision keys");
    v_.resize(m * hq, "vision values");
    att_.resize(m * hq, "vision attention outputs");
    // The pad columns of q / k / v stay zero (bias_to_padded_heads writes the heads' own).
    for (DeviceBuffer<bf16>* t : {&q_, &k_, &v_})
      DLLM_CUDA_CHECK(cudaMemsetAsync(t->get(), 0, m * hq * sizeof(bf16), stream_));
    proj_out_.resize(m * th, "vision features");
    packer_ = std::make_unique<cuda::CudaFeaturePacker>(vc_, kChunkCrops, stream_);
    crop_attention_ = std::make_unique<cuda::CropAttention>(
        kChunkCrops, n_, heads_, hp_, 1.0f / std::sqrt(static_cast<float>(head_dim_)), stream_);
  }

  // Encodes `crops` crops a chunk at a time: `fill(slot, first, chunk)` writes the chunk's
  // normalised pixels into a pinned slot, `done(first, chunk)` runs after the chunk's launches:
  // its features in proj_out_ (on the stream) until the next chunk's. Two slots: the host fills
  // one (copies crops, or preprocesses frames) while the GPU encodes the chunk of the other, and
  // the upload from pinned memory neither blocks the host until the stream drains nor crawls at
  // pageable speed.
  template <class Fill, class Done>
  void for_each_chunk(int64_t crops, Fill&& fill, Done&& done) {
    const int64_t crop_values = 3 * vc_.image_size * vc_.image_size;
    for (int64_t c0 = 0, i = 0; c0 < crops; c0 += kChunkCrops, i = 1 - i) {
      const int chunk = static_cast<int>(std::min<int64_t>(kChunkCrops, crops - c0));
      float* slot = pixel_slots_.get() + i * kChunkCrops * crop_values;
      DLLM_CUDA_CHECK(cudaEventSynchronize(slot_uploaded_[i]));  // its last upload is done
      fill(slot, c0, chunk);
      DLLM_CUDA_CHECK(cudaMemcpyAsync(pixels_.get(), slot, chunk * crop_values * sizeof(float),
                                      cudaMemcpyHostToDevice, stream_));
      DLLM_CUDA_CHECK(cudaEventRecord(slot_uploaded_[i], stream_));
      encode_chunk(chunk);
      done(c0, chunk);
    }
  }

  // A fill for for_each_chunk copying crops that are normalised already.
  CopyCrops copy_from(const PixelCrops& crops) const {
    const int64_t crop_values = 3 * vc_.image_size * vc_.image_size;
    if (crops.side != vc_.image_size && crops.crops > 0)
      fail("vision encoder: crops are ", crops.side, " pixels, the tower takes ", vc_.image_size);
    if (static_cast<int64_t>(crops.values.size()) != crops.crops * crop_values)
      fail("vision encoder: ", crops.values.size(), " pixel values for ", crops.crops, " crops");
    return {crops, crop_values};
  }

  // The packer's rows of `crops` crops (after its start_image / start_video).
  template <class Fill>
  std::vector<float> pack(int64_t crops, Fill&& fill) {
    for_each_chunk(crops, fill, [&](int64_t first, int chunk) {
      packer_->add_crops(first, chunk, proj_out_.get());
    });
    return packer_->finish();
  }

  void gemm(const bf16* a, const DeviceBuffer<bf16>& w, void* out, cudaDataType_t type, int m,
            int n, int k, bool accumulate) {
    cuda::gemm_nt(cublas_, a, w.get(), out, type, m, n, k, accumulate);
  }

  void encode_chunk(int crops) {
    const int m = crops * n_, s = static_cast<int>(vc_.image_size);
    const int p = static_cast<int>(vc_.patch_size), k = 3 * p * p;
    const int ff = static_cast<int>(vc_.intermediate_size);
    const int th = static_cast<int>(vc_.text_hidden_size), hq = heads_ * hp_;
    const float eps = static_cast<float>(vc_.layer_norm_eps);
    cuda::unfold_patches(pixels_.get(), crops, s, p, xn_.get(), stream_);
    gemm(xn_.get(), patch_w_, x_.get(), CUDA_R_32F, m, d_, k, false);
    cuda::add_rows_periodic(x_.get(), position_.get(), m, d_, n_, stream_);
    for (const GpuVisionLayer& L : layers_) {
      cuda::layer_norm(x_.get(), L.ln1_w.get(), L.ln1_b.get(), xn_.get(), m, d_, eps, stream_);
      gemm(xn_.get(), L.qkv_w, scratch_.get(), CUDA_R_32F, m, 3 * d_, d_, false);
      bf16* qkv[3] = {q_.get(), k_.get(), v_.get()};
      for (int i = 0; i < 3; ++i)
        cuda::bias_to_padded_heads(scratch_.get() + i * d_, 3 * d_, L.qkv_b.get() + i * d_, qkv[i],
                                   m, heads_, head_dim_, hp_, stream_);
      crop_attention_->run(q_.get(), k_.get(), v_.get(), att_.get(), crops, stream_);
      gemm(att_.get(), L.out_w, x_.get(), CUDA_R_32F, m, d_, hq, true);
      cuda::add_rows_periodic(x_.get(), L.out_b.get(), m, d_, 1, stream_);
      cuda::layer_norm(x_.get(), L.ln2_w.get(), L.ln2_b.get(), xn_.get(), m, d_, eps, stream_);
      gemm(xn_.get(), L.fc1_w, scratch_.get(), CUDA_R_32F, m, ff, d_, false);
      cuda::bias_activation(scratch_.get(), ff, L.fc1_b.get(), cuda::Activation::kGeluTanh,
                            xn_.get(), m, ff, stream_);
      gemm(xn_.get(), L.fc2_w, x_.get(), CUDA_R_32F, m, d_, ff, true);
      cuda::add_rows_periodic(x_.get(), L.fc2_b.get(), m, d_, 1, stream_);
    }
    // Projector: the last layer's output (no post_layernorm, as the CPU encoder).
    cuda::bias_activation(x_.get(), d_, nullptr, cuda::Activation::kNone, xn_.get(), m, d_,
                          stream_);
    gemm(xn_.get(), proj1_w_, scratch_.get(), CUDA_R_32F, m, th, d_, false);
    cuda::bias_activation(scratch_.get(), th, proj1_b_.get(), cuda::Activation::kGeluErf, xn_.get(),
                          m, th, stream_);
    gemm(xn_.get(), proj2_w_, proj_out_.get(), CUDA_R_32F, m, th, th, false);
    if (proj2_b_.get()) cuda::add_rows_periodic(proj_out_.get(), proj2_b_.get(), m, th, 1, stream_);
  }

  VisionConfig vc_;
  int d_ = 0, heads_ = 0, head_dim_ = 0, hp_ = 0, n_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::mutex mu_;
  std::unique_ptr<cuda::CudaFeaturePacker> packer_;
  std::unique_ptr<cuda::CropAttention> crop_attention_;
  DeviceBuffer<bf16> patch_w_, proj1_w_, proj2_w_;
  DeviceBuffer<float> position_, proj1_b_, proj2_b_;
  std::vector<GpuVisionLayer> layers_;
  DeviceBuffer<float> pixels_, x_, scratch_, proj_out_;
  cuda::PinnedBuffer<float> pixel_slots_;  // two chunks of pixels (for_each_chunk())
  cudaEvent_t slot_uploaded_[2] = {nullptr, nullptr};
  DeviceBuffer<bf16> xn_, q_, k_, v_, att_;
};

}  // namespace

std::unique_ptr<VisionEncoder> make_cuda_vision_encoder(const VisionModel& vision,
                                                        int min_attention_head_dim) {
  return std::make_unique<CudaVisionEncoder>(vision, min_attention_head_dim);
}

}  // namespace dllm
