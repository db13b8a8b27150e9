// Results of the byte-stream calls of every upgraded channel end (SHM rings, RDMA
// channel; transport/channel_end.hpp), shared by both sides of a connection.
#pragma once

#include <cstddef>
#include <cstdint>

namespace l5pg::transport {

enum class IoStatus : uint8_t {
    Ok,          // `bytes` > 0 were transferred
    WouldBlock,  // nothing now: ring empty (read) or full (write); wait and retry
    Closed,      // the peer closed the session (read: after everything it sent was read)
    Error,       // the channel is broken (QP failure, protocol violation); see error()
};

// `bytes` can be > 0 together with Closed/Error when a write() failed part-way: those
// bytes were transferred; report them, the next call reports the failure.
struct IoResult {
    size_t bytes = 0;
    IoStatus status = IoStatus::Ok;
};

[[nodiscard]] inline const char* to_string(IoStatus s) noexcept {
    switch (s) {
        case IoStatus::Ok:
            return "ok";
        case IoStatus::WouldBlock:
            return "would block";
        case IoStatus::Closed:
            return "closed";
        case IoStatus::Error:
            return "error";
    }
    return "unknown";
}

}  // namespace l5pg::transport
