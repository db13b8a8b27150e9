#include "clientlib/fd_table.hpp"

#include <array>
#include <atomic>

#include "clientlib/channel.hpp"

namespace l5pg::shim {
namespace {

// Encoding of one entry: 0 untracked, 1 candidate, 2 forked, 3 RDMA candidate,
// kChannelBase + slot.
constexpr uint32_t kUntracked = 0;
constexpr uint32_t kCandidate = 1;
constexpr uint32_t kForked = 2;
constexpr uint32_t kRdmaCandidate = 3;
constexpr uint32_t kChannelBase = 16;

// Zero-initialised static storage: valid before any constructor runs.
std::array<std::atomic<uint32_t>, kMaxTrackedFd> g_table;

bool in_range(int fd) noexcept {
    return fd >= 0 && fd < kMaxTrackedFd;
}

FdEntry decode(uint32_t raw) noexcept {
    switch (raw) {
        case kUntracked:
            return {};
        case kCandidate:
            return {FdKind::Candidate, nullptr};
        case kForked:
            return {FdKind::Forked, nullptr};
        case kRdmaCandidate:
            return {FdKind::RdmaCandidate, nullptr};
        default:
            break;
    }
    Channel* channel = channel_at(raw - kChannelBase);
    return channel ? FdEntry{FdKind::Upgraded, channel} : FdEntry{};
}

}  // namespace

FdEntry fd_lookup(int fd) noexcept {
    if (!in_range(fd))
        return {};
    return decode(g_table[fd].load(std::memory_order_acquire));
}

void fd_set_candidate(int fd) noexcept {
    if (in_range(fd))
        g_table[fd].store(kCandidate, std::memory_order_release);
}

void fd_set_rdma_candidate(int fd) noexcept {
    if (in_range(fd))
        g_table[fd].store(kRdmaCandidate, std::memory_order_release);
}

bool fd_attach_channel(int fd, Channel& channel) noexcept {
    if (!in_range(fd))
        return false;
    uint32_t expected = g_table[fd].load(std::memory_order_acquire);
    if (expected != kCandidate && expected != kRdmaCandidate)
        return false;
    return g_table[fd].compare_exchange_strong(expected, kChannelBase + channel_index(channel),
                                               std::memory_order_acq_rel);
}

FdEntry fd_forget(int fd) noexcept {
    if (!in_range(fd))
        return {};
    return decode(g_table[fd].exchange(kUntracked, std::memory_order_acq_rel));
}

void fd_duplicate(int from, int to) noexcept {
    if (from == to)
        return;
    const FdEntry previous = fd_forget(to);
    if (previous.kind == FdKind::Upgraded)
        channel_release(*previous.channel);
    if (!in_range(from) || !in_range(to))
        return;
    const uint32_t raw = g_table[from].load(std::memory_order_acquire);
    if (raw >= kChannelBase) {
        Channel* channel = channel_at(raw - kChannelBase);
        // None, or `from` was closed by another thread meanwhile (its last reference gone).
        if (channel == nullptr || !channel_try_add_ref(*channel))
            return;
    }
    g_table[to].store(raw, std::memory_order_release);
}

void fd_mark_all_forked() noexcept {
    for (auto& entry : g_table)
        if (entry.load(std::memory_order_relaxed) >= kChannelBase)
            entry.store(kForked, std::memory_order_relaxed);
}

}  // namespace l5pg::shim
