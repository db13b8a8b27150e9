// Catch2's main() and implementation, compiled once for every unit test executable (it is
// the slowest translation unit by far, above all under the sanitizers).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
