#include "daemon/worker.hpp"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/fd_limit.hpp"
#include "daemon/process_signals.hpp"
#include "daemon/session.hpp"
#include "daemon/shutdown_cancels.hpp"
#include "daemon/thread_name.hpp"
#include "transport/rdma/channel/layout.hpp"
#include "transport/wait/block.hpp"
#include "transport/wait/spin.hpp"
#include "transport/wait/wait_id.hpp"

namespace l5pg::daemon {
namespace {

EventBasePtr make_worker_base() {
    // One thread uses this base; new work arrives through the eventfd, so no locking.
    event_config* cfg = event_config_new();
    event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
    EventBasePtr base(event_base_new_with_config(cfg));
    event_config_free(cfg);
    if (!base)
        throw std::runtime_error("cannot create a libevent base for a worker");
    return base;
}

void pin_current_thread(int cpu, unsigned index) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (const int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set); rc != 0)
        spdlog::warn("worker {}: cannot pin to CPU {}: {}", index, cpu, std::strerror(rc));
}

wait::WaitPolicy spin_policy(const config::ShmConfig& shm) {
    return wait::WaitPolicy::from_us(shm.spin_us, shm.yield_us);
}

// The console's RELOAD takes SIGHUP's path: the main thread's handler (workers block the
// signal), so that a reload runs in one place whoever asked for it. The ticket is taken
// first: the reload the signal causes answers it (reload_ledger.hpp).
uint64_t request_reload_from_console(ReloadLedger& ledger) {
    spdlog::info("admin console: RELOAD requested");
    const uint64_t ticket = ledger.ask();
    (void)::kill(::getpid(), SIGHUP);
    return ticket;
}

}  // namespace

Worker::Worker(unsigned index, const SettingsStore& settings, Metrics& metrics,
               AdmissionState& admission_state, RdmaShared rdma)
    : index_(index),
      store_(settings),
      settings_generation_(settings.generation()),
      metrics_(metrics),
      admission_state_(admission_state),
      base_(make_worker_base()),
      rdma_shared_(rdma),
      next_id_(uint64_t{index} << 48),
      upstream_pool_(base_.get(), metrics, admission_state.pools),
      resolver_(base_.get()) {
    // Kept backends belong to the server they were opened on: when upstream.host's addresses
    // lose one (a failover by DNS), those reached there go, and none more is kept there.
    // The other workers close theirs there too (LostAddresses), when woken.
    resolver_.on_moved([this](const std::string& name, const std::vector<std::string>& gone,
                              const std::vector<std::string>& now) {
        if (name != upstream_name())
            return;  // a query sent before a reload pointed upstream.* elsewhere
        retired_addresses_.insert(gone.begin(), gone.end());
        for (const std::string& address : now)
            retired_addresses_.erase(address);  // back in the answer
        if (gone.empty())
            return;
        const size_t closed = upstream_pool_.drop_reached_at(retired_addresses_);
        spdlog::info(
            "worker {}: {} lost {} of its addresses: {} kept server connection(s) there "
            "closed",
            index_, name, gone.size(), closed);
        admission_state_.lost_addresses.post({index_, name, gone});
    });
    settings_ = store_.current();
    spin_policy_ = spin_policy(settings_->config.shm);
    wake_fd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!wake_fd_.valid())
        throw std::runtime_error(fmt::format("eventfd: {}", std::strerror(errno)));
    wake_event_.reset(event_new(base_.get(), wake_fd_.get(), EV_READ | EV_PERSIST, wake_cb, this));
    event_add(wake_event_.get(), nullptr);
    admission_state_.wakers.add([this] { wake(); });  // the workers start after this
    if (settings_->config.rdma.enabled)
        open_rdma();
}

