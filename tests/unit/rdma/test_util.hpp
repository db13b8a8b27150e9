// Helpers shared by the rdma unit tests: socket pairs, soft devices and queue pairs,
// blocking byte-stream helpers, and an echo server running an L5 RDMA endpoint on its
// own thread. Helpers meant for worker threads return an error string instead of
// using REQUIRE (Catch2 assertions are not thread-safe).
#pragma once

#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "transport/rdma/atomic_bytes.hpp"
#include "transport/rdma/buffer.hpp"
#include "transport/rdma/channel/client.hpp"
#include "transport/rdma/channel/exchange.hpp"
#include "transport/rdma/channel/server.hpp"
#include "transport/rdma/device.hpp"
#include "transport/rdma/sys.hpp"

namespace l5pg::rdma::test {

using namespace std::chrono_literals;
using sys::UniqueFd;

inline constexpr auto kWait = 10s;  // generous: only a real bug (a lost wake-up) hits it

struct FdPair {
    UniqueFd a;
    UniqueFd b;
};

inline FdPair socket_pair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

inline std::unique_ptr<Device> open_soft(const DeviceOptions& options = {}) {
    std::string error;
    auto device = open_device(DeviceKind::Soft, options, error);
    INFO(error);
    REQUIRE(device != nullptr);
    return device;
}

// Deterministic content: byte i of a stream seeded with `seed`.
inline std::byte pattern_byte(uint64_t seed, uint64_t i) {
    uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    x *= 0x94d049bb133111ebull;
    return static_cast<std::byte>((x >> 32) & 0xff);
}

inline std::vector<std::byte> pattern(uint64_t seed, size_t n, uint64_t offset = 0) {
    std::vector<std::byte> v(n);
    for (size_t i = 0; i < n; ++i)
        v[i] = pattern_byte(seed, offset + i);
    return v;
}

// Memory plus its registration.
struct Region {
    Buffer buffer;
    std::unique_ptr<MemoryRegion> mr;
    std::byte* data() const { return buffer.data(); }
};

inline Region make_region(ProtectionDomain& pd, size_t size, Access access) {
    std::string error;
    auto buffer = Buffer::allocate(size, error);
    REQUIRE(buffer.has_value());
    Region r{std::move(*buffer), nullptr};
    r.mr = pd.register_memory(r.buffer.data(), size, access, error);
    INFO(error);
    REQUIRE(r.mr != nullptr);
    return r;
}

// Two connected soft queue pairs, each in its own protection domain.
struct QpPair {
    std::unique_ptr<Device> device;
    std::unique_ptr<ProtectionDomain> pd_a;
    std::unique_ptr<ProtectionDomain> pd_b;
    std::unique_ptr<QueuePair> a;
    std::unique_ptr<QueuePair> b;

    explicit QpPair(const DeviceOptions& options = {}, uint32_t depth = 128) {
        device = open_soft(options);
        std::string error;
        pd_a = device->alloc_pd(error);
        pd_b = device->alloc_pd(error);
        REQUIRE((pd_a && pd_b));
        FdPair wire = socket_pair();
        QpOptions qa;
        qa.max_send_wr = depth;
        qa.soft_wire_fd = ::dup(wire.a.get());
        QpOptions qb = qa;
        qb.soft_wire_fd = ::dup(wire.b.get());
        a = pd_a->create_qp(qa, error);
        b = pd_b->create_qp(qb, error);
        INFO(error);
        REQUIRE((a && b));
        REQUIRE(a->connect(b->local_endpoint(), error));
        REQUIRE(b->connect(a->local_endpoint(), error));
    }
};

inline WorkRequest write_wr(const Region& local, size_t offset, uint32_t length, uint64_t remote,
                            uint32_t rkey, uint64_t wr_id, bool signaled) {
    WorkRequest wr;
    wr.wr_id = wr_id;
    wr.opcode = Opcode::Write;
    wr.local = local.data() + offset;
    wr.lkey = local.mr->lkey();
    wr.length = length;
    wr.remote_addr = remote;
    wr.rkey = rkey;
    wr.signaled = signaled;
    return wr;
}

inline WorkRequest read_wr(const Region& local, size_t offset, uint32_t length, uint64_t remote,
                           uint32_t rkey, uint64_t wr_id) {
    WorkRequest wr = write_wr(local, offset, length, remote, rkey, wr_id, true);
    wr.opcode = Opcode::Read;
    return wr;
}

// Copies memory a device thread writes into (atomically, like the channel reads it).
inline std::vector<std::byte> snapshot(const std::byte* p, size_t n) {
    std::vector<std::byte> v(n);
    std::atomic_thread_fence(std::memory_order_acquire);
    load_relaxed(v.data(), p, n);
    return v;
}

inline uint64_t addr(const std::byte* p) {
    return reinterpret_cast<uint64_t>(p);
}

// Waits for exactly one completion (REQUIREs it arrives).
inline Completion next_completion(QueuePair& qp, std::chrono::milliseconds timeout = kWait) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    Completion c;
    for (;;) {
        if (qp.poll(std::span(&c, 1)) == 1)
            return c;
        REQUIRE(std::chrono::steady_clock::now() < deadline);
        (void)qp.wait(10ms);
    }
}

