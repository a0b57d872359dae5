// kiln/autograd: the graph, the backward engine, grad mode, hooks and the differentiable ops.
#pragma once

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/checkpoint.h>
#include <kiln/autograd/engine.h>
#include <kiln/autograd/grad_mode.h>
#include <kiln/autograd/gradcheck.h>
#include <kiln/autograd/meta.h>
#include <kiln/autograd/ops/ops.h>
