// kiln/models: ready-made models (GPT with Hugging Face GPT-2 names and its HF weight interop).
#pragma once

#include <kiln/models/gpt.h>
#include <kiln/models/gpt_hf.h>
