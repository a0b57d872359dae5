// Hugging Face GPT-2 weights <-> Kiln GPT. HF's GPT-2 uses Conv1D layers whose weights are
// stored (in, out), and its token table has vocab_size rows; Kiln's Linear weights are
// (out, in) and wte has padded_vocab_size rows. These functions convert both ways.
#pragma once

#include <string>

#include <kiln/models/gpt.h>

namespace kiln::models {

/// Writes the model as an HF GPT-2 safetensors file: names "transformer.<...>" as in
/// GPT2LMHeadModel, c_attn/attn.c_proj/c_fc/mlp.c_proj weights transposed to (in, out), wte
/// sliced to vocab_size rows, no lm_head.weight (tied: HF re-ties it on load). Atomic.
void save_gpt_hf(const GPT& model, const std::string& path);

/// Reads an HF GPT-2 safetensors file into `model` (whose config must match: n_embd, n_layer,
/// block_size, vocab_size rows). Names may carry the "transformer." prefix (GPT2LMHeadModel) or
/// not (GPT2Model's "h.0.attn.c_attn.weight"). Conv1D weights are transposed to (out, in); wte
/// rows beyond the file's vocab_size are zero-filled; tensors are cast to the model's dtype.
/// Accepted and dropped: "lm_head.weight" when it equals wte (tied; otherwise an error), and the
/// causal-mask buffers "h.<i>.attn.bias" (4-D) / "h.<i>.attn.masked_bias" of older HF files.
/// Missing or unexpected names fail in one kiln::Error listing them; nothing is copied then.
void load_gpt_hf(GPT& model, const std::string& path);

}  // namespace kiln::models
