#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace dllm {
namespace {

// theta^(2i / d) in fp32, as torch evaluates base ** (arange(0, d, 2).float() / d).
std::vector<float> position_frequencies(double theta, int64_t dim) {
  std::vector<float> f(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i)
    f[static_cast<size_t>(i)] =
        std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(dim));
  return f;
}

std::vector<float> inverse(const std::vector<float>& f) {
  std::vector<float> out(f.size());
  for (size_t i = 0; i < f.size(); ++i) out[i] = 1.0f / f[i];
  return out;
}

double yarn_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

RopeTable yarn(const ModelConfig& c, const RopeScaling& s) {
  const int64_t dim = c.rotary_dim;
  const double original = s.original_max_position_embeddings > 0
                              ? static_cast<double>(s.original_max_position_embeddings)
                              : static_cast<double>(c.max_position_embeddings);
  const double factor = s.factor;
  RopeTable t;
  if (s.attention_factor > 0)
    t.attention_factor = static_cast<float>(s.attention_factor);
  else if (s.mscale != 0 && s.mscale_all_dim != 0)
    t.attention_factor =
        static_cast<float>(yarn_mscale(factor, s.mscale) / yarn_mscale(factor, s.mscale_all_dim));
  else
    t.attention_factor = static_cast<float>(yarn_mscale(factor, 1.0));
  // The rotary dimension that turns `rotations` times over the original context.
  const auto correction_dim = [&](double rotations) {
    return static_cast<double>(dim) * std::log(original / (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(c.rope_theta));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // as HF: no division by zero
  const std::vector<float> pos = position_frequencies(c.rope_theta, dim);
  t.inv_freq.resize(pos.size());
  for (size_t i = 0; i < pos.size(); ++i) {
    const float ramp =
        std::clamp(static_cast<float>((static_cast<double>(i) - low) / (high - low)), 0.0f, 1.0f);
    const float extrapolation = 1.0f - ramp;
    const float interpolated = 1.0f / (static_cast<float>(factor) * pos[i]);
    t.inv_freq[i] = interpolated * (1.0f - extrapolation) + (1.0f / pos[i]) * extrapolation;
  }
  return t;
}

}  // namespace

RopeTable rope_table(const ModelConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  RopeTable t;
  if (s.type == "default") {
    t.inv_freq = inverse(position_frequencies(c.rope_theta, c.rotary_dim));
  } else if (s.type == "linear") {
    t.inv_freq = inverse(position_frequencies(c.rope_theta, c.rotary_dim));
    for (float& f : t.inv_freq) f /= static_cast<float>(s.factor);
  } else if (s.type == "dynamic") {
    const double d = static_cast<double>(c.rotary_dim);
    // At L = factor * M: factor * L / M - (factor - 1) = factor^2 - factor + 1.
    const double stretch = s.factor * s.factor - (s.factor - 1);
    t.inv_freq =
        inverse(position_frequencies(c.rope_theta * std::pow(stretch, d / (d - 2)), c.rotary_dim));
  } else if (s.type == "yarn") {
    t = yarn(c, s);
  } else {
    fail("RoPE scaling type '", s.type, "' is not supported (default, linear, dynamic, yarn)");
  }
  return t;
}

}  // namespace dllm
