#include "daemon/metrics_server.hpp"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/thread.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace l5pg::daemon {

namespace {

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
    event_base* base = nullptr;
    evhttp* http = nullptr;
    event* stop = nullptr;
    uint16_t port = 0;
    std::thread thread;

    explicit Impl(const Metrics& m) : metrics(m) {}

    ~Impl() {
        if (thread.joinable()) {
            event_active(stop, 0, 0);  // wakes the loop; on_stop breaks it from inside
            thread.join();
        }
        if (http != nullptr) {
            evhttp_free(http);
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

    static void on_request(evhttp_request* req, void* arg) {
        const auto* self = static_cast<Impl*>(arg);
        const char* path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
        if (path == nullptr || std::strcmp(path, "/metrics") != 0) {
            reply_text(req, HTTP_NOTFOUND, "Not Found", "not found; try /metrics\n",
                       "text/plain; charset=utf-8");
            return;
        }
        const auto cmd = evhttp_request_get_command(req);
        if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
            reply_text(req, HTTP_BADMETHOD, "Method Not Allowed", "use GET\n",
                       "text/plain; charset=utf-8");
            return;
        }
        try {
            reply_text(req, HTTP_OK, "OK", self->metrics.render(),
                       "text/plain; version=0.0.4; charset=utf-8");
        } catch (const std::exception&) {
            evhttp_send_error(req, HTTP_INTERNAL, nullptr);
        }
    }

    void start(const std::string& host, uint16_t requested) {
        enable_libevent_threads();
        base = event_base_new();
        http = base != nullptr ? evhttp_new(base) : nullptr;
        stop = base != nullptr ? event_new(base, -1, 0, &Impl::on_stop, this) : nullptr;
        if (http == nullptr || stop == nullptr) {
            throw std::runtime_error("cannot set up the metrics HTTP server");
        }
        evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                             EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE);
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
        thread = std::thread([this] { event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY); });
    }
};

MetricsServer::MetricsServer(const std::string& host, uint16_t port, const Metrics& metrics)
    : impl_(std::make_unique<Impl>(metrics)) {
    impl_->start(host, port);
}

MetricsServer::~MetricsServer() = default;

uint16_t MetricsServer::port() const noexcept {
    return impl_->port;
}

}  // namespace l5pg::daemon
