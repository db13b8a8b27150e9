// libibverbs, loaded at run time. The shim is preloaded into programs that mostly never
// use RDMA, and l5pgd runs on hosts without rdma-core: neither may carry libibverbs (and
// through it libnl) as a link-time dependency. The verbs device dlopen()s
// "libibverbs.so.1" the first time it is asked for, and calls it through this table.
//
// Only functions that are real exported symbols are in the table. ibv_post_send and
// ibv_poll_cq are static inline in verbs.h (they call through the context's ops) and are
// used directly; ibv_query_port and ibv_reg_mr are macros over inline wrappers that call
// the exported symbol: query_port() and reg_mr() below redo what those wrappers do with
// the loaded symbol. The member names carry no ibv_ prefix so that the function-like
// macros of verbs.h never expand them.
#pragma once

#include <infiniband/verbs.h>

#include <string>

namespace l5pg::rdma::verbs {

struct IbvApi {
    decltype(&::ibv_get_device_list) get_device_list = nullptr;
    decltype(&::ibv_free_device_list) free_device_list = nullptr;
    decltype(&::ibv_get_device_name) get_device_name = nullptr;
    decltype(&::ibv_open_device) open_device = nullptr;
    decltype(&::ibv_close_device) close_device = nullptr;
    decltype(&::ibv_query_device) query_device = nullptr;
    decltype(&::ibv_query_port) query_port_compat = nullptr;  // the exported symbol
    decltype(&::ibv_query_gid) query_gid = nullptr;
    decltype(&::ibv_alloc_pd) alloc_pd = nullptr;
    decltype(&::ibv_dealloc_pd) dealloc_pd = nullptr;
    decltype(&::ibv_reg_mr) reg_mr_symbol = nullptr;  // the exported symbol
    decltype(&::ibv_dereg_mr) dereg_mr = nullptr;
    decltype(&::ibv_create_cq) create_cq = nullptr;
    decltype(&::ibv_destroy_cq) destroy_cq = nullptr;
    decltype(&::ibv_create_qp) create_qp = nullptr;
    decltype(&::ibv_destroy_qp) destroy_qp = nullptr;
    decltype(&::ibv_modify_qp) modify_qp = nullptr;
    decltype(&::ibv_get_async_event) get_async_event = nullptr;
    decltype(&::ibv_ack_async_event) ack_async_event = nullptr;
    decltype(&::ibv_event_type_str) event_type_str = nullptr;
    decltype(&::ibv_port_state_str) port_state_str = nullptr;
    decltype(&::ibv_wc_status_str) wc_status_str = nullptr;

    // verbs.h's ibv_query_port: the provider's extended query_port when the context has
    // one, else the exported (compat) symbol on a zeroed attribute struct.
    int query_port(ibv_context* context, uint8_t port_num, ibv_port_attr* attr) const noexcept;
    // verbs.h's ibv_reg_mr for access flags without IBV_ACCESS_OPTIONAL_RANGE bits (the
    // only ones the verbs device uses): the exported ibv_reg_mr.
    ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, int access) const noexcept;
};

// The library's file name, as dlopen() is given it.
inline constexpr const char* kLibibverbsName = "libibverbs.so.1";

// Loads libibverbs once per process (thread-safe; the handle is never closed: providers
// keep global state) and returns its table, or nullptr with `error` set to
// "libibverbs.so.1 not found: install rdma-core's libibverbs1 (<dlerror>)" or naming a
// missing symbol. A failed load is remembered: later calls fail the same way at once.
[[nodiscard]] const IbvApi* load_ibverbs(std::string& error);

// Whether libibverbs has been loaded into this process by load_ibverbs (for tests).
[[nodiscard]] bool ibverbs_loaded() noexcept;

}  // namespace l5pg::rdma::verbs
