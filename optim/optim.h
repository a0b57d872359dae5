// kiln/optim: optimizers over tensors (SGD, AdamW), LR schedules, gradient clipping and training
// checkpoints, and the GradScaler for mixed precision.
#pragma once

#include <kiln/optim/adamw.h>
#include <kiln/optim/checkpoint.h>
#include <kiln/optim/clip.h>
#include <kiln/optim/grad_scaler.h>
#include <kiln/optim/lr_schedule.h>
#include <kiln/optim/optimizer.h>
#include <kiln/optim/sgd.h>
