// Standard base64 (RFC 4648, '+' '/' alphabet, '=' padding), as used by tiktoken rank files.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace k3::base64 {

std::string encode(std::string_view bytes);
// nullopt when `text` is not canonical padded base64.
std::optional<std::string> decode(std::string_view text);

}  // namespace k3::base64
