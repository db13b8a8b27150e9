// The shared-memory segments attached to live sessions, keyed by their memfd's inode
// (st_dev, st_ino). A client could pass the same memfd in two upgrades; both sessions would
// then use the same rings and overwrite each other, so the second attach is declined.
// Thread-safe: one per l5pgd, shared by the workers.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

namespace l5pg::daemon {

class SegmentRegistry {
  public:
    SegmentRegistry() = default;
    SegmentRegistry(const SegmentRegistry&) = delete;
    SegmentRegistry& operator=(const SegmentRegistry&) = delete;

    using Key = std::pair<dev_t, ino_t>;

    // A session's entry; removed when released or destroyed (the session drops it when it
    // unmaps the segment).
    class Claim {
      public:
        Claim() = default;
        Claim(Claim&& other) noexcept;
        Claim& operator=(Claim&& other) noexcept;
        ~Claim() { release(); }
        void release() noexcept;

      private:
        friend class SegmentRegistry;
        Claim(SegmentRegistry* owner, Key key) : owner_(owner), key_(key) {}
        SegmentRegistry* owner_ = nullptr;
        Key key_{};
    };

    struct Refusal {
        uint64_t holder = 0;    // the session that has this segment; 0 when `fd` is not a memfd
        const char* call = "";  // or fstat failed: the call, and its errno
        int err = 0;
    };

    // Registers the memfd `fd` for session `session_id`, or says why not.
    [[nodiscard]] std::optional<Claim> claim(int fd, uint64_t session_id, Refusal& refusal);

    [[nodiscard]] size_t size() const;

  private:
    void remove(const Key& key) noexcept;

    mutable std::mutex mutex_;
    std::map<Key, uint64_t> attached_;  // guarded by mutex_: inode -> session id
};

}  // namespace l5pg::daemon
