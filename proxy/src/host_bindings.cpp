// Bindings of the host area (being written).
#include "bindings.hpp"

namespace gicbench {
void bind_host(nanobind::module_) {}
}  // namespace gicbench
