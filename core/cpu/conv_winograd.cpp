// Winograd F(2x2, 3x3) convolutions on the CPU (conv_winograd.h): each 2x2 output tile costs 16
// multiplications per channel pair instead of 36, done as 16 GEMMs over the channels, for the
// forward pass and both backward passes.
#include <kiln/core/cpu/conv_winograd.h>

#include <algorithm>
#include <array>
#include <vector>

#include <kiln/core/cpu/eigen.h>
#include <kiln/core/cpu/onednn/switch.h>
#include <kiln/core/factory.h>
#include <kiln/core/parallel.h>
#if KILN_WITH_ONEDNN
#include <kiln/core/cpu/onednn/gemm.h>
#endif

// Note [CPU Winograd]
// Lavin & Gray's F(2x2, 3x3): a 4x4 input tile d and a 3x3 kernel g give the 2x2 output tile
//   Y = A^T [(G g G^T) . (B^T d B)] A     (. elementwise over the 16 positions xi)
// so with U[xi] (O, C) the transformed weights and V[xi] (C, T) the transformed input tiles, the
// convolution is 16 GEMMs M[xi] = U[xi] V[xi] (O, T) and an output transform. The backward-data
// pass is the forward pass of the flipped, transposed kernel with padding 2 - p. The weight
// gradient is dg = G^T [sum over tiles (A dY A^T) . V] G: 16 GEMMs dU[xi] += dM[xi] V[xi]^T.
// The matrices hold only 0, +-1 and +-1/2, so the transforms round little: against a direct sum
// the results differ by a few ulps of the layer's magnitude (tests/core/test_conv_winograd.cpp
// bounds it). Images are processed in chunks of about kTileTarget tiles (V and M of a chunk stay
// near the cache); within a chunk the transforms split over (image, channel) and the GEMMs over the
// 16 positions, one single-threaded GEMM each, and chunks are summed in order, so no result
// depends on the thread count. Where it pays: it replaces oneDNN's direct kernels on CPUs without
// AVX-512, where oneDNN has no Winograd (Note [oneDNN Winograd]; docs/benchmarks.md).

