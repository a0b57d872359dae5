// The differentiable ops users call (kiln::matmul, kiln::gelu, a + b, ...).
#pragma once

#include <kiln/autograd/ops/elementwise.h>
