#include "daemon/metrics_server.hpp"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <vector>

#include "daemon/log_limiter.hpp"
#include "daemon/thread_name.hpp"

namespace l5pg::daemon {

namespace {

// What one scrape may cost l5pgd, whatever the client sends: a request line and headers
// of at most kMaxHeadersBytes, no body (GET and HEAD have none; a body is refused with 413
// before it is read), kTimeoutSeconds without progress, kMaxLifetime in all, and
// kMaxConnections at a time. A new connection beyond them closes the oldest (a scrape takes
// milliseconds: what has been open longest is a client that holds it, a byte every few
// seconds or a request at a time, and would keep scrapes out); only past twice as many, with
// closed ones not yet freed, do new ones wait in the kernel's listen queue.
constexpr ev_ssize_t kMaxHeadersBytes = 8 * 1024;
constexpr ev_ssize_t kMaxBodyBytes = 0;
constexpr int kTimeoutSeconds = 10;
constexpr auto kMaxLifetime = std::chrono::seconds(60);
constexpr size_t kMaxConnections = 16;
// Every method evhttp parses: those other than GET and HEAD reach on_request and get
// 405 with an Allow header (evhttp itself would answer 501 to a method not listed here).
constexpr ev_uint16_t kParsedMethods = EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                       EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
                                       EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH;
constexpr timeval kSweepInterval{0, 100 * 1000};
constexpr const char* kPlainText = "text/plain; charset=utf-8";

// Must run before the first event_base is created so bases get locks and a notify pipe,
// which is what makes event_active() from the destructor's thread safe.
void enable_libevent_threads() {
    static std::once_flag once;
    std::call_once(once, [] {
        if (evthread_use_pthreads() != 0) {
            throw std::runtime_error("cannot enable libevent thread support");
        }
    });
}

std::string endpoint(const std::string& host, uint16_t port) {
    const bool v6 = host.find(':') != std::string::npos;
    return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

uint16_t bound_port(evutil_socket_t fd) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        return 0;
    }
    if (addr.ss_family == AF_INET6) {
        return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
    }
    return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
}

void reply_text(evhttp_request* req, int code, const char* reason, const std::string& body,
                const char* content_type) {
    evkeyvalq* headers = evhttp_request_get_output_headers(req);
    evhttp_add_header(headers, "Content-Type", content_type);
    // One request per connection: nothing pipelined behind it is read, and no connection
    // lives into the lifetime cut (Prometheus then opens a connection per scrape).
    evhttp_add_header(headers, "Connection", "close");
    // libevent 2.1 writes a HEAD reply's body too: only its length goes out.
    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
        evhttp_add_header(headers, "Content-Length", std::to_string(body.size()).c_str());
        evhttp_send_reply(req, code, reason, nullptr);
        return;
    }
    evbuffer* buf = evbuffer_new();
    if (buf == nullptr) {
        evhttp_send_error(req, HTTP_INTERNAL, nullptr);
        return;
    }
    evbuffer_add(buf, body.data(), body.size());
    evhttp_send_reply(req, code, reason, buf);
    evbuffer_free(buf);
}

}  // namespace

struct MetricsServer::Impl {
    const Metrics& metrics;
    const Health& health;
    event_base* base = nullptr;
    evhttp* http = nullptr;
    event* stop = nullptr;
    event* sweep = nullptr;
    evconnlistener* listener = nullptr;  // evhttp's; disabled at kMaxConnections
    // One reference each (bufferevent_incref) on the connections' bufferevents, so that
    // on_sweep() can tell a closed one from a live one; oldest first.
    struct Connection {
        bufferevent* bev;
        std::chrono::steady_clock::time_point accepted;
        bool closing = false;  // shut down by us: evhttp frees it
    };
    std::vector<Connection> connections;
    uint16_t port = 0;
    std::thread thread;

    Impl(const Metrics& m, const Health& h) : metrics(m), health(h) {}

