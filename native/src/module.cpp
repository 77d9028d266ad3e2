// gicbench._native: the one native module. Each area registers its own bindings.
#include <nanobind/nanobind.h>

#include "bindings.hpp"

NB_MODULE(_native, m) {
  m.doc() = "gicbench native core: mlx5 wire helpers, emulated-NIC CPU engine, host submitter";
  gicbench::bind_wire(m.def_submodule("wire", "mlx5 WQE/CQE encoders from cuda/mlx5.cuh"));
  gicbench::bind_emu(m.def_submodule("emu", "emulated NIC: shared-memory objects and CPU engine"));
  gicbench::bind_host(m.def_submodule("host", "host submitter: native posting and polling loops"));
  gicbench::bind_doca(m.def_submodule("doca", "DOCA GPUNetIO: host threads of the CPU proxy handlers"));
  gicbench::bind_proxy(m.def_submodule("proxy", "mini-proxy: request rings, CPU workers, host producers"));
  gicbench::bind_gda(m.def_submodule("gda", "mini-gda: the host-forwarded doorbell's thread"));
#ifdef GICBENCH_HAVE_VERBS
  gicbench::bind_verbs(m.def_submodule("verbs", "verbs provider: libibverbs objects and loops"));
#endif
}
