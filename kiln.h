// Kiln for embedders: #include <kiln/kiln.h> and link kiln::kiln. The user API only: no raw
// kernels (kiln::ops) and no CUDA launchers (tests/core/test_public_api checks).
#pragma once

#include <kiln/autograd/autograd.h>
#include <kiln/core/core.h>
#include <kiln/cuda.h>
#include <kiln/data/data.h>
#include <kiln/models/models.h>
#include <kiln/nn/nn.h>
#include <kiln/optim/optim.h>
#include <kiln/parallel/parallel.h>
