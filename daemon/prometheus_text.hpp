// Pieces of the Prometheus text exposition format 0.0.4 that every renderer of l5pgd's
// metrics writes.
#pragma once

#include <fmt/format.h>

#include <iterator>
#include <string>
#include <string_view>

#include "daemon/utf8_text.hpp"

namespace l5pg::daemon::prometheus {

// The HELP and TYPE lines before a metric's samples.
inline void header(std::string& out, std::string_view name, std::string_view type,
                   std::string_view help) {
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

// A label value as it goes between the double quotes: backslash, double quote and line feed
// escaped (database and role names may hold any of them), and bytes that are not UTF-8 (a
// SQL_ASCII or LATIN1 cluster's names) as U+FFFD: Prometheus rejects a whole scrape over one.
inline std::string label_value(std::string_view value) {
    const std::string text = valid_utf8(value);
    std::string out;
    out.reserve(text.size());
    for (const char c : text) {  // bytes of a multibyte character are all >= 0x80
        if (c == '\\' || c == '"')
            out += '\\';
        if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

}  // namespace l5pg::daemon::prometheus
