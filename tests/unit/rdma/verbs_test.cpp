// The verbs device without RDMA hardware: discovery reports cleanly that there is no
// device, and every argument is validated before (and independently of) the hardware.
#include <sys/stat.h>

#include <array>
#include <vector>

#include "test_util.hpp"
#include "transport/rdma/verbs/ibverbs.hpp"
#include "transport/rdma/verbs/validate.hpp"

using namespace l5pg::rdma;
using namespace l5pg::rdma::verbs;

namespace {

bool host_has_rdma_device() {
    struct stat st {};
    return ::stat("/sys/class/infiniband", &st) == 0;
}

std::string validate(DeviceOptions o) {
    std::string error;
    return validate_options(o, error) ? "" : error;
}

}  // namespace

TEST_CASE("verbs: discovery without a device reports why", "[rdma][verbs]") {
    if (host_has_rdma_device()) {
        WARN("SKIPPED: this host has /sys/class/infiniband; the no-device path is not testable");
        return;
    }
    std::string error;
    CHECK(open_device(DeviceKind::Verbs, DeviceOptions{}, error) == nullptr);
    CHECK_THAT(error, Catch::StartsWith("no RDMA device found"));
    error.clear();
    CHECK(open_device(DeviceKind::Auto, DeviceOptions{}, error) == nullptr);
    CHECK_THAT(error, Catch::Contains("no usable verbs device"));
    CHECK_THAT(error, Catch::Contains("no RDMA device found"));
    CHECK_THAT(error, Catch::Contains("soft"));
    // A named device on a host without any: still the clear message.
    DeviceOptions named;
    named.device_name = "mlx5_0";
    CHECK(open_device(DeviceKind::Verbs, named, error) == nullptr);
    CHECK_THAT(error, Catch::Contains("no RDMA device found"));
}

TEST_CASE("verbs: option ranges are checked before any device is touched", "[rdma][verbs]") {
    CHECK(validate(DeviceOptions{}).empty());
    DeviceOptions o;
    o.port = 0;
    CHECK_THAT(validate(o), Catch::Contains("port must be at least 1"));
    o = {};
    o.gid_index = -2;
    CHECK_THAT(validate(o), Catch::Contains("gid_index"));
    o.gid_index = 256;
    CHECK_THAT(validate(o), Catch::Contains("gid_index"));
    o = {};
    o.timeout = 0;
    CHECK_THAT(validate(o), Catch::Contains("wait forever"));
    o.timeout = 32;
    CHECK_THAT(validate(o), Catch::Contains("timeout"));
    o = {};
    o.retry_count = 8;
    CHECK_THAT(validate(o), Catch::Contains("retry_count"));
    o = {};
    o.rnr_retry = 7;
    CHECK_THAT(validate(o), Catch::Contains("retry forever"));
    o = {};
    o.max_inline = 5000;
    CHECK_THAT(validate(o), Catch::Contains("max_inline"));
    // open_device() validates first, on any host.
    o = {};
    o.port = 0;
    std::string error;
    CHECK(open_device(DeviceKind::Verbs, o, error) == nullptr);
    CHECK_THAT(error, Catch::Contains("port must be at least 1"));
}

TEST_CASE("verbs: device selection by name", "[rdma][verbs]") {
    const std::vector<std::string> none;
    const std::vector<std::string> two{"mlx5_0", "rxe0"};
    size_t index = 99;
    std::string error;
    CHECK_FALSE(select_device(none, "", index, error));
    CHECK_THAT(error, Catch::StartsWith("no RDMA device found"));
    CHECK(select_device(two, "", index, error));
    CHECK(index == 0);
    CHECK(select_device(two, "rxe0", index, error));
    CHECK(index == 1);
    CHECK_FALSE(select_device(two, "mlx5_9", index, error));
    CHECK(error == "RDMA device 'mlx5_9' not found (available: mlx5_0 rxe0)");
    CHECK_THAT(no_device_message(ENOSYS), Catch::Contains("no RDMA support"));
}

TEST_CASE("verbs: port and GID validation", "[rdma][verbs]") {
    PortInfo ib;
    ib.port_count = 2;
    ib.active = true;
    ib.state_name = "PORT_ACTIVE";
    ib.gid_table_length = 16;
    DeviceOptions o;
    std::string error;
    CHECK(validate_port(ib, o, error));

    o.port = 3;
    CHECK_FALSE(validate_port(ib, o, error));
    CHECK_THAT(error, Catch::Contains("port 3 does not exist (the device has ports 1..2)"));

    o = {};
    PortInfo down = ib;
    down.active = false;
    down.state_name = "PORT_DOWN";
    CHECK_FALSE(validate_port(down, o, error));
    CHECK_THAT(error, Catch::Contains("not active (state PORT_DOWN)"));

    PortInfo roce = ib;
    roce.ethernet = true;
    CHECK_FALSE(validate_port(roce, o, error));  // RoCE without a GID index
    CHECK_THAT(error, Catch::Contains("RoCE"));
    o.gid_index = 3;
    CHECK(validate_port(roce, o, error));
    o.gid_index = 16;
    CHECK_FALSE(validate_port(roce, o, error));
    CHECK_THAT(error, Catch::Contains("gid_index 16 is out of range"));

    std::array<uint8_t, 16> gid{};
    o.gid_index = 1;
    CHECK_FALSE(validate_gid(gid, o, error));
    CHECK_THAT(error, Catch::Contains("empty GID table entry"));
    gid[15] = 1;
    CHECK(validate_gid(gid, o, error));
    o.gid_index = -1;
    CHECK(validate_gid(std::array<uint8_t, 16>{}, o, error));  // no GRH: GID unused
}

TEST_CASE("device kinds parse and print", "[rdma][verbs]") {
    DeviceKind k;
    CHECK(parse_device_kind("soft", k));
    CHECK(k == DeviceKind::Soft);
    CHECK(parse_device_kind("verbs", k));
    CHECK(k == DeviceKind::Verbs);
    CHECK(parse_device_kind("auto", k));
    CHECK(k == DeviceKind::Auto);
    CHECK_FALSE(parse_device_kind("rxe", k));
    CHECK(std::string(to_string(DeviceKind::Soft)) == "soft");
}

// ctest runs every test case in its own process, so this one starts with nothing loaded;
// run in one process with the others, an earlier verbs test may have loaded it already.
TEST_CASE("verbs: libibverbs is loaded on first use of the verbs device only", "[rdma][verbs]") {
    if (ibverbs_loaded()) {
        WARN("SKIPPED: an earlier test in this process used the verbs device");
        return;
    }
    auto soft = l5pg::rdma::test::open_soft();
    CHECK_FALSE(ibverbs_loaded());
    std::string error;
    DeviceOptions bad;
    bad.port = 0;  // rejected before anything is loaded
    CHECK(open_device(DeviceKind::Verbs, bad, error) == nullptr);
    CHECK_FALSE(ibverbs_loaded());
    const bool present = load_ibverbs(error) != nullptr;
    CHECK(ibverbs_loaded() == present);
    if (!present)
        CHECK_THAT(error, Catch::StartsWith("libibverbs.so.1 not found: install rdma-core's"));
}
