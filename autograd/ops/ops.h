// The differentiable ops users call (kiln::matmul, kiln::gelu, a + b, ...).
#pragma once

#include <kiln/autograd/ops/conv.h>
#include <kiln/autograd/ops/elementwise.h>
#include <kiln/autograd/ops/functional.h>
#include <kiln/autograd/ops/matmul.h>
#include <kiln/autograd/ops/reduce.h>
#include <kiln/autograd/ops/shape.h>
