// Transitional: waiting and the doorbell moved to transport/wait/ (RDMA uses them too, and
// they are not about shared memory). This header keeps the old names in `shm` for
// daemon/session*.cpp until the client-end seam of issue 15 rewrites those files; new
// code includes transport/wait/ directly.
#pragma once

#include "transport/wait/doorbell.hpp"

namespace l5pg::shm {

using wait::drain_doorbells;
using wait::DrainResult;
using wait::ring_doorbell;

}  // namespace l5pg::shm