// Called where no session callback is running (the top of the loop, before adopting new
// sessions): sessions ask config() and admission() afresh in each callback, so swapping
// the snapshot here never pulls it from under one. Keys that need a restart are the same
// in every snapshot (config::keep_restart_keys), so what was set up from them stays right.
void Worker::refresh_settings() {
    const uint64_t generation = store_.generation();
    if (generation == settings_generation_)
        return;
    const SettingsPtr previous = std::exchange(settings_, store_.current());
    settings_generation_ = generation;
    spin_policy_ = spin_policy(settings_->config.shm);
    idle_ = IdleStretch{};
    // Kept backends belong to the server they were opened on (a reload after a failover
    // points upstream.* at the new primary); the pool's other limits apply to what it keeps.
    const config::UpstreamConfig& was = previous->config.upstream;
    const config::UpstreamConfig& now = settings_->config.upstream;
    if (was.host != now.host || was.port != now.port ||
        was.unix_socket_dir != now.unix_socket_dir) {
        ++upstream_epoch_;
        upstream_pool_.clear();
        retired_addresses_.clear();  // another name's answers, or a numeric address
    }
    // A reload is how an operator says that /etc/hosts or resolv.conf changed too.
    resolver_.reread_configuration();
    if (settings_->config.pool.mode == config::PoolMode::None)
        upstream_pool_.clear();
    else
        upstream_pool_.apply(pool_limits());
    spdlog::debug("worker {}: new settings (spin {} us, yield {} us)", index_,
                  settings_->config.shm.spin_us, settings_->config.shm.yield_us);
}

// Opens this worker's RDMA device and endpoint. Failure is not fatal: upgrades are then
// declined with the reason, and clients carry on over TCP.
void Worker::open_rdma() {
    const config::RdmaConfig& cfg = settings_->config.rdma;
    rdma::DeviceKind kind = rdma::DeviceKind::Auto;
    (void)rdma::parse_device_kind(cfg.device, kind);  // validated by the config loader
    rdma::DeviceOptions options;
    options.device_name = cfg.device_name;
    options.port = cfg.device_port;
    options.gid_index = cfg.gid_index;
    options.soft_ack_timeout = std::chrono::milliseconds(cfg.completion_timeout_ms);
    // No client's frame is longer than an area of the largest ring it may ask for.
    options.soft_max_message = rdma::largest_message(cfg.max_ring_size);
    // The soft device runs in this worker's loop, not on a thread of its own: a client's
    // WRITE then wakes the worker itself, which applies it and finds the record at once
    // (a device thread cost a context switch more per message, issue 17).
    options.soft_driven = true;
    std::string error;
    if (kind == rdma::DeviceKind::Soft && rdma_shared_.registry == nullptr) {
        rdma_unavailable_ = "the soft device's wire listener is not running";
        return;
    }
    rdma_device_ = rdma::open_device(kind, options, error);
    if (rdma_device_ == nullptr) {
        rdma_unavailable_ = "no RDMA device: " + error;
        return;
    }
    rdma::ServerOptions server_options;
    server_options.max_sessions = settings_->config.limits.max_sessions;
    server_options.max_ring_size = cfg.max_ring_size;
    server_options.completion_timeout = std::chrono::milliseconds(cfg.completion_timeout_ms);
    rdma_endpoint_ = rdma::ServerEndpoint::create(*rdma_device_, server_options, error);
    if (rdma_endpoint_ == nullptr) {
        rdma_unavailable_ = "cannot set up the RDMA endpoint: " + error;
        rdma_device_.reset();
        return;
    }
    if (const int fd = rdma_device_->async_event_fd(); fd >= 0) {
        rdma_async_event_.reset(
            event_new(base_.get(), fd, EV_READ | EV_PERSIST, rdma_async_cb, this));
        event_add(rdma_async_event_.get(), nullptr);
    }
    if (const int fd = rdma_device_->progress_fd(); fd >= 0) {
        rdma_progress_event_.reset(
            event_new(base_.get(), fd, EV_READ | EV_PERSIST, rdma_progress_cb, this));
        event_add(rdma_progress_event_.get(), nullptr);
        rdma_progress_timer_.reset(event_new(base_.get(), -1, EV_PERSIST, rdma_progress_cb, this));
        const timeval every = to_timeval(rdma_device_->progress_interval());
        evtimer_add(rdma_progress_timer_.get(), &every);
    }
}

