#include "transport/rdma/verbs/ibverbs.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace l5pg::rdma::verbs {
namespace {

// Every function the table holds is exported at this version by rdma-core since v13;
// the IBVERBS_1.0 versions beside them are the pre-2006 ABI. dlvsym picks exactly the
// version a link against libibverbs.so would have bound.
constexpr const char* kSymbolVersion = "IBVERBS_1.1";

struct Loaded {
    IbvApi api;
    std::string error;  // empty: api is complete
};

std::atomic<bool> g_loaded{false};

template <typename Fn>
[[nodiscard]] bool resolve(void* handle, const char* name, Fn& out, std::string& error) {
    void* sym = ::dlvsym(handle, name, kSymbolVersion);
    if (sym == nullptr) {
        const char* why = ::dlerror();
        error = std::string(kLibibverbsName) + " lacks " + name + "@" + kSymbolVersion +
                (why != nullptr ? std::string(" (") + why + ")" : std::string());
        return false;
    }
    out = reinterpret_cast<Fn>(sym);
    return true;
}

Loaded load() {
    Loaded result;
    // RTLD_LOCAL: the application's own symbol lookups never see libibverbs.
    void* handle = ::dlopen(kLibibverbsName, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        const char* why = ::dlerror();
        result.error = std::string(kLibibverbsName) + " not found: install rdma-core's libibverbs1";
        if (why != nullptr)
            result.error += std::string(" (") + why + ")";
        return result;
    }
    IbvApi& a = result.api;
    std::string& e = result.error;
    const bool ok = resolve(handle, "ibv_get_device_list", a.get_device_list, e) &&
                    resolve(handle, "ibv_free_device_list", a.free_device_list, e) &&
                    resolve(handle, "ibv_get_device_name", a.get_device_name, e) &&
                    resolve(handle, "ibv_open_device", a.open_device, e) &&
                    resolve(handle, "ibv_close_device", a.close_device, e) &&
                    resolve(handle, "ibv_query_device", a.query_device, e) &&
                    resolve(handle, "ibv_query_port", a.query_port_compat, e) &&
                    resolve(handle, "ibv_query_gid", a.query_gid, e) &&
                    resolve(handle, "ibv_alloc_pd", a.alloc_pd, e) &&
                    resolve(handle, "ibv_dealloc_pd", a.dealloc_pd, e) &&
                    resolve(handle, "ibv_reg_mr", a.reg_mr_symbol, e) &&
                    resolve(handle, "ibv_dereg_mr", a.dereg_mr, e) &&
                    resolve(handle, "ibv_create_cq", a.create_cq, e) &&
                    resolve(handle, "ibv_destroy_cq", a.destroy_cq, e) &&
                    resolve(handle, "ibv_create_qp", a.create_qp, e) &&
                    resolve(handle, "ibv_destroy_qp", a.destroy_qp, e) &&
                    resolve(handle, "ibv_modify_qp", a.modify_qp, e) &&
                    resolve(handle, "ibv_get_async_event", a.get_async_event, e) &&
                    resolve(handle, "ibv_ack_async_event", a.ack_async_event, e) &&
                    resolve(handle, "ibv_event_type_str", a.event_type_str, e) &&
                    resolve(handle, "ibv_port_state_str", a.port_state_str, e) &&
                    resolve(handle, "ibv_wc_status_str", a.wc_status_str, e);
    if (!ok)
        ::dlclose(handle);  // nothing of it was used
    else
        g_loaded.store(true, std::memory_order_release);
    return result;
}

}  // namespace

int IbvApi::query_port(ibv_context* context, uint8_t port_num, ibv_port_attr* attr) const noexcept {
    // verbs_get_ctx_op only reads the context's own layout: no library call.
    if (verbs_context* vctx = verbs_get_ctx_op(context, query_port); vctx != nullptr)
        return vctx->query_port(context, port_num, attr, sizeof(*attr));
    std::memset(attr, 0, sizeof(*attr));
    return query_port_compat(context, port_num, reinterpret_cast<_compat_ibv_port_attr*>(attr));
}

ibv_mr* IbvApi::reg_mr(ibv_pd* pd, void* addr, size_t length, int access) const noexcept {
    if ((static_cast<unsigned>(access) & IBV_ACCESS_OPTIONAL_RANGE) != 0) {
        errno = EINVAL;  // would need ibv_reg_mr_iova2, which the table does not hold
        return nullptr;
    }
    return reg_mr_symbol(pd, addr, length, access);
}

const IbvApi* load_ibverbs(std::string& error) {
    const int saved_errno = errno;  // dlopen's probing must not leak into the caller's errno
    static const Loaded loaded = load();
    errno = saved_errno;
    if (!loaded.error.empty()) {
        error = loaded.error;
        return nullptr;
    }
    return &loaded.api;
}

bool ibverbs_loaded() noexcept {
    return g_loaded.load(std::memory_order_acquire);
}

}  // namespace l5pg::rdma::verbs
