// Parses the header of an XTML tag as the model writes it between <|open|> and <|sep|>:
// `name key="value" key2="value2"`.  Values are unescaped (&quot; then &amp;, the inverse of
// xtml_escape_attr).  Parsing is lenient: whatever does not fit the shape is skipped and `clean`
// is cleared.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace k3 {

struct XtmlTag {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;
  bool clean = true;

  // The value of an attribute, or "" when absent.
  std::string attr(std::string_view key) const;
};

XtmlTag parse_xtml_tag(std::string_view header);
std::string xtml_unescape_attr(std::string_view value);

}  // namespace k3
