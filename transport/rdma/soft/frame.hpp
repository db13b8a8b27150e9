// Frames of the soft device's wire protocol (one stream socket per queue pair). Every
// frame starts with a 32-byte little-endian header; WRITE requests and READ responses
// carry `length` payload bytes after it. See transport/rdma/README.md for the table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace l5pg::rdma::soft {

enum class FrameType : uint8_t {
    WriteRequest = 1,  // payload: the bytes to write at remote_addr
    ReadRequest = 2,   // length: bytes to read at remote_addr; no payload
    Ack = 3,           // WRITE `seq` (and every request before it) executed
    ReadResponse = 4,  // payload: the bytes READ `seq` asked for
    Nak = 5,           // request `seq` failed with `status` (a WcStatus); the QP is dead
};

inline constexpr size_t kFrameHeaderSize = 32;
inline constexpr uint8_t kFlagAckRequested = 1;  // WriteRequest: answer with an Ack

struct FrameHeader {
    FrameType type = FrameType::Ack;
    uint8_t flags = 0;
    uint32_t length = 0;
    uint64_t seq = 0;
    uint64_t remote_addr = 0;
    uint32_t rkey = 0;
    uint32_t status = 0;
};

void encode_frame_header(const FrameHeader& h, std::byte* out) noexcept;
// False (and `error`) for an unknown type, unknown flags or non-zero reserved bytes.
[[nodiscard]] bool decode_frame_header(const std::byte* in, FrameHeader& h, std::string& error);
// Payload bytes that follow a header of this type.
[[nodiscard]] inline uint32_t payload_length(const FrameHeader& h) noexcept {
    return h.type == FrameType::WriteRequest || h.type == FrameType::ReadResponse ? h.length : 0;
}

}  // namespace l5pg::rdma::soft
