// Python bindings of cuda/mlx5.cuh: the C++ twin of gicbench.mlx5, compared byte for byte in tests.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <string>

#include "bindings.hpp"
#include "mlx5.cuh"

namespace nb = nanobind;
namespace m5 = gicbench::mlx5;

namespace gicbench {

static nb::bytes to_bytes(const uint8_t* p, size_t n) {
  return nb::bytes(reinterpret_cast<const char*>(p), n);
}

void bind_wire(nb::module_ m) {
  m.def(
      "ctrl_seg",
      [](uint16_t pi, uint8_t opcode, uint8_t opmod, uint32_t qpn, uint8_t fm_ce_se, uint8_t ds,
         uint8_t signature, uint32_t imm) {
        uint8_t b[16];
        m5::set_ctrl_seg(b, pi, opcode, opmod, qpn, fm_ce_se, ds, signature, imm);
        return to_bytes(b, sizeof b);
      },
      nb::arg("pi"), nb::arg("opcode"), nb::arg("opmod"), nb::arg("qpn"), nb::arg("fm_ce_se"),
      nb::arg("ds"), nb::arg("signature") = 0, nb::arg("imm") = 0);
  m.def("raddr_seg", [](uint64_t raddr, uint32_t rkey) {
    uint8_t b[16];
    m5::set_raddr_seg(b, raddr, rkey);
    return to_bytes(b, sizeof b);
  });
  m.def("data_seg", [](uint32_t length, uint32_t lkey, uint64_t addr) {
    uint8_t b[16];
    m5::set_data_seg(b, length, lkey, addr);
    return to_bytes(b, sizeof b);
  });
  m.def("inline_seg_ds", &m5::inline_seg_ds);
  m.def("ds_to_wqebbs", &m5::ds_to_wqebbs);
}

}  // namespace gicbench
