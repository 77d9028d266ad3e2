// The host side of DOCA GPUNetIO's CPU_PROXY and CPU_PROXY_FREE_FLOW NIC handlers.
//
// With those handlers DOCA's device code never touches the NIC's doorbell. CPU_PROXY: the GPU
// stores (exclusive) or max-updates (shared) its producer index into one 8-byte proxy word, which
// DOCA's QP structure holds in place of the doorbell address (doca_gpu_dev_verbs_ring_proxy).
// CPU_PROXY_FREE_FLOW: the GPU only marks each finished WQE: slot[i & mask] = i + 1 in an array
// of sq_wqebbs 8-byte words (doca_gpu_dev_verbs_mark_wqes_ready_free_flow); the host finds the
// ready prefix itself (the second paper's "Free Flow"). Either way a host thread then publishes
// the producer index as a NIC driver does: doorbell record (BE32 of pi & 0xffff at the SND word),
// then the doorbell register with DOCA's own value (the next index, as doca_gpu_dev_common_
// prepare_db builds it), each with a release store.
#include <nanobind/nanobind.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bindings.hpp"
#include "ready_prefix.hpp"

namespace nb = nanobind;

namespace gicbench {
namespace {

// One QP: the ready-prefix walk and the ring are ready_prefix.hpp's (shared with mini-gda's
// host-forwarded doorbell); CPU_PROXY reads its producer index from the proxy word instead.
struct ProxyEntry {
  ready::Queue q;  // q.slots: FREE_FLOW's slot array, or CPU_PROXY's proxy word
  bool free_flow;
};

class DocaProxy {
 public:
  ~DocaProxy() { stop(); }

  void add(uint64_t word, uint64_t dbrec, uint64_t db, uint32_t qpn, uint32_t wqebbs,
           uint64_t start, bool free_flow) {
    if (running()) throw std::runtime_error("DocaProxy.add: stop the thread first");
    if (!word || !dbrec || !db) throw std::invalid_argument("DocaProxy.add: an address is 0");
    if (wqebbs == 0 || (wqebbs & (wqebbs - 1)) || wqebbs > 32768)
      throw std::invalid_argument("invalid wqebbs=" + std::to_string(wqebbs) +
                                  ": allowed a power of two, 1..32768");
    entries_.push_back(ProxyEntry{ready::Queue{reinterpret_cast<const uint64_t*>(word),
                                               reinterpret_cast<uint32_t*>(dbrec + 4),
                                               reinterpret_cast<uint64_t*>(db), qpn & 0xffffffu,
                                               wqebbs - 1, start, 0},
                                  free_flow});
  }

  // One pass over every QP; returns how many doorbells it rang.
  uint64_t poll_once() {
    uint64_t n = 0;
    for (ProxyEntry& e : entries_) n += step(e);
    return n;
  }

  void start() {
    if (running()) return;
    stop_.store(false);
    thread_ = std::thread([this] { loop(); });
  }

  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }

  bool running() const { return thread_.joinable(); }

  // (qpn, producer index published, doorbells rung) per QP.
  std::vector<std::tuple<uint32_t, uint64_t, uint64_t>> stats() const {
    std::vector<std::tuple<uint32_t, uint64_t, uint64_t>> out;
    for (const ProxyEntry& e : entries_) out.emplace_back(e.q.qpn, e.q.rung, e.q.rings);
    return out;
  }

 private:
  static uint64_t step(ProxyEntry& e) {
    const uint64_t pi =
        e.free_flow ? ready::prefix(e.q) : __atomic_load_n(e.q.slots, __ATOMIC_ACQUIRE);
    if (pi <= e.q.rung) return 0;
    ready::ring(e.q, pi);
    return 1;
  }

  // Spins while there is work; after 4096 idle passes it yields, after ~1M it sleeps 1 µs per
  // pass, so an idle proxy costs little and stop() is seen within microseconds.
  void loop() {
    uint64_t idle = 0;
    while (!stop_.load(std::memory_order_relaxed)) {
      if (poll_once()) {
        idle = 0;
        continue;
      }
      ++idle;
      if (idle > (1u << 20))
        std::this_thread::sleep_for(std::chrono::microseconds(1));
      else if (idle > 4096)
        std::this_thread::yield();
      else
        __builtin_ia32_pause();
    }
  }

  std::vector<ProxyEntry> entries_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
};

}  // namespace

void bind_doca(nb::module_ m) {
  nb::class_<DocaProxy>(m, "DocaProxy",
                        "Host thread ringing for DOCA's CPU_PROXY / CPU_PROXY_FREE_FLOW handlers")
      .def(nb::init<>())
      .def("add", &DocaProxy::add, nb::arg("word"), nb::arg("dbrec"), nb::arg("doorbell"),
           nb::arg("qpn"), nb::arg("wqebbs"), nb::arg("start"), nb::arg("free_flow"),
           "Watch one QP: word = proxy word (CPU_PROXY) or ready-slot array (FREE_FLOW), host "
           "addresses; dbrec = the QP's doorbell record (SND word at +4)")
      .def("poll_once", &DocaProxy::poll_once, "One pass; returns the doorbells rung")
      .def("start", &DocaProxy::start)
      .def("stop", &DocaProxy::stop, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("running", &DocaProxy::running)
      .def("stats", &DocaProxy::stats, "(qpn, producer index published, doorbells) per QP");
}

}  // namespace gicbench
