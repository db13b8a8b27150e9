#include "protocol/backend_key_watcher.hpp"

#include "protocol/server_greeting.hpp"
#include "protocol/wire.hpp"

namespace l5pg::protocol {
namespace {
constexpr uint32_t kAuthenticationOk = 0;  // an Authentication message's code
}  // namespace

BackendKeyWatcher::Status BackendKeyWatcher::feed(std::span<const std::byte> bytes) {
    if (status_ == Status::Done)
        return status_;
    buffer_.append(bytes);
    for (;;) {
        const MessageView msg = buffer_.next(kMaxSize);
        if (msg.status == ParseStatus::NeedMore) {
            if (buffer_.size() > kMaxSize)
                status_ = Status::Done;
            return status_;
        }
        if (msg.status == ParseStatus::Invalid)
            return status_ = Status::Done;
        if (msg.type == 'Z') {
            logged_in_ = true;
            return status_ = Status::Done;
        }
        if (msg.type == 'K')
            key_ = parse_backend_key_data(msg.body);
        if (msg.type == 'R')
            note_authentication(msg.body);
    }
}

void BackendKeyWatcher::note_authentication(std::span<const std::byte> body) noexcept {
    if (body.size() < 4)
        return;
    if (read_be32(body.data()) != kAuthenticationOk)
        asked_ = true;
    else if (!asked_)
        accepted_without_asking_ = true;
}

}  // namespace l5pg::protocol
