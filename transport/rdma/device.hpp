// The RDMA device interface (docs/wire-format.md section 5): register memory, post RDMA WRITE
// and READ, poll completions, and the connection data both ends exchange. The channel
// (channel/) is written against this interface only; `verbs` (rdma-core, RC queue pairs)
// and `soft` (a user-space device over a stream socket) implement it.
//
// Object lifetimes: Device -> ProtectionDomain -> {MemoryRegion, QueuePair}. The
// implementations keep what they need alive internally, so destruction order between
// these objects does not matter; the *memory* behind a MemoryRegion must outlive it.
//
// Isolation: an rkey is only valid on queue pairs of the protection domain it was
// registered in. Give every peer its own ProtectionDomain and no peer can name another
// peer's memory, whatever rkey it guesses.
//
// No exceptions: errors come back as false / nullptr plus a message in `error`.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace l5pg::rdma {

enum class DeviceKind : uint8_t { Auto = 0, Verbs = 1, Soft = 2 };

[[nodiscard]] const char* to_string(DeviceKind kind) noexcept;
// "auto", "verbs", "soft".
[[nodiscard]] bool parse_device_kind(std::string_view text, DeviceKind& kind) noexcept;

struct DeviceOptions {
    // ---- verbs
    std::string device_name;  // empty: the first device
    uint8_t port = 1;         // 1-based, as in ibv_query_port
    // -1: no global routing header (InfiniBand, LID addressing). >= 0: GID table index
    // used as source GID; RoCE requires one, and RoCE v2 entries usually sit at a
    // non-zero index (see `show_gids`).
    int gid_index = -1;
    // Local ACK timeout exponent: 4.096 us * 2^timeout (14: ~67 ms). 1..31; 0 would mean
    // "wait forever" and is rejected.
    uint8_t timeout = 14;
    uint8_t retry_count = 7;   // 0..7 transport retries before the QP fails
    uint8_t rnr_retry = 3;     // 0..6 (7 means retry forever); we never post receives
    uint32_t max_inline = 64;  // requested inline data per work request

    // ---- soft
    // TEST ONLY: apply every incoming WRITE byte by byte in a scrambled order, the last
    // byte last, to exercise the channel's torn-write detection.
    bool soft_scramble_writes = false;
    // A signaled work request without a response for this long fails the QP (the soft
    // device's retry timeout).
    std::chrono::milliseconds soft_ack_timeout{10000};
    uint32_t soft_max_message = 64u << 20;  // largest WRITE/READ a soft QP accepts
    // No device thread: the owner runs the device through progress_fd()/progress() (and
    // every QueuePair::wait() does). For an event loop that is never away for long, and
    // one thread: waits on two threads would take each other's events.
    bool soft_driven = false;
};

enum class Opcode : uint8_t { Write = 1, Read = 2 };

enum class WcStatus : uint8_t {
    Success = 0,
    LocalProtectionError,  // local buffer not in a region of this PD (verbs)
    RemoteAccessError,     // bad rkey, range outside the region, or access not granted
    RemoteInvalidRequest,  // e.g. longer than the peer accepts
    RetryExceeded,         // no response within timeout x retries: peer dead or unreachable
    Flushed,               // the QP failed before this request was executed
    TransportError,        // connection lost, protocol violation, anything else
};
[[nodiscard]] const char* to_string(WcStatus status) noexcept;

enum class Access : uint32_t {
    None = 0,
    LocalWrite = 1,   // the device may write it (READ destinations)
    RemoteWrite = 2,  // peers may RDMA WRITE into it
    RemoteRead = 4,   // peers may RDMA READ from it
};
[[nodiscard]] constexpr Access operator|(Access a, Access b) noexcept {
    return static_cast<Access>(static_cast<uint32_t>(a) | static_cast<uint32_t>(b));
}
[[nodiscard]] constexpr bool has(Access set, Access bit) noexcept {
    return (static_cast<uint32_t>(set) & static_cast<uint32_t>(bit)) != 0;
}

struct WorkRequest {
    uint64_t wr_id = 0;
    Opcode opcode = Opcode::Write;
    // Local buffer: the source of a WRITE, the destination of a READ. It must lie in a
    // region of this QP's protection domain registered under `lkey`.
    std::byte* local = nullptr;
    uint32_t lkey = 0;
    uint32_t length = 0;  // 1 .. max_message_size()
    uint64_t remote_addr = 0;
    uint32_t rkey = 0;
    // Only signaled requests produce a completion when they succeed; a failed request
    // always does. A signaled completion also retires every earlier request of the QP.
    bool signaled = false;
    // WRITE of at most max_inline() bytes: the data is copied when posted, so `local`
    // may be reused as soon as post() returns.
    bool inline_data = false;
};

struct Completion {
    uint64_t wr_id = 0;
    WcStatus status = WcStatus::Success;
    Opcode opcode = Opcode::Write;
    uint32_t byte_len = 0;
};

// What one end tells the other so the two queue pairs can be connected. Encoded on the
// wire by channel/hello.cpp.
struct QpEndpoint {
    DeviceKind kind = DeviceKind::Auto;
    uint32_t qpn = 0;  // 24 bits
    uint32_t psn = 0;  // 24 bits, first packet sequence number
    uint16_t lid = 0;
    uint8_t mtu = 0;  // enum ibv_mtu (1..5); 0 for soft
    std::array<uint8_t, 16> gid{};
};

class MemoryRegion {
  public:
    virtual ~MemoryRegion() = default;
    MemoryRegion(const MemoryRegion&) = delete;
    MemoryRegion& operator=(const MemoryRegion&) = delete;

