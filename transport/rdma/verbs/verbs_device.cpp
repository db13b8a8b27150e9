#include "transport/rdma/verbs/verbs_device.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "transport/rdma/sys.hpp"
#include "transport/rdma/verbs/validate.hpp"
#include "transport/rdma/verbs/verbs_common.hpp"
#include "transport/rdma/verbs/verbs_qp.hpp"

namespace l5pg::rdma::verbs {
namespace {

struct DeviceListDeleter {
    const IbvApi* api;
    void operator()(ibv_device** list) const noexcept { api->free_device_list(list); }
};

class VerbsMemoryRegion final : public MemoryRegion {
  public:
    VerbsMemoryRegion(std::shared_ptr<ibv_mr> mr, std::byte* addr, size_t length) noexcept
        : MemoryRegion(addr, length, mr->lkey, mr->rkey), mr_(std::move(mr)) {}

  private:
    std::shared_ptr<ibv_mr> mr_;
};

[[nodiscard]] int access_flags(Access access) noexcept {
    int flags = 0;
    if (has(access, Access::LocalWrite))
        flags |= IBV_ACCESS_LOCAL_WRITE;
    if (has(access, Access::RemoteWrite))  // verbs requires LOCAL_WRITE with REMOTE_WRITE
        flags |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    if (has(access, Access::RemoteRead))
        flags |= IBV_ACCESS_REMOTE_READ;
    return flags;
}

class VerbsPd final : public ProtectionDomain {
  public:
    VerbsPd(std::shared_ptr<ibv_pd> pd, std::shared_ptr<const VerbsConfig> config) noexcept
        : pd_(std::move(pd)), config_(std::move(config)) {}

    std::unique_ptr<MemoryRegion> register_memory(std::byte* addr, size_t length, Access access,
                                                  std::string& error) override {
        if (addr == nullptr || length == 0) {
            error = "cannot register an empty memory region";
            return nullptr;
        }
        ibv_mr* raw = config_->api->reg_mr(pd_.get(), addr, length, access_flags(access));
        if (raw == nullptr) {
            error = sys::errno_text("ibv_reg_mr", errno);
            return nullptr;
        }
        // The MR keeps its PD alive; the PD keeps the device context alive.
        std::shared_ptr<ibv_mr> mr(raw,
                                   [pd = pd_, api = config_->api](ibv_mr* m) { api->dereg_mr(m); });
        return std::make_unique<VerbsMemoryRegion>(std::move(mr), addr, length);
    }

    std::unique_ptr<QueuePair> create_qp(const QpOptions& options, std::string& error) override {
        return VerbsQueuePair::create(pd_, config_, options, error);
    }

  private:
    std::shared_ptr<ibv_pd> pd_;
    std::shared_ptr<const VerbsConfig> config_;
};

class VerbsDevice final : public Device {
  public:
    VerbsDevice(std::string name, std::shared_ptr<const VerbsConfig> config) noexcept
        : name_(std::move(name)), config_(std::move(config)) {}

    DeviceKind kind() const noexcept override { return DeviceKind::Verbs; }
    std::string name() const override { return name_; }

    std::unique_ptr<ProtectionDomain> alloc_pd(std::string& error) override {
        ibv_pd* raw = config_->api->alloc_pd(config_->context.get());
        if (raw == nullptr) {
            error = sys::errno_text("ibv_alloc_pd", errno);
            return nullptr;
        }
        std::shared_ptr<ibv_pd> pd(
            raw, [ctx = config_->context, api = config_->api](ibv_pd* p) { api->dealloc_pd(p); });
        return std::make_unique<VerbsPd>(std::move(pd), config_);
    }

    int async_event_fd() const noexcept override { return config_->context->async_fd; }

    // QP and CQ events carry the QP's FailureState in qp_context / cq_context (set by
    // VerbsQueuePair). ibv_destroy_qp waits until the QP's events are acknowledged, so
    // the state is alive while we use it.
    void process_async_events() noexcept override {
        for (;;) {
            ibv_async_event event;
            if (config_->api->get_async_event(config_->context.get(), &event) != 0)
                return;  // EAGAIN: the fd is non-blocking
            const std::string what = config_->api->event_type_str(event.event_type);
            switch (event.event_type) {
                case IBV_EVENT_QP_FATAL:
                case IBV_EVENT_QP_REQ_ERR:
                case IBV_EVENT_QP_ACCESS_ERR:
                case IBV_EVENT_PATH_MIG_ERR:
                    if (auto* state = static_cast<FailureState*>(event.element.qp->qp_context))
                        state->set("async event: " + what);
                    break;
                case IBV_EVENT_CQ_ERR:
                    if (auto* state = static_cast<FailureState*>(event.element.cq->cq_context))
                        state->set("async event: " + what);
                    break;
                case IBV_EVENT_DEVICE_FATAL:
                    config_->device_failure->set("async event: " + what);
                    break;
                default:  // port/LID/GID changes, COMM_EST, ...: QPs that suffer fail by retries
                    break;
            }
            config_->api->ack_async_event(&event);
        }
    }

