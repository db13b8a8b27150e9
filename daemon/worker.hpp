// A worker thread: owns its sessions and one libevent base. While SHM sessions are busy
// it polls their rings in a loop (spin, then sched_yield); when idle past the budget it
// arms every ring's wake-up flag and blocks in epoll until a doorbell, an upstream
// socket or a new session wakes it (docs/wire-format.md section 3). It does not spin at all while
// every busy session waits for Postgres, while its recent idle stretches outlasted the
// budget (wait::AdaptiveSpin), while its clients are confined to the one CPU it is
// confined to (transport/wait/cpu_hint.hpp), or while it serves one session and the CPUs
// are crowded (transport/wait/crowding_gauge.hpp): then spinning only takes CPU from those
// it waits for.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "daemon/admin_console.hpp"
#include "daemon/admission.hpp"
#include "daemon/doorbell_coalescer.hpp"
#include "daemon/event_ptr.hpp"
#include "daemon/metrics.hpp"
#include "daemon/settings.hpp"
#include "daemon/unique_fd.hpp"
#include "daemon/upstream_pool.hpp"
#include "daemon/upstream_resolver.hpp"
#include "transport/rdma/channel/server.hpp"
#include "transport/rdma/device.hpp"
#include "transport/wait/adaptive_spin.hpp"
#include "transport/wait/cpu_follower.hpp"
#include "transport/wait/cpu_hint.hpp"
#include "transport/wait/crowding_gauge.hpp"
#include "transport/wait/policy.hpp"

namespace l5pg::daemon {

class Session;
class WireRegistry;

// What the workers share for RDMA upgrades (rdma.enabled): the soft device's wire
// rendezvous and the port clients connect it to.
struct RdmaShared {
    WireRegistry* registry = nullptr;  // null unless rdma.device is soft
    uint16_t soft_port = 0;
};

class Worker {
  public:
    // Reads the store's current settings now, and a newer snapshot whenever one is published
    // (see refresh_settings()).
    Worker(unsigned index, const SettingsStore& settings, Metrics& metrics,
           AdmissionState& admission_state, RdmaShared rdma = {});
    ~Worker();
    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;

    void start();
    // Tells the thread to close every session and end; join() waits for it. Server stops
    // all its workers first, then joins them: they close their sessions together.
    void request_stop();
    void join();
    // Thread-safe: queue an accepted client for this worker.
    void hand_over(AcceptedClient client);
    // Thread-safe: wake the worker's loop, so that it takes up newly published settings
    // now, or shows it still goes round (loop_rounds()).
    void wake();
    [[nodiscard]] size_t session_count() const noexcept {
        return session_count_.load(std::memory_order_relaxed);
    }
    // Thread-safe: how often the loop went round; still after wake() means stuck (the
    // systemd watchdog asks, Server::workers_responsive()).
    [[nodiscard]] uint64_t loop_rounds() const noexcept {
        return loop_rounds_.load(std::memory_order_relaxed);
    }