    [[nodiscard]] std::byte* addr() const noexcept { return addr_; }
    [[nodiscard]] size_t length() const noexcept { return length_; }
    [[nodiscard]] uint32_t lkey() const noexcept { return lkey_; }
    [[nodiscard]] uint32_t rkey() const noexcept { return rkey_; }
    // The address a peer puts in WorkRequest::remote_addr to reach `p` in this region.
    [[nodiscard]] uint64_t remote_addr(const std::byte* p) const noexcept {
        return reinterpret_cast<uint64_t>(p);
    }

  protected:
    MemoryRegion(std::byte* addr, size_t length, uint32_t lkey, uint32_t rkey) noexcept
        : addr_(addr), length_(length), lkey_(lkey), rkey_(rkey) {}

  private:
    std::byte* addr_;
    size_t length_;
    uint32_t lkey_;
    uint32_t rkey_;
};

struct QpOptions {
    uint32_t max_send_wr = 128;  // send queue depth (capped by the device)
    // soft device only: the connected stream socket (TCP or AF_UNIX) that carries this
    // QP's traffic. Always taken over: closed with the QP, or on failure. Must be -1
    // for verbs.
    int soft_wire_fd = -1;
};

class QueuePair {
  public:
    virtual ~QueuePair() = default;
    QueuePair() = default;
    QueuePair(const QueuePair&) = delete;
    QueuePair& operator=(const QueuePair&) = delete;

    [[nodiscard]] virtual QpEndpoint local_endpoint() const noexcept = 0;
    // Connects to the peer's endpoint (RC: INIT -> RTR -> RTS). Posting is only allowed
    // afterwards.
    [[nodiscard]] virtual bool connect(const QpEndpoint& remote, std::string& error) = 0;
    // False (nothing posted) when the request is malformed, the send queue is full or
    // the QP has failed.
    [[nodiscard]] virtual bool post(const WorkRequest& wr, std::string& error) = 0;
    // Posting several requests at once: between hold_posts(true) and hold_posts(false) a
    // device may keep posted requests back and start them together at the end (the soft
    // device sends them in one system call; verbs starts each when posted). wait() ends
    // the hold first: nobody waits for a request that was never started.
    virtual void hold_posts(bool hold) noexcept { (void)hold; }
    // Non-blocking: moves up to out.size() completions into `out`, returns how many.
    [[nodiscard]] virtual size_t poll(std::span<Completion> out) = 0;
    // Blocks until poll() has something or the QP failed; false on timeout.
    [[nodiscard]] virtual bool wait(std::chrono::nanoseconds timeout) = 0;
    // True once the QP is in the error state (error completion, async event, dead peer,
    // protocol violation); `reason` says why. A failed QP never recovers.
    [[nodiscard]] virtual bool failed(std::string* reason = nullptr) const = 0;

    // Bytes this queue pair has taken in from its peer so far, where the device sees them
    // (the soft device's wire); 0 where the hardware applies them unseen.
    [[nodiscard]] virtual uint64_t bytes_received() const noexcept { return 0; }

    [[nodiscard]] virtual uint32_t max_inline() const noexcept = 0;
    [[nodiscard]] virtual uint32_t max_send_wr() const noexcept = 0;
    [[nodiscard]] virtual uint32_t max_message_size() const noexcept = 0;
};

class ProtectionDomain {
  public:
    virtual ~ProtectionDomain() = default;
    ProtectionDomain() = default;
    ProtectionDomain(const ProtectionDomain&) = delete;
    ProtectionDomain& operator=(const ProtectionDomain&) = delete;

    [[nodiscard]] virtual std::unique_ptr<MemoryRegion> register_memory(std::byte* addr,
                                                                        size_t length,
                                                                        Access access,
                                                                        std::string& error) = 0;
    [[nodiscard]] virtual std::unique_ptr<QueuePair> create_qp(const QpOptions& options,
                                                               std::string& error) = 0;
};

class Device {
  public:
    virtual ~Device() = default;
    Device() = default;
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    [[nodiscard]] virtual DeviceKind kind() const noexcept = 0;
    [[nodiscard]] virtual std::string name() const = 0;
    [[nodiscard]] virtual std::unique_ptr<ProtectionDomain> alloc_pd(std::string& error) = 0;
    // A device that needs its owner to run it (DeviceOptions::soft_driven): call
    // progress() whenever progress_fd() is readable and at least every
    // progress_interval(). -1: the device runs by itself. progress() is true when it
    // handled something (a wire event), false for a turn that found nothing.
    [[nodiscard]] virtual int progress_fd() const noexcept { return -1; }
    virtual bool progress() noexcept { return false; }
    [[nodiscard]] virtual std::chrono::milliseconds progress_interval() const noexcept {
        return std::chrono::milliseconds(1000);
    }
    // verbs: the device's non-blocking async event fd; when it is readable, call
    // process_async_events(), which marks the affected QPs failed. soft: -1.
    [[nodiscard]] virtual int async_event_fd() const noexcept { return -1; }
    virtual void process_async_events() noexcept {}
};

// auto: verbs if an RDMA device can be opened, else nullptr with the reason (auto never
// silently falls back to soft: a host without RDMA hardware must ask for soft).
// Defined in open_device.cpp, the only file that knows the implementations.
[[nodiscard]] std::unique_ptr<Device> open_device(DeviceKind kind, const DeviceOptions& options,
                                                  std::string& error);

}  // namespace l5pg::rdma
