// Short, safe descriptions of untrusted JSON values for error messages.
// Never dump an untrusted value whole: nlohmann's parser is iterative and accepts a value nested
// 100,000 levels deep, but dump() recurses once per level and overflows the stack; a huge value
// would also flood the message.  Scalars are shown as written (strings quoted, escaped and cut
// short, so a NUL or invalid UTF-8 cannot garble the message); arrays and objects by type and size.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace k3 {

inline std::string json_preview(const nlohmann::json& j, size_t max_chars = 40) {
  using value_t = nlohmann::json::value_t;
  switch (j.type()) {
    case value_t::array: return "an array of " + std::to_string(j.size()) + (j.size() == 1 ? " entry" : " entries");
    case value_t::object: return "an object with " + std::to_string(j.size()) + (j.size() == 1 ? " key" : " keys");
    case value_t::binary: return "binary data";
    case value_t::discarded: return "a discarded value";
    case value_t::string: {
      const std::string& s = j.get_ref<const std::string&>();
      if (s.size() <= max_chars) return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      // Escape only the shown prefix (a cut UTF-8 sequence becomes U+FFFD instead of throwing).
      const std::string shown =
          nlohmann::json(s.substr(0, max_chars)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      return shown.substr(0, shown.size() - 1) + "...\" (" + std::to_string(s.size()) + " characters)";
    }
    default: return j.dump();  // null, boolean, number: a few characters, no recursion
  }
}

}  // namespace k3
