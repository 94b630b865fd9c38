#include "io/json_document.h"

#include <set>
#include <unordered_set>
#include <vector>

#include "base/error.h"

namespace k3 {

using nlohmann::json;

namespace {

// nlohmann's DOM builder behind a SAX interface that also notes the first repeated key.  (The
// parser_callback_t route looks for discarded values in the enclosing object each time a nested
// object closes, which is quadratic in its size: a safetensors header of thousands of tensors.)
class DuplicateNotingSax {
 public:
  DuplicateNotingSax(json& result, DuplicateKey* duplicate) : dom_(result, true), duplicate_(duplicate) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return dom_.number_float(v, s); }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    frames_.push_back({true, {}, {}});
    return dom_.start_object(n);
  }
  bool end_object() {
    frames_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    frames_.push_back({false, {}, {}});
    return dom_.start_array(n);
  }
  bool end_array() {
    frames_.pop_back();
    return dom_.end_array();
  }
  bool key(json::string_t& k) {
    if (duplicate_->depth == 0 && !frames_.empty()) {
      Frame& f = frames_.back();
      f.last = k;
      if (!f.keys.insert(k).second) {
        int depth = 0;
        for (const Frame& g : frames_) {
          if (!g.object) continue;
          ++depth;
          if (!g.last.empty()) duplicate_->path += (duplicate_->path.empty() ? "" : ".") + g.last;
        }
        duplicate_->depth = depth;
      }
    }
    return dom_.key(k);
  }
  bool parse_error(std::size_t pos, const std::string& token, const nlohmann::detail::exception& e) {
    return dom_.parse_error(pos, token, e);
  }

 private:
  struct Frame {
    bool object;
    std::unordered_set<std::string> keys;
    std::string last;  // the latest key (the path to a repeated one)
  };
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  DuplicateKey* duplicate_;
  std::vector<Frame> frames_;
};

}  // namespace

json parse_json_noting_duplicates(const char* begin, const char* end, DuplicateKey* duplicate) {
  *duplicate = DuplicateKey{};
  json result;
  DuplicateNotingSax sax(result, duplicate);
  json::sax_parse(begin, end, &sax);  // throws nlohmann's parse_error on bad syntax
  return result;
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