// The soft device's wires have events (or its periodic check is due): apply what came.
void Worker::rdma_progress_cb(int, short, void* arg) {
    auto* self = static_cast<Worker*>(arg);
    // Only what happened on a wire ends an idle stretch, not the periodic turn.
    if (self->rdma_device_ && self->rdma_device_->progress())
        self->activity_ = true;
}

// A queue pair failed (device event): the affected sessions see it in their next
// progress()/read(), which the polling loop calls right after this callback.
void Worker::rdma_async_cb(int, short, void* arg) {
    auto* self = static_cast<Worker*>(arg);
    if (self->rdma_device_)
        self->rdma_device_->process_async_events();
    self->activity_ = true;
}

Worker::~Worker() {
    request_stop();
    join();
}

void Worker::start() {
    thread_ = std::thread([this] { run(); });
}

void Worker::request_stop() {
    if (!thread_.joinable())
        return;
    stopping_.store(true);
    const uint64_t one = 1;
    (void)!::write(wake_fd_.get(), &one, sizeof one);
}

void Worker::join() {
    if (thread_.joinable())
        thread_.join();
}

void Worker::hand_over(AcceptedClient client) {
    {
        std::lock_guard lock(handover_mutex_);
        handed_over_.push_back(std::move(client));
    }
    session_count_.fetch_add(1, std::memory_order_relaxed);
    const uint64_t one = 1;
    (void)!::write(wake_fd_.get(), &one, sizeof one);
}

std::string Worker::upstream_name() const {
    return UpstreamResolver::name_of(settings_->config.upstream.host,
                                     settings_->config.upstream.port);
}

// Another worker's lookup found upstream.host's answer without an address this worker's kept
// connections may have been reached at. Those idle go now; the answer this worker keeps is
// forgotten, so that its next start looks the name up again and its own lookup decides what
// it keeps from then on (its on_moved: a connection in use now is not kept if reached there,
// and none new opened there).
void Worker::close_kept_at_lost_addresses() {
    std::set<std::string> lost;
    admission_state_.lost_addresses.read_since(lost_seen_, [&](const LostAddresses& news) {
        if (news.worker != index_ && news.name == upstream_name())
            lost.insert(news.gone.begin(), news.gone.end());
    });
    if (lost.empty())
        return;
    resolver_.forget(upstream_name());
    if (const size_t closed = upstream_pool_.drop_reached_at(lost); closed > 0)
        spdlog::info(
            "worker {}: {} kept server connection(s) closed: another worker's lookup of "
            "upstream.host no longer found the address they were reached at",
            index_, closed);
}

// Another worker's session could not log in (53300) and this one may keep what is in the way.
void Worker::answer_room_requests() {
    const std::vector<UpstreamPool::Idle> taken = admission_state_.room.answer(
        room_asks_seen_, [this](const PoolDirectory::Key& owner, RoomMatch match) {
            return upstream_pool_.take_for_room(owner, match);
        });
    for (const UpstreamPool::Idle& idle : taken) {
        spdlog::info(
            "worker {}: ending a kept server connection (backend pid {}) to make room "
            "for a login Postgres refused on another worker",
            index_, idle.greeting.key.backend_pid);
        send_terminate(idle.fd.get());
    }
}

void Worker::wake() {
    const uint64_t one = 1;
    (void)!::write(wake_fd_.get(), &one, sizeof one);
}

void Worker::wake_cb(int fd, short, void* arg) {
    uint64_t value;
    (void)!::read(fd, &value, sizeof value);
    static_cast<Worker*>(arg)->adopt_handed_over();
}

