// poll/ppoll/select/pselect. When none of the descriptors is upgraded the call goes
// straight to libc. Otherwise readiness of upgraded fds comes from their rings: check,
// spin and yield within the budget (and the caller's timeout), then arm the wake-up
// flags, re-check, and block in the real ppoll() on the sockets, where a doorbell byte
// or EOF wakes us. select()/pselect() are mapped onto the same code.
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <bitset>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory_resource>
#include <utility>
#include <vector>

#include "clientlib/c_boundary.hpp"
#include "clientlib/channel.hpp"
#include "clientlib/channel_ref.hpp"
#include "clientlib/doorbell_relook.hpp"
#include "clientlib/end_waiters.hpp"
#include "clientlib/fd_table.hpp"
#include "clientlib/foreign_waiters.hpp"
#include "clientlib/proc_fds.hpp"
#include "clientlib/real_calls.hpp"
#include "clientlib/settings.hpp"
#include "transport/wait/block.hpp"
#include "transport/wait/wait_id.hpp"

extern "C" [[noreturn]] void __chk_fail(void);

namespace l5pg::shim {
namespace {

constexpr int64_t kForever = -1;
// A forked child's copy of an upgraded fd reads EOF and writes EPIPE. Like a Unix socket
// whose peer left: hung up, readable (the EOF) and writable (the EPIPE) where asked for.
short forked_revents(short events) {
    return static_cast<short>(POLLHUP | (events & (kPollReadable | kPollWritable | POLLRDHUP)));
}

int64_t now_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// The kernel refuses more entries than the process may have descriptors (EINVAL) before it
// reads one; asked only of long arrays (a system call).
bool beyond_fd_limit(nfds_t n) {
    if (n <= FD_SETSIZE)
        return false;
    rlimit limit{};
    return ::getrlimit(RLIMIT_NOFILE, &limit) == 0 && n > limit.rlim_cur;
}

// A null array, or one longer than the kernel takes, goes to the kernel, which answers
// EFAULT or EINVAL (a pointer it cannot read otherwise crashes the program here, where the
// kernel would answer EFAULT too).
bool any_tracked(const pollfd* fds, nfds_t n) {
    if (fds == nullptr || beyond_fd_limit(n))
        return false;
    for (nfds_t i = 0; i < n; ++i) {
        const FdKind kind = fd_lookup(fds[i].fd).kind;
        if (kind == FdKind::Upgraded || kind == FdKind::Forked)
            return true;
    }
    return false;
}

// One poll() call over a mix of upgraded and ordinary descriptors. What each fd is, and a
// reference to each upgraded fd's channel, are taken once for the whole call
// (channel_ref.hpp): another thread's close() meanwhile leaves this call its channels.
//
// poll() is async-signal-safe, and programs call it in signal handlers: what the call keeps
// per fd lives in a buffer on the stack (kInlineBytes, about 20 fds); only a larger array
// goes to the heap.
class MixedPoll {
  public:
    MixedPoll(pollfd* fds, nfds_t n)
        : fds_(fds), n_(n), arena_(inline_.data(), inline_.size()), entries_(n, &arena_) {
        std::bitset<kMaxChannels> seen;  // channels named so far (a rare repeat is looked up)
        for (nfds_t i = 0; i < n_; ++i) {
            Entry& e = entries_[i];
            e.channel = ChannelRef::of(fds_[i].fd);
            e.kind = e.channel ? FdKind::Upgraded : fd_lookup(fds_[i].fd).kind;
            if (e.kind == FdKind::Upgraded && !e.channel)
                e.kind = FdKind::Untracked;  // closed just now: libc's again
            if (e.kind == FdKind::Upgraded) {
                const uint32_t index = channel_index(*e.channel);
                e.counted_in = seen.test(index) ? counted_in(e.channel.get(), i) : i;
                seen.set(index);
            }
        }
    }

