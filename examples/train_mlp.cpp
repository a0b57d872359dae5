// A custom module trained with AdamW, a warm-up + cosine schedule and gradient clipping; saved, loaded.
#include <cstdio>
#include <kiln/kiln.h>
using namespace kiln;
struct Mlp : nn::Module {  // register the children, write forward
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 32));
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 1));
  Tensor forward(const Tensor& x) { return fc2->forward(gelu(fc1->forward(x))); }
};

int main() {
  Tensor x = randn({256, 4}), y = tanh(matmul(x, randn({4, 1})));  // a target to learn
  auto model = std::make_shared<Mlp>();
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(1e-2).weight_decay(0.01));
  optim::LRScheduler sched(opt, optim::warmup_cosine_schedule(optim::WarmupCosineOptions(10, 200)));
  double first = mse_loss(model->forward(x), y).item();
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    mse_loss(model->forward(x), y).backward();
    optim::clip_grad_norm(model->parameters(), 1.0);
    opt.step();
    sched.step();
  }
  nn::save_weights(*model, "mlp.safetensors");  // PyTorch and Hugging Face tools read it
  auto loaded = std::make_shared<Mlp>();
  nn::load_weights(*loaded, "mlp.safetensors");
  double last = mse_loss(model->forward(x), y).item(), reloaded = mse_loss(loaded->forward(x), y).item();
  std::printf("loss %.4f -> %.4f, reloaded %.4f\n", first, last, reloaded);
  return last < 0.2 * first && reloaded == last ? 0 : 1;  // it reaches ~0.1x
}
