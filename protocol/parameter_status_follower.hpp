// The ParameterStatus reports in a backend's stream after its greeting, so that a kept server
// connection greets its next client with the values Postgres last reported on it
// (daemon/session_pool.cpp), as PgBouncer does. Postgres reports a GUC_REPORT setting when
// its value differs from the one it last reported: after a client's SET, and after a reload
// or a promotion changed the default (in_hot_standby, DateStyle, TimeZone, ...). DISCARD ALL
// then sets it back to that new default without a report, so a greeting kept from the
// backend's start would name the old value to every later client. Fed copies of the bytes,
// never shared memory. Pure code, no I/O.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "protocol/framing.hpp"
#include "protocol/server_greeting.hpp"

namespace l5pg::protocol {

class ParameterStatusFollower {
  public:
    // A ParameterStatus longer than this (Postgres's name a setting and its value) is not
    // followed: broken().
    static constexpr size_t kMaxStatus = 64 * 1024;

    // Walks `bytes` with the stream's own `boundaries` (the session follows Postgres's
    // messages anyway: one walk serves both), passing each message start to
    // on_message(type, offset) as MessageBoundaryTracker::walk() does, and calls
    // on_status(name, value) for each ParameterStatus complete in them. The first bytes walked
    // with a follower begin at a message boundary.
    template <class OnMessage, class OnStatus>
    size_t walk(MessageBoundaryTracker& boundaries, std::span<const std::byte> bytes,
                OnMessage&& on_message, OnStatus&& on_status);

    // A report that could not be read: the values are unknown from here on. (A length that
    // could not be read breaks the boundaries themselves.)
    [[nodiscard]] bool broken() const noexcept { return broken_; }

  private:
    // Appends a piece of the ParameterStatus being collected; calls on_status once it is whole.
    template <class OnStatus>
    void collect(std::span<const std::byte> piece, OnStatus& on_status);

    std::vector<std::byte> status_;  // the ParameterStatus under way, from its type byte
    bool collecting_ = false;
    bool broken_ = false;
    std::string name_, value_;
};

template <class OnMessage, class OnStatus>
size_t ParameterStatusFollower::walk(MessageBoundaryTracker& boundaries,
                                     std::span<const std::byte> bytes, OnMessage&& on_message,
                                     OnStatus&& on_status) {
    size_t from = 0;  // where the piece of a ParameterStatus in these bytes begins
    const size_t walked = boundaries.walk(bytes, [&](char type, size_t at) {
        if (collecting_)  // a message begins here: the ParameterStatus before it ended
            collect(bytes.subspan(from, at - from), on_status);
        if (!on_message(type, at))
            return false;
        collecting_ = type == 'S';
        from = at;
        return true;
    });
    if (collecting_)
        collect(bytes.subspan(from, walked - from), on_status);
    return walked;
}

template <class OnStatus>
void ParameterStatusFollower::collect(std::span<const std::byte> piece, OnStatus& on_status) {
    if (broken_)
        return;
    status_.insert(status_.end(), piece.begin(), piece.end());
    const MessageView msg = next_message(status_, kMaxStatus);
    if (msg.status == ParseStatus::NeedMore)
        return;
    broken_ = msg.status == ParseStatus::Invalid || msg.total_size() != status_.size() ||
              !parse_parameter_status(msg.body, name_, value_);
    if (!broken_)
        on_status(name_, value_);
    status_.clear();
    collecting_ = false;
}

}  // namespace l5pg::protocol
