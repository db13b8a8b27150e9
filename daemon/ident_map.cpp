#include "daemon/ident_map.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "protocol/startup.hpp"

namespace l5pg::daemon {
namespace {

std::vector<std::string> words_of(std::string_view line) {
    std::vector<std::string> words;
    std::istringstream in{std::string(line.substr(0, line.find('#')))};
    for (std::string word; in >> word;)
        words.push_back(word);
    return words;
}

// A uid as std::to_string() writes it ("0123" is uid 123); a name as it is.
std::string canonical_os_user(const std::string& word) {
    if (word.empty() ||
        !std::all_of(word.begin(), word.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return word;
    const size_t first = word.find_first_not_of('0');
    return first == std::string::npos ? "0" : word.substr(first);
}

}  // namespace

IdentMap IdentMap::parse(std::string_view text, const std::string& origin) {
    IdentMap map;
    size_t line_no = 0;
    while (!text.empty()) {
        ++line_no;
        const size_t eol = text.find('\n');
        const std::vector<std::string> words = words_of(text.substr(0, eol));
        text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
        if (words.empty())
            continue;
        if (words.size() != 2)
            throw std::runtime_error(
                fmt::format("{}: line {}: expected \"OS-USER ROLE\", got {} fields", origin,
                            line_no, words.size()));
        // Such a role is refused before the map is read (Postgres would cut its name). A
        // warning, not an error: a file l5pgd ran with before must not stop it now.
        if (words[1].size() > protocol::kMaxNameBytes) {
            map.warnings_.push_back(fmt::format(
                "{}: line {}: role name longer than {} bytes: the rule can never be used", origin,
                line_no, protocol::kMaxNameBytes));
            continue;
        }
        map.rules_.emplace(canonical_os_user(words[0]), words[1]);
    }
    return map;
}

IdentMap IdentMap::load(const std::string& path) {
    if (path.empty())
        return {};
    // A directory opens, and reads as an empty file would: no rule, and no word of it.
    if (std::error_code ec; std::filesystem::is_directory(path, ec))
        throw std::runtime_error(
            fmt::format("auth.ident_file: cannot read \"{}\": it is a directory", path));
    errno = 0;
    std::ifstream in(path);
    if (!in)  // std::ifstream sets errno on Linux (libstdc++ opens with fopen)
        throw std::runtime_error(fmt::format("auth.ident_file: cannot read \"{}\": {}", path,
                                             errno != 0 ? std::strerror(errno) : "unknown error"));
    std::ostringstream text;
    text << in.rdbuf();
    return parse(text.str(), "auth.ident_file \"" + path + "\"");
}

bool IdentMap::allows(std::string_view os_user, std::string_view role) const {
    return rules_.contains({std::string(os_user), std::string(role)});
}

}  // namespace l5pg::daemon
