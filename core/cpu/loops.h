// The CPU elementwise engine: walks N operands that share one logical shape, each with its own
// strides (0 for a broadcast dim), row by row. Dims are coalesced first, so contiguous and
// broadcast-scalar operands reach the row function as flat runs the compiler vectorizes.
// Work is split over threads by element ranges; each element is computed independently, so the
// split never changes a result.
#pragma once

#include <array>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include <kiln/core/formulas.h>
#include <kiln/core/parallel.h>
#include <kiln/core/tensor.h>

namespace kiln::cpu {

template <int N>
struct StridedOperands {
  Shape shape;                            // coalesced, outermost first
  std::array<char*, N> base{};            // first element of each operand
  std::array<Strides, N> strides;         // in bytes, same length as shape
};

// Operands must already have `shape` (use Tensor::expand for broadcasting).
template <int N>
StridedOperands<N> make_operands(const Shape& shape, const std::array<const Tensor*, N>& ts) {
  StridedOperands<N> ops;
  for (int k = 0; k < N; ++k) {
    KILN_ASSERT(ts[k]->shape() == shape, "operand ", k, " has shape ", ts[k]->shape(), ", loop shape ", shape);
    ops.base[k] = static_cast<char*>(ts[k]->data_ptr());
  }
  std::array<Strides, N> bytes;
  for (int k = 0; k < N; ++k)
    for (int64_t d = 0; d < shape.ndim(); ++d)
      bytes[k].push_back(ts[k]->strides()[d] * static_cast<int64_t>(ts[k]->element_size()));
  Shape sh;
  std::array<Strides, N> st;
  formulas::collapse_dims<N>(shape, bytes, sh, st);  // Note [Collapsing dims]
  if (sh.empty()) {  // a single element
    sh.push_back(1);
    for (int k = 0; k < N; ++k) st[k].push_back(0);
  }
  ops.shape = sh;
  ops.strides = st;
  return ops;
}

// Calls row(ptrs, inner_byte_strides, n) for runs along the innermost dim, in parallel.
template <int N, class Row>
void for_each_row(const StridedOperands<N>& ops, Row&& row, int64_t grain = kGrainSize) {
  const int64_t nd = ops.shape.ndim();
  const int64_t inner = ops.shape[nd - 1];
  const int64_t total = shape_numel(ops.shape);
  std::array<int64_t, N> inner_stride;
  for (int k = 0; k < N; ++k) inner_stride[k] = ops.strides[k][nd - 1];
  parallel_for(0, total, grain, [&](int64_t begin, int64_t end) {
    // Multi-index of `begin`.
    std::array<int64_t, 16> small_idx{};
    std::vector<int64_t> big_idx;
    int64_t* idx = small_idx.data();
    if (nd > 16) {
      big_idx.resize(nd);
      idx = big_idx.data();
    }
    int64_t rem = begin;
    for (int64_t d = nd - 1; d >= 0; --d) {
      idx[d] = rem % ops.shape[d];
      rem /= ops.shape[d];
    }
    while (begin < end) {
      int64_t n = std::min(end - begin, inner - idx[nd - 1]);
      std::array<char*, N> p;
      for (int k = 0; k < N; ++k) {
        int64_t off = 0;
        for (int64_t d = 0; d < nd; ++d) off += idx[d] * ops.strides[k][d];
        p[k] = ops.base[k] + off;
      }
      row(p, inner_stride, n);
      begin += n;
      idx[nd - 1] += n;
      for (int64_t d = nd - 1; d > 0 && idx[d] >= ops.shape[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  });
}

template <class Out, class... In, class Op, size_t... K>
inline void map_row(const std::array<char*, sizeof...(In) + 1>& p,
                    const std::array<int64_t, sizeof...(In) + 1>& s, int64_t n, Op& op,
                    std::index_sequence<K...>) {
  Out* __restrict__ o = reinterpret_cast<Out*>(p[0]);
  bool contiguous = s[0] == sizeof(Out) && ((s[K + 1] == sizeof(In)) && ...);
  if (contiguous) {
    std::tuple<const In*...> in{reinterpret_cast<const In*>(p[K + 1])...};
    for (int64_t i = 0; i < n; ++i) o[i] = formulas::convert<Out>(op(static_cast<acc_t<In>>(std::get<K>(in)[i])...));
    return;
  }
  if constexpr (sizeof...(In) == 2) {
    // Binary ops with one side broadcast along the row (x + scalar, x * bias): hoist it.
    using A = std::tuple_element_t<0, std::tuple<In...>>;
    using B = std::tuple_element_t<1, std::tuple<In...>>;
    if (s[0] == sizeof(Out) && s[1] == sizeof(A) && s[2] == 0) {
      const A* a = reinterpret_cast<const A*>(p[1]);
      const acc_t<B> b = static_cast<acc_t<B>>(*reinterpret_cast<const B*>(p[2]));
      for (int64_t i = 0; i < n; ++i) o[i] = formulas::convert<Out>(op(static_cast<acc_t<A>>(a[i]), b));
      return;
    }
    if (s[0] == sizeof(Out) && s[1] == 0 && s[2] == sizeof(B)) {
      const acc_t<A> a = static_cast<acc_t<A>>(*reinterpret_cast<const A*>(p[1]));
      const B* b = reinterpret_cast<const B*>(p[2]);
      for (int64_t i = 0; i < n; ++i) o[i] = formulas::convert<Out>(op(a, static_cast<acc_t<B>>(b[i])));
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i)
    *reinterpret_cast<Out*>(p[0] + i * s[0]) =
        formulas::convert<Out>(op(static_cast<acc_t<In>>(*reinterpret_cast<const In*>(p[K + 1] + i * s[K + 1]))...));
}

// out[i] = op(in[i]...) for typed operands. Out, In... are the storage types; `op` takes and
// returns compute types (acc_t), so 16-bit floats are loaded to float and rounded once.
template <class Out, class... In, class Op>
void map_kernel(const Tensor& out, const std::array<const Tensor*, sizeof...(In)>& ins, Op op) {
  constexpr int N = sizeof...(In) + 1;
  std::array<const Tensor*, N> all;
  all[0] = &out;
  for (size_t k = 0; k < sizeof...(In); ++k) all[k + 1] = ins[k];
  auto ops = make_operands<N>(out.shape(), all);
  for_each_row<N>(ops, [&](const std::array<char*, N>& p, const std::array<int64_t, N>& s, int64_t n) {
    map_row<Out, In...>(p, s, n, op, std::make_index_sequence<sizeof...(In)>{});
  });
}

}  // namespace kiln::cpu
