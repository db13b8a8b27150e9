// A quantity shared by the workers and bounded by a setting that reloads may change: places
// for sessions (session_cap.hpp), bytes of RDMA memory. A share is taken whole or not at all
// and given back when its holder ends. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>

namespace l5pg::daemon {

class Capacity {
  public:
    Capacity() = default;
    Capacity(const Capacity&) = delete;
    Capacity& operator=(const Capacity&) = delete;

    class Share {
      public:
        Share() = default;
        Share(Share&& other) noexcept
            : owner_(std::exchange(other.owner_, nullptr)), amount_(other.amount_) {}
        Share& operator=(Share&& other) noexcept {
            if (this != &other) {
                release();
                owner_ = std::exchange(other.owner_, nullptr);
                amount_ = other.amount_;
            }
            return *this;
        }
        ~Share() { release(); }
        void release() noexcept {
            if (owner_ != nullptr)
                std::exchange(owner_, nullptr)
                    ->taken_.fetch_sub(amount_, std::memory_order_relaxed);
        }
        [[nodiscard]] bool held() const noexcept { return owner_ != nullptr; }
        // This held share as `amount` instead, if the total stays within `max` (a smaller
        // share always does): in one step, so that no one takes what it gives up meanwhile.
        // False, the share unchanged, otherwise.
        [[nodiscard]] bool resize(uint64_t amount, uint64_t max) noexcept {
            if (owner_ == nullptr)
                return false;
            std::atomic<uint64_t>& taken = owner_->taken_;
            uint64_t now = taken.load(std::memory_order_relaxed);
            for (;;) {
                if (amount > amount_) {
                    const uint64_t more = amount - amount_;
                    if (more > max || now > max - more)
                        return false;
                }
                if (taken.compare_exchange_weak(now, now - amount_ + amount,
                                                std::memory_order_relaxed)) {
                    amount_ = amount;
                    return true;
                }
            }
        }

      private:
        friend class Capacity;
        Share(Capacity* owner, uint64_t amount) noexcept : owner_(owner), amount_(amount) {}
        Capacity* owner_ = nullptr;
        uint64_t amount_ = 0;
    };

    // `amount` if taken + amount stays within `max` (read per call: reloads change it), else
    // an empty share.
    [[nodiscard]] Share try_take(uint64_t amount, uint64_t max) noexcept {
        uint64_t taken = taken_.load(std::memory_order_relaxed);
        while (amount <= max && taken <= max - amount)
            if (taken_.compare_exchange_weak(taken, taken + amount, std::memory_order_relaxed))
                return Share(this, amount);
        return Share();
    }

    [[nodiscard]] uint64_t taken() const noexcept { return taken_.load(std::memory_order_relaxed); }

  private:
    std::atomic<uint64_t> taken_{0};
};

}  // namespace l5pg::daemon
