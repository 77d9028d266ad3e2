// Bindings of the emu area (being written).
#include "bindings.hpp"

namespace gicbench {
void bind_emu(nanobind::module_) {}
}  // namespace gicbench
