// Forwarding header, kept so that existing includes build: the headers that need libtorch live
// in tdaot/torch/ (this one is tdaot/torch/session.h); every other public header is torch-free.
#pragma once

#include "tdaot/torch/session.h"
