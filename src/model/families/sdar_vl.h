// The SDAR-VL family (sdar_vl.cpp): declared apart from family.h's list so that the vision work
// stays in its own files.
#pragma once

#include "model/families/family.h"

namespace dllm {

extern const Family kSdarVlFamily;

}  // namespace dllm
