#include "daemon/upstream_resolver.hpp"

#include <event2/util.h>
#include <netdb.h>
#include <sys/stat.h>

#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace l5pg::daemon {

namespace {

// getaddrinfo()'s words (glibc's, as libpq shows them) for evdns's failure codes.
std::string lookup_failure_text(int evutil_error) {
    static constexpr std::pair<int, int> kCodes[] = {
        {EVUTIL_EAI_NONAME, EAI_NONAME},         {EVUTIL_EAI_AGAIN, EAI_AGAIN},
        {EVUTIL_EAI_NODATA, EAI_NODATA},         {EVUTIL_EAI_MEMORY, EAI_MEMORY},
        {EVUTIL_EAI_SERVICE, EAI_SERVICE},       {EVUTIL_EAI_FAMILY, EAI_FAMILY},
        {EVUTIL_EAI_SOCKTYPE, EAI_SOCKTYPE},     {EVUTIL_EAI_BADFLAGS, EAI_BADFLAGS},
        {EVUTIL_EAI_ADDRFAMILY, EAI_ADDRFAMILY},
    };
    // evdns reports every failure but NXDOMAIN so (libevent 2.1): timeouts, SERVFAIL, and
    // a name without an A or AAAA record.
    if (evutil_error == EVUTIL_EAI_FAIL)
        return "no address from the DNS servers (no answer, a server failure, or no A or AAAA "
               "record)";
    for (const auto& [evutil_code, glibc_code] : kCodes)
        if (evutil_code == evutil_error)
            return ::gai_strerror(glibc_code);
    return evutil_gai_strerror(evutil_error);
}

}  // namespace

struct UpstreamResolver::Pending {
    UpstreamResolver* resolver;
    std::string key;
    std::chrono::milliseconds keep;
    std::vector<uint64_t> waiters;               // Waiter ids, some perhaps gone
    evdns_getaddrinfo_request* query = nullptr;  // until its callback ran
};

void UpstreamResolver::Waiter::reset() noexcept {
    if (resolver_ != nullptr)
        resolver_->waiting_.erase(id_);
    resolver_ = nullptr;
}

UpstreamResolver::UpstreamResolver(event_base* base) noexcept : base_(base) {}

UpstreamResolver::~UpstreamResolver() = default;

void UpstreamResolver::free_dns(evdns_base* dns) noexcept {
    evdns_base_free(dns, /*fail_requests=*/0);
}

void UpstreamResolver::cancel_pending() noexcept {
    closing_ = true;
    for (auto& [key, pending] : pending_)
        if (pending->query != nullptr)
            evdns_getaddrinfo_cancel(std::exchange(pending->query, nullptr));
}

UpstreamResolver::Answer UpstreamResolver::lookup(const std::string& host, uint16_t port,
                                                  std::chrono::milliseconds keep, Waiter& waiter,
                                                  Done done) {
    waiter.reset();
    const std::string service = std::to_string(port);
    if (auto numeric = numeric_upstream(host, service))
        return std::make_shared<const UpstreamAddresses>(std::move(*numeric));
    const auto now = clock::now();
    forget_expired(now);
    const std::string key = name_of(host, port);
    if (const auto it = cache_.find(key); it != cache_.end())
        return it->second.answer;
    auto pending = pending_.find(key);
    if (pending == pending_.end()) {
        if (Answer now_known = ask_dns(key, host, service, keep))
            return now_known;
        pending = pending_.find(key);
    }
    waiter.resolver_ = this;
    waiter.id_ = next_waiter_++;
    waiting_.emplace(waiter.id_, Waiting{&waiter, std::move(done)});
    pending->second->waiters.push_back(waiter.id_);
    return nullptr;
}

// A lookup whose waiter leaves at once: the query, if one was needed, runs on.
void UpstreamResolver::refresh(const std::string& host, uint16_t port,
                               std::chrono::milliseconds keep) {
    Waiter nobody;
    (void)lookup(host, port, keep, nobody, [](const Answer&) {});
}

// Starts the query for `key`, or returns its answer when evdns knew it at once (/etc/hosts,
// or a failure).
UpstreamResolver::Answer UpstreamResolver::ask_dns(const std::string& key, const std::string& host,
                                                   const std::string& service,
                                                   std::chrono::milliseconds keep) {
    evdns_base* dns_base = dns();
    if (dns_base == nullptr)
        return std::make_shared<const UpstreamAddresses>(
            UpstreamAddresses{{}, "could not start the DNS resolver (/etc/resolv.conf)"});
    auto& pending = pending_[key];
    pending = std::make_unique<Pending>(Pending{this, key, keep, {}});
    evutil_addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    hints.ai_flags = EVUTIL_AI_NUMERICSERV;
    // Answered at once (the callback ran, pending_ no longer holds the key), or later.
    Pending* asked = pending.get();
    evdns_getaddrinfo_request* query =
        evdns_getaddrinfo(dns_base, host.c_str(), service.c_str(), &hints, answered_cb, asked);
    if (pending_.count(key) != 0) {
        asked->query = query;
        return nullptr;
    }
    const auto it = cache_.find(key);
    return it != cache_.end() ? it->second.answer : nullptr;
}

