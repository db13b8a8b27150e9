#include "transport/rdma/soft/frame.hpp"

#include "transport/rdma/sys.hpp"

namespace l5pg::rdma::soft {

// offset 0 type, 1 flags, 2 reserved (u16), 4 length, 8 seq, 16 remote_addr, 24 rkey,
// 28 status.
void encode_frame_header(const FrameHeader& h, std::byte* out) noexcept {
    sys::put_le(out + 0, static_cast<uint8_t>(h.type), 1);
    sys::put_le(out + 1, h.flags, 1);
    sys::put_le(out + 2, 0, 2);
    sys::put_le(out + 4, h.length, 4);
    sys::put_le(out + 8, h.seq, 8);
    sys::put_le(out + 16, h.remote_addr, 8);
    sys::put_le(out + 24, h.rkey, 4);
    sys::put_le(out + 28, h.status, 4);
}

bool decode_frame_header(const std::byte* in, FrameHeader& h, std::string& error) {
    const auto type = static_cast<uint8_t>(sys::get_le(in + 0, 1));
    if (type < static_cast<uint8_t>(FrameType::WriteRequest) ||
        type > static_cast<uint8_t>(FrameType::Nak)) {
        error = "soft RDMA protocol violation: unknown frame type " + std::to_string(type);
        return false;
    }
    h.type = static_cast<FrameType>(type);
    h.flags = static_cast<uint8_t>(sys::get_le(in + 1, 1));
    if ((h.flags & ~kFlagAckRequested) != 0 || sys::get_le(in + 2, 2) != 0) {
        error = "soft RDMA protocol violation: unknown flags or reserved bits set";
        return false;
    }
    h.length = static_cast<uint32_t>(sys::get_le(in + 4, 4));
    h.seq = sys::get_le(in + 8, 8);
    h.remote_addr = sys::get_le(in + 16, 8);
    h.rkey = static_cast<uint32_t>(sys::get_le(in + 24, 4));
    h.status = static_cast<uint32_t>(sys::get_le(in + 28, 4));
    return true;
}

}  // namespace l5pg::rdma::soft
