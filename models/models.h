// kiln/models: the bundled models (the CIFAR CNN).
#pragma once

#include <kiln/models/cifar_cnn.h>
