// Bindings of the NIC model (emu_model_bindings.cpp): a Nic's model, and the model's arithmetic
// alone (NicModelSim) for the tests that check each mechanism by hand.
#pragma once
#include <nanobind/nanobind.h>

namespace gicbench {
void bind_emu_model(nanobind::module_& m);
}  // namespace gicbench
