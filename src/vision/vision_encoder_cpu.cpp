// The SigLIP tower and projector on the CPU (fp32): patch embedding as a GEMM over unfolded
// patches, learned absolute positions, pre-LN layers with bidirectional attention over the
// crop's patches, then linear_1 -> GELU(erf) -> linear_2. transformers' SiglipVisionModel and
// LlavaOnevisionMultiModalProjector compute the same.
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_vision_ops.h"
#include "core/error.h"
#include "core/host_tensor.h"
#include "vision/vision_encoder.h"

namespace dllm {
namespace {

struct CpuVisionLayer {
  HostTensor ln1_w, ln1_b, q_w, q_b, k_w, k_b, v_w, v_b, out_w, out_b, ln2_w, ln2_b, fc1_w, fc1_b,
      fc2_w, fc2_b;
};

class CpuVisionEncoder final : public VisionEncoder {
 public:
  explicit CpuVisionEncoder(const VisionModel& vm) : vc_(vm.config) {
    const VisionTensors& t = vm.tensors;
    patch_w_ = to_f32(t.patch_w);
    patch_b_ = to_f32(t.patch_b);
    position_ = to_f32(t.position);
    for (const auto& l : t.layers)
      layers_.push_back({to_f32(l.ln1_w), to_f32(l.ln1_b), to_f32(l.q_w), to_f32(l.q_b),
                         to_f32(l.k_w), to_f32(l.k_b), to_f32(l.v_w), to_f32(l.v_b),
                         to_f32(l.out_w), to_f32(l.out_b), to_f32(l.ln2_w), to_f32(l.ln2_b),
                         to_f32(l.fc1_w), to_f32(l.fc1_b), to_f32(l.fc2_w), to_f32(l.fc2_b)});
    proj1_w_ = to_f32(t.proj1_w);
    proj1_b_ = to_f32(t.proj1_b);
    proj2_w_ = to_f32(t.proj2_w);
    proj2_b_ = to_f32(t.proj2_b);
    const int64_t n = vc_.patches_per_crop();
    all_visible_.assign(static_cast<size_t>(n * n), 1);
  }

  const VisionConfig& config() const override { return vc_; }

  std::vector<float> encode(const PixelCrops& crops) override {
    if (crops.side != vc_.image_size && crops.crops > 0)
      fail("vision encoder: crops are ", crops.side, " pixels, the tower takes ", vc_.image_size);
    const int64_t n = vc_.patches_per_crop(), th = vc_.text_hidden_size;
    std::vector<float> out(static_cast<size_t>(crops.crops * n * th));
    const int64_t crop_values = 3 * vc_.image_size * vc_.image_size;
    for (int64_t c = 0; c < crops.crops; ++c)
      encode_crop(crops.values.data() + c * crop_values, out.data() + c * n * th);
    return out;
  }

 private:
  // Unfolds the crop into [patches, 3 * p * p] in the weight's (channel, ky, kx) order.
  void unfold(const float* pixels, std::vector<float>& cols) const {
    const int64_t p = vc_.patch_size, side = vc_.patches_per_side(), s = vc_.image_size;
    const int64_t k = 3 * p * p;
    cols.resize(static_cast<size_t>(side * side * k));
    for (int64_t py = 0; py < side; ++py)
      for (int64_t px = 0; px < side; ++px) {
        float* dst = cols.data() + (py * side + px) * k;
        for (int64_t c = 0; c < 3; ++c)
          for (int64_t ky = 0; ky < p; ++ky)
            for (int64_t kx = 0; kx < p; ++kx)
              *dst++ = pixels[(c * s + py * p + ky) * s + px * p + kx];
      }
  }

  void encode_crop(const float* pixels, float* out) {
    const int64_t n = vc_.patches_per_crop(), d = vc_.hidden_size, ff = vc_.intermediate_size;
    const int64_t heads = vc_.num_heads, hd = d / heads, th = vc_.text_hidden_size;
    const float eps = static_cast<float>(vc_.layer_norm_eps);
    std::vector<float> cols, x(static_cast<size_t>(n * d)), h(x.size()), q(x.size()), k(x.size()),
        v(x.size()), att(x.size()), mlp(static_cast<size_t>(n * ff));
    unfold(pixels, cols);
    cpu::matmul_nt(cols.data(), 3 * vc_.patch_size * vc_.patch_size, patch_w_.ptr(),
                   3 * vc_.patch_size * vc_.patch_size, x.data(), d, n, d,
                   3 * vc_.patch_size * vc_.patch_size);
    cpu::add_bias(x.data(), patch_b_.ptr(), n, d);
    for (size_t i = 0; i < x.size(); ++i) x[i] += position_.ptr()[i];

    std::vector<const float*> k_rows(static_cast<size_t>(n)), v_rows(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      k_rows[static_cast<size_t>(j)] = k.data() + j * d;
      v_rows[static_cast<size_t>(j)] = v.data() + j * d;
    }
    for (const CpuVisionLayer& L : layers_) {
      cpu::layer_norm(x.data(), L.ln1_w.ptr(), L.ln1_b.ptr(), h.data(), n, d, eps);
      linear(h.data(), L.q_w, L.q_b, q.data(), n, d, d);
      linear(h.data(), L.k_w, L.k_b, k.data(), n, d, d);
      linear(h.data(), L.v_w, L.v_b, v.data(), n, d, d);
      cpu::attention(q.data(), d, k_rows, v_rows, all_visible_, att.data(), d, n, heads, heads, hd,
                     1.0f / std::sqrt(static_cast<float>(hd)));
      linear(att.data(), L.out_w, L.out_b, h.data(), n, d, d);
      for (size_t i = 0; i < x.size(); ++i) x[i] += h[i];
      cpu::layer_norm(x.data(), L.ln2_w.ptr(), L.ln2_b.ptr(), h.data(), n, d, eps);
      linear(h.data(), L.fc1_w, L.fc1_b, mlp.data(), n, ff, d);
      cpu::gelu_tanh(mlp.data(), n * ff);
      linear(mlp.data(), L.fc2_w, L.fc2_b, h.data(), n, d, ff);
      for (size_t i = 0; i < x.size(); ++i) x[i] += h[i];
    }
    std::vector<float> p1(static_cast<size_t>(n * th));
    linear(x.data(), proj1_w_, proj1_b_, p1.data(), n, th, d);
    cpu::gelu_erf(p1.data(), n * th);
    linear(p1.data(), proj2_w_, proj2_b_, out, n, th, th);
  }

  // out[m, n] = a[m, k] · wᵀ + b
  static void linear(const float* a, const HostTensor& w, const HostTensor& b, float* out,
                     int64_t m, int64_t n, int64_t k) {
    cpu::matmul_nt(a, k, w.ptr(), k, out, n, m, n, k);
    if (b.numel() > 0) cpu::add_bias(out, b.ptr(), m, n);
  }

  VisionConfig vc_;
  HostTensor patch_w_, patch_b_, position_, proj1_w_, proj1_b_, proj2_w_, proj2_b_;
  std::vector<CpuVisionLayer> layers_;
  std::vector<uint8_t> all_visible_;
};

}  // namespace

std::unique_ptr<VisionEncoder> make_cpu_vision_encoder(const VisionModel& vision) {
  return std::make_unique<CpuVisionEncoder>(vision);
}

}  // namespace dllm