    ~MixedPoll() {
        for (Entry& e : entries_) {
            if (e.channel && &counted_of(e) == &e.counted)  // demoted ones too
                stop_waiting(*e.channel, e.counted);
        }
    }
    MixedPoll(const MixedPoll&) = delete;
    MixedPoll& operator=(const MixedPoll&) = delete;

    int run(int64_t timeout_ns, const sigset_t* mask) {
        if (int ready = scan_rings(); ready > 0 || timeout_ns == 0)
            return finish(ready);
        const int64_t started = now_ns();
        const int result = wait(timeout_ns < 0 ? kForever : started + timeout_ns, mask);
        const auto waited = std::chrono::nanoseconds(now_ns() - started);
        for_each_upgraded(
            [waited](Channel& ch, short) { ch.spin.record(waited, settings().budget); });
        return result;
    }

  private:
    // The wait of one poll() call as a wait::Waiter: ready when some ring is; spin and yield
    // on the rings alone (ordinary fds wait at most this budget), then arm every upgraded
    // fd, re-check and sleep in the real ppoll() on all the fds.
    class PollWaiter {
      public:
        PollWaiter(MixedPoll& poll, int64_t deadline, const sigset_t* mask)
            : poll_(poll), deadline_(deadline), mask_(mask) {}

        bool ready() { return poll_.scan_rings() > 0; }
        // A round after a sleep cut short to look at the rings arms at once: spinning then
        // would only burn the CPU, and lengthen the instants a signal finds no EINTR to give.
        wait::WaitPolicy policy() {
            return std::exchange(looked_, false) ? wait::WaitPolicy::none()
                                                 : poll_.budget_within(deadline_);
        }
        // Every upgraded fd under one name: l5pgd rings one of them, which ends the wait.
        bool arm() {
            const uint64_t wait_id = wait::next_wait_id();
            poll_.for_each_upgraded_entry([this, wait_id](Entry& e, short events) {
                channel_arm(*e.channel, events, wait_id, poll_.counted_of(e));
            });
            return true;
        }
        void disarm() {
            poll_.for_each_upgraded_entry([this](Entry& e, short events) {
                channel_disarm(*e.channel, events, poll_.counted_of(e));
            });
        }
        // Ready ordinary fds or the caller's timeout end the wait; a doorbell alone rounds
        // again, where the rings are looked at first.
        wait::Woken sleep() {
            const bool soon = poll_.looks_again_soon();
            const int rc = poll_.block(soon ? next_look() : deadline_, mask_);
            looked_ = soon;
            if (rc < 0)
                return wait::Woken::Stop;
            ordinary_ready_ = rc;
            if (rc > 0 || (deadline_ != kForever && now_ns() >= deadline_))
                return wait::Woken::Look;
            return wait::Woken::Again;
        }
        [[nodiscard]] int ordinary_ready() const { return ordinary_ready_; }

      private:
        // The caller's deadline, or sooner the next look at the rings (doorbell_relook.hpp).
        int64_t next_look() {
            const int64_t look = now_ns() + std::chrono::nanoseconds(relook_.next()).count();
            return deadline_ == kForever ? look : std::min(deadline_, look);
        }

        MixedPoll& poll_;
        int64_t deadline_;
        const sigset_t* mask_;
        int ordinary_ready_ = 0;
        DoorbellRelook relook_;
        // The last round's sleep had its end cut to look at the rings (whatever ended it):
        // the next round arms at once.
        bool looked_ = false;
    };

    int wait(int64_t deadline, const sigset_t* mask) {
        PollWaiter waiter(*this, deadline, mask);
        if (!wait::block_until_ready(waiter))
            return -1;
        // Ordinary fds the last real ppoll() found ready keep its revents and are counted
        // once; probing them again could find one drained meanwhile by another thread.
        return finish(scan_rings(),
                      waiter.ordinary_ready() > 0 ? Ordinary::Polled : Ordinary::Probe);
    }