    ~Impl() {
        if (thread.joinable()) {
            event_active(stop, 0, 0);  // wakes the loop; on_stop breaks it from inside
            thread.join();
        }
        if (http != nullptr) {
            std::lock_guard lock(by_http_mutex());
            by_http().erase(http);
        }
        if (http != nullptr) {
            evhttp_free(http);
        }
        for (const Connection& c : connections)
            bufferevent_decref(c.bev);
        if (sweep != nullptr) {
            event_free(sweep);
        }
        if (stop != nullptr) {
            event_free(stop);
        }
        if (base != nullptr) {
            event_base_free(base);
        }
    }

    // A user event rather than a bare event_base_loopbreak(): an activation made before
    // the loop starts stays queued, whereas a loopbreak flag would be reset by the loop.
    static void on_stop(evutil_socket_t, short, void* arg) {
        event_base_loopbreak(static_cast<Impl*>(arg)->base);
    }

    // libevent 2.1's evhttp has no connection cap (evhttp_set_max_connections came in
    // 2.2), but it lets us make each connection's bufferevent: count them here, close the
    // oldest beyond kMaxConnections, and stop accepting at twice as many.
    static bufferevent* on_new_connection(event_base* base, void* arg) {
        auto* self = static_cast<Impl*>(arg);
        bufferevent* bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
        if (bev == nullptr)
            return nullptr;  // evhttp tries to make its own, and fails the same way
        // evhttp keeps the socket reading while it writes a reply, and parses nothing
        // meanwhile: without a high-water mark a client that sends and never reads grows
        // the input buffer by gigabytes. Beyond the largest request, reading stops.
        bufferevent_setwatermark(bev, EV_READ, 0, 2 * kMaxHeadersBytes);
        self->forget_closed();
        auto live =
            static_cast<size_t>(std::count_if(self->connections.begin(), self->connections.end(),
                                              [](const Connection& c) { return !c.closing; }));
        for (Connection& c : self->connections) {  // oldest first
            if (live < kMaxConnections)
                break;
            if (!c.closing) {
                close_connection(c);
                --live;
            }
        }
        bufferevent_incref(bev);
        self->connections.push_back({bev, std::chrono::steady_clock::now()});
        if (self->connections.size() >= 2 * kMaxConnections && self->listener != nullptr)
            evconnlistener_disable(self->listener);
        if (!evtimer_pending(self->sweep, nullptr))
            evtimer_add(self->sweep, &kSweepInterval);
        return bev;
    }

    // Shut its socket down: evhttp sees the connection end and frees it as any other.
    static void close_connection(Connection& c) {
        if (c.closing)
            return;
        c.closing = true;
        if (const evutil_socket_t fd = bufferevent_getfd(c.bev); fd >= 0)
            ::shutdown(fd, SHUT_RDWR);
    }

    // evhttp frees a connection's bufferevent when it closes, and bufferevent_free() clears
    // its callbacks (a live evhttp connection always has its error callback set); our
    // reference keeps the object readable until we drop it here.
    void forget_closed() {
        std::erase_if(connections, [](const Connection& c) {
            bufferevent_event_cb event_cb = nullptr;
            bufferevent_getcb(c.bev, nullptr, nullptr, &event_cb, nullptr);
            if (event_cb != nullptr)
                return false;
            bufferevent_decref(c.bev);
            return true;
        });
    }

    static void on_sweep(evutil_socket_t, short, void* arg) {
        auto* self = static_cast<Impl*>(arg);
        self->forget_closed();
        const auto now = std::chrono::steady_clock::now();
        for (Connection& c : self->connections)
            if (now - c.accepted >= kMaxLifetime)
                close_connection(c);
        if (self->connections.size() < 2 * kMaxConnections && self->listener != nullptr)
            evconnlistener_enable(self->listener);  // also after an accept() error
        if (!self->connections.empty())
            evtimer_add(self->sweep, &kSweepInterval);
    }

    // The listener's callback argument is evhttp's, so its error callback finds us here.
    static std::map<evhttp*, Impl*>& by_http() {
        static std::map<evhttp*, Impl*> map;
        return map;
    }
    static std::mutex& by_http_mutex() {
        static std::mutex mutex;
        return mutex;
    }

