// The differentiable ops users call (kiln::matmul, kiln::gelu, a + b, ...). autograd/ops/X wraps
// the raw core/ops/X; attention, dropout, loss and compare (isclose, allclose, equal: no gradient)
// have no single raw op of their own.
#pragma once

#include <kiln/autograd/ops/add_layer_norm.h>
#include <kiln/autograd/ops/attention.h>
#include <kiln/autograd/ops/batch_norm.h>
#include <kiln/autograd/ops/compare.h>
#include <kiln/autograd/ops/conv.h>
#include <kiln/autograd/ops/cross_entropy.h>
#include <kiln/autograd/ops/dropout.h>
#include <kiln/autograd/ops/elementwise.h>
#include <kiln/autograd/ops/gelu_linear.h>
#include <kiln/autograd/ops/linear_gelu_linear.h>
#include <kiln/autograd/ops/index.h>
#include <kiln/autograd/ops/join.h>
#include <kiln/autograd/ops/layer_norm.h>
#include <kiln/autograd/ops/linear_cross_entropy.h>
#include <kiln/autograd/ops/loss.h>
#include <kiln/autograd/ops/matmul.h>
#include <kiln/autograd/ops/pool.h>
#include <kiln/autograd/ops/reduce.h>
#include <kiln/autograd/ops/softmax.h>
#include <kiln/autograd/ops/triangle.h>
