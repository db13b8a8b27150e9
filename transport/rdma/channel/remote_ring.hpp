// The writing end of a ring in the peer's area. Records are assembled in a private
// staging buffer that mirrors the remote ring byte for byte (same offsets), then sent
// with one RDMA WRITE, or two when the record wraps around the end of the ring (this
// implementation does not double-map the peer's ring: the soft device cannot, and a
// second WRITE at the wrap point costs less than a special mapping on every host).
//
// The reader's position is learned by RDMA READ and is untrusted: it must never go
// backwards or pass what we wrote. Staging bytes are reused only when the reader has
// consumed them *and* the WRITE that sent them has completed locally (an RDMA
// retransmission may re-read the source until then).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "transport/rdma/channel/layout.hpp"
#include "transport/rdma/device.hpp"

namespace l5pg::rdma {

class RemoteRing {
  public:
    RemoteRing() = default;
    // `staging` has `size` bytes in a region with key `lkey`; the peer's ring starts at
    // `remote_ring` (rkey `rkey`). `max_payload` <= max_record_payload(size).
    RemoteRing(std::byte* staging, uint32_t lkey, uint64_t remote_ring, uint32_t rkey, size_t size,
               size_t max_payload) noexcept;

    // Payload bytes the next record may carry (0: full).
    [[nodiscard]] size_t payload_that_fits() const noexcept;
    // Same, after a record of `payload` bytes has been staged.
    [[nodiscard]] size_t payload_that_fits_after(size_t payload) const noexcept;
    // Stages a record (payload.size() <= payload_that_fits(), > 0), fills the WRITE(s)
    // that send it (lkey/rkey/addresses/length; the caller sets wr_id and flags),
    // advances the write position. Returns the number of WRITEs (1 or 2).
    [[nodiscard]] size_t stage(std::span<const std::byte> payload,
                               std::array<WorkRequest, 2>& wrs) noexcept;

    // A READ returned the reader's position. False: impossible (corrupt or hostile peer).
    [[nodiscard]] bool update_read_pos(uint64_t pos) noexcept;
    // Every WRITE up to write position `pos` has completed locally.
    void note_completed(uint64_t pos) noexcept;

    [[nodiscard]] uint64_t position() const noexcept { return write_pos_; }
    [[nodiscard]] uint64_t read_pos() const noexcept { return read_pos_; }
    [[nodiscard]] size_t size() const noexcept { return size_; }
    // Bytes the reader has not yet confirmed consuming.
    [[nodiscard]] size_t used() const noexcept {
        return static_cast<size_t>(write_pos_ - read_pos_);
    }

  private:
    [[nodiscard]] size_t fits(uint64_t write_pos) const noexcept;

    std::byte* staging_ = nullptr;
    uint32_t lkey_ = 0;
    uint64_t remote_ring_ = 0;
    uint32_t rkey_ = 0;
    size_t size_ = 0;
    size_t max_payload_ = 0;
    uint64_t write_pos_ = 0;
    uint64_t read_pos_ = 0;       // last validated reader position
    uint64_t completed_pos_ = 0;  // WRITEs up to here have completed locally
};

}  // namespace l5pg::rdma