    // The largest budget any upgraded fd earned (channel_wait_budget), cut to the
    // caller's timeout.
    wait::WaitPolicy budget_within(int64_t deadline) {
        size_t upgraded = 0;
        for_each_upgraded([&upgraded](Channel&, short) { ++upgraded; });
        wait::WaitPolicy budget = wait::WaitPolicy::none();
        for_each_upgraded([&budget, upgraded](Channel& ch, short) {
            const wait::WaitPolicy b = channel_wait_budget(ch, upgraded == 1);
            if (b.total() > budget.total())
                budget = b;
        });
        if (deadline == kForever)
            return budget;
        return budget.within(std::chrono::nanoseconds(std::max<int64_t>(deadline - now_ns(), 0)));
    }

    // Sets revents of upgraded/forked entries from ring state; returns how many are ready.
    int scan_rings() {
        int ready = 0;
        for (nfds_t i = 0; i < n_; ++i) {
            const Entry& entry = entries_[i];
            if (entry.kind == FdKind::Forked) {
                fds_[i].revents = forked_revents(fds_[i].events);
            } else if (entry.kind == FdKind::Upgraded) {
                fds_[i].revents = channel_revents(*entry.channel, fds_[i].events);
            } else {
                continue;
            }
            if (fds_[i].revents != 0)
                ++ready;
        }
        return ready;
    }

