// Per-element and per-channel math of BatchNorm (training or eval) followed by
// an activation, forward and backward. The loops live in bn_act.cu (GPU) and
// bn_act_cpu.cpp (OpenMP); both call only these functions, so the two builds
// compute the same formulas.
//
// Forward:  z = (x - mean[c]) * scale[c] + bias[c]  with scale = w * invstd
//           (x - mean first: no cancellation when |mean| >> std);  y = act(z).
// Backward: g = dy * act'(z); dbias = sum g; dweight = sum g * xhat;
//           dx = scale * g + (x - mean) * coef_x[c] + coef_1[c]  (training: the
//           mean and variance depend on x; eval: coef_x = coef_1 = 0).
// Nothing but x is saved for backward: z is recomputed, which costs less than
// the memory traffic of storing it.
#pragma once
#include "dbf_common.cuh"
#include "float16_bits.cuh"

DBF_NAMESPACE_BEGIN

#if !defined(__CUDA_ARCH__)
// Host exp/erf written out so that loops over them vectorise (libm's erff has
// no vector variant without -ffast-math). exp: 2^n * p(f), |f| <= 0.5*ln2,
// degree-6 Taylor polynomial (relative error < 2e-7 on that range).
DBF_HD float host_exp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float t = x * 1.44269504088896341f;
  const float n = __builtin_floorf(t + 0.5f);
  const float f = x - n * 0.693147180559945309f;
  float p = 1.0f / 720.0f;
  p = p * f + 1.0f / 120.0f;
  p = p * f + 1.0f / 24.0f;
  p = p * f + 1.0f / 6.0f;
  p = p * f + 0.5f;
  p = p * f + 1.0f;
  p = p * f + 1.0f;
  const u32 scale = static_cast<u32>(static_cast<int>(n) + 127) << 23;
  return p * bits_to_float(scale);
}

// erf by Abramowitz & Stegun 7.1.26 (absolute error <= 1.5e-7), odd extension.
DBF_HD float host_erf(float x) {
  const float ax = __builtin_fabsf(x);
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float r = 1.0f - p * t * host_exp(-ax * ax);
  return __builtin_copysignf(r, x);
}
#endif

DBF_HD float dbf_exp(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return host_exp(x);
#endif
}

DBF_HD float dbf_erf(float x) {
#if defined(__CUDA_ARCH__)
  return erff(x);
#else
  return host_erf(x);
#endif
}

DBF_HD float act_forward(float z, int act) {
  switch (act) {
    case kRelu:
      return z > 0.0f ? z : 0.0f;
    case kGelu:  // exact GELU: z * Phi(z)
      return 0.5f * z * (1.0f + dbf_erf(z * 0.70710678118654752f));
    case kSilu:
      return z / (1.0f + dbf_exp(-z));
    default:
      return z;
  }
}

// d act / d z
DBF_HD float act_grad(float z, int act) {
  switch (act) {
    case kRelu:
      return z > 0.0f ? 1.0f : 0.0f;
    case kGelu: {
      const float cdf = 0.5f * (1.0f + dbf_erf(z * 0.70710678118654752f));
      const float pdf = 0.39894228040143268f * dbf_exp(-0.5f * z * z);
      return cdf + z * pdf;
    }
    case kSilu: {
      const float s = 1.0f / (1.0f + dbf_exp(-z));
      return s * (1.0f + z * (1.0f - s));
    }
    default:
      return 1.0f;
  }
}

// Per-channel statistics are accumulated relative to a shift (one sample of
// the channel) so that E[x^2] - E[x]^2 does not cancel when |mean| >> std.
struct ChannelStats {
  float mean;
  float invstd;
  float scale;
  float bias;
};

// From sums of (x - k) and (x - k)^2 over `count` elements, plus the BN
// parameters, the values the forward pass needs. `training` selects batch
// statistics (and updates the running ones in place) or the running ones.
DBF_HD ChannelStats bn_channel_stats(double sum, double sumsq, double k, i64 count,
                                     float weight, float bias, float eps, float momentum,
                                     bool training, float* running_mean, float* running_var) {
  ChannelStats s;
  float var;
  if (training) {
    const double n = static_cast<double>(count);
    const double m = sum / n;
    double v = sumsq / n - m * m;
    v = v < 0.0 ? 0.0 : v;
    s.mean = static_cast<float>(m + k);
    var = static_cast<float>(v);
    if (running_mean != 0) {
      // PyTorch's convention: running = (1 - momentum) * running + momentum *
      // batch, with the unbiased variance.
      const float unbiased = count > 1 ? static_cast<float>(v * n / (n - 1.0)) : var;
      *running_mean = (1.0f - momentum) * *running_mean + momentum * s.mean;
      *running_var = (1.0f - momentum) * *running_var + momentum * unbiased;
    }
  } else {
    s.mean = *running_mean;
    var = *running_var;
  }
#if defined(__CUDA_ARCH__)
  s.invstd = rsqrtf(var + eps);
#else
  s.invstd = 1.0f / __builtin_sqrtf(var + eps);
#endif
  s.scale = weight * s.invstd;
  s.bias = bias;
  return s;
}

// Backward per-channel coefficients, from sum_g = sum(g) and sum_gx =
// sum(g * xhat): dx = scale * g + (x - mean) * coef_x + coef_1.
struct ChannelGrad {
  float coef_x;
  float coef_1;
};

DBF_HD ChannelGrad bn_channel_grad(double sum_g, double sum_gx, i64 count, float invstd,
                                   float scale, bool training) {
  ChannelGrad r;
  if (!training) {
    r.coef_x = 0.0f;
    r.coef_1 = 0.0f;
    return r;
  }
  const double n = static_cast<double>(count);
  const double kx = static_cast<double>(scale) * sum_gx / n;  // scale * mean(g*xhat)
  // - xhat * kx = -(x - mean) * invstd * kx
  r.coef_x = static_cast<float>(-static_cast<double>(invstd) * kx);
  r.coef_1 = static_cast<float>(-static_cast<double>(scale) * sum_g / n);
  return r;
}

// Pre-activation value and the backward's g = dy * act'(z).
DBF_HD float bn_z(float x, float mean, float scale, float bias) {
  return (x - mean) * scale + bias;
}
DBF_HD float bn_act_g(float x, float dy, float mean, float scale, float bias, int act) {
  return dy * act_grad(bn_z(x, mean, scale, bias), act);
}

DBF_NAMESPACE_END
