#include "clientlib/fd_table.hpp"

#include <time.h>
#include <unistd.h>

#include <array>
#include <atomic>

#include "clientlib/channel.hpp"
#include "clientlib/settings.hpp"

namespace l5pg::shim {
namespace {

// Encoding of one entry: 0 untracked, 1 candidate, 2 forked, 3 RDMA candidate, 4 upgrading,
// kChannelBase + slot.
constexpr uint32_t kUntracked = 0;
constexpr uint32_t kCandidate = 1;
constexpr uint32_t kForked = 2;
constexpr uint32_t kRdmaCandidate = 3;
constexpr uint32_t kUpgrading = 4;
constexpr uint32_t kChannelBase = 16;

// Zero-initialised static storage: valid before any constructor runs.
std::array<std::atomic<uint32_t>, kMaxTrackedFd> g_table;

// The process the table belongs to. A vfork() child runs in its parent's memory until it
// execs or exits, and no fork handler runs for it: the dup2() and close() it makes on its
// own copies of the fds (Python's subprocess does) must not change the parent's entries.
// Asked only where a tracked entry may change, as getpid() is a system call. 0: the shim's
// constructor has not run yet (another library's constructor connects): ours.
std::atomic<pid_t> g_owner{0};

bool owned_here() {
    const pid_t owner = g_owner.load(std::memory_order_relaxed);
    return owner == 0 || ::getpid() == owner;
}

bool in_range(int fd) {
    return fd >= 0 && fd < kMaxTrackedFd;
}

bool tracked(int fd) {
    return in_range(fd) && g_table[fd].load(std::memory_order_relaxed) != kUntracked;
}

int64_t monotonic_ns() {  // clock_gettime is async-signal-safe
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

FdEntry decode(uint32_t raw) {
    switch (raw) {
        case kUntracked:
            return {};
        case kCandidate:
            return {FdKind::Candidate, nullptr};
        case kForked:
            return {FdKind::Forked, nullptr};
        case kRdmaCandidate:
            return {FdKind::RdmaCandidate, nullptr};
        case kUpgrading:
            return {FdKind::Upgrading, nullptr};
        default:
            break;
    }
    Channel* channel = channel_at(raw - kChannelBase);
    return channel ? FdEntry{FdKind::Upgraded, channel} : FdEntry{};
}

// The highest fd number ever given a tracked entry: select() looks for upgraded fds no
// further (interpose_poll.cpp). Only grows, as the kernel's descriptor table does.
std::atomic<int> g_highest_tracked{-1};

// Every entry fd_duplicate() and the candidates' setters store goes through here.
void store_tracked(int fd, uint32_t raw) {
    int highest = g_highest_tracked.load(std::memory_order_relaxed);
    while (raw != kUntracked && fd > highest &&
           !g_highest_tracked.compare_exchange_weak(highest, fd, std::memory_order_relaxed)) {
    }
    g_table[fd].store(raw, std::memory_order_release);
}

}  // namespace

int fd_highest_tracked() {
    return g_highest_tracked.load(std::memory_order_relaxed);
}

FdEntry fd_lookup(int fd) {
    if (!in_range(fd))
        return {};
    return decode(g_table[fd].load(std::memory_order_acquire));
}

void fd_table_take_ownership() {
    g_owner.store(::getpid(), std::memory_order_relaxed);
}

void fd_set_candidate(int fd) {
    if (in_range(fd) && owned_here())
        store_tracked(fd, kCandidate);
}

void fd_set_rdma_candidate(int fd) {
    if (in_range(fd) && owned_here())
        store_tracked(fd, kRdmaCandidate);
}

bool fd_claim_for_upgrade(int fd) {
    if (!in_range(fd))
        return false;
    uint32_t expected = g_table[fd].load(std::memory_order_acquire);
    if (expected != kCandidate && expected != kRdmaCandidate)
        return false;
    return g_table[fd].compare_exchange_strong(expected, kUpgrading, std::memory_order_acq_rel);
}

bool fd_attach_channel(int fd, Channel& channel) {
    if (!in_range(fd))
        return false;
    uint32_t expected = kUpgrading;
    return g_table[fd].compare_exchange_strong(expected, kChannelBase + channel_index(channel),
                                               std::memory_order_acq_rel);
}

void fd_abandon_upgrade(int fd) {
    if (!in_range(fd))
        return;
    uint32_t expected = kUpgrading;
    (void)g_table[fd].compare_exchange_strong(expected, kUntracked, std::memory_order_acq_rel);
}

// An upgrade ends within twice upgrade_timeout_ms (UpgradeClock, upgrade_common.hpp: the
// attempt's steps, then a fallback to plain TCP); three times that bounds a wait that a
// signal handler interrupting the upgrading thread itself would otherwise never end.
bool fd_await_upgrade(int fd) {
    if (!in_range(fd))
        return true;
    const int64_t deadline =
        monotonic_ns() + int64_t{3} * settings().upgrade_timeout_ms * 1'000'000;
    while (g_table[fd].load(std::memory_order_acquire) == kUpgrading) {
        if (monotonic_ns() >= deadline)
            return false;
        pause_keeping_errno(100'000);
    }
    return true;
}

FdEntry fd_forget(int fd) {
    if (!tracked(fd) || !owned_here())
        return {};
    return decode(g_table[fd].exchange(kUntracked, std::memory_order_acq_rel));
}

void fd_duplicate(int from, int to) {
    // Not `tracked() && !owned_here()`: a thread of a vfork() child's parent may make either
    // entry tracked between the two looks.
    if (from == to || !owned_here())
        return;
    const FdEntry previous = fd_forget(to);
    if (previous.kind == FdKind::Upgraded)
        channel_release(*previous.channel);
    if (!in_range(from) || !in_range(to))
        return;
    uint32_t raw = g_table[from].load(std::memory_order_acquire);
    for (;;) {
        if (raw == kUpgrading) {
            // Duplicated while its first message asks l5pgd: the socket's fate is being
            // decided (on the rings once l5pgd said yes): both descriptors get the outcome.
            // Should the upgrade outlast the wait, the copy must not touch the bare socket
            // beside the rings: it reads EOF and writes EPIPE, as a forked child's.
            if (!fd_await_upgrade(from)) {
                store_tracked(to, kForked);
                return;
            }
            raw = g_table[from].load(std::memory_order_acquire);
            continue;
        }
        if (raw != kCandidate && raw != kRdmaCandidate)
            break;
        // Two descriptors of one socket before its first message: the upgrade would move
        // only the one that sends first onto the rings, and the other would go on reading
        // and writing the bare socket. Neither is upgraded: the socket stays a socket. (A
        // first send that claims it meanwhile makes the exchange fail: look again.)
        if (g_table[from].compare_exchange_strong(raw, kUntracked, std::memory_order_acq_rel))
            return;
    }
    if (raw >= kChannelBase) {
        Channel* channel = channel_at(raw - kChannelBase);
        // `from` was closed by another thread meanwhile (its last reference gone), or closed
        // and its slot given to another connection between the look and the reference (as
        // ChannelRef::of() checks): `to` is a copy of a socket whose session ends, which must
        // neither reach that other connection's rings nor write on l5pgd's session socket.
        if (channel == nullptr || !channel_try_add_ref(*channel)) {
            store_tracked(to, kForked);
            return;
        }
        if (g_table[from].load(std::memory_order_acquire) != raw) {
            channel_release(*channel);
            store_tracked(to, kForked);
            return;
        }
    }
    store_tracked(to, raw);
}

// A socket another thread was upgrading when the parent forked goes onto the parent's rings
// (or stays a socket) without the child: the child's copy is the parent's, as upgraded ones.
void fd_mark_all_forked() {
    for (auto& entry : g_table) {
        const uint32_t raw = entry.load(std::memory_order_relaxed);
        if (raw >= kChannelBase || raw == kUpgrading)
            entry.store(kForked, std::memory_order_relaxed);
    }
}

}  // namespace l5pg::shim
