// kiln::ops: every raw tensor op (no autograd), one header per family.
#pragma once

#include <kiln/core/ops/conv.h>
#include <kiln/core/ops/cross_entropy.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/ops/index.h>
#include <kiln/core/ops/join.h>
#include <kiln/core/ops/layer_norm.h>
#include <kiln/core/ops/matmul.h>
#include <kiln/core/ops/pool.h>
#include <kiln/core/ops/reduce.h>
#include <kiln/core/ops/softmax.h>
#include <kiln/core/ops/triangle.h>
