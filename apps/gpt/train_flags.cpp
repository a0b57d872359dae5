// add_train_gpt_flags (see train_flags.h): every train_gpt flag, its default and its help text.
#include "train_flags.h"

#include "common/dtype_flag.h"

namespace kiln::apps {

void add_train_gpt_flags(CLI::App& app, TrainGptArgs& a, double& floor_flag) {
  add_model_flags(app, a.shape, "preset");
  app.add_option("--train", a.train, "glob of the training shards, e.g. 'data/train_*.bin'")->required();
  app.add_option("--val", a.val, "glob of the validation shards (needed by --eval-every)");
  app.add_option("--batch-size,-b", a.batch_size, "B: sequences per micro-batch per rank")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seq-len,-t", a.seq_len, "T: tokens per sequence")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--total-batch-tokens", a.total_batch_tokens,
                 "tokens per optimizer step over all ranks; gradient accumulation = this / (B*T*world size), "
                 "which must divide (0: B*T*world size, no accumulation)")->check(CLI::NonNegativeNumber);
  app.add_option("--lr", a.lr, "peak learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--min-lr", a.min_lr, "learning rate at the end of the cosine decay")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--warmup-steps", a.warmup_steps, "linear warmup steps, then cosine decay to --min-lr at --steps")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--steps", a.steps, "optimizer steps of the whole run")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--stop-after", a.stop_after,
                 "end this process after step N (checkpointing it; continue with --resume), keeping the --steps "
                 "schedule: for preemptible jobs (0: run to --steps)")->check(CLI::NonNegativeNumber);
  app.add_option("--weight-decay", a.weight_decay,
                 "AdamW decoupled weight decay of the 2-D (and higher) weights; biases, LayerNorm and other 1-D "
                 "parameters get none (nanoGPT/llm.c). Betas (0.9, 0.95), eps 1e-8")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--grad-clip", a.grad_clip, "clip the global gradient norm to this (0: off)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--dtype", a.dtype, "f32 (or fp32), or autocast to bf16, or f16 (or fp16) with a loss scaler")
      ->transform(dtype_flag(kTrainGptDTypes))->capture_default_str();
  app.add_option("--eval-every", a.eval_every, "validation loss every N steps and at the end (0: off)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--eval-tokens", a.eval_tokens, "validation tokens per evaluation (over all ranks, from the start "
                 "of the val shards)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--log-every", a.log_every, "print and record the loss every N steps, and at the first and last (each syncs the ranks)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--checkpoint-every", a.checkpoint_every,
                 "write DIR/step_<N>.safetensors every N steps, keeping the last 2 (0: only at the end)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--checkpoint-dir", a.checkpoint_dir,
                 "checkpoint directory; also gets config.json (the model's shape, read by sample_gpt) and the "
                 "final checkpoint");
  app.add_flag("--resume", a.resume, "continue from the latest checkpoint in --checkpoint-dir (model, optimizer, "
               "schedule, RNG, data cursor), if there is one");
  add_memory_flags(app, a.recompute, a.fused_head);
  add_fit_memory_flag(app, a.fit);
  app.add_flag("--cuda-graph", a.cuda_graph, "capture the whole training step as one CUDA graph after 3 eager steps "
               "and replay it (--device cuda, one process, no sharding; the batch goes through static buffers). "
               "Off by default: on an H200 it matched the eager step but was no faster at gpt2-124m or gpt-1.3b");
  add_parallel_flags(app, a.parallel, "each transformer block");
  app.add_option("--seed", a.seed, "model init and data order")->capture_default_str();
  app.add_option("--device", a.device, "cpu or cuda (under a launcher each rank takes cuda:LOCAL_RANK)")
      ->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--threads", a.threads, "CPU threads per process (0: OMP_NUM_THREADS or all cores)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--metrics", a.metrics, "JSONL file: one object per logged step (step, loss, lr, tokens_per_s, "
                 "mfu, grad_norm, elapsed_s; fp16: skipped, skipped_steps since the last line), one per "
                 "evaluation (val_loss); appended to on --resume");
  app.add_option("--loss-svg", a.loss_svg, "write an SVG loss curve of this run at the end");
  add_profile_flags(app, a.profile);
  app.add_option("--entropy-floor", floor_flag, "the data's entropy floor in nats/token, shown next to the loss "
                 "(default: read from floor.txt next to the --train shards, which kiln-make-shards --synthetic writes)");
  app.add_option("--peak-flops", a.peak_flops, "one rank's peak FLOP/s for MFU; default for cuda: 989e12 (H100/H200 "
                 "dense bf16; half for f32/TF32), for the CPU its f32 peak derived from the CPU (vector width, 2 "
                 "FMA units per core assumed, the threads' cores, the measured clock; printed at the start)");
}

}  // namespace kiln::apps
