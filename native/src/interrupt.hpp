// SIGTERM/SIGINT for native loops: a handler (install_interrupt_handler) sets a flag that every
// loop reads once per iteration (operation, request, batch or pass) and every 256 polls while it
// waits, so the rank gives up promptly and marks its trace incomplete instead of spinning until
// its completion timeout. The handler chains to Python's, which schedules the Python-level one.
#pragma once

#include <atomic>

namespace gicbench {

extern std::atomic<int> g_interrupt;
void install_interrupt_handler();
inline bool interrupted() { return g_interrupt.load(std::memory_order_relaxed) != 0; }

}  // namespace gicbench
