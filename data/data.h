// kiln/data: datasets (CIFAR-10 and its synthetic stand-in), augmentation, the distributed
// sampler and the threaded prefetching loader.
#pragma once

#include <kiln/data/augment.h>
#include <kiln/data/cifar10.h>
#include <kiln/data/data_loader.h>
#include <kiln/data/sampler.h>
