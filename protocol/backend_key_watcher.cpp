#include "protocol/backend_key_watcher.hpp"

#include "protocol/server_greeting.hpp"

namespace l5pg::protocol {

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
    }
}

}  // namespace l5pg::protocol
