// mini-gda's host-forwarded doorbell (`--submitter gpu --doorbell host`): one native thread per
// submitter advances each QP's ready prefix (ready_prefix.hpp) and rings for the GPU threads.
//
// Lifetime: the submitter arms the thread with what each QP must reach in a call, starts it,
// launches the kernel and stops it when the kernel has ended (also on failure or signal:
// stop() sets the flag the loop reads every pass and joins). A hole that holds the prefix for
// `timeout_s` (no progress on any QP, a WQE marked ready beyond the prefix of a QP short of its
// target: a GPU thread reserved a slot and never marked it) ends the loop with a diagnostic
// (rank, QP, ready prefix, the producer index marked beyond it, the target, the word found at
// the prefix); the submitter raises it. A QP with nothing marked beyond its prefix is the GPU
// not producing (its kernel has its own deadline), not a stall of this thread. The destructor
// stops the thread: it is never left running.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
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

using Clock = std::chrono::steady_clock;

class HostDoorbell {
 public:
  explicit HostDoorbell(int rank) : rank_(rank) {}
  ~HostDoorbell() { stop(); }
  HostDoorbell(const HostDoorbell&) = delete;
  HostDoorbell& operator=(const HostDoorbell&) = delete;

  // Watch one QP: slots = its ready array (host address, wqebbs words), dbrec = its doorbell
  // record (SND word at +4), start = its producer index now. Returns its index.
  size_t add(uint64_t slots, uint64_t dbrec, uint64_t db, uint32_t qpn, uint32_t wqebbs,
             uint64_t start) {
    if (running()) throw std::runtime_error("HostDoorbell.add: stop the thread first");
    if (!slots || !dbrec || !db) throw std::invalid_argument("HostDoorbell.add: an address is 0");
    if (wqebbs == 0 || (wqebbs & (wqebbs - 1)) || wqebbs > 32768)
      throw std::invalid_argument("invalid wqebbs=" + std::to_string(wqebbs) +
                                  ": allowed a power of two, 1..32768");
    queues_.push_back(ready::Queue{reinterpret_cast<const uint64_t*>(slots),
                                   reinterpret_cast<uint32_t*>(dbrec + 4),
                                   reinterpret_cast<uint64_t*>(db), qpn & 0xffffffu, wqebbs - 1,
                                   start, 0});
    targets_.push_back(start);
    return queues_.size() - 1;
  }

  // The WQEBBs each listed QP will be marked up to in the coming call, beyond what is rung now
  // ((index, wqebbs) pairs); the others expect nothing. Clears an earlier error.
  void arm(const std::vector<std::pair<size_t, uint64_t>>& expect) {
    if (running()) throw std::runtime_error("HostDoorbell.arm: stop the thread first");
    for (size_t i = 0; i < queues_.size(); ++i) targets_[i] = queues_[i].rung;
    for (const auto& [i, n] : expect) {
      if (i >= queues_.size()) throw std::out_of_range("HostDoorbell.arm: no QP " + std::to_string(i));
      targets_[i] = queues_[i].rung + n;
    }
    error_.clear();
  }

  // One pass over every QP; returns the doorbells it rang.
  uint64_t poll_once() {
    uint64_t n = 0;
    for (ready::Queue& q : queues_) n += ready::step(q) ? 1 : 0;
    return n;
  }