inline bool socket_readable(int fd, int timeout_ms = 0) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) == 1;
}

template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = kWait) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!pred()) {
        if (std::chrono::steady_clock::now() >= deadline)
            return false;
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

// ---------------------------------------------------------------- byte streams

// Thread-safe (no Catch2): "" on success, else what went wrong.
inline std::string write_all(ClientChannel& c, std::span<const std::byte> data) {
    size_t done = 0;
    while (done < data.size()) {
        const IoResult r = c.write(data.subspan(done));
        if (r.status == IoStatus::Ok) {
            done += r.bytes;
        } else if (r.status != IoStatus::WouldBlock) {
            return std::string("write: ") + to_string(r.status) + ": " + c.error();
        } else if (!c.wait_writable(kWait)) {
            return "write: timed out waiting for ring space";
        }
    }
    return "";
}

inline std::string read_exact(ClientChannel& c, std::span<std::byte> out) {
    size_t done = 0;
    while (done < out.size()) {
        const IoResult r = c.read(out.subspan(done));
        if (r.status == IoStatus::Ok) {
            done += r.bytes;
        } else if (r.status != IoStatus::WouldBlock) {
            return std::string("read: ") + to_string(r.status) + ": " + c.error();
        } else if (!c.wait_readable(kWait)) {
            return "read: timed out waiting for data";
        }
    }
    return "";
}

// A client channel and its end of the session socket (declared first: outlives it).
struct Client {
    UniqueFd fd;
    std::unique_ptr<ClientChannel> channel;
    ClientChannel* operator->() const { return channel.get(); }
};

// Creates a client and sends its hello; the caller hands `server_fd`/`server_wire` to
// the server, then calls finish_client().
struct PendingClient {
    Client client;
    UniqueFd server_fd;
    UniqueFd server_wire;
};

inline bool start_client(Device& device, const ClientOptions& options, PendingClient& out,
                         std::string& error) {
    int s[2];
    int w[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s) != 0 ||
        ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, w) != 0) {
        error = "socketpair failed";
        return false;
    }
    out.client.fd.reset(s[0]);
    out.server_fd.reset(s[1]);
    out.server_wire.reset(w[1]);
    QpOptions qp;
    qp.soft_wire_fd = w[0];
    out.client.channel = ClientChannel::create(device, s[0], options, qp, error);
    return out.client.channel != nullptr &&
           send_hello(s[0], out.client.channel->hello(), 5000ms, error);
}

inline bool finish_client(PendingClient& pending, std::string& error) {
    Hello reply;
    return recv_hello(pending.client.fd.get(), reply, 5000ms, error) &&
           pending.client.channel->connect(reply, error);
}

// One client and one server session on an endpoint, all driven by the calling thread.
struct SessionPair {
    Client client;
    UniqueFd server_fd;  // outlives the session
    std::unique_ptr<ServerSession> session;
};

inline SessionPair connect_pair(Device& device, ServerEndpoint& endpoint,
                                const ClientOptions& options = {}) {
    PendingClient pending;
    std::string error;
    INFO(error);
    REQUIRE(start_client(device, options, pending, error));
    QpOptions qp;
    qp.soft_wire_fd = pending.server_wire.release();
    SessionPair pair;
    pair.session = endpoint.accept_on_socket(pending.server_fd.get(), qp, error);
    INFO(error);
    REQUIRE(pair.session != nullptr);
    REQUIRE(finish_client(pending, error));
    pair.client = std::move(pending.client);
    pair.server_fd = std::move(pending.server_fd);
    return pair;
}

// ---------------------------------------------------------------- echo server

// An L5 RDMA server on its own thread that echoes every byte back to its sender. It
// services sessions while there is traffic and otherwise blocks in poll() on the
// session sockets after prepare_to_block(), so wake-ups go through doorbells.
class EchoServer {
  public:
    EchoServer(Device& device, const ServerOptions& options) : device_(device) {
        std::string error;
        endpoint_ = ServerEndpoint::create(device, options, error);
        INFO(error);
        REQUIRE(endpoint_ != nullptr);
        wake_ = socket_pair();
        REQUIRE(sys::set_nonblocking(wake_.b.get()));
        thread_ = std::thread([this] { run(); });
    }
    ~EchoServer() {
        stop_.store(true);
        wake();
        thread_.join();
    }

    // Thread-safe: connects a new client; nullptr with `error` if refused.
    Client connect(const ClientOptions& options, std::string& error) {
        PendingClient pending;
        if (!start_client(device_, options, pending, error))
            return {};
        {
            std::lock_guard lock(mutex_);
            accepts_.push_back(std::move(pending.server_fd));
            wires_.push_back(std::move(pending.server_wire));
        }
        wake();
        if (!finish_client(pending, error))
            return {};
        return std::move(pending.client);
    }

