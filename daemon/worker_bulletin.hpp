// Notes one worker thread posts for all of them, each worker reading those after the last it
// read, in its own loop once woken (WorkerWakers): RoomRequests' asks, upstream.host's lost
// addresses (AdmissionState). The last kKept notes are kept; a worker further behind misses
// the older ones.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>

#include "daemon/worker_wakers.hpp"

namespace l5pg::daemon {

template <class Note>
class WorkerBulletin {
  public:
    explicit WorkerBulletin(const WorkerWakers& wakers) : wakers_(wakers) {}

    // From any worker thread; wakes them all.
    void post(Note note) {
        {
            const std::lock_guard lock(mutex_);
            const uint64_t number = last_.load(std::memory_order_relaxed) + 1;
            notes_.emplace_back(number, std::move(note));
            if (notes_.size() > kKept)
                notes_.pop_front();
            last_.store(number, std::memory_order_release);
        }
        wakers_.wake_all();
    }

    // `visit(Note&)` for each note after `seen` (a worker's own count, moved past them), under
    // the lock: one worker at a time, so a visit may mark a note for the others; keep it quick.
    template <class Visit>
    void read_since(uint64_t& seen, Visit&& visit) {
        if (last_.load(std::memory_order_acquire) == seen)
            return;  // every wake reads: no lock while nothing was posted
        const std::lock_guard lock(mutex_);
        for (auto& [number, note] : notes_)
            if (number > seen)
                visit(note);
        seen = last_.load(std::memory_order_relaxed);
    }

  private:
    static constexpr size_t kKept = 64;

    const WorkerWakers& wakers_;
    std::mutex mutex_;
    std::atomic<uint64_t> last_{0};  // the last note's number; written under the mutex
    std::deque<std::pair<uint64_t, Note>> notes_;  // guarded by the mutex
};

}  // namespace l5pg::daemon
