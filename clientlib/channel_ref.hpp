// A reference to the channel of an upgraded fd, held for the length of one interposed call.
//
// Why: another thread may close() the fd while this one is inside send(), recv() or poll()
// on it. The fd's own reference then goes; without one of the call's own, the last release
// would destroy the end (unmap the rings) under the call, and the slot could serve another
// connection before the call looks at it again. With libc the call just goes on with the
// socket it began with, and so does the shim: the channel lives until the call returns, and
// whichever reference goes last frees it.
#pragma once

#include <cerrno>
#include <utility>

#include "clientlib/channel.hpp"
#include "clientlib/fd_table.hpp"

namespace l5pg::shim {

class ChannelRef {
  public:
    ChannelRef() = default;
    ChannelRef(ChannelRef&& other) : ch_(std::exchange(other.ch_, nullptr)) {}
    ChannelRef& operator=(ChannelRef&& other) {
        if (this != &other) {
            reset();
            ch_ = std::exchange(other.ch_, nullptr);
        }
        return *this;
    }
    ChannelRef(const ChannelRef&) = delete;
    ChannelRef& operator=(const ChannelRef&) = delete;
    ~ChannelRef() { reset(); }

    // The channel `fd` is upgraded to, or none (not upgraded, or closed by another thread
    // meanwhile). Async-signal-safe and lock-free, like fd_lookup().
    [[nodiscard]] static ChannelRef of(int fd) {
        // An fd names a channel only while it holds a reference to it (close() forgets the
        // fd before it releases), so a second look settles it; a few more for fds that
        // other threads close and reuse meanwhile.
        for (int attempt = 0; attempt < 4; ++attempt) {
            const FdEntry entry = fd_lookup(fd);
            if (entry.kind != FdKind::Upgraded)
                return {};
            // A slot whose last reference went is being freed: take none of it.
            if (!channel_try_add_ref(*entry.channel))
                continue;  // the fd was closed meanwhile: look again (EBADF or its new use)
            ChannelRef ref(entry.channel);
            // Between the lookup and the reference the fd may have been closed and its slot
            // given to another connection: the reference counts only if the fd still names it.
            if (fd_lookup(fd).channel == entry.channel)
                return ref;
        }
        return {};
    }

    [[nodiscard]] Channel* get() const { return ch_; }
    [[nodiscard]] Channel& operator*() const { return *ch_; }
    [[nodiscard]] Channel* operator->() const { return ch_; }
    explicit operator bool() const { return ch_ != nullptr; }

  private:
    explicit ChannelRef(Channel* ch) : ch_(ch) {}
    // The last reference may go here, after the call set errno (channel_release keeps it).
    void reset() {
        if (ch_ != nullptr)
            channel_release(*std::exchange(ch_, nullptr));
    }

    Channel* ch_ = nullptr;
};

}  // namespace l5pg::shim