void UpstreamResolver::reread_configuration() noexcept {
    cache_.clear();
    stale_ = dns_ != nullptr;
}

// What a file looked like when evdns read it: glibc reads /etc/hosts at every lookup and
// resolv.conf again once it changed; evdns reads both once, so a lookup that goes to DNS
// looks whether either changed since (a DHCP or VPN client rewrote them).
UpstreamResolver::FileStamps UpstreamResolver::stamps_now() noexcept {
    FileStamps stamps{};
    const char* const paths[] = {"/etc/resolv.conf", "/etc/hosts"};
    for (size_t i = 0; i < stamps.size(); ++i) {
        struct stat st {};
        if (::stat(paths[i], &st) == 0)
            stamps[i] = {st.st_dev,         st.st_ino,          st.st_size,
                         st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_ctim.tv_sec,
                         st.st_ctim.tv_nsec};
    }
    return stamps;
}

evdns_base* UpstreamResolver::dns() {
    if (dns_ && !stale_ && stamps_now() != read_stamps_)
        stale_ = true;
    if (stale_ && pending_.empty()) {
        // Not freed in this pass of the loop: a query cancelled for being late (A answered,
        // AAAA not) still has a deferred callback into it.
        retired_.push_back(std::move(dns_));
        stale_ = false;
    }
    if (!dns_) {
        // evdns's defaults stay, 0x20 case randomisation included: its queries leave from
        // one UDP port per server, so the query id and the name's case are what an
        // off-path forger has to guess.
        read_stamps_ = stamps_now();
        dns_.reset(evdns_base_new(base_, EVDNS_BASE_INITIALIZE_NAMESERVERS));
    }
    return dns_.get();
}

void UpstreamResolver::answered_cb(int result, evutil_addrinfo* found, void* arg) {
    auto& pending = *static_cast<Pending*>(arg);
    pending.resolver->answered(pending, result, found);
}

void UpstreamResolver::answered(Pending& pending, int result, evutil_addrinfo* found) {
    std::unique_ptr<addrinfo, decltype(&evutil_freeaddrinfo)> guard(found, &evutil_freeaddrinfo);
    pending.query = nullptr;  // evdns frees it after this call
    if (closing_)
        return;
    UpstreamAddresses addresses;
    if (result == 0)
        addresses = tcp_addresses_of(found);
    else
        addresses.lookup_failure = lookup_failure_text(result);
    compare_with_last(pending.key, addresses);
    auto answer = std::make_shared<const UpstreamAddresses>(std::move(addresses));
    // A failure is handed to those waiting now only; the next connection asks again.
    const auto keep = answer->list.empty() ? std::chrono::milliseconds(0) : pending.keep;
    cache_[pending.key] = Cached{answer, clock::now() + keep};
    const auto owned = pending_.extract(pending.key);  // `pending` lives until we return
    for (const uint64_t id : pending.waiters) {
        const auto it = waiting_.find(id);
        if (it == waiting_.end())
            continue;  // its session went meanwhile
        Done done = std::move(it->second.done);
        it->second.waiter->resolver_ = nullptr;
        waiting_.erase(it);
        done(answer);
    }
}

// A failed lookup says nothing about where the server went; a set in another order (round
// robin) is the same set, and one with more addresses loses none.
void UpstreamResolver::compare_with_last(const std::string& key, const UpstreamAddresses& found) {
    if (found.list.empty())
        return;
    std::vector<std::string> now;
    for (const UpstreamAddress& address : found.list)
        now.push_back(address.bytes());
    std::sort(now.begin(), now.end());
    auto [it, first] = last_found_.try_emplace(key, now);
    if (first)
        return;
    if (it->second == now)
        return;
    std::vector<std::string> gone;
    std::set_difference(it->second.begin(), it->second.end(), now.begin(), now.end(),
                        std::back_inserter(gone));
    it->second = now;
    if (moved_)
        moved_(key, gone, now);
}

void UpstreamResolver::forget_expired(clock::time_point now) {
    std::erase_if(cache_, [now](const auto& entry) { return entry.second.until <= now; });
}

}  // namespace l5pg::daemon