namespace kiln::cpu::KILN_CPU_CAP {  // Note [CPU capabilities]

namespace {

constexpr int64_t kTileTarget = 256;  // tiles per chunk (whole images, at least one)
// The 16 positions' matrices of U, V and M lie this many floats (one cache line) further apart than
// their size: sizes are often powers of two, and the transforms read or write all 16 at once, which
// would put the 16 streams in one cache set.
constexpr int64_t kSkew = 16;
inline int64_t skewed(int64_t size) { return size + kSkew; }

// Scratch of n floats from Kiln's caching allocator (not zeroed; reused call to call without page
// faults, which fresh std::vectors of these sizes cost on every call).
Tensor scratch(int64_t n) { return empty({n}, DType::f32); }

// One convolution as the transforms see it: cin planes (h, w) in, cout planes (oh, ow) out.
struct Plan {
  int64_t n = 0, cin = 0, h = 0, w = 0, cout = 0, oh = 0, ow = 0, ph = 0, pw = 0;
  int64_t th = 0, tw = 0;  // tiles down and across
  int64_t chunk = 1;       // images per chunk
  Plan(int64_t n_, int64_t cin_, int64_t h_, int64_t w_, int64_t cout_, int64_t oh_, int64_t ow_, int64_t ph_,
       int64_t pw_)
      : n(n_), cin(cin_), h(h_), w(w_), cout(cout_), oh(oh_), ow(ow_), ph(ph_), pw(pw_) {
    th = (oh + 1) / 2, tw = (ow + 1) / 2;
    chunk = std::clamp<int64_t>(kTileTarget / tiles(), 1, n);
  }
  int64_t tiles() const { return th * tw; }  // per image
};

// Row-major C (m, n) (+)= A (m, k) @ B (k, n), or B^T when b_trans (B then (n, k)).
void sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, bool b_trans, int64_t ldb,
           float* c, int64_t ldc, bool accumulate) {
#if KILN_WITH_ONEDNN
  if (onednn_sgemm_enabled()) {
    onednn::sgemm(m, n, k, a, false, lda, b, b_trans, ldb, c, ldc, accumulate);
    return;
  }
#endif
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<>;
  Eigen::Map<Mat, 0, Stride> cm(c, m, n, Stride(ldc));
  Eigen::Map<const Mat, 0, Stride> am(a, m, k, Stride(lda));
  if (b_trans) {
    Eigen::Map<const Mat, 0, Stride> bm(b, n, k, Stride(ldb));
    if (accumulate)
      cm.noalias() += am * bm.transpose();
    else
      cm.noalias() = am * bm.transpose();
  } else {
    Eigen::Map<const Mat, 0, Stride> bm(b, k, n, Stride(ldb));
    if (accumulate)
      cm.noalias() += am * bm;
    else
      cm.noalias() = am * bm;
  }
}

// G g G^T: a 3x3 kernel (row stride 3) to its 16 positions; flipped reads it rotated by 180 degrees.
std::array<float, 16> weight_tile(const float* g, bool flipped) {
  float k[9];
  for (int i = 0; i < 9; ++i) k[i] = flipped ? g[8 - i] : g[i];
  float gg[4][3];  // G g
  for (int j = 0; j < 3; ++j) {
    gg[0][j] = k[j];
    gg[1][j] = 0.5f * (k[j] + k[3 + j] + k[6 + j]);
    gg[2][j] = 0.5f * (k[j] - k[3 + j] + k[6 + j]);
    gg[3][j] = k[6 + j];
  }
  std::array<float, 16> u;
  for (int i = 0; i < 4; ++i) {
    const float* r = gg[i];
    u[i * 4 + 0] = r[0];
    u[i * 4 + 1] = 0.5f * (r[0] + r[1] + r[2]);
    u[i * 4 + 2] = 0.5f * (r[0] - r[1] + r[2]);
    u[i * 4 + 3] = r[2];
  }
  return u;
}

// U (16, cout, cin) from w (O, C, 3, 3): forward, U[xi][o][c] from w[o][c]; transposed (backward
// data), U[xi][c][o] from w[o][c] rotated by 180 degrees.
Tensor transform_weights(const float* w, int64_t o_count, int64_t c_count, bool transposed) {
  const int64_t pairs = o_count * c_count;
  Tensor hold = scratch(16 * skewed(pairs));
  float* u = hold.data<float>();
  parallel_for(0, pairs, 256, [&](int64_t lo, int64_t hi) {
    for (int64_t d = lo; d < hi; ++d) {  // in U's order, so each position's writes run in sequence
      const int64_t src = transposed ? (d % o_count) * c_count + d / o_count : d;  // w[o][c]
      const std::array<float, 16> t = weight_tile(w + src * 9, transposed);
      for (int xi = 0; xi < 16; ++xi) u[xi * skewed(pairs) + d] = t[xi];
    }
  });
  return hold;
}

// B^T d B of the tiles of images [0, count) of x (count, cin, h, w) -> v (16, cin, T), T = count *
// tiles, tile t = image * tiles + ty * tw + tx.
void transform_input(const float* x, int64_t count, const Plan& p, float* v) {
  const int64_t T = count * p.tiles(), ph2 = 2 * p.th + 2, pw2 = 2 * p.tw + 2;
  parallel_for(0, count * p.cin, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> pad(ph2 * pw2);  // the zero-padded plane, (2*th + 2, 2*tw + 2)
    for (int64_t ic = lo; ic < hi; ++ic) {
      const int64_t i = ic / p.cin, c = ic % p.cin;
      const float* plane = x + ic * p.h * p.w;
      std::fill(pad.begin(), pad.end(), 0.0f);
      for (int64_t y = 0; y < p.h; ++y) {
        const int64_t py = y + p.ph;
        if (py >= ph2) break;
        const int64_t x0 = std::max<int64_t>(0, -p.pw), x1 = std::min<int64_t>(p.w, pw2 - p.pw);
        std::copy(plane + y * p.w + x0, plane + y * p.w + x1, pad.data() + py * pw2 + x0 + p.pw);
      }
      float* out = v + c * T + i * p.tiles();
      const int64_t stride = skewed(p.cin * T);  // between positions
      for (int64_t ty = 0; ty < p.th; ++ty)
        for (int64_t tx = 0; tx < p.tw; ++tx) {
          const float* d = pad.data() + 2 * ty * pw2 + 2 * tx;
          float r[4][4];  // B^T d
          for (int j = 0; j < 4; ++j) {
            const float d0 = d[j], d1 = d[pw2 + j], d2 = d[2 * pw2 + j], d3 = d[3 * pw2 + j];
            r[0][j] = d0 - d2, r[1][j] = d1 + d2, r[2][j] = d2 - d1, r[3][j] = d1 - d3;
          }
          float* o = out + ty * p.tw + tx;
          for (int a = 0; a < 4; ++a) {
            o[(a * 4 + 0) * stride] = r[a][0] - r[a][2];
            o[(a * 4 + 1) * stride] = r[a][1] + r[a][2];
            o[(a * 4 + 2) * stride] = r[a][2] - r[a][1];
            o[(a * 4 + 3) * stride] = r[a][1] - r[a][3];
          }
        }
    }
  });
}

