#include "daemon/upstream_pool.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include <spdlog/spdlog.h>

namespace l5pg::daemon {
namespace {

// An idle backend says nothing: a byte (the FATAL of pg_terminate_backend(), of a shutdown)
// or EOF means it is gone, even if this loop has not seen the readiness event yet.
bool quiet(int fd) {
    std::byte probe;
    const ssize_t n = ::recv(fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// Idle until `idle_timeout` after it was parked, and never past the backend's lifetime.
UpstreamPool::clock::time_point deadline_of(UpstreamPool::clock::time_point parked,
                                            UpstreamPool::clock::time_point born,
                                            const UpstreamPool::Limits& limits) {
    return std::min(parked + limits.idle_timeout, born + limits.server_lifetime);
}

}  // namespace

void send_terminate(int fd) {
    const auto& bye = protocol::kTerminateMessage;
    (void)::send(fd, bye.data(), bye.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

UpstreamPool::UpstreamPool(event_base* base, Metrics& metrics, PoolDirectory& directory)
    : base_(base),
      metrics_(metrics),
      directory_(directory),
      expiry_timer_(evtimer_new(base, expiry_cb, this)) {}

UpstreamPool::~UpstreamPool() {
    clear();
}

std::optional<UpstreamPool::Idle> UpstreamPool::take(std::string_view startup) {
    std::optional<Idle> taken;
    expire();  // the expiry timer may not have run yet in this round
    for (auto it = entries_.begin(); it != entries_.end() && !taken;) {
        if (it->startup != startup) {
            ++it;
        } else if (!quiet(it->idle.fd.get())) {
            it = drop(it);
        } else {
            taken = remove(it);
        }
    }
    arm_expiry();
    return taken;
}

std::optional<UpstreamPool::Idle> UpstreamPool::take_for_room(const PoolDirectory::Key& owner,
                                                              RoomMatch match) {
    expire();
    std::optional<Idle> taken;
    for (;;) {
        const auto chosen = choose_for_room(owner, match);
        if (chosen == entries_.end())
            break;
        if (quiet(chosen->idle.fd.get())) {
            taken = remove(chosen);
            metrics_.pool_ended_for_room();
            break;
        }
        drop(chosen);  // Postgres ended it: it frees nothing now
    }
    arm_expiry();
    return taken;
}

UpstreamPool::Entries::iterator UpstreamPool::choose_for_room(const PoolDirectory::Key& owner,
                                                              RoomMatch match) {
    // Newest first: of those that match, the last one is idle longest.
    const auto idle_longest = [this](auto&& matches) {
        const auto found = std::find_if(entries_.rbegin(), entries_.rend(), matches);
        return found == entries_.rend() ? entries_.end() : std::prev(found.base());
    };
    auto chosen = idle_longest([&owner](const Entry& e) { return e.owner == owner; });
    if (chosen == entries_.end() && match != RoomMatch::Owner)
        chosen = idle_longest([&owner](const Entry& e) { return e.owner.second == owner.second; });
    if (chosen == entries_.end() && match != RoomMatch::Owner)
        chosen = idle_longest([&owner](const Entry& e) { return e.owner.first == owner.first; });
    if (chosen == entries_.end() && match == RoomMatch::Any)
        chosen = idle_longest([](const Entry&) { return true; });
    return chosen;
}

UpstreamPool::Idle UpstreamPool::remove(Entries::iterator at) {
    Idle idle = std::move(at->idle);
    count(*at, -1);
    entries_.erase(at);  // its watch event goes first, then nothing refers to the fd
    return idle;
}

bool UpstreamPool::park(std::string startup, PoolDirectory::Key owner, Idle idle,
                        const Limits& limits) {
    const auto now = clock::now();
    const clock::time_point deadline = deadline_of(now, idle.born, limits);
    if (limits.max_idle == 0 || deadline <= now) {
        send_terminate(idle.fd.get());
        return false;
    }
    trim(limits.max_idle - 1);
    entries_.push_front(
        Entry{std::move(startup), std::move(owner), std::move(idle), now, deadline, {}});
    Entry& entry = entries_.front();
    entry.watch.reset(
        event_new(base_, entry.idle.fd.get(), EV_READ | EV_PERSIST, readable_cb, this));
    event_add(entry.watch.get(), nullptr);
    count(entry, 1);
    arm_expiry();
    return true;
}

void UpstreamPool::apply(const Limits& limits) {
    trim(limits.max_idle);
    for (Entry& entry : entries_)
        entry.deadline = deadline_of(entry.parked, entry.idle.born, limits);
    expire();
    arm_expiry();
}

// The oldest go until at most `max_idle` are left.
void UpstreamPool::trim(size_t max_idle) {
    while (entries_.size() > max_idle)
        drop(std::prev(entries_.end()));
}

void UpstreamPool::clear() {
    while (!entries_.empty())
        drop(entries_.begin());
    if (expiry_timer_)
        evtimer_del(expiry_timer_.get());
}

size_t UpstreamPool::drop_reached_at(const std::set<std::string>& addresses) {
    size_t dropped = 0;
    for (auto it = entries_.begin(); it != entries_.end();) {
        if (addresses.contains(it->idle.address.bytes())) {
            it = drop(it);
            ++dropped;
        } else {
            ++it;
        }
    }
    arm_expiry();
    return dropped;
}

UpstreamPool::Entries::iterator UpstreamPool::drop(Entries::iterator at) {
    send_terminate(at->idle.fd.get());
    count(*at, -1);
    return entries_.erase(at);
}

void UpstreamPool::count(const Entry& entry, int64_t delta) {
    metrics_.pool_idle_changed(delta);
    directory_.change(entry.owner, delta);
}

// An idle backend has nothing to say: any byte (a FATAL before an administrator's
// termination) or EOF means it is gone or going.
void UpstreamPool::readable_cb(int fd, short, void* arg) {
    auto* self = static_cast<UpstreamPool*>(arg);
    const auto found = std::find_if(self->entries_.begin(), self->entries_.end(),
                                    [fd](const Entry& e) { return e.idle.fd.get() == fd; });
    if (found == self->entries_.end())
        return;
    spdlog::debug("pooled server connection (backend pid {}) closed: Postgres ended it",
                  found->idle.greeting.key.backend_pid);
    self->drop(found);
    self->arm_expiry();
}

void UpstreamPool::expiry_cb(int, short, void* arg) {
    auto* self = static_cast<UpstreamPool*>(arg);
    self->expire();
    self->arm_expiry();
}

void UpstreamPool::expire() {
    const auto now = clock::now();
    for (auto it = entries_.begin(); it != entries_.end();)
        it = it->deadline <= now ? drop(it) : std::next(it);
}

// One timer for the earliest deadline (a reload may have changed the timeout, so the list's
// order by age is not an order by deadline).
void UpstreamPool::arm_expiry() {
    if (entries_.empty()) {
        evtimer_del(expiry_timer_.get());
        return;
    }
    const auto earliest =
        std::min_element(entries_.begin(), entries_.end(),
                         [](const Entry& a, const Entry& b) { return a.deadline < b.deadline; });
    const auto left = std::max(clock::duration::zero(), earliest->deadline - clock::now());
    const timeval tv = to_timeval(std::chrono::duration_cast<std::chrono::microseconds>(left) +
                                  std::chrono::milliseconds(1));
    evtimer_add(expiry_timer_.get(), &tv);
}

}  // namespace l5pg::daemon
