#include "io/json_document.h"

#include <set>
#include <vector>

#include "base/error.h"

namespace k3 {

using nlohmann::json;

json parse_json_noting_duplicates(const char* begin, const char* end, DuplicateKey* duplicate) {
  *duplicate = DuplicateKey{};
  // nlohmann's callback depth: object_start reports the depth outside the new object, a key the
  // depth inside it (1 for the top level's keys).  keys[d - 1] holds the keys seen so far in the
  // open object at depth d; path[d - 1] the latest key at that depth.
  std::vector<std::set<std::string>> keys;
  std::vector<std::string> path;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      keys.resize(static_cast<size_t>(depth));
      keys.emplace_back();
    } else if (event == json::parse_event_t::key && depth >= 1 && duplicate->depth == 0) {
      const auto d = static_cast<size_t>(depth);
      if (keys.size() < d) keys.resize(d);
      path.resize(d);
      path[d - 1] = parsed.get<std::string>();
      if (!keys[d - 1].insert(path[d - 1]).second) {
        duplicate->depth = depth;
        for (size_t i = 0; i < d; ++i)
          if (!path[i].empty()) duplicate->path += (duplicate->path.empty() ? "" : ".") + path[i];
      }
    }
    return true;
  };
  return json::parse(begin, end, cb);
}

json parse_json_document(const std::string& text, const std::string& source) {
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    fail(source, ": contains a NUL byte at offset ", nul, " (expected JSON text)");
  DuplicateKey duplicate;
  json doc;
  try {
    doc = parse_json_noting_duplicates(text.data(), text.data() + text.size(), &duplicate);
  } catch (const json::exception& e) {
    fail(source, ": not valid JSON: ", e.what());
  }
  if (duplicate.depth > 0)
    fail(source, ": key '", duplicate.path, "' appears twice (JSON keeps only one of them; remove the other)");
  return doc;
}

}  // namespace k3
