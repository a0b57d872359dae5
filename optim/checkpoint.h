// Training checkpoints: model weights, optimizer state, schedule and global steps, RNG states and
// an opaque data-loader cursor in ONE safetensors file, written atomically and validated whole
// before anything is restored (see Note [Checkpoint format]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/generator.h>
#include <kiln/core/io/safetensors.h>
#include <kiln/optim/optimizer.h>

namespace kiln::optim {

inline constexpr int kCheckpointFormatVersion = 1;

/// A kiln::Generator's position: Generator(seed) then set_offset(offset) resumes its stream.
struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;

  static RngState of(const Generator& g) { return {g.seed(), g.offset()}; }
  void restore(Generator& g) const {
    g.manual_seed(seed);
    g.set_offset(offset);
  }
};

/// Everything besides weights and optimizer state that a resumed run needs.
struct TrainingProgress {
  int64_t global_step = 0;
  int64_t scheduler_step = 0;  ///< LRScheduler::last_step(); restore with set_step()
  std::vector<RngState> rng;   ///< in an order the caller chooses (e.g. default, dropout, data)
  std::string data_cursor;     ///< opaque bytes (any content, binary included)
  /// Further named state (e.g. GradScaler::state_dict() under "grad_scaler."): saved as given,
  /// loaded back in file order; the caller validates it when restoring (load_state_dict).
  NamedTensors extra;
};

/// Note [Checkpoint format]
/// One safetensors file. Tensors, in this order:
///   "model.<name>"       each of the caller's named tensors (e.g. a module's state_dict)
///   "optimizer.<key>"    Optimizer::state_dict() (Note [Optimizer state_dict] in optimizer.h)
///   "data_cursor"        u8 (n,): the cursor's bytes
///   "extra.<name>"       each of TrainingProgress::extra (none when it is empty)
/// Metadata (decimal strings unless said otherwise):
///   "format" = "kiln.checkpoint", "format_version" = "1", "optimizer" = "SGD" | "AdamW",
///   "global_step", "scheduler_step", "rng.count", "rng.<i>.seed", "rng.<i>.offset",
///   "checksum": 16 hex digits, a 64-bit hash of every tensor's bytes in file order, so a flipped
///   byte in the data section is caught, not only a damaged header or a truncated file.
/// save_checkpoint writes through core's save_safetensors (tmp file in the same directory, fsync,
/// rename): a crash leaves the previous checkpoint intact.
void save_checkpoint(const std::string& path, const NamedTensors& model, const Optimizer& optimizer,
                     const TrainingProgress& progress);

/// The same with the optimizer's state given as its state_dict() and name(): what a sharded optimizer
/// writes once it gathered its state, or its parameter groups alone (parallel/sharded_checkpoint.h).
void save_checkpoint(const std::string& path, const NamedTensors& model, const NamedTensors& optimizer_state,
                     const std::string& optimizer_name, const TrainingProgress& progress);

/// Reads and validates the whole file first: readable safetensors, format and version, checksum,
/// the optimizer's kind, every model name present with the caller's shape and dtype and no other,
/// the optimizer state (validate_state_dict), and the metadata numbers. Any problem throws
/// kiln::Error naming the file and the problem, and the model and optimizer are left untouched.
/// Only then are the weights copied into the caller's tensors and the optimizer state loaded.
TrainingProgress load_checkpoint(const std::string& path, const NamedTensors& model, Optimizer& optimizer);

/// Reads the whole file and checks what load_checkpoint checks before it touches a tensor that does
/// not depend on the model: readable safetensors, format and version, and the data against the
/// stored checksum. Throws kiln::IOError naming the file and the problem. The resume agreement
/// (parallel/checkpoint_agreement.h) runs it on the checkpoint it picked; sample_gpt before it samples.
void verify_checkpoint(const std::string& path);

/// The file, verified as verify_checkpoint does; `who` starts every error message.
SafetensorsFile load_verified_checkpoint(const std::string& path, const char* who);

/// The same checks on a file already read from `path` (no second read).
void verify_loaded_checkpoint(const SafetensorsFile& file, const std::string& path, const char* who);

}  // namespace kiln::optim
