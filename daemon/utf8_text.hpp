// Client-supplied names (databases, roles) as text that a reader decoding UTF-8 accepts:
// Postgres's own names are in the server's encoding, and a client may send any bytes.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

namespace l5pg::daemon {

// The length of the well-formed UTF-8 sequence at value[i] (Unicode's table 3-7: no
// overlong forms, surrogates or values beyond U+10FFFF), or 0.
inline size_t utf8_sequence(std::string_view value, size_t i) noexcept {
    const auto at = [&](size_t k) { return static_cast<unsigned char>(value[k]); };
    const unsigned char lead = at(i);
    if (lead < 0x80)
        return 1;
    size_t length = 0;
    unsigned char second_lo = 0x80;
    unsigned char second_hi = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
        length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        length = 3;
        second_lo = lead == 0xE0 ? 0xA0 : 0x80;
        second_hi = lead == 0xED ? 0x9F : 0xBF;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        length = 4;
        second_lo = lead == 0xF0 ? 0x90 : 0x80;
        second_hi = lead == 0xF4 ? 0x8F : 0xBF;
    } else {
        return 0;
    }
    if (value.size() - i < length || at(i + 1) < second_lo || at(i + 1) > second_hi)
        return 0;
    for (size_t k = 2; k < length; ++k)
        if (at(i + k) < 0x80 || at(i + k) > 0xBF)
            return 0;
    return length;
}

// `value` with every byte that does not begin a well-formed sequence as U+FFFD, cut to at
// most `max_bytes` of the input at a character boundary.
inline std::string valid_utf8(std::string_view value, size_t max_bytes = std::string_view::npos) {
    std::string out;
    out.reserve(std::min(value.size(), max_bytes));
    for (size_t i = 0; i < value.size();) {
        const size_t length = utf8_sequence(value, i);
        if (i + std::max<size_t>(length, 1) > max_bytes)
            break;
        if (length == 0)
            out += "\xEF\xBF\xBD";
        else
            out.append(value.substr(i, length));
        i += std::max<size_t>(length, 1);
    }
    return out;
}

}  // namespace l5pg::daemon