    // For sessions, on the worker thread only. config() and admission() are this worker's
    // current snapshot: valid until the callback that asked returns (a reload replaces
    // them between callbacks), so keep no reference beyond it.
    [[nodiscard]] event_base* base() const noexcept { return base_.get(); }
    [[nodiscard]] const config::Config& config() const noexcept { return settings_->config; }
    [[nodiscard]] Metrics& metrics() noexcept { return metrics_; }
    [[nodiscard]] const Admission& admission() const noexcept { return settings_->admission; }
    [[nodiscard]] SegmentRegistry& segments() noexcept { return admission_state_.segments; }
    [[nodiscard]] SessionDirectory& sessions() noexcept { return admission_state_.sessions; }
    [[nodiscard]] SessionCap& session_cap() noexcept { return admission_state_.session_cap; }
    [[nodiscard]] Capacity& rdma_memory() noexcept { return admission_state_.rdma_memory; }
    [[nodiscard]] Capacity& consoles() noexcept { return admission_state_.consoles; }
    // The waits of SHM clients this worker rang for lately (one doorbell per client wait).
    [[nodiscard]] DoorbellCoalescer& doorbells() noexcept { return doorbells_; }
    // `size` bytes of this worker thread's own, for a private copy that lives only within
    // one callback (the next call may hand out the same bytes).
    [[nodiscard]] std::span<std::byte> scratch(size_t size);
    // Server connections kept for the next client (pool.mode), and the keys their clients
    // hold in place of the backends' own (shared by all workers).
    [[nodiscard]] UpstreamPool& upstream_pool() noexcept { return upstream_pool_; }
    // What all workers keep idle, and how to ask the others to end a kept backend.
    [[nodiscard]] const PoolDirectory& pools() const noexcept { return admission_state_.pools; }
    [[nodiscard]] RoomRequests& room_requests() noexcept { return admission_state_.room; }
    // Looks upstream.host up for this worker's sessions, without blocking them.
    [[nodiscard]] UpstreamResolver& resolver() noexcept { return resolver_; }
    // Whether upstream.host's answers no longer have `address` (no server connection reached
    // there is kept).
    [[nodiscard]] bool address_retired(const UpstreamAddress& address) const {
        return retired_addresses_.contains(address.bytes());
    }
    // Closes the kept connections at addresses other workers' lookups found gone since this
    // worker last looked (at each wake, and before a kept connection is handed out).
    void close_kept_at_lost_addresses();
    [[nodiscard]] CancelKeys& cancel_keys() noexcept { return admission_state_.cancel_keys; }
    [[nodiscard]] CancelGuessLimiter& cancel_guesses() noexcept {
        return admission_state_.cancel_guesses;
    }
    [[nodiscard]] ForeignFds& foreign_fds() noexcept { return admission_state_.foreign_fds; }
    // SIGINT's graceful shutdown: new sessions are refused, cancel requests forwarded.
    [[nodiscard]] bool draining() const noexcept {
        return admission_state_.draining.load(std::memory_order_relaxed);
    }
    // What this worker's pool keeps: its share of pool.max_idle, and for how long.
    [[nodiscard]] UpstreamPool::Limits pool_limits() const noexcept;
    // Changes whenever a reload points upstream.* elsewhere: a server connection opened
    // before is not kept (the pool holds only connections to the current server).
    [[nodiscard]] uint64_t upstream_epoch() const noexcept { return upstream_epoch_; }
    // This worker's admin console server (created on first use).
    [[nodiscard]] AdminConsole& admin_console();
    void note_activity() noexcept { activity_ = true; }
    // This worker's RDMA endpoint; null when RDMA is disabled or the device could not be
    // opened (rdma_unavailable() says why).
    [[nodiscard]] rdma::ServerEndpoint* rdma_endpoint() noexcept { return rdma_endpoint_.get(); }
    [[nodiscard]] const std::string& rdma_unavailable() const noexcept { return rdma_unavailable_; }
    [[nodiscard]] rdma::DeviceKind rdma_device_kind() const noexcept {
        return rdma_device_ ? rdma_device_->kind() : rdma::DeviceKind::Auto;
    }
    [[nodiscard]] std::string rdma_device_name() const {
        return rdma_device_ ? rdma_device_->name() : std::string();
    }
    [[nodiscard]] const RdmaShared& rdma_shared() const noexcept { return rdma_shared_; }
    // A session joins or leaves the polling loop (Session::set_polled: only changes).
    void set_polled(Session* session, bool polled);
    void retire(Session* session);
    // Keeps a closed session's RDMA channel, and the socket it rings, until the client
    // has acknowledged everything written to it (at most rdma.completion_timeout_ms),
    // polled from this worker's loop: closing one session never blocks the others. Beyond
    // this worker's lingering_share() (fd_limit.hpp) the channel goes at once.
    void linger(uint64_t session_id, std::unique_ptr<rdma::ServerSession> channel, UniqueFd socket,
                Capacity::Share memory);

