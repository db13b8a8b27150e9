// A blocking send/recv or poll() on an upgraded channel (channel.cpp, interpose_poll.cpp):
// the one wait of transport/wait/block.hpp, teaching the channel's AdaptiveSpin how long
// the wait took, so the next one knows whether spinning pays.
#pragma once

#include <chrono>

#include "clientlib/channel.hpp"
#include "clientlib/settings.hpp"
#include "transport/wait/block.hpp"

namespace l5pg::shim {

// False with errno set when the waiter's poll() failed (EINTR: a signal, as a blocking
// recv/send would report it).
template <wait::Waiter W>
[[nodiscard]] bool channel_wait(Channel& ch, W& waiter) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    const bool ok = wait::block_until_ready(waiter);
    ch.spin.record(clock::now() - start, settings().budget);
    return ok;
}

}  // namespace l5pg::shim
