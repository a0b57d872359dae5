// kiln/parallel: the Store, process groups (Gloo), init_process_group, DistributedDataParallel,
// sharded data parallel (ZeRO-1/2, FSDP),
// the data-parallel Trainer, the memory planner and the launcher logic behind kiln-run.
#pragma once

#include <kiln/parallel/checked_process_group.h>
#include <kiln/parallel/checkpoint_agreement.h>
#include <kiln/parallel/preemption.h>
#include <kiln/parallel/comm_hooks.h>
#include <kiln/parallel/debug_level.h>
#include <kiln/parallel/ddp.h>
#include <kiln/parallel/elastic_agent.h>
#include <kiln/parallel/file_store.h>
#include <kiln/parallel/fsdp.h>
#include <kiln/parallel/gloo_process_group.h>
#include <kiln/parallel/init.h>
#include <kiln/parallel/job_store.h>
#include <kiln/parallel/launcher.h>
#include <kiln/parallel/memory_plan.h>
#include <kiln/parallel/mixed_precision_policy.h>
#include <kiln/parallel/nccl_process_group.h>
#include <kiln/parallel/powersgd_hook.h>
#include <kiln/parallel/process_group.h>
#include <kiln/parallel/rendezvous.h>
#include <kiln/parallel/shard_layout.h>
#include <kiln/parallel/sharded_checkpoint.h>
#include <kiln/parallel/sharded_optimizer.h>
#include <kiln/parallel/sharded_reducer.h>
#include <kiln/parallel/sharding.h>
#include <kiln/parallel/spawn.h>
#include <kiln/parallel/store.h>
#include <kiln/parallel/sync_batch_norm.h>
#include <kiln/parallel/trainer.h>
