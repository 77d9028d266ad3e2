// The fields a native loop's failure (loop_error.hpp) reports to Python, shared by the host
// loops on mlx5 queues and mini-proxy's EngineError (the same queue state: QP, producer and
// retired indices, CQ consumer index, the error CQE's syndromes, the polled word, progress).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "loop_error.hpp"

namespace gicbench {

inline void put_loop_fields(nanobind::dict& d, const LoopError& e) {
  d["kind"] = e.kind;
  d["field"] = e.field;
  d["allowed"] = e.allowed;
  d["message"] = e.message;
  d["qpn"] = e.qpn;
  d["pi"] = e.pi;
  d["retired"] = e.retired;
  d["cq_ci"] = e.cq_ci;
  d["syndrome"] = e.syndrome;
  d["vendor_syndrome"] = e.vendor_syndrome;
  d["wqe_counter"] = e.wqe_counter;
  d["word_seen"] = e.word_seen;
  d["word_expected"] = e.word_expected;
  d["done"] = e.done;
  d["total"] = e.total;
}

}  // namespace gicbench
