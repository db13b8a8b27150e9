#include "daemon/ident_map.hpp"

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
        // Such a role is refused before the map is read (Postgres would cut its name).
        if (words[1].size() > protocol::kMaxNameBytes)
            throw std::runtime_error(
                fmt::format("{}: line {}: role name longer than {} bytes can never be used", origin,
                            line_no, protocol::kMaxNameBytes));
        map.rules_.emplace(words[0], words[1]);
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
