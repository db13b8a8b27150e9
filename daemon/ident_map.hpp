// The ident map of auth.local=peer (README "Security model"): which OS users may ask for
// which database roles besides their own name, like pg_ident.conf with a single map.
// File format, one rule per line, '#' starts a comment:
//     OS-USER  ROLE          e.g.  "deploy  app_owner"
// OS-USER is a user name or a numeric uid: all digits is a uid ("0123" is 123), never a
// user name of those digits. A rule grants exactly that pair; there are no wildcards or
// patterns.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace l5pg::daemon {

class IdentMap {
  public:
    // Throws std::runtime_error naming `origin` and the line for a malformed rule.
    [[nodiscard]] static IdentMap parse(std::string_view text, const std::string& origin);
    // Reads and parses `path`; "" gives an empty map. Throws std::runtime_error.
    [[nodiscard]] static IdentMap load(const std::string& path);

    [[nodiscard]] bool allows(std::string_view os_user, std::string_view role) const;
    [[nodiscard]] size_t size() const noexcept { return rules_.size(); }
    // Rules loaded but of no use (a role beyond 63 bytes), to log at start and reload.
    [[nodiscard]] const std::vector<std::string>& warnings() const noexcept { return warnings_; }

  private:
    std::set<std::pair<std::string, std::string>> rules_;
    std::vector<std::string> warnings_;
};

}  // namespace l5pg::daemon