// A^T m A of m (16, cout, T) -> y (count, cout, oh, ow), plus bias (cout) when not null.
void transform_output(const float* m, int64_t count, const Plan& p, const float* bias, float* y) {
  const int64_t T = count * p.tiles(), stride = skewed(p.cout * T);
  parallel_for(0, count * p.cout, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t io = lo; io < hi; ++io) {
      const int64_t i = io / p.cout, o = io % p.cout;
      const float b = bias ? bias[o] : 0.0f;
      const float* in = m + o * T + i * p.tiles();
      float* plane = y + io * p.oh * p.ow;
      for (int64_t ty = 0; ty < p.th; ++ty)
        for (int64_t tx = 0; tx < p.tw; ++tx) {
          const float* q = in + ty * p.tw + tx;
          float s[2][4];  // A^T m
          for (int j = 0; j < 4; ++j) {
            const float m0 = q[j * stride], m1 = q[(4 + j) * stride], m2 = q[(8 + j) * stride],
                        m3 = q[(12 + j) * stride];
            s[0][j] = m0 + m1 + m2, s[1][j] = m1 - m2 - m3;
          }
          for (int a = 0; a < 2; ++a) {
            const int64_t yy = 2 * ty + a;
            if (yy >= p.oh) break;
            float* row = plane + yy * p.ow + 2 * tx;
            row[0] = s[a][0] + s[a][1] + s[a][2] + b;
            if (2 * tx + 1 < p.ow) row[1] = s[a][1] - s[a][2] - s[a][3] + b;
          }
        }
    }
  });
}

// A dY A^T of the 2x2 tiles of gy (count, cout, oh, ow) -> dm (16, cout, T); rows and columns past
// the output are zeros.
void transform_grad(const float* gy, int64_t count, const Plan& p, float* dm) {
  const int64_t T = count * p.tiles(), stride = skewed(p.cout * T);
  parallel_for(0, count * p.cout, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t io = lo; io < hi; ++io) {
      const int64_t i = io / p.cout, o = io % p.cout;
      const float* plane = gy + io * p.oh * p.ow;
      float* out = dm + o * T + i * p.tiles();
      for (int64_t ty = 0; ty < p.th; ++ty)
        for (int64_t tx = 0; tx < p.tw; ++tx) {
          float dy[2][2] = {{0, 0}, {0, 0}};
          for (int a = 0; a < 2; ++a)
            for (int b = 0; b < 2; ++b) {
              const int64_t yy = 2 * ty + a, xx = 2 * tx + b;
              if (yy < p.oh && xx < p.ow) dy[a][b] = plane[yy * p.ow + xx];
            }
          float r[4][2];  // A dY
          for (int b = 0; b < 2; ++b)
            r[0][b] = dy[0][b], r[1][b] = dy[0][b] + dy[1][b], r[2][b] = dy[0][b] - dy[1][b], r[3][b] = -dy[1][b];
          float* q = out + ty * p.tw + tx;
          for (int a = 0; a < 4; ++a) {
            q[(a * 4 + 0) * stride] = r[a][0];
            q[(a * 4 + 1) * stride] = r[a][0] + r[a][1];
            q[(a * 4 + 2) * stride] = r[a][0] - r[a][1];
            q[(a * 4 + 3) * stride] = -r[a][1];
          }
        }
    }
  });
}

// y (n, cout, oh, ow) = the convolution of x (n, cin, h, w) whose transformed weights are u
// (16, cout, cin), plus bias when not null.
void winograd(const float* x, const float* u, const float* bias, float* y, const Plan& p) {
  count_cpu_winograd_call();
  const Tensor v_hold = scratch(16 * skewed(p.cin * p.chunk * p.tiles()));
  const Tensor m_hold = scratch(16 * skewed(p.cout * p.chunk * p.tiles()));
  float* v = v_hold.data<float>();
  float* m = m_hold.data<float>();
  for (int64_t n0 = 0; n0 < p.n; n0 += p.chunk) {
    const int64_t count = std::min(p.chunk, p.n - n0), T = count * p.tiles();
    transform_input(x + n0 * p.cin * p.h * p.w, count, p, v);
    parallel_for(0, 16, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t xi = lo; xi < hi; ++xi)
        sgemm(p.cout, T, p.cin, u + xi * skewed(p.cout * p.cin), p.cin, v + xi * skewed(p.cin * T), false, T,
              m + xi * skewed(p.cout * T), T, false);
    });
    transform_output(m, count, p, bias, y + n0 * p.cout * p.oh * p.ow);
  }
}

