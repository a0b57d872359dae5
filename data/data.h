// kiln/data: datasets and loaders (llm.c token shards and their distributed loader, a synthetic
// corpus with a known entropy floor).
#pragma once

#include <kiln/data/synthetic_corpus.h>
#include <kiln/data/token_loader.h>
#include <kiln/data/token_shard.h>