  private:
    std::string name_;
    std::shared_ptr<const VerbsConfig> config_;
};

}  // namespace

std::unique_ptr<Device> open_verbs_device(const DeviceOptions& options, std::string& error) {
    if (!validate_options(options, error))
        return nullptr;
    const IbvApi* api = load_ibverbs(error);  // the first use of RDMA verbs loads the library
    if (api == nullptr)
        return nullptr;
    int count = 0;
    errno = 0;
    std::unique_ptr<ibv_device*, DeviceListDeleter> list(api->get_device_list(&count),
                                                         DeviceListDeleter{api});
    if (list == nullptr || count <= 0) {
        error = no_device_message(list == nullptr ? errno : 0);
        return nullptr;
    }
    std::vector<std::string> names;
    for (int i = 0; i < count; ++i)
        names.emplace_back(api->get_device_name(list.get()[i]));
    size_t index = 0;
    if (!select_device(names, options.device_name, index, error))
        return nullptr;

    ibv_context* raw = api->open_device(list.get()[index]);
    if (raw == nullptr) {
        error = sys::errno_text(("ibv_open_device(" + names[index] + ")").c_str(), errno);
        return nullptr;
    }
    auto config = std::make_shared<VerbsConfig>();
    config->api = api;
    config->context =
        std::shared_ptr<ibv_context>(raw, [api](ibv_context* c) { api->close_device(c); });
    config->device_failure = std::make_shared<FailureState>();

    ibv_device_attr device_attr{};
    if (const int rc = api->query_device(raw, &device_attr); rc != 0) {
        error = sys::errno_text("ibv_query_device", rc);
        return nullptr;
    }
    PortInfo info;
    info.port_count = device_attr.phys_port_cnt;
    ibv_port_attr port_attr{};
    if (options.port >= 1 && options.port <= info.port_count) {
        if (const int rc = api->query_port(raw, options.port, &port_attr); rc != 0) {
            error = sys::errno_text("ibv_query_port", rc);
            return nullptr;
        }
        info.active = port_attr.state == IBV_PORT_ACTIVE;
        info.state_name = api->port_state_str(port_attr.state);
        info.ethernet = port_attr.link_layer == IBV_LINK_LAYER_ETHERNET;
        info.gid_table_length = port_attr.gid_tbl_len;
    }
    if (!validate_port(info, options, error)) {
        error = names[index] + ": " + error;
        return nullptr;
    }
    if (options.gid_index >= 0) {
        ibv_gid gid{};
        if (api->query_gid(raw, options.port, options.gid_index, &gid) != 0) {
            error = sys::errno_text("ibv_query_gid", errno);
            return nullptr;
        }
        std::memcpy(config->gid.data(), gid.raw, 16);
        if (!validate_gid(config->gid, options, error)) {
            error = names[index] + ": " + error;
            return nullptr;
        }
    }
    // The async fd is polled by the application's event loop: it must never block.
    if (!sys::set_nonblocking(raw->async_fd)) {
        error = sys::errno_text("fcntl(O_NONBLOCK) on the async event fd", errno);
        return nullptr;
    }
    config->port = options.port;
    config->gid_index = options.gid_index;
    config->lid = port_attr.lid;
    config->active_mtu = port_attr.active_mtu;
    config->max_message = port_attr.max_msg_sz;
    config->max_qp_wr = static_cast<uint32_t>(std::max(device_attr.max_qp_wr, 1));
    config->max_rd_atomic = static_cast<uint8_t>(std::clamp(device_attr.max_qp_rd_atom, 1, 16));
    config->timeout = options.timeout;
    config->retry_count = options.retry_count;
    config->rnr_retry = options.rnr_retry;
    config->max_inline = options.max_inline;
    return std::make_unique<VerbsDevice>(names[index], std::move(config));
}

}  // namespace l5pg::rdma::verbs