void Worker::adopt_handed_over() {
    refresh_settings();  // a session accepted after a reload starts with its settings
    if (draining())
        upstream_pool_.clear();  // see Session::pool_wanted()
    answer_room_requests();
    close_kept_at_lost_addresses();
    // After the settings: a SHOW CONFIG behind a RELOAD shows what the reload applied.
    if (admin_console_)
        admin_console_->answer_reloads(admission_state_.reloads);
    std::vector<AcceptedClient> batch;
    {
        std::lock_guard lock(handover_mutex_);
        batch.swap(handed_over_);
    }
    for (AcceptedClient& client : batch) {
        auto session = std::make_unique<Session>(*this, ++next_id_, std::move(client));
        Session* raw = session.get();
        sessions_.emplace(raw, std::move(session));
        raw->start();
    }
    // A wake with nothing handed over (a reload, the heartbeat behind /healthz) is not
    // activity: it must not make an idle worker spin before it blocks again.
    if (!batch.empty())
        activity_ = true;
}

AdminConsole& Worker::admin_console() {
    if (!admin_console_)
        admin_console_ = std::make_unique<AdminConsole>(base_.get(), [this] {
            return AdminView{
                admission_state_.sessions, admission_state_.pools, config(), metrics_,
                [this] { return request_reload_from_console(admission_state_.reloads); }};
        });
    return *admin_console_;
}

void Worker::set_polled(Session* session, bool polled) {
    if (polled)
        polled_.push_back(session);
    else
        std::erase(polled_, session);
    if (polled_.size() != 1)
        follower_.release();  // a lone session's client only: nobody to follow now
}

void Worker::retire(Session* session) {
    retired_.push_back(session);
}

void Worker::linger(uint64_t session_id, std::unique_ptr<rdma::ServerSession> channel,
                    UniqueFd socket, Capacity::Share memory) {
    channel->begin_close();
    if (channel->flush_step())
        return;  // nothing in flight: the channel goes now
    if (lingering_.size() >= lingering_share(settings_->config)) {
        client_logs().session_error.log(
            spdlog::level::warn,
            "session {}: RDMA channel closed before the client acknowledged our last writes: "
            "{} channels of this worker wait for that already (its share of a quarter of "
            "limits.max_sessions)",
            session_id, lingering_.size());
        return;
    }
    const auto timeout = std::chrono::milliseconds(settings_->config.rdma.completion_timeout_ms);
    lingering_.push_back({session_id, std::move(memory), std::move(channel), std::move(socket),
                          clock::now() + timeout});
    if (!linger_timer_)
        linger_timer_.reset(event_new(base_.get(), -1, EV_PERSIST, linger_cb, this));
    static constexpr timeval kLingerPoll{0, 1000};
    if (evtimer_pending(linger_timer_.get(), nullptr) == 0)
        evtimer_add(linger_timer_.get(), &kLingerPoll);
}

void Worker::linger_cb(int, short, void* arg) {
    static_cast<Worker*>(arg)->poll_lingering();
}

// Destroying a channel destroys its queue pair: the client can no longer reach us, and
// the socket's EOF tells it we are gone.
void Worker::poll_lingering() {
    const auto now = clock::now();
    std::erase_if(lingering_, [&](Lingering& l) {
        const bool done = l.channel->flush_step();
        if (!done && now < l.deadline)
            return false;
        if (!done || l.channel->broken())
            client_logs().session_error.log(
                spdlog::level::warn,
                "session {}: RDMA client did not acknowledge our last writes: {}", l.session_id,
                done ? l.channel->error() : "timeout");
        return true;
    });
    if (lingering_.empty() && linger_timer_)
        evtimer_del(linger_timer_.get());
}

void Worker::reap() {
    for (Session* session : retired_) {
        const auto it = sessions_.find(session);
        if (it == sessions_.end())
            continue;
        sessions_.erase(it);
        session_count_.fetch_sub(1, std::memory_order_relaxed);
    }
    retired_.clear();
}

