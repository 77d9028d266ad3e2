// A native loop's failure, with everything needed to diagnose it: one record for the host
// submitter's loops on mlx5 queues and on verbs, and the base of mini-proxy's EngineError. A
// poster (poster.hpp) fills the queue state of the lane it drives; the loop fills the rest.
#pragma once

#include <stdio.h>

#include <cstdint>
#include <string>

namespace gicbench {

// A QP number as the reports write it: 0x000123.
inline std::string qpn_hex(uint32_t qpn) {
  char b[16];
  snprintf(b, sizeof b, "0x%06x", qpn);
  return b;
}

struct LoopError {
  bool failed = false;
  // "timeout" | "cqe_error" | "interrupted" | "stopped" (a sibling thread failed) |
  // "bad_arguments" (field, allowed, message) | "queue_state" (a QP whose memory cannot say what
  // is outstanding; message) | "post_failed" | "poll_failed" (verbs; message)
  std::string kind;
  std::string field;    // bad_arguments: the argument refused
  std::string allowed;  // bad_arguments: what would be accepted
  std::string message;  // a human sentence where the kind alone does not say enough
  uint64_t done = 0;    // operations (single-op, responder) or messages (msg-rate) completed or
                        // posted before the failure, warm-up included
  uint64_t total = 0;   // ... out of this many requested
  // The lane's queue state. mlx5 queues: SQ producer index and the index retired by CQEs
  // (WQEBBs), the CQ consumer index. verbs: work requests posted and known complete,
  // completions taken.
  uint32_t qpn = 0;
  uint64_t pi = 0;
  uint64_t retired = 0;
  uint32_t cq_ci = 0;
  // The error completion. mlx5: the error CQE's syndromes and WQE counter.
  uint32_t syndrome = 0;
  uint32_t vendor_syndrome = 0;
  uint32_t wqe_counter = 0;
  // verbs: the ibv_wc's status (-1: no completion), vendor error, wr_id and QP number.
  int wc_status = -1;
  uint32_t vendor_err = 0;
  uint64_t wr_id = 0;
  uint32_t wc_qpn = 0;
  // Round trip: the value last seen in the polled word, and the one awaited.
  uint64_t word_seen = 0;
  uint64_t word_expected = 0;

  // Refuse an argument before anything is posted. Always false (the loop's return value).
  bool refuse(const std::string& f, const std::string& allowed_, const std::string& m) {
    failed = true;
    kind = "bad_arguments";
    field = f;
    allowed = allowed_;
    message = m;
    return false;
  }
};

}  // namespace gicbench
