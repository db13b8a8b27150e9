// Results of the channel's byte-stream calls: the transport-wide ones
// (transport/io_result.hpp), under the names the RDMA code has always used.
#pragma once

#include "transport/io_result.hpp"

namespace l5pg::rdma {

using transport::IoResult;
using transport::IoStatus;
using transport::to_string;

}  // namespace l5pg::rdma
