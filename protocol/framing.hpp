// PG v3 regular message framing: [type byte][int32 length incl. itself][body].
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace l5pg::protocol {

// Largest regular message length we accept; Postgres itself allows up to 1 GB - 1
// for a few message types (PG_LARGE_MESSAGE_LIMIT).
inline constexpr uint32_t kMaxMessageLength = 0x3fffffff;
inline constexpr size_t kMessageHeaderSize = 5;
// The frontend's Terminate message: 'X', length 4.
inline constexpr std::array<std::byte, kMessageHeaderSize> kTerminateMessage{
    std::byte{'X'}, std::byte{0}, std::byte{0}, std::byte{0}, std::byte{4}};

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

// A complete message at the start of `buf` (bytes already copied out of a socket or ring):
// Ok with its type and body, NeedMore until all of it is there, Invalid for a bad length.
struct MessageView {
    ParseStatus status = ParseStatus::NeedMore;
    char type = 0;
    std::span<const std::byte> body;
    [[nodiscard]] size_t total_size() const noexcept { return kMessageHeaderSize + body.size(); }
};
[[nodiscard]] MessageView next_message(std::span<const std::byte> buf,
                                       uint32_t max_length = kMaxMessageLength) noexcept;

// Appends a frontend Query message ('Q') with `sql`: l5pgd's own queries on a pooled
// server connection (pool_reset.hpp, pool_login_check.hpp).
void append_query_message(std::vector<std::byte>& out, std::string_view sql);

// Bytes copied out of a socket (never parsed where another process can change them), handed
// out message by message.
class MessageBuffer {
  public:
    void append(std::span<const std::byte> bytes) {
        bytes_.insert(bytes_.end(), bytes.begin(), bytes.end());
    }
    // The next complete message (then the one after it on the next call), or NeedMore, or
    // Invalid for a bad length. A view is valid until the next append().
    [[nodiscard]] MessageView next(uint32_t max_length) noexcept;
    // Puts back `last`, the message next() just handed out: rest() begins with it again.
    void unread(const MessageView& last) noexcept { parsed_ -= last.total_size(); }
    [[nodiscard]] size_t size() const noexcept { return bytes_.size(); }
    // What follows the messages handed out.
    [[nodiscard]] std::span<const std::byte> rest() const noexcept {
        return std::span<const std::byte>(bytes_).subspan(parsed_);
    }
    // Everything appended, handed out or not.
    [[nodiscard]] std::vector<std::byte> take() noexcept {
        parsed_ = 0;
        return std::exchange(bytes_, {});
    }

  private:
    std::vector<std::byte> bytes_;
    size_t parsed_ = 0;
};

// Follows a stream of regular messages as it passes, without copying it: whether the bytes
// seen so far end exactly at a message boundary (where a message of our own, such as a
// FATAL at shutdown, may be put in without breaking the client's framing), and the status
// of the last ReadyForQuery (what a pooled server connection is doing, daemon/upstream_pool.hpp).
// Cost: one step per message, not per byte.
class MessageBoundaryTracker {
  public:
    void feed(std::span<const std::byte> bytes) noexcept {
        (void)walk(bytes, [](char, size_t) noexcept { return true; });
    }
    // Walks `bytes`, which follow those walked before, and calls on_message(type, offset) at
    // the first byte of every message that begins in them. When it returns false the walk
    // stops in front of that message, which stays unwalked. Returns the bytes walked.
    template <class OnMessage>
    size_t walk(std::span<const std::byte> bytes, OnMessage&& on_message) noexcept;

    [[nodiscard]] bool at_boundary() const noexcept {
        return !broken_ && header_have_ == 0 && body_left_ == 0;
    }
    // An impossible length was seen: nothing after it is known.
    [[nodiscard]] bool broken() const noexcept { return broken_; }
    // 'I', 'T' or 'E' from the last ReadyForQuery walked; 0 before the first.
    [[nodiscard]] char ready_status() const noexcept { return ready_status_; }

  private:
    void end_header() noexcept;

    uint64_t body_left_ = 0;  // bytes of the current message's body still to come
    std::byte header_[kMessageHeaderSize]{};
    size_t header_have_ = 0;
    bool broken_ = false;      // an impossible length: never a boundary again
    bool body_fresh_ = false;  // no byte of the current message's body walked yet
    char type_ = 0;            // the current message's type
    char ready_status_ = 0;
};

template <class OnMessage>
size_t MessageBoundaryTracker::walk(std::span<const std::byte> bytes,
                                    OnMessage&& on_message) noexcept {
    size_t at = 0;
    while (at < bytes.size() && !broken_) {
        if (body_left_ > 0) {
            // ReadyForQuery's body is its one status byte.
            if (body_fresh_ && type_ == 'Z')
                ready_status_ = static_cast<char>(bytes[at]);
            body_fresh_ = false;
            const size_t skip =
                static_cast<size_t>(std::min<uint64_t>(body_left_, bytes.size() - at));
            body_left_ -= skip;
            at += skip;
            continue;
        }
        if (header_have_ == 0) {
            if (!on_message(static_cast<char>(bytes[at]), at))
                return at;
            type_ = static_cast<char>(bytes[at]);
        }
        const size_t take = std::min(kMessageHeaderSize - header_have_, bytes.size() - at);
        for (size_t i = 0; i < take; ++i)
            header_[header_have_ + i] = bytes[at + i];
        header_have_ += take;
        at += take;
        if (header_have_ == kMessageHeaderSize)
            end_header();
    }
    return bytes.size();
}

}  // namespace l5pg::protocol