Tensor f32_contiguous(const Tensor& t) { return t.to(DType::f32).contiguous(); }

}  // namespace

Tensor winograd_conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvShapes& s) {
  const ConvGeometry& g = s.g;
  const Tensor xc = f32_contiguous(x), wc = f32_contiguous(weight);
  const Tensor bc = bias.defined() ? f32_contiguous(bias) : Tensor();
  Tensor y = empty({s.n, s.o, g.oh, g.ow}, DType::f32);
  const Tensor u = transform_weights(wc.data<float>(), s.o, g.c, false);
  winograd(xc.data<float>(), u.data<float>(), bc.defined() ? bc.data<float>() : nullptr, y.data<float>(),
           Plan(s.n, g.c, g.h, g.w, s.o, g.oh, g.ow, g.ph, g.pw));
  return y.to(x.dtype());
}

Tensor winograd_conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& input_shape,
                                      const ConvShapes& s) {
  const ConvGeometry& g = s.g;
  const Tensor gy = f32_contiguous(grad_out), wc = f32_contiguous(weight);
  Tensor gx = empty(input_shape, DType::f32);
  const Tensor u = transform_weights(wc.data<float>(), s.o, g.c, true);  // (16, C, O)
  winograd(gy.data<float>(), u.data<float>(), nullptr, gx.data<float>(),
           Plan(s.n, s.o, g.oh, g.ow, g.c, g.h, g.w, 2 - g.ph, 2 - g.pw));
  return gx.to(grad_out.dtype());
}

Tensor winograd_conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                                       const ConvShapes& s) {
  const ConvGeometry& g = s.g;
  const Tensor gy = f32_contiguous(grad_out), xc = f32_contiguous(x);
  const Plan p(s.n, g.c, g.h, g.w, s.o, g.oh, g.ow, g.ph, g.pw);
  count_cpu_winograd_call();
  const Tensor v_hold = scratch(16 * skewed(p.cin * p.chunk * p.tiles()));
  const Tensor dm_hold = scratch(16 * skewed(p.cout * p.chunk * p.tiles()));
  const int64_t pairs = p.cout * p.cin;
  const Tensor du_hold = scratch(16 * skewed(pairs));  // (16, O, C)
  float* v = v_hold.data<float>();
  float* dm = dm_hold.data<float>();
  float* du = du_hold.data<float>();
  for (int64_t n0 = 0; n0 < p.n; n0 += p.chunk) {
    const int64_t count = std::min(p.chunk, p.n - n0), T = count * p.tiles();
    transform_input(xc.data<float>() + n0 * p.cin * p.h * p.w, count, p, v);
    transform_grad(gy.data<float>() + n0 * p.cout * p.oh * p.ow, count, p, dm);
    parallel_for(0, 16, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t xi = lo; xi < hi; ++xi)
        sgemm(p.cout, p.cin, T, dm + xi * skewed(p.cout * T), T, v + xi * skewed(p.cin * T), true, T,
              du + xi * skewed(pairs), p.cin, n0 > 0);
    });
  }
  // gw[o][c] = G^T dU[.][o][c] G.
  Tensor gw = empty(weight_shape, DType::f32);
  float* out = gw.data<float>();
  parallel_for(0, pairs, 256, [&](int64_t lo, int64_t hi) {
    for (int64_t q = lo; q < hi; ++q) {
      float d[4][4];
      for (int xi = 0; xi < 16; ++xi) d[xi / 4][xi % 4] = du[xi * skewed(pairs) + q];
      float e[3][4];  // G^T D
      for (int j = 0; j < 4; ++j) {
        const float half = 0.5f * (d[1][j] + d[2][j]);
        e[0][j] = d[0][j] + half, e[1][j] = 0.5f * (d[1][j] - d[2][j]), e[2][j] = half + d[3][j];
      }
      float* k = out + q * 9;
      for (int a = 0; a < 3; ++a) {
        const float half = 0.5f * (e[a][1] + e[a][2]);
        k[a * 3 + 0] = e[a][0] + half, k[a * 3 + 1] = 0.5f * (e[a][1] - e[a][2]), k[a * 3 + 2] = half + e[a][3];
      }
    }
  });
  return gw.to(grad_out.dtype());
}

}  // namespace kiln::cpu::KILN_CPU_CAP
