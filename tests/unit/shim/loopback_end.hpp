// A transport::ChannelEnd in process memory, with an error injector, for driving the shim's
// channel (clientlib/channel.cpp) without l5pgd: what the channel writes collects in
// `outbound`, what the test delivers is read from `inbound`. The test plays l5pgd: it
// delivers, closes or breaks the end from any thread and, like l5pgd, rings the doorbell
// (one byte on the socketpair's other end) only when it finds the reader's flag armed.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>

#include "transport/channel_end.hpp"
#include "transport/wait/doorbell.hpp"

namespace l5pg::test {

using transport::IoResult;
using transport::IoStatus;
using transport::Want;

// What the end does wrong on purpose.
struct Faults {
    size_t max_write = std::numeric_limits<size_t>::max();  // short writes
    size_t max_read = std::numeric_limits<size_t>::max();   // short reads
    int would_block_writes = 0;  // the next n writes report WouldBlock (EAGAIN)
    int would_block_reads = 0;   // the next n reads report WouldBlock
};

class LoopbackEnd final : public transport::ChannelEnd {
  public:
    explicit LoopbackEnd(size_t capacity = 1 << 16) : capacity_(capacity) {}

    // ---- the test's side (l5pgd's), from any thread
    void set_faults(const Faults& f) {
        std::lock_guard lock(mutex_);
        faults_ = f;
    }
    // Appends to what the channel reads; rings `peer_fd` if the reader armed its flag.
    void deliver(std::string_view bytes, int peer_fd = -1) {
        bool ring = false;
        {
            std::lock_guard lock(mutex_);
            inbound_.append(bytes);
            ring = std::exchange(read_armed_, false);
        }
        if (ring && peer_fd >= 0)
            (void)wait::ring_doorbell(peer_fd);
    }
    // Takes what the channel wrote; rings `peer_fd` if the writer waits for room.
    std::string take(int peer_fd = -1) {
        std::string out;
        bool ring = false;
        {
            std::lock_guard lock(mutex_);
            out.swap(outbound_);
            ring = std::exchange(write_armed_, false);
        }
        if (ring && peer_fd >= 0)
            (void)wait::ring_doorbell(peer_fd);
        return out;
    }
    // l5pgd closed the session: reads end after what was delivered, writes fail.
    void close_from_peer() {
        std::lock_guard lock(mutex_);
        closed_ = true;
    }
    // A torn or oversized record, a corrupt position: the channel is broken from now on.
    void tear(const char* why) {
        std::lock_guard lock(mutex_);
        error_ = why;
    }
    [[nodiscard]] bool armed(Want want) {
        std::lock_guard lock(mutex_);
        return want == Want::Read ? read_armed_ : write_armed_;
    }
    [[nodiscard]] int closes_by_application() {
        std::lock_guard lock(mutex_);
        return closes_;
    }
    [[nodiscard]] int foreign_wait_preparations() {
        std::lock_guard lock(mutex_);
        return foreign_preparations_;
    }

    // ---- transport::ChannelEnd, called by the channel
    IoResult write(int, std::span<const std::byte> bytes) noexcept override {
        std::lock_guard lock(mutex_);
        if (error_ != nullptr)
            return {0, IoStatus::Error};
        if (closed_)
            return {0, IoStatus::Closed};
        if (bytes.empty())
            return {0, IoStatus::Ok};
        if (faults_.would_block_writes > 0) {
            --faults_.would_block_writes;
            return {0, IoStatus::WouldBlock};
        }
        const size_t n = std::min({bytes.size(), capacity_ - outbound_.size(), faults_.max_write});
        if (n == 0)
            return {0, IoStatus::WouldBlock};
        outbound_.append(reinterpret_cast<const char*>(bytes.data()), n);
        return {n, IoStatus::Ok};
    }
    IoResult read(int, std::span<std::byte> out) noexcept override {
        return copy_out(out, 0, /*consume=*/true);
    }
    bool can_peek() const noexcept override { return true; }
    IoResult peek(std::span<std::byte> out, size_t skip) noexcept override {
        return copy_out(out, skip, /*consume=*/false);
    }
    size_t unread_bytes() noexcept override {
        std::lock_guard lock(mutex_);
        return error_ != nullptr ? 0 : inbound_.size();
    }
    bool ready(Want want) noexcept override {
        std::lock_guard lock(mutex_);
        if (error_ != nullptr || closed_)
            return true;
        return want == Want::Read ? !inbound_.empty() : outbound_.size() < capacity_;
    }
    bool arm(Want want, uint64_t) noexcept override {
        std::lock_guard lock(mutex_);
        (want == Want::Read ? read_armed_ : write_armed_) = true;
        return true;
    }
    void disarm(Want want) noexcept override {
        std::lock_guard lock(mutex_);
        (want == Want::Read ? read_armed_ : write_armed_) = false;
    }
    void on_socket_readable(int fd) noexcept override {
        size_t count = 0;
        if (wait::drain_doorbells(fd, count) == wait::DrainResult::PeerClosed) {
            std::lock_guard lock(mutex_);
            closed_ = true;
        }
    }
    void prepare_for_foreign_wait(int, bool) noexcept override {
        std::lock_guard lock(mutex_);
        ++foreign_preparations_;
    }
    bool hung_up() noexcept override {
        std::lock_guard lock(mutex_);
        return closed_ && inbound_.empty();
    }
    bool broken() const noexcept override {
        std::lock_guard lock(mutex_);
        return error_ != nullptr;
    }
    const char* error() const noexcept override {
        std::lock_guard lock(mutex_);
        return error_ != nullptr ? error_ : "";
    }
    // No spinning: every wait in these tests goes through arm, re-check and the doorbell.
    wait::WaitPolicy wait_policy(wait::AdaptiveSpin&, const wait::WaitPolicy&,
                                 bool) noexcept override {
        return wait::WaitPolicy::none();
    }
    void close_by_application() noexcept override {
        std::lock_guard lock(mutex_);
        ++closes_;
    }
    void forget_after_fork() noexcept override {}

  private:
    IoResult copy_out(std::span<std::byte> out, size_t skip, bool consume) noexcept {
        std::lock_guard lock(mutex_);
        if (error_ != nullptr)
            return {0, IoStatus::Error};
        if (consume && faults_.would_block_reads > 0) {
            --faults_.would_block_reads;
            return {0, IoStatus::WouldBlock};
        }
        const size_t there = inbound_.size() - std::min(skip, inbound_.size());
        const size_t n = std::min({out.size(), there, faults_.max_read});
        if (n == 0)
            return {0, closed_ ? IoStatus::Closed : IoStatus::WouldBlock};
        std::memcpy(out.data(), inbound_.data() + skip, n);
        if (consume)
            inbound_.erase(0, n);
        return {n, IoStatus::Ok};
    }

    mutable std::mutex mutex_;
    const size_t capacity_;
    Faults faults_;
    std::string inbound_;   // from l5pgd (the test) to the channel
    std::string outbound_;  // from the channel to l5pgd
    bool closed_ = false;
    const char* error_ = nullptr;
    bool read_armed_ = false;
    bool write_armed_ = false;
    int closes_ = 0;
    int foreign_preparations_ = 0;
};

}  // namespace l5pg::test