    // Out of descriptors, accept() fails at once for as long as a connection waits, and
    // libevent would retry (and log) on every loop turn: stop listening until the next
    // sweep instead.
    static void on_accept_error(evconnlistener* listener, void* http) {
        const int err = EVUTIL_SOCKET_ERROR();
        evconnlistener_disable(listener);
        Impl* self = nullptr;
        {
            std::lock_guard lock(by_http_mutex());
            const auto it = by_http().find(static_cast<evhttp*>(http));
            self = it != by_http().end() ? it->second : nullptr;
        }
        static LogLimiter log;
        log.log(spdlog::level::warn, "metrics: accept() failed: {}; retrying every {} ms",
                std::strerror(err), kSweepInterval.tv_usec / 1000);
        if (self != nullptr)
            evtimer_add(self->sweep, &kSweepInterval);  // on_sweep() listens again
    }

    static void on_request(evhttp_request* req, void* arg) {
        const auto* self = static_cast<Impl*>(arg);
        const char* path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
        const std::string_view route = path != nullptr ? path : "";
        if (route != "/metrics" && route != "/healthz" && route != "/readyz") {
            reply_text(req, HTTP_NOTFOUND, "Not Found",
                       "not found; try /metrics, /healthz or /readyz\n", kPlainText);
            return;
        }
        const auto cmd = evhttp_request_get_command(req);
        if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
            evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
            reply_text(req, HTTP_BADMETHOD, "Method Not Allowed", "use GET\n", kPlainText);
            return;
        }
        try {
            if (route == "/metrics") {
                reply_text(req, HTTP_OK, "OK", self->metrics.render(),
                           "text/plain; version=0.0.4; charset=utf-8");
                return;
            }
            const auto now = Health::clock::now();
            const Health::Verdict verdict =
                route == "/healthz" ? self->health.liveness(now) : self->health.readiness(now);
            reply_text(req, verdict.ok ? HTTP_OK : HTTP_SERVUNAVAIL,
                       verdict.ok ? "OK" : "Service Unavailable", verdict.text + "\n", kPlainText);
        } catch (const std::exception&) {
            evhttp_send_error(req, HTTP_INTERNAL, nullptr);
        }
    }

    void start(const std::string& host, uint16_t requested) {
        enable_libevent_threads();
        base = event_base_new();
        http = base != nullptr ? evhttp_new(base) : nullptr;
        stop = base != nullptr ? event_new(base, -1, 0, &Impl::on_stop, this) : nullptr;
        sweep = base != nullptr ? evtimer_new(base, &Impl::on_sweep, this) : nullptr;
        if (http == nullptr || stop == nullptr || sweep == nullptr) {
            throw std::runtime_error("cannot set up the metrics HTTP server");
        }
        evhttp_set_allowed_methods(http, kParsedMethods);
        evhttp_set_max_headers_size(http, kMaxHeadersBytes);
        evhttp_set_max_body_size(http, kMaxBodyBytes);
        evhttp_set_timeout(http, kTimeoutSeconds);
        evhttp_set_bevcb(http, &Impl::on_new_connection, this);
        evhttp_set_gencb(http, &Impl::on_request, this);
        errno = 0;
        evhttp_bound_socket* handle = evhttp_bind_socket_with_handle(http, host.c_str(), requested);
        if (handle == nullptr) {
            // libevent preserves the bind()/listen() errno; 0 means name resolution failed.
            const int err = errno;
            throw std::runtime_error("cannot listen for metrics on " + endpoint(host, requested) +
                                     ": " +
                                     (err != 0 ? std::strerror(err) : "cannot resolve address"));
        }
        port = bound_port(evhttp_bound_socket_get_fd(handle));
        listener = evhttp_bound_socket_get_listener(handle);
        {
            std::lock_guard lock(by_http_mutex());
            by_http()[http] = this;
        }
        evconnlistener_set_error_cb(listener, &Impl::on_accept_error);
        thread = std::thread([this] {
            name_this_thread("l5pgd-metrics");
            event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY);
        });
    }
};

MetricsServer::MetricsServer(const std::string& host, uint16_t port, const Metrics& metrics,
                             const Health& health)
    : impl_(std::make_unique<Impl>(metrics, health)) {
    impl_->start(host, port);
}

MetricsServer::~MetricsServer() = default;

uint16_t MetricsServer::port() const noexcept {
    return impl_->port;
}

}  // namespace l5pg::daemon