    // Blocks in the real ppoll() (upgraded fds armed by PollWaiter) with upgraded sockets
    // polled for POLLIN only (a doorbell byte or EOF), then disarms and drains them; a
    // socket whose bytes are owed to another thread is left alone (looks_again_soon()).
    // Returns the number of ready ordinary fds, or -1 with errno.
    int block(int64_t deadline, const sigset_t* mask) {
        for (nfds_t i = 0; i < n_; ++i) {
            entries_[i].saved_events = fds_[i].events;
            if (entries_[i].kind == FdKind::Upgraded)
                fds_[i].events = entries_[i].owed_to_others ? 0 : POLLIN;
        }
        timespec ts{};
        const timespec* timeout = nullptr;
        if (deadline != kForever) {
            const int64_t left = std::max<int64_t>(deadline - now_ns(), 0);
            ts = {static_cast<time_t>(left / 1'000'000'000),
                  static_cast<long>(left % 1'000'000'000)};
            timeout = &ts;
        }
        const int rc = real().ppoll(fds_, n_, timeout, mask);
        const int saved_errno = errno;
        int ordinary_ready = 0;
        for (nfds_t i = 0; i < n_; ++i) {
            Entry& entry = entries_[i];
            fds_[i].events = entry.saved_events;
            if (entry.kind == FdKind::Upgraded) {
                channel_disarm(*entry.channel, fds_[i].events, counted_of(entry));
                if (rc > 0 && fds_[i].revents != 0 && !names_its_channel(i)) {
                    ordinary_ready += become_ordinary(i);
                    continue;
                }
                // Owed or not when we began, the byte that woke us may be for a thread
                // counted meanwhile: asked again (with events 0, only a hang-up wakes us).
                if (rc > 0 && fds_[i].revents != 0)
                    (void)channel_drain_for_waiter(*entry.channel, fds_[i].fd, fds_[i].revents,
                                                   counted_of(entry));
                fds_[i].revents = 0;
            } else if (entry.kind != FdKind::Forked && rc > 0 && fds_[i].revents != 0) {
                ++ordinary_ready;
            }
        }
        errno = saved_errno;
        return rc < 0 ? -1 : ordinary_ready;
    }

    // Another thread may close an upgraded fd this call waits on, and its number may name
    // another file by now: drained, that file's bytes would be lost to it.
    bool names_its_channel(nfds_t i) const {
        return fd_lookup(fds_[i].fd).channel == entries_[i].channel.get();
    }

    // The entry's number is polled as an ordinary fd from now on, as libc's poll() goes on
    // with the number (POLLNVAL once closed, else what its new file has); looked at now.
    // 1 if it is ready. It keeps its reference: this call may count as a waiter on the
    // channel (for other entries too, counted_in), which the destructor gives back.
    int become_ordinary(nfds_t i) {
        entries_[i].kind = FdKind::Untracked;
        return probe_now(i);
    }

    // An ordinary entry's revents, looked at now without waiting; 1 if it is ready.
    int probe_now(nfds_t i) {
        pollfd probe{fds_[i].fd, fds_[i].events, 0};
        fds_[i].revents = real().poll(&probe, 1, 0) > 0 ? probe.revents : 0;
        return fds_[i].revents != 0 ? 1 : 0;
    }

    // Whether the ordinary fds' revents come from a real ppoll() that found some ready
    // (Polled), or must be looked at now without waiting (Probe: an upgraded fd was ready
    // first, or the wait ended without an ordinary fd).
    enum class Ordinary { Probe, Polled };

    // Counts the ready entries, each once, and restores the readiness invariant
    // (channel.hpp) for upgraded fds with empty rings.
    int finish(int ring_ready, Ordinary ordinary = Ordinary::Probe) {
        int ordinary_ready = 0;
        for (nfds_t i = 0; i < n_; ++i) {
            const Entry& entry = entries_[i];
            if (entry.kind == FdKind::Upgraded) {
                if ((fds_[i].revents & kPollReadable) == 0 && foreign_waiters_possible())
                    (void)entry.channel->end->arm(transport::Want::Read,  // uncounted: it stays
                                                  wait::kUnnamedWait);
                continue;
            }
            if (entry.kind == FdKind::Forked)
                continue;
            if (ordinary == Ordinary::Polled) {
                ordinary_ready += fds_[i].revents != 0 ? 1 : 0;
                continue;
            }
            ordinary_ready += probe_now(i);
        }
        return ring_ready + ordinary_ready;
    }

    struct Entry {
        FdKind kind = FdKind::Untracked;
        // The entry whose `counted` stands for this call on the channel: its own, or the
        // first one's when the array names the channel more than once (one waiter per
        // channel). An index, not a pointer: Entry stays 24 bytes (kInlineBytes).
        uint32_t counted_in = 0;
        ChannelRef channel;           // Upgraded, and kept once demoted (become_ordinary)
        short saved_events = 0;       // the caller's events while block() asks for others
        CountedWants counted = 0;     // this call counts as a waiter on the channel (arm())
        bool owed_to_others = false;  // block() leaves the socket's bytes to another thread
    };
    static_assert(sizeof(Entry) <= 24);

    CountedWants& counted_of(const Entry& e) { return entries_[e.counted_in].counted; }

    // Whether some entry's wait may miss its doorbell (a wait for room), or leaves its
    // socket unpolled this round: its byte is owed to another thread (end_waiters.hpp).
    // Either way the sleep is cut to the next look at the rings.
    bool looks_again_soon() {
        bool soon = false;
        for_each_upgraded_entry([this, &soon](Entry& e, short) {
            e.owed_to_others = doorbell_owed_to_others(*e.channel, counted_of(e));
            soon = soon || e.owed_to_others || may_miss_doorbell(counted_of(e));
        });
        return soon;
    }

    // The index of the first upgraded entry before `i` on the same channel, or i.
    uint32_t counted_in(const Channel* ch, nfds_t i) {
        for (nfds_t j = 0; j < i; ++j) {
            if (entries_[j].kind == FdKind::Upgraded && entries_[j].channel.get() == ch)
                return entries_[j].counted_in;
        }
        return static_cast<uint32_t>(i);
    }

    template <class Fn>
    void for_each_upgraded_entry(Fn fn) {
        for (nfds_t i = 0; i < n_; ++i) {
            Entry& entry = entries_[i];
            if (entry.kind == FdKind::Upgraded)
                fn(entry, fds_[i].events);
        }
    }
    template <class Fn>
    void for_each_upgraded(Fn fn) {
        for_each_upgraded_entry([&fn](Entry& e, short events) { fn(*e.channel, events); });
    }
    static constexpr size_t kInlineBytes = 512;  // ~20 fds; small on a signal stack too

    pollfd* fds_;
    nfds_t n_;
    alignas(std::max_align_t) std::array<std::byte, kInlineBytes> inline_;
    std::pmr::monotonic_buffer_resource arena_;  // inline_, then the heap
    std::pmr::vector<Entry> entries_;
};

int poll_ns(pollfd* fds, nfds_t n, int64_t timeout_ns, const sigset_t* mask) {
    return within_c_boundary([&] { return MixedPoll(fds, n).run(timeout_ns, mask); });
}

// A wait longer than this is forever (the kernel caps such timeouts the same way).
constexpr int64_t kMaxTimeoutSec = int64_t{1} << 32;

// The timeouts the kernel refuses with EINVAL before it waits: for ppoll() and pselect() a
// negative second or a nanosecond outside 0..999,999,999; for select() a negative second or
// microsecond (it carries whole seconds out of tv_usec).
bool valid_timeout(const timespec* ts) {
    return ts == nullptr || (ts->tv_sec >= 0 && ts->tv_nsec >= 0 && ts->tv_nsec < 1'000'000'000);
}
bool valid_timeout(const timeval* tv) {
    return tv == nullptr || (tv->tv_sec >= 0 && tv->tv_usec >= 0);
}

int einval() {
    errno = EINVAL;
    return -1;
}

int64_t timeout_ns(int64_t sec, int64_t nsec) {
    return sec >= kMaxTimeoutSec ? kForever : sec * 1'000'000'000 + nsec;
}

int64_t timespec_ns(const timespec* ts) {
    return ts == nullptr ? kForever : timeout_ns(ts->tv_sec, ts->tv_nsec);
}

int64_t timeval_ns(const timeval* tv) {
    if (tv == nullptr)
        return kForever;
    const int64_t sec = int64_t{tv->tv_sec} + tv->tv_usec / 1'000'000;
    return timeout_ns(sec, int64_t{tv->tv_usec % 1'000'000} * 1000);
}

// How many bits of each set a select() looks at: `nfds`, also beyond FD_SETSIZE (a program
// may size its own sets larger; glibc's FD_ISSET() would abort there), but no further than
// the kernel reads, which stops at the size of its descriptor table. That size is not
// known here, but it is never below the highest descriptor open now or ever tracked, +1:
// looking for our fds needs no more than the latter; waiting for all of them, the former.
int select_span(int nfds, int highest_fd) {
    if (nfds <= FD_SETSIZE)
        return std::max(nfds, 0);
    return std::min(nfds, std::max(FD_SETSIZE, highest_fd + 1));
}

// Below `limit`. From /proc (the calling thread's view, also when the main thread has
// exited); should that fail (the process at its descriptor limit, no /proc), by asking the
// kernel downward from `limit`, which costs a call per closed number above the highest.
int highest_open_fd(int limit) {
    const int saved = errno;
    int highest = -1;
    const bool walked = walk_open_fds([&](int, const char*, int fd) {
        highest = std::max(highest, fd);
        return false;
    });
    if (!walked || highest < 0) {
        // No descriptor at or above the descriptor limit, beyond the ones ever tracked.
        rlimit fds{};
        const auto cap = ::getrlimit(RLIMIT_NOFILE, &fds) == 0
                             ? std::max<rlim_t>(fds.rlim_cur, fd_highest_tracked() + 1)
                             : static_cast<rlim_t>(limit);
        for (highest = static_cast<int>(std::min<rlim_t>(limit, cap)) - 1;
             highest >= 0 && real().fcntl(highest, F_GETFD) < 0;)
            --highest;
    }
    errno = saved;
    return std::min(highest, limit - 1);
}

// A set's bit for `fd`, word by word as glibc lays the set out (FD_ISSET without its
// FD_SETSIZE check).
constexpr int kSetWordBits = 8 * sizeof(unsigned long);

std::byte* set_word(fd_set* set, int fd) {
    return reinterpret_cast<std::byte*>(set) + (fd / kSetWordBits) * sizeof(unsigned long);
}

bool fd_bit(const fd_set* set, int fd) {
    unsigned long word = 0;
    std::memcpy(&word, set_word(const_cast<fd_set*>(set), fd), sizeof word);
    return ((word >> (fd % kSetWordBits)) & 1) != 0;
}

void clear_fd_bit(fd_set* set, int fd) {
    unsigned long word = 0;
    std::memcpy(&word, set_word(set, fd), sizeof word);
    word &= ~(1UL << (fd % kSetWordBits));
    std::memcpy(set_word(set, fd), &word, sizeof word);
}

short select_events(int fd, const fd_set* rd, const fd_set* wr, const fd_set* ex) {
    short events = 0;
    if (rd && fd_bit(rd, fd))
        events |= POLLIN;
    if (wr && fd_bit(wr, fd))
        events |= POLLOUT;
    if (ex && fd_bit(ex, fd))
        events |= POLLPRI;
    return events;
}

// Asked for exceptions alone (POLLPRI) and hung up or failed without one: select() has
// nothing to report for it, and never will (after a hang-up or an error no urgent data can
// come), so its wait goes on without it, as the kernel's does.
bool exception_never_coming(const pollfd& entry) {
    return entry.fd >= 0 && entry.events == POLLPRI && entry.revents != 0 &&
           (entry.revents & POLLPRI) == 0;
}

// Whether select() reports the entry in one of the sets it was asked in (its events).
bool select_reports(const pollfd& entry) {
    const short re = entry.fd < 0 ? 0 : entry.revents;
    return ((entry.events & POLLIN) && (re & (POLLIN | POLLHUP | POLLERR))) ||
           ((entry.events & POLLOUT) && (re & (POLLOUT | POLLERR))) ||
           ((entry.events & POLLPRI) && (re & POLLPRI));
}

// Counts the fds select() reports, once per set, and clears the rest from the sets. An
// entry left out of the wait (its fd negated) is reported as not ready.
int report_select(const std::pmr::vector<pollfd>& fds, fd_set* rd, fd_set* wr, fd_set* ex) {
    int count = 0;
    for (const pollfd& entry : fds) {
        const int fd = entry.fd < 0 ? ~entry.fd : entry.fd;
        const short re = entry.fd < 0 ? 0 : entry.revents;
        auto report = [&](fd_set* set, bool on) {
            if (set == nullptr || !fd_bit(set, fd))
                return;
            if (on)
                ++count;
            else
                clear_fd_bit(set, fd);
        };
        report(rd, re & (POLLIN | POLLHUP | POLLERR));
        report(wr, re & (POLLOUT | POLLERR));
        report(ex, re & POLLPRI);
    }
    return count;
}

// select()/pselect() on top of poll_ns(): fd_sets in, fd_sets out, counting set bits. The
// pollfd array lives on the stack for up to 64 fds, on the heap beyond; with MixedPoll's
// state (about 20 fds inline) a select() allocates nothing, as in a signal handler, up to
// about 20 fds. poll() reports a hang-up or an error whatever was asked, select() only
// within the sets: a wait that found nothing select() reports goes on, without the fds
// that ended it (exception_never_coming), until the caller's timeout.
int select_fds(int nfds, fd_set* rd, fd_set* wr, fd_set* ex, int64_t timeout_ns,
               const sigset_t* mask) {
    nfds = select_span(nfds, nfds > FD_SETSIZE ? highest_open_fd(nfds) : -1);
    size_t asked = 0;
    for (int fd = 0; fd < nfds; ++fd)
        asked += select_events(fd, rd, wr, ex) != 0 ? 1 : 0;
    alignas(std::max_align_t) std::array<std::byte, 64 * sizeof(pollfd)> inline_fds;
    std::pmr::monotonic_buffer_resource arena(inline_fds.data(), inline_fds.size());
    std::pmr::vector<pollfd> fds(&arena);
    fds.reserve(asked);
    for (int fd = 0; fd < nfds; ++fd)
        if (const short events = select_events(fd, rd, wr, ex); events != 0)
            fds.push_back({fd, events, 0});
    const int64_t deadline = timeout_ns == kForever ? kForever : now_ns() + timeout_ns;
    for (;;) {
        const int64_t left =
            deadline == kForever ? kForever : std::max<int64_t>(deadline - now_ns(), 0);
        if (poll_ns(fds.data(), fds.size(), left, mask) < 0)
            return -1;
        for (const pollfd& entry : fds)
            if (entry.revents & POLLNVAL) {
                errno = EBADF;
                return -1;
            }
        if (left == 0 || std::any_of(fds.begin(), fds.end(), select_reports))
            break;
        bool left_out = false;
        for (pollfd& entry : fds)
            if (exception_never_coming(entry)) {
                entry.fd = ~entry.fd;  // poll() skips negative fds
                left_out = true;
            }
        if (!left_out)
            break;  // the caller's timeout passed
    }
    return report_select(fds, rd, wr, ex);
}

int select_ns(int nfds, fd_set* rd, fd_set* wr, fd_set* ex, int64_t timeout_ns,
              const sigset_t* mask) {
    return within_c_boundary([&] { return select_fds(nfds, rd, wr, ex, timeout_ns, mask); });
}

bool select_has_tracked(int nfds, const fd_set* rd, const fd_set* wr, const fd_set* ex) {
    for (int fd = 0, span = select_span(nfds, fd_highest_tracked()); fd < span; ++fd) {
        if (select_events(fd, rd, wr, ex) == 0)
            continue;
        const FdKind kind = fd_lookup(fd).kind;
        if (kind == FdKind::Upgraded || kind == FdKind::Forked)
            return true;
    }
    return false;
}

}  // namespace
}  // namespace l5pg::shim

using namespace l5pg::shim;

// glibc declares poll()'s array __attr_access((__write_only__)), which is wrong for the
// events the caller filled in; GCC then warns that we read "uninitialised" input.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

extern "C" {

int poll(pollfd* fds, nfds_t n, int timeout_ms) {
    if (!any_tracked(fds, n))
        return real().poll(fds, n, timeout_ms);
    return poll_ns(fds, n, timeout_ms < 0 ? kForever : int64_t{timeout_ms} * 1'000'000, nullptr);
}

int ppoll(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask) {
    if (!any_tracked(fds, n))
        return real().ppoll(fds, n, timeout, mask);
    if (!valid_timeout(timeout))
        return einval();
    return poll_ns(fds, n, timespec_ns(timeout), mask);
}

int __poll_chk(pollfd* fds, nfds_t n, int timeout_ms, size_t fdslen) {
    if (fdslen / sizeof(pollfd) < n)
        __chk_fail();
    return poll(fds, n, timeout_ms);
}

int __ppoll_chk(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask,
                size_t fdslen) {
    if (fdslen / sizeof(pollfd) < n)
        __chk_fail();
    return ppoll(fds, n, timeout, mask);
}

int select(int nfds, fd_set* rd, fd_set* wr, fd_set* ex, timeval* timeout) {
    if (!select_has_tracked(nfds, rd, wr, ex))
        return real().select(nfds, rd, wr, ex, timeout);
    if (!valid_timeout(timeout))
        return einval();
    const int64_t wait_ns = timeval_ns(timeout);
    const int64_t start = now_ns();
    const int rc = select_ns(nfds, rd, wr, ex, wait_ns, nullptr);
    if (timeout != nullptr && wait_ns != kForever) {  // Linux select() reports the time left
        const int64_t left = std::max<int64_t>(wait_ns - (now_ns() - start), 0);
        timeout->tv_sec = left / 1'000'000'000;
        timeout->tv_usec = (left % 1'000'000'000) / 1000;
    }
    return rc;
}

int pselect(int nfds, fd_set* rd, fd_set* wr, fd_set* ex, const timespec* timeout,
            const sigset_t* mask) {
    if (!select_has_tracked(nfds, rd, wr, ex))
        return real().pselect(nfds, rd, wr, ex, timeout, mask);
    if (!valid_timeout(timeout))
        return einval();
    return select_ns(nfds, rd, wr, ex, timespec_ns(timeout), mask);
}

}  // extern "C"
