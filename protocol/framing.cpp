#include "protocol/framing.hpp"

#include <algorithm>

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

void MessageBoundaryTracker::feed(std::span<const std::byte> bytes) noexcept {
    while (!bytes.empty() && !broken_) {
        if (body_left_ > 0) {
            const size_t skip = static_cast<size_t>(std::min<uint64_t>(body_left_, bytes.size()));
            body_left_ -= skip;
            bytes = bytes.subspan(skip);
            continue;
        }
        const size_t take = std::min(kMessageHeaderSize - header_have_, bytes.size());
        std::copy_n(bytes.begin(), take, header_ + header_have_);
        header_have_ += take;
        bytes = bytes.subspan(take);
        if (header_have_ < kMessageHeaderSize)
            return;
        header_have_ = 0;
        // No upper bound here: Postgres's messages are as long as Postgres says.
        const MessageHeaderParse parse =
            parse_message_header({header_, kMessageHeaderSize}, UINT32_MAX);
        if (parse.status == ParseStatus::Ok)
            body_left_ = parse.header.length - 4;
        else
            broken_ = true;
    }
}

}  // namespace l5pg::protocol