Worker::PollRound Worker::poll_sessions() {
    PollRound round;
    if (rdma_endpoint_ && rdma_endpoint_->sessions() > 0) {
        // Clears the mailbox bytes (hints; every polled session is looked at below) and
        // counts the observations the endpoint's torn-record detection relies on. At most one
        // pass, from where the last round's scan stopped (the slots below wait for the next
        // round): peers that set their bytes again as fast as they are cleared (WRITEs cost
        // l5pgd no CPU) must not keep the loop from the rest.
        std::array<rdma::ServerSession*, 64> ready;
        const size_t scans = rdma_endpoint_->sessions() / ready.size() + 1;
        for (size_t i = 0; i < scans && rdma_endpoint_->poll(ready) == ready.size(); ++i) {
        }
    }
    // Index loop: a session may close (and leave polled_) while being polled, and the next
    // one then takes its index: the index moves on only past a session still there.
    for (size_t i = 0; i < polled_.size();) {
        Session* session = polled_[i];
        // Read before the poll: whether Postgres owed this session an answer already.
        if (session->awaiting_upstream())
            round.upstream_pending = true;
        if (session->poll_channel())
            round.progress = true;
        if (i < polled_.size() && polled_[i] == session)
            ++i;
    }
    return round;
}

// Ends an idle stretch: AdaptiveSpin learns how long it lasted.
void Worker::end_idle_stretch() noexcept {
    const auto now = clock::now();
    idle_spin_.record(now - idle_.since, spin_policy_);
    idle_ = IdleStretch{now};
}

// One round with nothing to do: spin, yield, or block, depending on how long we have
// been idle and whether spinning pays (see spinning_pays_off() and wait::AdaptiveSpin).
// The same phases as wait::spin_then_yield(), one step per round: between two steps the
// worker polls all its sessions' rings, not one condition.
void Worker::idle_round() {
    const auto now = clock::now();
    const wait::WaitPolicy policy =
        spinning_pays_off(now) ? idle_spin_.budget(spin_policy_) : wait::WaitPolicy::none();
    idle_.yielding = false;
    switch (policy.phase_after(now - idle_.since)) {
        case wait::Phase::Spin:
            wait::cpu_relax();
            break;
        case wait::Phase::Yield:
            wait::sched_yield_noexcept();
            idle_.yielding = true;
            break;
        case wait::Phase::Block:
            block_until_event();
            reap();
            if (activity_)  // woken by a doorbell or Postgres: the idle stretch is over
                end_idle_stretch();
            break;
    }
}

// Spinning only pays while a client may publish its next request any moment. While every
// busy session waits for Postgres, the backend is the one with work to do: on a machine
// with few cores it may well need the very core we would spin on, and its answer wakes
// our epoll through the upstream socket anyway. shm.spin_awaiting_upstream keeps the
// spinning for hosts where the worker has a core of its own. A lone client confined to
// the one CPU we are confined to cannot publish while we spin at all. And a worker not
// confined to one CPU stops spinning for a lone session while the CPUs are crowded
// (shm.block_when_crowded; the shim does the same, session_policy.hpp). With several
// sessions its polling finds work for one or another, and spinning was measured to win
// (docs/performance.md, "Crowded CPUs"). While it blocks for that lone session, the worker
// runs on the client's CPU (shm.follow_client_cpu; cpu_follower.hpp), until the gauge finds
// the CPUs uncrowded or the worker has other sessions to serve.
bool Worker::spinning_pays_off(clock::time_point now) noexcept {
    // Following pins us to one CPU; our own confinement is still what it was (none).
    const uint32_t sole_cpu = follower_.following() ? 0 : sole_cpu_.current(now);
    bool pays = false;
    for (Session* session : polled_) {  // no early exit: every session learns our hint
        // Acted upon for a lone session only, as by the shim (channel_wait_budget()).
        const bool shares_cpu = session->client_shares_sole_cpu(sole_cpu) && polled_.size() == 1;
        if (!shares_cpu &&
            (settings_->config.shm.spin_awaiting_upstream || !session->awaiting_upstream()))
            pays = true;
    }
    // The gauge judges only rounds in which we would spin.
    const bool judged =
        sole_cpu == 0 && polled_.size() == 1 && settings_->config.shm.block_when_crowded;
    if (pays && judged && crowding_.crowded(now, wait::read_sched_times)) {
        if (settings_->config.shm.follow_client_cpu)
            follower_.follow(polled_.front()->client_cpu());
        return false;
    }
    // Kept while we await the backend or spin between back-offs: moving twice per
    // transaction would cost more than the hand-offs it saves.
    if (!judged || !crowding_.crowded_lately() || !settings_->config.shm.follow_client_cpu)
        follower_.release();
    return pays;
}

