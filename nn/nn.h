// kiln/nn: Module and its registry, layers, containers, losses, init and weight files.
#pragma once

#include <kiln/nn/activation.h>
#include <kiln/nn/container.h>
#include <kiln/nn/conv.h>
#include <kiln/nn/dropout.h>
#include <kiln/nn/embedding.h>
#include <kiln/nn/flatten.h>
#include <kiln/nn/init.h>
#include <kiln/nn/linear.h>
#include <kiln/nn/loss.h>
#include <kiln/nn/module.h>
#include <kiln/nn/normalization.h>
#include <kiln/nn/pooling.h>
#include <kiln/nn/serialize.h>
