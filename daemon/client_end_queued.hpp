// What the socket and RDMA ends share (client_end_socket.cpp, client_end_rdma.cpp): the
// client's bytes staged in a queue for peek(), read from the transport one chunk at a time
// when the queue is empty, and Postgres's bytes queued for the client up to
// limits.session_buffer_bytes and pushed out by the transport's flush(). (The SHM end
// needs neither queue: it peeks into and reserves in the rings themselves.)
#pragma once

#include <algorithm>

#include "daemon/byte_queue.hpp"
#include "daemon/client_end.hpp"

namespace l5pg::daemon {

class QueuedClientEnd : public ClientEnd {
  public:
    [[nodiscard]] IoStatus peek(std::span<const std::byte>& data) final {
        if (in_.empty())
            fill_input();
        if (in_.empty())
            return IoStatus::WouldBlock;
        data = in_.front();
        return IoStatus::Ok;
    }
    void consume(size_t n) final { in_.consume(n); }
    [[nodiscard]] IoStatus reserve(size_t want, std::span<std::byte>& space) final {
        if (!has_room())
            return IoStatus::WouldBlock;
        space = out_.prepare(std::min(want, kChunk));
        return IoStatus::Ok;
    }
    void commit(size_t n) final {
        out_.commit(n);
        flush();
    }
    void send(std::span<const std::byte> bytes) final {
        out_.append(bytes);
        flush();
    }
    [[nodiscard]] bool output_queued() const noexcept final { return !out_.empty(); }
    [[nodiscard]] bool has_room() final { return out_.size() < host_.high_water(); }

  protected:
    // Also the most a queue grows past limits.session_buffer_bytes (see byte_queue.hpp).
    static constexpr size_t kChunk = 64 * 1024;

    explicit QueuedClientEnd(ClientEndHost& host) noexcept : host_(host) {}
    // Reads one chunk from the transport into in_ (empty when called), if it has one; a
    // client that left or failed is reported to the host.
    virtual void fill_input() = 0;

    ClientEndHost& host_;
    ByteQueue in_;   // from the client, not yet consumed
    ByteQueue out_;  // for the client, not yet handed to the transport
};

}  // namespace l5pg::daemon
