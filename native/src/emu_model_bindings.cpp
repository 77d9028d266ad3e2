// Bindings of the NIC model: gicbench._native.emu.{MODEL_PARAMS, MODEL_COUNTERS, model_bytes,
// nic_set_model, nic_model_log, nic_model_counters, NicModelSim}.
#include "emu_model_bindings.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "emu_nic.hpp"

namespace nb = nanobind;

namespace gicbench {

namespace {

namespace nm = nic_model;
using emu::Nic;

// The parameters by name, in one table: what Python must give (every one, as an int >= 0).
struct Field {
  const char* name;
  bool wide;  // uint64_t (else uint32_t)
  size_t off;
};
#define GB_F64(f) Field{#f, true, offsetof(nm::Params, f)}
#define GB_F32(f) Field{#f, false, offsetof(nm::Params, f)}
const Field kFields[] = {
    GB_F64(doorbell_ps),     GB_F64(dma_read_ps),       GB_F64(dma_fs_per_byte),
    GB_F64(dma_write_ps),    GB_F64(tx_msg_ps),         GB_F64(rx_msg_ps),
    GB_F64(link_fs_per_byte), GB_F64(wire_ps),          GB_F64(ctx_fetch_ps),
    GB_F64(recv_miss_busy_ps), GB_F64(dc_connect_ps),   GB_F64(slack_ps),
    GB_F32(mtu),             GB_F32(packet_header_bytes), GB_F32(request_header_bytes),
    GB_F32(cache_lines),     GB_F32(send_ctx_lines),    GB_F32(recv_ctx_lines),
};
#undef GB_F64
#undef GB_F32

const char* const kCounterNames[nm::kNumCounters] = {
    "nic_model_wqes", "nic_model_cqes", "nic_model_late",
    "nic_model_send_misses", "nic_model_recv_misses", "nic_model_dci_connects",
};

nm::Params params_of(const nb::dict& d) {
  nm::Params p{};
  for (const Field& f : kFields) {
    if (!d.contains(f.name)) throw std::invalid_argument(std::string("missing ") + f.name);
    const uint64_t v = nb::cast<uint64_t>(d[f.name]);
    if (f.wide) {
      std::memcpy(reinterpret_cast<uint8_t*>(&p) + f.off, &v, 8);
    } else {
      if (v > 0xffffffffu) throw std::invalid_argument(std::string("too large: ") + f.name);
      const uint32_t w = static_cast<uint32_t>(v);
      std::memcpy(reinterpret_cast<uint8_t*>(&p) + f.off, &w, 4);
    }
  }
  if (d.size() != sizeof(kFields) / sizeof(kFields[0]))
    throw std::invalid_argument("unknown parameter given");
  return p;
}

struct NoSync {
  void lock(uint32_t*) {}
  void unlock(uint32_t*) {}
  void add(uint64_t* c, uint64_t v) { *c += v; }
};

// The model's arithmetic on its own: NICs (each its transmit state and its shared region) and
// QPs, planned in the order the caller gives, with times the caller gives. plan_wqe is the
// function the CPU engine calls.
class NicModelSim {
 public:
  NicModelSim(const nb::dict& params, uint32_t nics) : p_(params_of(params)) {
    for (uint32_t i = 0; i < nics; ++i) {
      Nic_ n;
      n.mem.assign(nm::shared_bytes(p_) / 8 + 1, 0);
      nm::shared_init(shared(n), p_);
      nics_.push_back(std::move(n));
    }
  }
  nb::dict plan(uint32_t src, uint32_t qpn, int32_t dst, uint32_t dst_num, uint32_t kind,
                uint32_t bytes, bool pointer, uint32_t nbb, uint64_t t_seen, bool dci) {
    if (src >= nics_.size() || (dst >= 0 && static_cast<size_t>(dst) >= nics_.size()))
      throw std::invalid_argument("no such NIC");
    if (kind > nm::kAtomic || nbb == 0) throw std::invalid_argument("kind 0..4, nbb >= 1");
    nm::WqeDesc w{static_cast<uint8_t>(kind), static_cast<uint8_t>(pointer),
                  static_cast<uint8_t>(dci), nbb, bytes, dst, dst_num};
    Nic_& n = nics_[src];
    nm::Shared* resp = dst >= 0 ? shared(nics_[dst]) : nullptr;
    NoSync sync;
    const nm::Planned o = nm::plan_wqe(p_, n.tx, qps_[{src, qpn}], shared(n), resp,
                                       n.spare_rx_free, w, qpn, t_seen, sync);
    ++shared(n)->counters[nm::kCntWqes];
    nb::dict d;
    d["t_nic"] = o.tx.t_nic;
    d["t_fetched"] = o.tx.t_fetched;
    d["t_ready"] = o.tx.t_ready;
    d["t_depart"] = o.tx.t_depart;
    d["t_arrive"] = o.tx.t_arrive;
    d["t_touch"] = o.rx.t_touch;
    d["t_reply"] = o.rx.t_reply;
    d["t_exec"] = o.t.t_exec;
    d["t_cqe"] = o.t.t_cqe;
    d["send_hit"] = bool(o.send_hit);
    d["recv_hit"] = bool(o.recv_hit);
    d["connected"] = bool(o.tx.connected);
    return d;
  }
  nb::dict counters(uint32_t nic) {
    nb::dict d;
    for (uint32_t i = 0; i < nm::kNumCounters; ++i) d[kCounterNames[i]] = shared(nics_.at(nic))->counters[i];
    d["cache_used_lines"] = nm::has_cache(shared(nics_.at(nic)))
                                ? nm::shared_cache(shared(nics_.at(nic))).h->used_lines
                                : 0u;
    return d;
  }

