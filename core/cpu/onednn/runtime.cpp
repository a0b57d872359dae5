// The oneDNN runtime shared by core/cpu/onednn's kernels (runtime.h).
#include <kiln/core/cpu/onednn/runtime.h>

#include <omp.h>

#include <kiln/core/cpu/onednn/switch.h>
#include <kiln/core/factory.h>
#include <kiln/core/parallel.h>

namespace kiln::cpu::onednn {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

int match_threads() {
  if (in_parallel_region()) return 1;
  const int n = num_threads();
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
  return n;
}

dnnl::primitive_attr scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void execute(const dnnl::primitive& prim, const memory::desc& scratchpad, Args args) {
  Tensor pad;
  if (scratchpad.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, fresh(scratchpad, pad));
  prim.execute(stream(), args);
  stream().wait();
  count_onednn_call();
}

memory::desc plain_desc(const memory::dims& dims) {
  memory::dims strides(dims.size(), 1);
  for (int64_t d = static_cast<int64_t>(dims.size()) - 2; d >= 0; --d) strides[d] = strides[d + 1] * dims[d + 1];
  return memory::desc(dims, memory::data_type::f32, strides);
}

memory wrap(const memory::desc& md, const Tensor& t) {
  KILN_ASSERT(t.dtype() == DType::f32 && t.device().is_cpu() && t.numel() * 4 >= static_cast<int64_t>(md.get_size()),
              "oneDNN: a buffer of ", t.numel(), " ", t.dtype(), " for a layout of ", md.get_size(), " bytes");
  return memory(md, engine(), t.data_ptr());
}

memory fresh(const memory::desc& md, Tensor& holder) {
  holder = empty({static_cast<int64_t>((md.get_size() + 3) / 4)}, DType::f32);
  return memory(md, engine(), holder.data_ptr());
}

Reorder::Reorder(const memory::desc& from, const memory::desc& to) : needed(from != to) {
  if (needed) prim = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), to));
}

void Reorder::run(const memory& from, const memory& to) const {
  if (!needed) return;
  prim.execute(stream(), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
  stream().wait();
}

memory in_layout(const memory& user, const memory::desc& want, const Reorder& reorder, Tensor& holder) {
  if (!reorder.needed) return user;
  memory m = fresh(want, holder);
  reorder.run(user, m);
  return m;
}

}  // namespace kiln::cpu::onednn
