// The native loops' SIGTERM/SIGINT flag (see interrupt.hpp).
#include "interrupt.hpp"

#include <signal.h>

namespace gicbench {

std::atomic<int> g_interrupt{0};

namespace {

struct sigaction g_previous[2];
constexpr int kSignals[2] = {SIGTERM, SIGINT};

void on_signal(int sig) {
  g_interrupt.store(1, std::memory_order_relaxed);
  // Chain to the previous handler (Python's, which schedules the Python-level handler).
  for (int i = 0; i < 2; ++i) {
    if (kSignals[i] != sig) continue;
    if (g_previous[i].sa_flags & SA_SIGINFO) continue;  // not Python's: nothing to chain to
    const auto h = g_previous[i].sa_handler;
    if (h != SIG_DFL && h != SIG_IGN && h != nullptr) h(sig);
  }
}

}  // namespace

void install_interrupt_handler() {
  for (int i = 0; i < 2; ++i) {
    struct sigaction cur {};
    sigaction(kSignals[i], nullptr, &cur);
    // Installed twice without Python replacing it in between: keep the handler we chain to
    // (saving ourselves as "previous" would recurse on the next signal).
    if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == on_signal) continue;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(kSignals[i], &sa, &g_previous[i]);
  }
}

}  // namespace gicbench
