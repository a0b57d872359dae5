// kiln/data: datasets and loaders: llm.c token shards and their distributed loader, the GPT-2
// tokenizer, a synthetic corpus with a known entropy floor, CIFAR-10 (and its synthetic stand-in),
// augmentation, the distributed sampler and the threaded prefetching loader.
#pragma once

#include <kiln/data/augment.h>
#include <kiln/data/cifar10.h>
#include <kiln/data/data_loader.h>
#include <kiln/data/gpt2_pretokenize.h>
#include <kiln/data/gpt2_tokenizer.h>
#include <kiln/data/sampler.h>
#include <kiln/data/synthetic_corpus.h>
#include <kiln/data/text_documents.h>
#include <kiln/data/token_loader.h>
#include <kiln/data/token_shard.h>
