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

// Follows a stream of regular messages as it passes, without copying it: whether the bytes
// seen so far end exactly at a message boundary (where a message of our own, such as a
// FATAL at shutdown, may be put in without breaking the client's framing). Cost: one step
// per message, not per byte.
class MessageBoundaryTracker {
  public:
    void feed(std::span<const std::byte> bytes) noexcept;
    [[nodiscard]] bool at_boundary() const noexcept {
        return !broken_ && header_have_ == 0 && body_left_ == 0;
    }

  private:
    uint64_t body_left_ = 0;  // bytes of the current message's body still to come
    std::byte header_[kMessageHeaderSize]{};
    size_t header_have_ = 0;
    bool broken_ = false;  // an impossible length: never a boundary again
};

}  // namespace l5pg::protocol
