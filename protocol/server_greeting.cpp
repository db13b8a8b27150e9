#include "protocol/server_greeting.hpp"

#include <algorithm>

#include "protocol/backend_messages.hpp"
#include "protocol/error_response.hpp"
#include "protocol/framing.hpp"
#include "protocol/wire.hpp"

namespace l5pg::protocol {
namespace {

// The NUL-terminated string at the start of `in`, which then starts after it; false if no
// NUL is within bounds.
bool take_cstring(std::span<const std::byte>& in, std::string& out) {
    const auto nul = std::find(in.begin(), in.end(), std::byte{0});
    if (nul == in.end())
        return false;
    out.assign(reinterpret_cast<const char*>(in.data()), static_cast<size_t>(nul - in.begin()));
    in = in.subspan(out.size() + 1);
    return true;
}

}  // namespace

bool parse_parameter_status(std::span<const std::byte> body, std::string& name,
                            std::string& value) {
    return take_cstring(body, name) && take_cstring(body, value) && body.empty();
}

void ServerGreeting::set_parameter(std::string_view name, std::string_view value) {
    for (auto& [key, current] : parameters)
        if (key == name) {
            current = value;
            return;
        }
    parameters.emplace_back(name, value);
}

std::vector<std::byte> ServerGreeting::build(CancelKey client_key) const {
    BackendWriter out;
    out.authentication_ok();
    for (const auto& [name, value] : parameters)
        out.parameter_status(name, value);
    out.backend_key_data(client_key.backend_pid, client_key.secret);
    out.ready_for_query('I');
    return out.take();
}

GreetingReader::Status GreetingReader::feed(std::span<const std::byte> bytes) {
    buffer_.append(bytes);
    if (status_ == Status::NeedMore)
        status_ = parse();
    return status_;
}

std::optional<CancelKey> parse_backend_key_data(std::span<const std::byte> body) {
    if (body.size() != 8)
        return std::nullopt;
    return CancelKey{read_be32(body.data()), read_be32(body.data() + 4)};
}

GreetingReader::Status GreetingReader::parse() {
    for (;;) {
        const MessageView msg = buffer_.next(kMaxSize);
        if (msg.status == ParseStatus::Invalid)
            return Status::NotPoolable;
        if (msg.status == ParseStatus::NeedMore)
            return buffer_.size() > kMaxSize ? Status::NotPoolable : Status::NeedMore;
        switch (msg.type) {
            case 'R':  // AuthenticationOk only: any other request is an exchange we do not do
                if (msg.body.size() != 4 || read_be32(msg.body.data()) != 0 || authenticated_)
                    return Status::NotPoolable;
                authenticated_ = true;
                break;
            case 'S': {
                std::string name, value;
                if (!authenticated_ || !parse_parameter_status(msg.body, name, value))
                    return Status::NotPoolable;
                greeting_.set_parameter(name, value);
                break;
            }
            case 'K': {
                const std::optional<CancelKey> key = parse_backend_key_data(msg.body);
                if (!authenticated_ || keyed_ || !key)
                    return Status::NotPoolable;
                greeting_.key = *key;
                keyed_ = true;
                break;
            }
            case 'Z':
                if (!keyed_ || msg.body.size() != 1 || msg.body[0] != std::byte{'I'})
                    return Status::NotPoolable;
                return Status::Complete;
            case 'E': {
                const std::optional<ReceivedError> error = read_error_response(msg.body);
                too_many_connections_ = error && error->sqlstate == kSqlstateTooManyConnections;
                return Status::NotPoolable;
            }
            default:
                return Status::NotPoolable;
        }
    }
}

}  // namespace l5pg::protocol