  void start(double timeout_s) {
    if (running()) return;
    if (!(timeout_s > 0)) throw std::invalid_argument("HostDoorbell.start: timeout_s must be > 0");
    timeout_ = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    stop_.store(false);
    thread_ = std::thread([this] { loop(); });
  }

  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }

  bool running() const { return thread_.joinable(); }
  // The loop ended by itself (a timeout); the thread still needs stop() to be joined.
  bool failed() const { return failed_.load(); }

  std::optional<std::string> error() const {
    if (running() && !failed_.load()) return std::nullopt;  // only read once the loop ended
    if (error_.empty()) return std::nullopt;
    return error_;
  }

  // (qpn, producer index rung, doorbells rung) per QP.
  std::vector<std::tuple<uint32_t, uint64_t, uint64_t>> stats() const {
    std::vector<std::tuple<uint32_t, uint64_t, uint64_t>> out;
    for (const ready::Queue& q : queues_) out.emplace_back(q.qpn, q.rung, q.rings);
    return out;
  }

 private:
  bool short_of_target() const {
    for (size_t i = 0; i < queues_.size(); ++i)
      if (queues_[i].rung < targets_[i]) return true;
    return false;
  }

  // The furthest producer index marked ready beyond q's prefix (the prefix itself: none).
  static uint64_t marked_beyond(const ready::Queue& q) {
    const uint64_t nslots = uint64_t{q.mask} + 1;
    uint64_t far = q.rung;
    for (uint64_t k = 1; k < nslots; ++k) {
      const uint64_t at = q.rung + k;
      const uint64_t v = __atomic_load_n(&q.slots[at & q.mask], __ATOMIC_ACQUIRE);
      const uint32_t ahead = static_cast<uint32_t>(v) - static_cast<uint32_t>(at);
      if (ahead != 0 && ahead <= nslots && at + ahead > far) far = at + ahead;
    }
    return far;
  }

  // A QP short of its target with a hole at its prefix: its diagnostic, true. Else false.
  bool diagnose(double waited_s) {
    for (size_t i = 0; i < queues_.size(); ++i) {
      const ready::Queue& q = queues_[i];
      if (q.rung >= targets_[i]) continue;
      const uint64_t far = marked_beyond(q);
      if (far == q.rung) continue;
      const uint64_t word = __atomic_load_n(&q.slots[q.rung & q.mask], __ATOMIC_ACQUIRE);
      char buf[512];
      std::snprintf(buf, sizeof buf,
                    "rank %d, host-forwarded doorbell: QP 0x%06x made no progress for %.3g s: "
                    "ready prefix %llu, producer index marked up to %llu beyond a hole, the call "
                    "reaches %llu; slot %llu holds %llu (ready when it holds the index after its "
                    "WQE: a GPU thread reserved it and never marked it), %llu doorbells rung",
                    rank_, q.qpn, waited_s, static_cast<unsigned long long>(q.rung),
                    static_cast<unsigned long long>(far),
                    static_cast<unsigned long long>(targets_[i]),
                    static_cast<unsigned long long>(q.rung & q.mask),
                    static_cast<unsigned long long>(word),
                    static_cast<unsigned long long>(q.rings));
      error_ = buf;
      return true;
    }
    return false;
  }

  // Spins while there is work; idle, it pauses, then yields; it checks the stop flag every pass
  // and the deadline every 1024 idle passes.
  void loop() {
    uint64_t idle = 0;
    Clock::time_point last = Clock::now();
    while (!stop_.load(std::memory_order_relaxed)) {
      if (poll_once()) {
        idle = 0;
        last = Clock::now();
        continue;
      }
      ++idle;
      if ((idle & 1023) == 0) {
        const Clock::time_point now = Clock::now();
        if (!short_of_target()) {
          last = now;  // nothing owed: waiting is not a stall
        } else if (now - last > timeout_) {
          if (diagnose(std::chrono::duration<double>(now - last).count())) {
            failed_.store(true);
            return;
          }
          last = now;  // owed but nothing marked: the GPU is not producing, its deadline rules
        }
      }
      if (idle > 65536)
        std::this_thread::yield();
      else
        __builtin_ia32_pause();
    }
  }

  int rank_;
  std::vector<ready::Queue> queues_;
  std::vector<uint64_t> targets_;
  Clock::duration timeout_{};
  std::string error_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
};

}  // namespace

void bind_gda(nb::module_ m) {
  nb::class_<HostDoorbell>(m, "HostDoorbell",
                           "mini-gda's host-forwarded doorbell: a native thread that advances "
                           "each QP's ready prefix and rings")
      .def(nb::init<int>(), nb::arg("rank"))
      .def("add", &HostDoorbell::add, nb::arg("slots"), nb::arg("dbrec"), nb::arg("doorbell"),
           nb::arg("qpn"), nb::arg("wqebbs"), nb::arg("start"),
           "Watch one QP (host addresses); returns its index")
      .def("arm", &HostDoorbell::arm, nb::arg("expect"),
           "(index, WQEBBs) each QP is marked up to in the coming call")
      .def("poll_once", &HostDoorbell::poll_once, "One pass; returns the doorbells rung")
      .def("start", &HostDoorbell::start, nb::arg("timeout_s"))
      .def("stop", &HostDoorbell::stop, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("running", &HostDoorbell::running)
      .def_prop_ro("failed", &HostDoorbell::failed)
      .def("error", &HostDoorbell::error, "The timeout diagnostic, once the loop has ended")
      .def("stats", &HostDoorbell::stats, "(qpn, producer index rung, doorbells) per QP");
}

}  // namespace gicbench
