#include "daemon/process_signals.hpp"

#include <pthread.h>
#include <signal.h>

#include <initializer_list>

namespace l5pg::daemon {
namespace {

template <class Signals>
sigset_t set_of(const Signals& signals) noexcept {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : signals)
        sigaddset(&set, sig);
    return set;
}

// Their default action ends the process: held until the handlers are in place.
constexpr std::initializer_list<int> kHeldAtStart = {SIGHUP, SIGUSR1, SIGUSR2};

}  // namespace

void prepare_process_signals() noexcept {
    const sigset_t handled_at_once = set_of(std::initializer_list<int>{SIGINT, SIGTERM, SIGQUIT});
    const sigset_t held = set_of(kHeldAtStart);
    pthread_sigmask(SIG_UNBLOCK, &handled_at_once, nullptr);
    pthread_sigmask(SIG_BLOCK, &held, nullptr);
}

void release_held_signals() noexcept {
    const sigset_t held = set_of(kHeldAtStart);
    pthread_sigmask(SIG_UNBLOCK, &held, nullptr);
}

void block_process_signals() noexcept {
    const sigset_t all = set_of(kProcessSignals);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
}

}  // namespace l5pg::daemon
