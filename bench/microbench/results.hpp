// Every run's value, the CSV file and the human-readable tables.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace l5pg::microbench {

struct Sample {
    std::string kind;       // pingpong | bandwidth | memcpy
    std::string transport;  // pingpong: cacheline, shm, ...; bandwidth: shm; memcpy: dram|cached
    size_t msg_bytes = 0;   // message size, bandwidth chunk size, memcpy buffer size
    size_t ring_bytes = 0;  // SHM ring size per direction, 0 when there is no ring
    int run = 0;            // 1..repeat
    std::optional<double> value;  // none: the run failed (unit "error")
    std::string unit;             // round_trips_per_s | GB_per_s | error
};

struct Summary {
    double median = 0;
    double min = 0;
    double max = 0;
    size_t runs = 0;
    size_t failed = 0;
};

class Results {
  public:
    explicit Results(std::string placement) : placement_(std::move(placement)) {}

    void add(Sample sample) { samples_.push_back(std::move(sample)); }
    [[nodiscard]] bool any_failed() const;
    // Over the successful runs of one cell; nullopt when none succeeded (or none ran).
    [[nodiscard]] std::optional<Summary> summary(const std::string& kind,
                                                 const std::string& transport, size_t msg_bytes,
                                                 size_t ring_bytes) const;

    // Columns: kind,transport,msg_bytes,ring_bytes,run,value,unit,placement. Throws BenchError.
    void write_csv(const std::string& path) const;

    void print_pingpong(const std::vector<std::string>& transports,
                        const std::vector<size_t>& msg_sizes, size_t ring_bytes) const;
    void print_bandwidth(const std::vector<size_t>& chunks, const std::vector<size_t>& rings,
                         size_t memcpy_dram_bytes, size_t memcpy_cached_bytes) const;

  private:
    void print_ring_cost_bound(const std::vector<size_t>& msg_sizes, size_t ring_bytes) const;

    std::string placement_;
    std::vector<Sample> samples_;
};

// "1.23M", "45.6k", "789".
[[nodiscard]] std::string format_rate(double per_second);

}  // namespace l5pg::microbench