 private:
  struct Nic_ {
    nm::Tx tx;
    uint64_t spare_rx_free = 0;
    std::vector<uint64_t> mem;  // the shared region, 8-byte aligned
  };
  static nm::Shared* shared(Nic_& n) { return reinterpret_cast<nm::Shared*>(n.mem.data()); }
  nm::Params p_;
  std::vector<Nic_> nics_;
  std::map<std::pair<uint32_t, uint32_t>, nm::Qp> qps_;
};

}  // namespace

void bind_emu_model(nb::module_& m) {
  m.attr("MODEL_PARAMS") = [] {
    nb::list l;
    for (const Field& f : kFields) l.append(f.name);
    return l;
  }();
  m.attr("MODEL_COUNTERS") = [] {
    nb::list l;
    for (const char* n : kCounterNames) l.append(n);
    return l;
  }();
  m.def("model_bytes", [](const nb::dict& d) { return Nic::model_bytes(params_of(d)); },
        "Segment bytes a Nic's NIC model takes (its shared region's footprint).");
  m.def("nic_set_model", [](Nic& n, const nb::dict& d) { n.set_model(params_of(d)); },
        nb::arg("nic"), nb::arg("params"), "Charge the NIC model on this Nic's engine.");
  m.def("nic_model_counters", [](const Nic& n) {
    nb::dict d;
    const std::vector<uint64_t> c = n.model_counters();
    for (size_t i = 0; i < c.size(); ++i) d[kCounterNames[i]] = c[i];
    return d;
  });
  m.def("nic_model_log", [](Nic& n) {
    // Columns of the last planned WQEs (oldest first), times in picoseconds.
    const std::vector<emu::ModelLogEntry> v = n.model_log();
    const char* names[] = {"qpn", "idx", "kind", "flags", "bytes", "t_seen", "t_exec", "t_cqe",
                           "exec_at", "cqe_at"};
    std::vector<nb::list> cols(10);
    for (const emu::ModelLogEntry& e : v) {
      cols[0].append(e.qpn);
      cols[1].append(e.idx);
      cols[2].append(e.kind);
      cols[3].append(e.flags);
      cols[4].append(e.bytes);
      cols[5].append(e.t_seen);
      cols[6].append(e.t_exec);
      cols[7].append(e.t_cqe);
      cols[8].append(e.exec_at);
      cols[9].append(e.cqe_at);
    }
    nb::dict d;
    for (int i = 0; i < 10; ++i) d[names[i]] = cols[i];
    return d;
  });
  m.def("model_now_ps", &emu::model_now_ps, "The model's clock (CLOCK_MONOTONIC, ps).");
  nb::class_<NicModelSim>(m, "NicModelSim", "The NIC model's arithmetic alone (tests).")
      .def(nb::init<const nb::dict&, uint32_t>(), nb::arg("params"), nb::arg("nics") = 2)
      .def("plan", &NicModelSim::plan, nb::arg("src"), nb::arg("qpn"), nb::arg("dst"),
           nb::arg("dst_num"), nb::arg("kind"), nb::arg("bytes"), nb::arg("pointer"),
           nb::arg("nbb"), nb::arg("t_seen"), nb::arg("dci") = false)
      .def("counters", &NicModelSim::counters);
}

}  // namespace gicbench
