// Tensors and autograd: shared-handle tensors, views, broadcasting and dtype promotion; gradients by
// reverse mode, checked against the closed form and against central finite differences (gradcheck).
#include <cmath>
#include <cstdio>
#include <iostream>

#include <kiln/kiln.h>

using namespace kiln;

int main() try {
  Generator gen(42);
  Tensor a = randn({4, 3}, gen);                  // f32 on the CPU
  Tensor b = tensor({1.f, 2.f, 3.f});             // 1-D from values
  Tensor c = a * b + 1.0;                         // broadcasting: (4, 3) * (3,)
  Tensor row = c.select(0, 1);                    // a view: shares c's storage
  Tensor copy = c.clone();                        // clone() copies
  row.fill_(0.0);                                 // writes through to c, not to copy
  std::cout << c << "\n";
  bool views_ok = c.data<float>()[3] == 0.f && copy.data<float>()[3] != 0.f;
  bool promotes = (a + randn({4, 3}, gen, DType::f64)).dtype() == DType::f64;  // f32 + f64 -> f64

  // y = sum(tanh(x w)^2): dy/dw = x^T (2 t (1 - t^2)) with t = tanh(x w).
  Tensor x = randn({5, 3}, gen, DType::f64);
  Tensor w = randn({3, 2}, gen, DType::f64).requires_grad_();
  Tensor y = sum(square(tanh(matmul(x, w))));
  y.backward();
  Tensor expected;
  {
    NoGradGuard no_grad;                          // nothing below is recorded
    Tensor t = tanh(matmul(x, w));
    expected = matmul(x.t(), t * 2.0 * (1.0 - t * t));
  }
  double err = amax(abs(w.grad() - expected), {0, 1}).item();
  bool fd_ok = gradcheck([&](const std::vector<Tensor>& in) { return sum(square(tanh(matmul(in[0], in[1])))); },
                         {x, w});
  std::printf("views %s, promotion %s, |grad - closed form| = %.2e, gradcheck %s\n", views_ok ? "ok" : "WRONG",
              promotes ? "ok" : "WRONG", err, fd_ok ? "ok" : "FAILED");
  return views_ok && promotes && err < 1e-12 && fd_ok ? 0 : 1;
} catch (const Error& e) {
  std::fprintf(stderr, "tensors_autograd: %s\n", e.what());
  return 1;
}