// Longest wait for an RDMA flag WRITE's completion before the worker looks at its
// sessions again (a completion usually ends it much sooner).
constexpr std::chrono::microseconds kSettleWait{200};

// The worker's sleep as a wait::Waiter, so that it goes through the one blocking wait
// (transport/wait/block.hpp) like every other: no spinning here (idle_round() did that,
// polling all sessions between steps); arm() sets every session's wake-up flag and
// re-checks (Dekker), then sleep() blocks in epoll until a doorbell, an upstream socket or
// a new session wakes it. A client that publishes after our re-check sees the flag and
// writes a doorbell byte, which wakes the epoll.
class Worker::Sleep {
  public:
    explicit Sleep(Worker& worker) noexcept : w_(worker) {}

    bool ready() noexcept { return false; }  // the polling round before us found nothing
    wait::WaitPolicy policy() noexcept { return wait::WaitPolicy::none(); }
    // False: something is ready already (the flags stay armed only while we sleep).
    bool arm() { return !w_.arm_sessions(); }
    void disarm() { w_.disarm_sessions(); }
    wait::Woken sleep() {
        w_.metrics_.worker_blocked();
        event_base_loop(w_.base_.get(), EVLOOP_ONCE);
        w_.disarm_sessions();
        return wait::Woken::Look;  // the caller's next round looks at everything
    }

  private:
    Worker& w_;
};

// Arms every session's wake-up under one name for this block and re-checks; true when one
// is ready already.
bool Worker::arm_sessions() {
    const uint64_t wait_id = wait::next_wait_id();
    bool ready = false;
    for (Session* session : polled_)
        ready = session->arm_before_block(wait_id) || ready;
    if (!ready && rdma_endpoint_ && rdma_endpoint_->sessions() > 0) {
        // Arms every RDMA session's wait flag in its client's memory; blocking is only
        // safe once those WRITEs completed ("settled"), else we go round once more.
        std::array<rdma::ServerSession*, 64> rdma_ready;
        bool settled = false;
        if (rdma_endpoint_->prepare_to_block(rdma_ready, settled) > 0) {
            ready = true;
        } else if (!settled) {
            // The flag WRITEs are in flight: wait for them rather than spin (a soft device
            // is run by this very wait, see QueuePair::wait()), then go round again.
            rdma_endpoint_->await_completions(kSettleWait);
            ready = true;
        }
    }
    return ready;
}

void Worker::disarm_sessions() {
    for (size_t i = 0; i < polled_.size(); ++i)
        polled_[i]->disarm_after_block();
}

void Worker::block_until_event() {
    Sleep sleep(*this);
    (void)wait::block_until_ready(sleep);
}

// Between two epoll_wait(0) calls a spinning worker checks its rings this many times
// (each round is a ring check plus a pause: well under a microsecond).
constexpr unsigned kSocketCheckInterval = 16;