    std::vector<std::string> errors() {
        std::lock_guard lock(mutex_);
        return errors_;
    }
    size_t closed() {
        std::lock_guard lock(mutex_);
        return closed_;
    }
    size_t live() { return live_.load(); }

  private:
    struct Entry {
        UniqueFd fd;
        std::unique_ptr<ServerSession> session;
        std::vector<std::byte> out;  // echo bytes not yet written
        size_t head = 0;
        bool done = false;
    };

    void wake() {
        const char b = 1;
        (void)!::write(wake_.a.get(), &b, 1);
    }

    void record_error(std::string e) {
        std::lock_guard lock(mutex_);
        errors_.push_back(std::move(e));
    }

    void accept_pending(std::vector<Entry>& entries) {
        std::deque<UniqueFd> fds;
        std::deque<UniqueFd> wires;
        {
            std::lock_guard lock(mutex_);
            fds.swap(accepts_);
            wires.swap(wires_);
        }
        for (size_t i = 0; i < fds.size(); ++i) {
            QpOptions qp;
            qp.soft_wire_fd = wires[i].get();
            (void)wires[i].release();  // taken over by accept, even on failure
            std::string error;
            auto session = endpoint_->accept_on_socket(fds[i].get(), qp, error);
            if (session == nullptr) {
                record_error("accept: " + error);
                continue;  // fds[i] closes: the client sees EOF
            }
            entries.push_back(Entry{std::move(fds[i]), std::move(session), {}, 0, false});
        }
        live_.store(entries.size());
    }

    // Moves bytes for one session; returns true if anything moved.
    bool service(Entry& e, std::vector<std::byte>& buf) {
        ServerSession& s = *e.session;
        bool moved = false;
        (void)s.progress();
        for (;;) {
            const IoResult r = s.read(buf);
            if (r.status == IoStatus::Ok) {
                e.out.insert(e.out.end(), buf.begin(),
                             buf.begin() + static_cast<ptrdiff_t>(r.bytes));
                moved = true;
                continue;
            }
            if (r.status == IoStatus::Error) {
                record_error("session " + std::to_string(s.slot()) + ": " + s.error());
                e.done = true;
                return true;
            }
            if (r.status == IoStatus::Closed) {
                std::lock_guard lock(mutex_);
                ++closed_;
                e.done = true;
                return true;
            }
            break;
        }
        if (e.head < e.out.size()) {
            const IoResult w = s.write(std::span(e.out).subspan(e.head));
            if (w.status == IoStatus::Error) {
                record_error("session " + std::to_string(s.slot()) + ": " + s.error());
                e.done = true;
                return true;
            }
            e.head += w.bytes;
            moved = moved || w.bytes > 0;
            if (e.head == e.out.size()) {
                e.out.clear();
                e.head = 0;
            }
        }
        return moved;
    }

    void run() {
        std::vector<Entry> entries;
        std::vector<ServerSession*> ready(1024);
        std::vector<std::byte> buf(64 * 1024);
        int idle = 0;
        while (!stop_.load()) {
            accept_pending(entries);
            (void)endpoint_->poll(ready);  // we service every session anyway
            bool moved = false;
            for (Entry& e : entries)
                moved = service(e, buf) || moved;
            const size_t before = entries.size();
            std::erase_if(entries, [](const Entry& e) { return e.done; });
            if (entries.size() != before)
                live_.store(entries.size());
            if (moved) {
                idle = 0;
                continue;
            }
            if (++idle < 20) {
                std::this_thread::yield();
                continue;
            }
            bool settled = false;
            if (endpoint_->prepare_to_block(ready, settled) > 0) {
                idle = 0;
                continue;
            }
            if (!settled) {  // flag WRITEs in flight: not safe to block yet
                std::this_thread::yield();
                continue;
            }
            // Doorbells arrive on the session sockets; failed QPs (a client whose
            // request was refused) on the device's async event fd.
            std::vector<pollfd> fds;
            fds.push_back({wake_.b.get(), POLLIN, 0});
            fds.push_back({device_.async_event_fd(), POLLIN, 0});
            for (const Entry& e : entries)
                fds.push_back({e.fd.get(), POLLIN, 0});
            if (::poll(fds.data(), fds.size(), 10'000) <= 0)
                continue;
            if (fds[0].revents != 0) {
                char tmp[64];
                while (::read(wake_.b.get(), tmp, sizeof tmp) > 0) {
                }
            }
            if (fds[1].revents != 0)
                device_.process_async_events();
            for (size_t i = 2; i < fds.size(); ++i) {
                if (fds[i].revents != 0)
                    entries[i - 2].session->on_socket_readable();
            }
            idle = 0;
        }
    }

    Device& device_;
    std::unique_ptr<ServerEndpoint> endpoint_;
    FdPair wake_;
    std::mutex mutex_;
    std::deque<UniqueFd> accepts_;
    std::deque<UniqueFd> wires_;
    std::vector<std::string> errors_;
    size_t closed_ = 0;
    std::atomic<size_t> live_{0};
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

}  // namespace l5pg::rdma::test
