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

void append_query_message(std::vector<std::byte>& out, std::string_view sql) {
    const size_t at = out.size();
    out.resize(at + kMessageHeaderSize + sql.size() + 1);
    out[at] = std::byte{'Q'};
    write_be32(out.data() + at + 1, static_cast<uint32_t>(4 + sql.size() + 1));
    std::copy(sql.begin(), sql.end(),
              reinterpret_cast<char*>(out.data() + at + kMessageHeaderSize));
    out.back() = std::byte{0};
}

MessageView next_message(std::span<const std::byte> buf, uint32_t max_length) noexcept {
    MessageView view;
    const MessageHeaderParse header = parse_message_header(buf, max_length);
    view.status = header.status;
    if (header.status != ParseStatus::Ok)
        return view;
    if (buf.size() < header.header.total_size()) {
        view.status = ParseStatus::NeedMore;
        return view;
    }
    view.type = header.header.type;
    view.body = buf.subspan(kMessageHeaderSize, header.header.length - 4);
    return view;
}

MessageView MessageBuffer::next(uint32_t max_length) noexcept {
    const MessageView view = next_message(rest(), max_length);
    if (view.status == ParseStatus::Ok)
        parsed_ += view.total_size();
    return view;
}

void MessageBoundaryTracker::end_header() noexcept {
    header_have_ = 0;
    // No upper bound here: Postgres's messages are as long as Postgres says.
    const MessageHeaderParse parse =
        parse_message_header({header_, kMessageHeaderSize}, UINT32_MAX);
    if (parse.status == ParseStatus::Ok) {
        body_left_ = parse.header.length - 4;
        body_fresh_ = true;
    } else {
        broken_ = true;
    }
}

}  // namespace l5pg::protocol