  private:
    static void wake_cb(int fd, short what, void* arg);
    static void rdma_async_cb(int fd, short what, void* arg);
    static void rdma_progress_cb(int fd, short what, void* arg);
    void open_rdma();
    void refresh_settings();
    void run();
    void adopt_handed_over();
    void answer_room_requests();
    [[nodiscard]] std::string upstream_name() const;  // upstream.* as the resolver names it
    struct PollRound {
        bool progress = false;          // some session moved bytes
        bool upstream_pending = false;  // some session awaited Postgres before its poll
    };
    PollRound poll_sessions();
    [[nodiscard]] bool spinning_pays_off(std::chrono::steady_clock::time_point now) noexcept;
    void end_idle_stretch() noexcept;
    void idle_round();
    // Sleeps through the one blocking wait (wait::block_until_ready) with a Sleep waiter.
    void block_until_event();
    class Sleep;
    [[nodiscard]] bool arm_sessions();  // true: a session is ready, do not block
    void disarm_sessions();
    void reap();
    void close_all(std::string_view reason);
    void cancel_running_requests(const std::vector<Session*>& sessions);
    static void linger_cb(int fd, short what, void* arg);
    void poll_lingering();

    const unsigned index_;
    const SettingsStore& store_;
    SettingsPtr settings_;          // the worker thread's snapshot (the constructor's first)
    uint64_t settings_generation_;  // the store's generation when settings_ was taken
    uint64_t upstream_epoch_ = 0;   // see upstream_epoch()
    Metrics& metrics_;
    AdmissionState& admission_state_;
    EventBasePtr base_;
    UniqueFd wake_fd_;  // eventfd: new sessions and stop requests
    EventPtr wake_event_;
    std::thread thread_;
    std::atomic<bool> stopping_{false};
    std::atomic<size_t> session_count_{0};
    std::atomic<uint64_t> loop_rounds_{0};  // written by the worker thread only
    bool activity_ = false;
    using clock = std::chrono::steady_clock;
    struct IdleStretch {
        clock::time_point since = clock::now();  // last progress
        unsigned rounds = 0;                     // idle rounds since then
        bool yielding = false;                   // past the spin budget
    };
    wait::WaitPolicy spin_policy_;  // shm.spin_us, shm.yield_us of settings_
    wait::AdaptiveSpin idle_spin_;  // whether idle stretches are worth spinning
    // Whether our CPUs are crowded; idle rounds are not waits, so no rate check.
    wait::CrowdingGauge crowding_{wait::CrowdingGauge::RateCheck::Off};
    wait::SoleCpuHint sole_cpu_;  // the one CPU this thread is confined to, if any
    wait::CpuFollower follower_;  // on a lone client's CPU while crowded_ has us blocking
    IdleStretch idle_;

    uint64_t room_asks_seen_ = 0;  // RoomRequests::answer() read up to here
    uint64_t lost_seen_ = 0;       // admission_state_.lost_addresses read up to here

    std::mutex handover_mutex_;
    std::vector<AcceptedClient> handed_over_;  // guarded by the mutex

    // RDMA: declared before the sessions, which must go first (the endpoint outlives them).
    const RdmaShared rdma_shared_;
    std::unique_ptr<rdma::Device> rdma_device_;
    std::unique_ptr<rdma::ServerEndpoint> rdma_endpoint_;
    std::string rdma_unavailable_;
    EventPtr rdma_async_event_;
    EventPtr rdma_progress_event_;  // a driven device's fd, and its periodic turn
    EventPtr rdma_progress_timer_;
    struct Lingering {  // see linger(); declared after the endpoint, which must outlive it
        uint64_t session_id = 0;
        Capacity::Share memory;  // the rings' share of rdma.max_memory, given back after them
        std::unique_ptr<rdma::ServerSession> channel;
        UniqueFd socket;
        clock::time_point deadline;
    };
    std::vector<Lingering> lingering_;
    EventPtr linger_timer_;  // polls lingering_ while it is not empty

    uint64_t next_id_;
    DoorbellCoalescer doorbells_;                  // before the sessions, whose SHM ends use it
    std::vector<std::byte> scratch_;               // see scratch()
    UpstreamPool upstream_pool_;                   // after base_, which must outlive its events
    UpstreamResolver resolver_;                    // after base_, before the sessions waiting
    std::set<std::string> retired_addresses_;      // see address_retired()
    std::unique_ptr<AdminConsole> admin_console_;  // before the sessions, which go first
    std::unordered_map<Session*, std::unique_ptr<Session>> sessions_;
    std::vector<Session*> polled_;   // SHM and RDMA sessions in the polling loop
    std::vector<Session*> retired_;  // closed, destroyed after the current callback
};

}  // namespace l5pg::daemon
