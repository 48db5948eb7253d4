// Forwarding header, kept so that existing includes build: the helpers a robot service uses
// beside the runtime live in tdaot/service/ (this one is tdaot/service/stats.h).
#pragma once

#include "tdaot/service/stats.h"
