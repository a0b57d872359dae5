// kiln/models: the bundled models: GPT (Hugging Face GPT-2 names, HF weight interop) and the
// CIFAR CNN.
#pragma once

#include <kiln/models/cifar_cnn.h>
#include <kiln/models/gpt.h>
#include <kiln/models/gpt_hf.h>
#include <kiln/models/gpt_kv_cache.h>
#include <kiln/models/gpt_memory.h>
