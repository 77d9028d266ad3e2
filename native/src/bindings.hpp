// Registration functions of the native module's areas (one .cpp file each).
#pragma once
#include <nanobind/nanobind.h>

namespace gicbench {
void bind_wire(nanobind::module_ m);  // wire.cpp: cuda/mlx5.cuh encoders/decoders
void bind_emu(nanobind::module_ m);   // emu_bindings.cpp: the emulated NIC's CPU engine
void bind_host(nanobind::module_ m);  // host_bindings.cpp: the host submitter's timing loops
void bind_doca(nanobind::module_ m);  // doca_proxy.cpp: DOCA GPUNetIO's CPU proxy handlers
void bind_proxy(nanobind::module_ m);  // proxy_bindings.cpp: mini-proxy's rings and workers
void bind_verbs(nanobind::module_ m);  // verbs_bindings.cpp: verbs objects and loops
void bind_gda(nanobind::module_ m);    // gda_forward.cpp: mini-gda's host-forwarded doorbell
}  // namespace gicbench
