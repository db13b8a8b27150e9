#include "transport/rdma/soft/soft_device.hpp"

#include "transport/rdma/soft/region_table.hpp"
#include "transport/rdma/soft/soft_qp.hpp"
#include "transport/rdma/sys.hpp"

namespace l5pg::rdma::soft {
namespace {

class SoftMemoryRegion final : public MemoryRegion {
  public:
    SoftMemoryRegion(std::shared_ptr<RegionTable> table, std::byte* addr, size_t length,
                     uint32_t key) noexcept
        : MemoryRegion(addr, length, key, key), table_(std::move(table)) {}
    ~SoftMemoryRegion() override { table_->remove(lkey()); }

  private:
    std::shared_ptr<RegionTable> table_;
};

class SoftPd final : public ProtectionDomain {
  public:
    explicit SoftPd(const SoftConfig& config)
        : config_(config), table_(std::make_shared<RegionTable>()) {}

    std::unique_ptr<MemoryRegion> register_memory(std::byte* addr, size_t length, Access access,
                                                  std::string& error) override {
        if (addr == nullptr || length == 0) {
            error = "cannot register an empty memory region";
            return nullptr;
        }
        const uint32_t key = table_->add(addr, length, access);
        return std::make_unique<SoftMemoryRegion>(table_, addr, length, key);
    }

    std::unique_ptr<QueuePair> create_qp(const QpOptions& options, std::string& error) override {
        return SoftQueuePair::create(table_, config_, options, error);
    }

  private:
    SoftConfig config_;
    std::shared_ptr<RegionTable> table_;
};

class SoftDevice final : public Device {
  public:
    explicit SoftDevice(const SoftConfig& config) : config_(config) {}
    DeviceKind kind() const noexcept override { return DeviceKind::Soft; }
    std::string name() const override { return "soft"; }
    std::unique_ptr<ProtectionDomain> alloc_pd(std::string&) override {
        return std::make_unique<SoftPd>(config_);
    }
    int async_event_fd() const noexcept override { return config_.failures->fd(); }
    int progress_fd() const noexcept override {
        return config_.engine->driven() ? config_.engine->fd() : -1;
    }
    bool progress() noexcept override { return config_.engine->drive(0); }
    std::chrono::milliseconds progress_interval() const noexcept override {
        return config_.engine->scan_every();
    }
    void process_async_events() noexcept override { config_.failures->drain(); }

  private:
    SoftConfig config_;
};

}  // namespace

std::unique_ptr<Device> open_soft_device(const DeviceOptions& options, std::string& error) {
    if (options.soft_ack_timeout.count() <= 0) {
        error = "soft device: ack timeout must be positive";
        return nullptr;
    }
    if (options.soft_max_message < 4096 || options.soft_max_message > (1u << 30)) {
        error = "soft device: max message size must be between 4 KiB and 1 GiB";
        return nullptr;
    }
    SoftConfig config;
    config.scramble_writes = options.soft_scramble_writes;
    config.ack_timeout = options.soft_ack_timeout;
    config.max_message = options.soft_max_message;
    config.failures = FailureSignal::create(error);
    if (config.failures == nullptr)
        return nullptr;
    // The ack timeout is checked this often besides every event of a queue pair: a dead
    // peer is noticed within an ack timeout and about one scan interval (1/8 of it, at
    // most 1 s).
    config.engine = WireEngine::create(config.ack_timeout / 8, options.soft_driven, error);
    if (config.engine == nullptr)
        return nullptr;
    return std::make_unique<SoftDevice>(config);
}

}  // namespace l5pg::rdma::soft
