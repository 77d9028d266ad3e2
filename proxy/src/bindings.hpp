// Registration functions of the native module's areas (one .cpp file each).
#pragma once
#include <nanobind/nanobind.h>

namespace gicbench {
void bind_wire(nanobind::module_ m);
}  // namespace gicbench
