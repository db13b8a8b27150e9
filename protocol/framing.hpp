// PG v3 regular message framing: [type byte][int32 length incl. itself][body].
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace l5pg::protocol {

// Largest regular message length we accept; Postgres itself allows up to 1 GB - 1
// for a few message types (PG_LARGE_MESSAGE_LIMIT).
inline constexpr uint32_t kMaxMessageLength = 0x3fffffff;
inline constexpr size_t kMessageHeaderSize = 5;

enum class ParseStatus { Ok, NeedMore, Invalid };

struct MessageHeader {
    char type = 0;
    uint32_t length = 0;  // as on the wire: counts itself, not the type byte
    [[nodiscard]] size_t total_size() const noexcept { return 1 + size_t{length}; }
};

struct MessageHeaderParse {
    ParseStatus status = ParseStatus::NeedMore;
    MessageHeader header{};
    std::string_view error;  // set when status == Invalid; static storage
};

// Parses the 5-byte header at the start of `buf`. NeedMore while fewer than 5 bytes are
// present; Invalid when the length is below 4 or above `max_length`.
[[nodiscard]] MessageHeaderParse parse_message_header(
    std::span<const std::byte> buf, uint32_t max_length = kMaxMessageLength) noexcept;

}  // namespace l5pg::protocol
