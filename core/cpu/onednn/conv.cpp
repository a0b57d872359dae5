// Convolutions through oneDNN: the primitives take whatever layout oneDNN finds fastest for the
// shape (format `any`, usually channel-blocked nChw16c on AVX-512); Kiln's NCHW tensors are reordered
// in and out around them. Direct kernels, or Winograd for wide 3x3 layers (Note [oneDNN Winograd]).
// Primitives and reorders are cached by shape (Note [oneDNN primitive cache]), threads follow
// Kiln's (Note [oneDNN threads]).
#include <kiln/core/cpu/onednn/conv.h>

#include <array>
#include <cstdlib>
#include <cstring>

#include <kiln/core/cpu/onednn/runtime.h>
#include <kiln/core/factory.h>

namespace kiln::cpu::onednn {

namespace {

using dnnl::algorithm;
using dnnl::prop_kind;
using fwd_t = dnnl::convolution_forward;
using bwd_data_t = dnnl::convolution_backward_data;
using bwd_weights_t = dnnl::convolution_backward_weights;

// The oneDNN view of one convolution's geometry.
struct Dims {
  memory::dims src, weights, dst, strides, dilates, pad_l, pad_r;
  explicit Dims(const ConvShapes& s) {
    const ConvGeometry& g = s.g;
    src = {s.n, g.c, g.h, g.w};
    dst = {s.n, s.o, g.oh, g.ow};
    if (s.groups == 1)
      weights = {s.o, g.c, g.kh, g.kw};
    else
      weights = {s.groups, s.o / s.groups, g.c / s.groups, g.kh, g.kw};
    strides = {g.sh, g.sw};
    dilates = {g.dh - 1, g.dw - 1};  // oneDNN counts the gaps between taps
    pad_l = {g.ph, g.pw};
    // Right/bottom padding that makes the output exactly (oh, ow); below pad_l when the stride
    // drops trailing rows.
    pad_r = {(g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1 - g.h - g.ph,
             (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1 - g.w - g.pw};
  }
  // The dims of a primitive argument: the input's, the weights' or the output's (or their diffs).
  const memory::dims& of(int arg) const {
    switch (arg) {
      case DNNL_ARG_SRC:
      case DNNL_ARG_DIFF_SRC: return src;
      case DNNL_ARG_WEIGHTS:
      case DNNL_ARG_DIFF_WEIGHTS: return weights;
      default: return dst;
    }
  }
};

memory::desc any(const memory::dims& d) { return memory::desc(d, memory::data_type::f32, memory::format_tag::any); }

Key key_of(int kind, const ConvShapes& s, bool bias) {
  const ConvGeometry& g = s.g;
  return {kind, s.n, g.c, g.h, g.w, s.o, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, s.groups, bias, match_threads()};
}

fwd_t::primitive_desc forward_pd(const ConvShapes& s, bool bias, const dnnl::primitive_attr& attr, algorithm alg) {
  const Dims d(s);
  if (bias) {
    fwd_t::desc desc(prop_kind::forward_training, alg, any(d.src), any(d.weights),
                     plain_desc({s.o}), any(d.dst), d.strides, d.dilates, d.pad_l, d.pad_r);
    return fwd_t::primitive_desc(desc, attr, engine());
  }
  fwd_t::desc desc(prop_kind::forward_training, alg, any(d.src), any(d.weights), any(d.dst),
                   d.strides, d.dilates, d.pad_l, d.pad_r);
  return fwd_t::primitive_desc(desc, attr, engine());
}

// One cached forward: the primitive and the reorders between Kiln's plain tensors and its layouts.
struct Forward {
  bool ok = false;  // oneDNN had an implementation
  fwd_t::primitive_desc pd;
  fwd_t prim;
  memory::desc src_user, weights_user, dst_user;
  Reorder src_in, weights_in, dst_out;
};

// One cached backward pass (Prim: backward data or backward weights): the primitive, two plain
// inputs reordered into the layouts it picked, one output reordered out of its layout; layout(arg)
// is the one it picked for a DNNL_ARG_*.
template <class Prim>
struct Backward {
  bool ok = false;
  typename Prim::primitive_desc pd;
  Prim prim;
  std::array<memory::desc, 2> in_user;
  memory::desc out_user;
  std::array<Reorder, 2> in;
  Reorder out;
  memory::desc layout(int arg) const { return pd.query_md(dnnl::query::exec_arg_md, arg); }
};

// Note [oneDNN Winograd]
// A 3x3 stride-1 convolution with at least kWinogradChannels input and output channels (multiples
// of 16) asks oneDNN for its Winograd F(4x4, 3x3) kernels first (forward, backward data and
// weights): on the 2-core AVX-512 VM they run the standard CIFAR CNN's 64- and 256-channel layers
// in about half the time of the direct kernels (13.8 -> 6.7 ms for 256 -> 256 channels on 8x8,
// batch 64, backward weights), which is most of bench_cifar's standard ratio. With few channels
// they lose (the tiny CNN ran slower), hence the threshold. Winograd rounds differently from a
// direct sum (the input and output transforms add a few ulps of the layer's magnitude; the tests
// bound it in tests/core/test_onednn.cpp); KILN_ONEDNN_WINOGRAD=0 in the environment keeps every
// convolution direct.
constexpr int64_t kWinogradChannels = 64;

bool winograd_eligible(const ConvShapes& s) {
  static const bool on = [] {
    const char* env = std::getenv("KILN_ONEDNN_WINOGRAD");
    return !(env && std::strcmp(env, "0") == 0);
  }();
  const ConvGeometry& g = s.g;
  return on && s.groups == 1 && g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 &&
         g.c >= kWinogradChannels && s.o >= kWinogradChannels && g.c % 16 == 0 && s.o % 16 == 0;
}

// Builds an entry with fill(entry, algorithm): Winograd when eligible and oneDNN has it, else
// direct; ok = false when oneDNN refuses the shape (no implementation).
template <class Entry, class F>
std::shared_ptr<Entry> make_entry(const ConvShapes& s, F&& fill) {
  if (winograd_eligible(s)) {
    auto e = std::make_shared<Entry>();
    try {
      fill(*e, algorithm::convolution_winograd);
      e->ok = true;
      return e;
    } catch (const dnnl::error&) {
    }
  }
  auto e = std::make_shared<Entry>();
  try {
    fill(*e, algorithm::convolution_direct);
    e->ok = true;
  } catch (const dnnl::error&) {
    e->ok = false;
  }
  return e;
}

Tensor f32_contiguous(const Tensor& t) { return t.to(DType::f32).contiguous(); }

// A backward pass of the convolution s (Prim: backward data or weights), cached under `kind`:
// ins[i] (plain, of the dims of in_args[i]) in, the output (out_arg, of out_shape) in
// result_dtype; std::nullopt when oneDNN has no implementation for the shape.
template <class Prim>
std::optional<Tensor> run_backward(int kind, const ConvShapes& s, std::array<int, 2> in_args,
                                   const std::array<const Tensor*, 2>& ins, int out_arg, const Shape& out_shape,
                                   DType result_dtype) {
  static Cache<Backward<Prim>> cache;
  auto e = cache.get(key_of(kind, s, false), [&] {
    return make_entry<Backward<Prim>>(s, [&](Backward<Prim>& b, algorithm alg) {
      const Dims d(s);
      const auto hint = forward_pd(s, false, dnnl::primitive_attr(), alg);
      typename Prim::desc desc(alg, any(d.src), any(d.weights), any(d.dst), d.strides, d.dilates, d.pad_l, d.pad_r);
      b.pd = typename Prim::primitive_desc(desc, scratchpad_attr(), engine(), hint);
      b.prim = Prim(b.pd);
      for (int i = 0; i < 2; ++i) {
        b.in_user[i] = plain_desc(d.of(in_args[i]));
        b.in[i] = Reorder(b.in_user[i], b.layout(in_args[i]));
      }
      b.out_user = plain_desc(d.of(out_arg));
      b.out = Reorder(b.layout(out_arg), b.out_user);
    });
  });
  if (!e->ok) return std::nullopt;
  const Tensor a = f32_contiguous(*ins[0]), b = f32_contiguous(*ins[1]);
  Tensor out = empty(out_shape, DType::f32);
  Tensor hold_a, hold_b, hold_out;
  const memory out_user = wrap(e->out_user, out);
  const memory out_mem = e->out.needed ? fresh(e->layout(out_arg), hold_out) : out_user;
  execute(e->prim, e->pd.scratchpad_desc(),
          {{in_args[0], in_layout(wrap(e->in_user[0], a), e->layout(in_args[0]), e->in[0], hold_a)},
           {in_args[1], in_layout(wrap(e->in_user[1], b), e->layout(in_args[1]), e->in[1], hold_b)},
           {out_arg, out_mem}});
  e->out.run(out_mem, out_user);
  return out.to(result_dtype);
}

}  // namespace

std::optional<Tensor> conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvShapes& s) {
  static Cache<Forward> cache;
  const bool has_bias = bias.defined();
  auto e = cache.get(key_of(0, s, has_bias), [&] {
    return make_entry<Forward>(s, [&](Forward& f, algorithm alg) {
      const Dims d(s);
      f.pd = forward_pd(s, has_bias, scratchpad_attr(), alg);
      f.prim = fwd_t(f.pd);
      f.src_user = plain_desc(d.src);
      f.weights_user = plain_desc(d.weights);
      f.dst_user = plain_desc(d.dst);
      f.src_in = Reorder(f.src_user, f.pd.src_desc());
      f.weights_in = Reorder(f.weights_user, f.pd.weights_desc());
      f.dst_out = Reorder(f.pd.dst_desc(), f.dst_user);
    });
  });
  if (!e->ok) return std::nullopt;
  const Tensor xc = f32_contiguous(x), wc = f32_contiguous(weight);
  Tensor out = empty({s.n, s.o, s.g.oh, s.g.ow}, DType::f32);
  Tensor hold_src, hold_w, hold_dst;
  Args args{{DNNL_ARG_SRC, in_layout(wrap(e->src_user, xc), e->pd.src_desc(), e->src_in, hold_src)},
            {DNNL_ARG_WEIGHTS, in_layout(wrap(e->weights_user, wc), e->pd.weights_desc(), e->weights_in, hold_w)}};
  Tensor bc;
  if (has_bias) {
    bc = f32_contiguous(bias);
    args.emplace(DNNL_ARG_BIAS, wrap(plain_desc({s.o}), bc));
  }
  const memory dst_user = wrap(e->dst_user, out);
  const memory dst = e->dst_out.needed ? fresh(e->pd.dst_desc(), hold_dst) : dst_user;
  args.emplace(DNNL_ARG_DST, dst);
  execute(e->prim, e->pd.scratchpad_desc(), std::move(args));
  e->dst_out.run(dst, dst_user);
  return out.to(x.dtype());
}

std::optional<Tensor> conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& input_shape,
                                            const ConvShapes& s) {
  return run_backward<bwd_data_t>(1, s, {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS}, {&grad_out, &weight}, DNNL_ARG_DIFF_SRC,
                                  input_shape, grad_out.dtype());
}

std::optional<Tensor> conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                                             const ConvShapes& s) {
  return run_backward<bwd_weights_t>(2, s, {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST}, {&x, &grad_out}, DNNL_ARG_DIFF_WEIGHTS,
                                     weight_shape, grad_out.dtype());
}

}  // namespace kiln::cpu::onednn
