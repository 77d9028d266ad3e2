// Native posting loops for bench/emu_engine.py (Python cannot post tens of millions of WQEs/s).
#pragma once
#include <nanobind/nanobind.h>

namespace gicbench {
void bind_emu_bench(nanobind::module_& m);
}  // namespace gicbench
