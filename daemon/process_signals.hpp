// The signals l5pgd handles (SIGINT, SIGTERM, SIGQUIT, SIGHUP; SIGUSR1 and SIGUSR2, which it
// only logs) and which threads see them: the main thread's event loop handles them (Server),
// the worker threads block them.
#pragma once

#include <signal.h>

#include <array>

namespace l5pg::daemon {

// Every signal the main thread's event loop handles (Server) and the workers block.
inline constexpr std::array<int, 6> kProcessSignals = {SIGINT, SIGTERM, SIGQUIT,
                                                       SIGHUP, SIGUSR1, SIGUSR2};

// First thing in main(): SIGHUP, SIGUSR1 and SIGUSR2 held (their default action ends the
// process, and a reload sent while l5pgd starts, by a script or logrotate, killed it
// instead), the others
// unblocked (a parent may leave signals blocked for its children: l5pgd would ignore a
// stop or a reload for ever).
void prepare_process_signals() noexcept;
// Once the event loop's handlers are in place: a SIGHUP held since the start arrives now,
// as a reload.
void release_held_signals() noexcept;
// In a worker thread: none of them.
void block_process_signals() noexcept;

}  // namespace l5pg::daemon
