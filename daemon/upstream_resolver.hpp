// Looking up upstream.host without stopping the worker: libevent's evdns (resolv.conf and
// /etc/hosts, as getaddrinfo reads them, again whenever either changed; not nsswitch.conf),
// one query per name however many sessions wait for it, and the answer kept for
// upstream.dns_max_ttl_ms, as PgBouncer's dns_max_ttl (the record's own TTL is not known
// here). A failed lookup is not kept: the next connection asks again.
#pragma once

#include <event2/dns.h>

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/c_handle.hpp"
#include "daemon/upstream.hpp"

namespace l5pg::daemon {

class UpstreamResolver {
  public:
    using Answer = std::shared_ptr<const UpstreamAddresses>;
    using Done = std::function<void(Answer)>;

    // A session's place in the queue for a lookup; leaving it (destruction, reset()) forgets
    // the callback, so a session may go while its lookup runs on.
    class Waiter {
      public:
        Waiter() = default;
        ~Waiter() { reset(); }
        Waiter(const Waiter&) = delete;
        Waiter& operator=(const Waiter&) = delete;
        void reset() noexcept;
        [[nodiscard]] bool waiting() const noexcept { return resolver_ != nullptr; }

      private:
        friend class UpstreamResolver;
        UpstreamResolver* resolver_ = nullptr;
        uint64_t id_ = 0;
    };

    explicit UpstreamResolver(event_base* base) noexcept;
    ~UpstreamResolver();
    UpstreamResolver(const UpstreamResolver&) = delete;
    UpstreamResolver& operator=(const UpstreamResolver&) = delete;

    // host:port's addresses when known now (a numeric address, or an answer younger than
    // `keep`), else null: then `done` is called from the event loop with the answer, unless
    // `waiter` was reset first.
    [[nodiscard]] Answer lookup(const std::string& host, uint16_t port,
                                std::chrono::milliseconds keep, Waiter& waiter, Done done);
    // Asks for host:port's addresses, unless an answer younger than `keep` is known or a
    // query is on its way (nobody waits for it: its answer is kept, and on_moved() learns
    // whether the name moved).
    void refresh(const std::string& host, uint16_t port, std::chrono::milliseconds keep);
    // Forgets the answers kept, and reads /etc/resolv.conf and /etc/hosts again for the next
    // query (evdns reads them once; l5pgd's reload is the moment to read them again).
    void reread_configuration() noexcept;
    // Forgets the answer kept for `name` (name_of()): the next lookup asks DNS again.
    void forget(const std::string& name) noexcept { cache_.erase(name); }
    // Between two passes of the event loop: frees the resolver a reload replaced. evdns
    // finishes a cancelled query in a deferred callback, run before the pass ends.
    void free_retired() noexcept { retired_.clear(); }
    // Before the worker's loop stops: cancels the queries still pending. Their callbacks
    // run (and evdns frees them) in the next pass of the loop, which the caller runs.
    void cancel_pending() noexcept;
    // Called (from the event loop) when a name's answer has other addresses than its previous
    // one (a failover by DNS, or an address back): the name (host:port), the addresses gone
    // (perhaps none) and those it has now, as UpstreamAddress::bytes().
    using Moved = std::function<void(const std::string& name, const std::vector<std::string>& gone,
                                     const std::vector<std::string>& now)>;
    void on_moved(Moved moved) { moved_ = std::move(moved); }
    // The name on_moved() reports for host:port.
    [[nodiscard]] static std::string name_of(const std::string& host, uint16_t port) {
        return host + ':' + std::to_string(port);
    }

  private:
    using clock = std::chrono::steady_clock;
    struct Cached {
        Answer answer;
        clock::time_point until;
    };
    struct Pending;  // one evdns query and who waits for it
    static void answered_cb(int result, evutil_addrinfo* found, void* arg);
    void answered(Pending& pending, int result, evutil_addrinfo* found);
    [[nodiscard]] Answer ask_dns(const std::string& key, const std::string& host,
                                 const std::string& service, std::chrono::milliseconds keep);
    [[nodiscard]] evdns_base* dns();
    struct FileStamp {
        dev_t device = 0;
        ino_t inode = 0;
        off_t size = 0;
        time_t mtime = 0;
        long mtime_ns = 0;
        time_t ctime = 0;  // also changes when a copy puts the old mtime back (cp -p)
        long ctime_ns = 0;
        bool operator==(const FileStamp&) const = default;
    };
    using FileStamps = std::array<FileStamp, 2>;  // /etc/resolv.conf, /etc/hosts
    [[nodiscard]] static FileStamps stamps_now() noexcept;
    void forget_expired(clock::time_point now);

    event_base* const base_;
    // Frees a base no query uses any more (evdns_base_free's fail_requests would only
    // schedule callbacks for a loop pass that may never come).
    static void free_dns(evdns_base* dns) noexcept;
    CHandle<evdns_base, free_dns> dns_;                   // created for the first name
    std::vector<CHandle<evdns_base, free_dns>> retired_;  // see free_retired()
    std::map<std::string, Cached> cache_;
    // Each name's last addresses found (their bytes, sorted): kept beyond the cached answer.
    std::map<std::string, std::vector<std::string>> last_found_;
    Moved moved_;
    void compare_with_last(const std::string& key, const UpstreamAddresses& found);
    std::map<std::string, std::unique_ptr<Pending>> pending_;
    struct Waiting {
        Waiter* waiter;
        Done done;
    };
    std::map<uint64_t, Waiting> waiting_;  // by Waiter::id_
    uint64_t next_waiter_ = 1;
    bool closing_ = false;      // cancel_pending() ran: answers are of no use
    bool stale_ = false;        // dns_ read an older resolv.conf: replaced once nothing is pending
    FileStamps read_stamps_{};  // the files as dns_ read them
};

}  // namespace l5pg::daemon
