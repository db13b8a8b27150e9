// Every fuzz target defines LLVMFuzzerTestOneInput (libFuzzer's entry point). With clang and
// L5PG_FUZZ=ON it links libFuzzer (`make fuzz`); otherwise replay_main.cpp replays the seed
// corpus once under ctest (`make test`), so every crash that was ever found stays fixed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace l5pg::fuzz {

inline std::span<const std::byte> bytes(const uint8_t* data, size_t size) noexcept {
    return {reinterpret_cast<const std::byte*>(data), size};
}

}  // namespace l5pg::fuzz
