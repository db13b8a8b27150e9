// A daemon::ClientEnd in process memory with an error injector, for driving Session
// (daemon/session*.cpp) without a client process: the test delivers the client's bytes
// (`deliver`), reads what Session sent it (`take`), and makes the end misbehave: short
// peeks and reserves, a full output, the client leaving, a torn record.
#pragma once

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>

#include "daemon/client_end.hpp"

namespace l5pg::test {

using daemon::ClientEndHost;
using daemon::IoStatus;

struct EndFaults {
    size_t max_peek = std::numeric_limits<size_t>::max();     // short reads of the client
    size_t max_reserve = std::numeric_limits<size_t>::max();  // short room for Postgres's bytes
    size_t capacity = 1 << 20;                                // output the client holds
    bool stalled = false;  // the client takes nothing: what the session sends stays queued
};

class LoopbackClientEnd final : public daemon::ClientEnd {
  public:
    explicit LoopbackClientEnd(ClientEndHost& host) : host_(host) {}

    // ---- the test's side (the client's)
    EndFaults faults;
    void deliver(std::string_view bytes) { in_.append(bytes); }
    std::string take() {
        std::string out;
        out.swap(out_);
        return out;
    }
    [[nodiscard]] const std::string& output() const { return out_; }
    [[nodiscard]] size_t pending_input() const { return in_.size(); }
    // The client leaves after what it delivered (its closed flag, EOF).
    void leave(bool error = false) {
        left_ = true;
        left_with_error_ = error;
    }
    // The next peek finds nonsense in what the client wrote.
    void tear() { torn_ = true; }
    int input_wanted_changes = 0;
    bool input_wanted = true;
    bool closed_by_session = false;
    bool close_was_error = false;

    // ---- daemon::ClientEnd
    bool polled() const noexcept override { return true; }
    void on_socket_readable() override {}
    void on_socket_writable() override {}
    void progress(bool) override {
        if (left_ && !reported_left_) {
            reported_left_ = true;
            host_.client_departed("client closed the connection", left_with_error_);
        }
    }
    IoStatus peek(std::span<const std::byte>& data) override {
        if (torn_) {
            host_.close("torn record in the client's ring", true);
            return IoStatus::Error;
        }
        if (in_.empty())
            return IoStatus::WouldBlock;
        const size_t n = std::min(in_.size(), faults.max_peek);
        data = std::as_bytes(std::span<const char>(in_.data(), n));
        return IoStatus::Ok;
    }
    void consume(size_t n) override { in_.erase(0, n); }
    void want_input(bool on) override {
        if (on != input_wanted)
            ++input_wanted_changes;
        input_wanted = on;
    }
    bool input_exhausted() override { return left_ && in_.empty(); }
    IoStatus reserve(size_t want, std::span<std::byte>& space) override {
        if (out_.size() >= faults.capacity)
            return full_ = true, IoStatus::WouldBlock;
        const size_t n = std::min({want, faults.max_reserve, faults.capacity - out_.size()});
        scratch_.resize(n);
        space = std::as_writable_bytes(std::span<char>(scratch_.data(), n));
        return IoStatus::Ok;
    }
    void commit(size_t n) override { out_.append(scratch_.data(), n); }
    void send(std::span<const std::byte> bytes) override {
        queued_.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
        flush();
    }
    void send_if_room(std::span<const std::byte> message) override {
        if (out_.size() + message.size() <= faults.capacity)
            send(message);
    }
    void flush() override {
        if (faults.stalled)
            return;
        out_ += queued_;
        queued_.clear();
    }
    bool output_queued() const noexcept override { return !queued_.empty(); }
    bool has_room() override { return !full_; }
    bool resume_output() override {
        if (!full_ || out_.size() >= faults.capacity)
            return false;
        full_ = false;
        return true;
    }
    bool arm_before_block(bool input_wanted_now, uint64_t) override {
        return input_wanted_now && !in_.empty();
    }
    void disarm_after_block() override {}
    bool shares_sole_cpu(uint32_t) noexcept override { return false; }
    void on_client_gone(bool) override {}
    void on_input_done() override {}
    void on_close(bool error, bool) override {
        closed_by_session = true;
        close_was_error = error;
    }
    void reap(daemon::UniqueFd&) override {}

  private:
    ClientEndHost& host_;
    std::string in_;       // from the client, not yet consumed by Session
    std::string out_;      // what Session sent the client
    std::string scratch_;  // the reserved space
    std::string queued_;   // sent by the session, not yet taken by a stalled client
    bool full_ = false;
    bool left_ = false;
    bool left_with_error_ = false;
    bool reported_left_ = false;
    bool torn_ = false;
};

}  // namespace l5pg::test
