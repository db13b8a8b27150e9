#include "protocol/framing.hpp"

#include "protocol/wire.hpp"

namespace l5pg::protocol {

MessageHeaderParse parse_message_header(std::span<const std::byte> buf,
                                        uint32_t max_length) noexcept {
    MessageHeaderParse result;
    if (buf.size() < kMessageHeaderSize)
        return result;  // NeedMore
    result.header.type = static_cast<char>(buf[0]);
    const uint32_t length = read_be32(buf.data() + 1);
    result.header.length = length;
    // The length is a signed int32 on the wire: "negative" values are above 2^31 here
    // and fail the upper bound like any other oversized length.
    if (length < 4) {
        result.status = ParseStatus::Invalid;
        result.error = "message length is smaller than 4";
    } else if (length > max_length) {
        result.status = ParseStatus::Invalid;
        result.error = "message length exceeds the limit";
    } else {
        result.status = ParseStatus::Ok;
    }
    return result;
}

}  // namespace l5pg::protocol
