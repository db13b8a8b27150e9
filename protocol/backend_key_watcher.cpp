#include "protocol/backend_key_watcher.hpp"

#include "protocol/wire.hpp"

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
        if (msg.status == ParseStatus::Invalid || msg.type == 'Z')
            return status_ = Status::Done;
        // Protocol 3.0's key is 8 bytes; 3.2's longer secret is not one l5pgd can map.
        if (msg.type == 'K' && msg.body.size() == 8)
            key_ = CancelKey{read_be32(msg.body.data()), read_be32(msg.body.data() + 4)};
    }
}

}  // namespace l5pg::protocol