void Worker::run() {
    block_process_signals();
    name_this_thread(fmt::format("l5pgd-worker-{}", index_));
    const auto& cpus = settings_->config.workers.cpu_affinity;
    if (!cpus.empty())
        pin_current_thread(cpus[index_ % cpus.size()], index_);
    spdlog::debug("worker {} started", index_);

    idle_ = IdleStretch{};
    while (!stopping_.load(std::memory_order_relaxed)) {
        // A plain increment (one writer): no locked instruction in the spin loop.
        loop_rounds_.store(loop_rounds_.load(std::memory_order_relaxed) + 1,
                           std::memory_order_relaxed);
        refresh_settings();
        activity_ = false;
        if (polled_.empty()) {
            event_base_loop(base_.get(), EVLOOP_ONCE);
            reap();
            resolver_.free_retired();
            idle_ = IdleStretch{};
            continue;
        }
        const auto [progress, upstream_pending] = poll_sessions();
        // Spinning is for the rings; sockets (Postgres, doorbells, new sessions) are
        // checked every kSocketCheckInterval spin rounds, not with a syscall per round,
        // and after a busy round only if Postgres already owed an answer before it: a
        // query forwarded just now cannot have been answered yet.
        if ((progress && upstream_pending) || idle_.yielding ||
            ++idle_.rounds % kSocketCheckInterval == 0)
            event_base_loop(base_.get(), EVLOOP_NONBLOCK);
        reap();
        resolver_.free_retired();
        if (progress || activity_)
            end_idle_stretch();
        else
            idle_round();
    }
    close_all("l5pgd is shutting down");
    spdlog::debug("worker {} stopped", index_);
}

std::span<std::byte> Worker::scratch(size_t size) {
    if (scratch_.size() < size)
        scratch_.resize(size);
    return std::span<std::byte>(scratch_).first(size);
}

UpstreamPool::Limits Worker::pool_limits() const noexcept {
    const config::PoolConfig& pool = settings_->config.pool;
    const size_t workers = std::max(1u, settings_->config.workers.count);
    return {(pool.max_idle + workers - 1) / workers,
            std::chrono::milliseconds(pool.idle_timeout_ms),
            std::chrono::milliseconds(pool.server_lifetime_ms)};
}

// Before their sessions close (shutdown_cancels.hpp). A server that does not take the cancels
// holds the stop up a second at most.
void Worker::cancel_running_requests(const std::vector<Session*>& sessions) {
    constexpr std::chrono::seconds kCancelBudget{1};
    ShutdownCancels cancels;
    size_t running = 0;
    for (const Session* session : sessions)
        if (const std::optional<CancelKeys::Backend> backend =
                session->backend_of_running_request()) {
            cancels.add(*backend);
            ++running;
        }
    if (running == 0)
        return;
    const size_t sent = cancels.send(kCancelBudget);
    spdlog::info(
        "worker {}: cancelled {} of {} statements still running, before closing their "
        "sessions",
        index_, sent, running);
}

void Worker::close_all(std::string_view reason) {
    upstream_pool_.clear();
    std::vector<Session*> all;
    all.reserve(sessions_.size());
    for (auto& [raw, owned] : sessions_)
        all.push_back(raw);
    cancel_running_requests(all);
    for (Session* session : all)
        session->terminate_for_shutdown();  // FATAL 57P01 where it can go out now
    reap();
    adopt_handed_over();  // sockets queued after the loop ended: close them too
    all.clear();
    for (auto& [raw, owned] : sessions_)
        all.push_back(raw);
    for (Session* session : all)
        session->close(reason);
    reap();
    // The closed RDMA sessions' last writes, all at once: one completion timeout at most.
    while (!lingering_.empty()) {
        if (rdma_device_)
            (void)rdma_device_->progress();  // a driven device: acknowledgements come in here
        poll_lingering();
        if (!lingering_.empty())
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // Lookups nobody waits for any more: evdns finishes their cancellation in one more pass.
    resolver_.cancel_pending();
    event_base_loop(base_.get(), EVLOOP_NONBLOCK);
    resolver_.free_retired();
}

}  // namespace l5pg::daemon
