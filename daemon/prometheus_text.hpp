// Pieces of the Prometheus text exposition format 0.0.4 that every renderer of l5pgd's
// metrics writes.
#pragma once

#include <fmt/format.h>

#include <iterator>
#include <string>
#include <string_view>

namespace l5pg::daemon::prometheus {

// The HELP and TYPE lines before a metric's samples.
inline void header(std::string& out, std::string_view name, std::string_view type,
                   std::string_view help) {
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

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

// A label value as it goes between the double quotes: backslash, double quote and line feed
// escaped (database and role names may hold any of them), and bytes that are not UTF-8 (a
// SQL_ASCII or LATIN1 cluster's names) as U+FFFD: Prometheus rejects a whole scrape over one.
inline std::string label_value(std::string_view value) {
    std::string out;
    out.reserve(value.size());
    for (size_t i = 0; i < value.size();) {
        const size_t length = utf8_sequence(value, i);
        if (length == 0) {
            out += "\xEF\xBF\xBD";
            ++i;
            continue;
        }
        const char c = value[i];
        if (c == '\\' || c == '"')
            out += '\\';
        if (c == '\n')
            out += "\\n";
        else
            out.append(value.substr(i, length));
        i += length;
    }
    return out;
}

}  // namespace l5pg::daemon::prometheus
