#include "text/xtml_tag.h"

namespace k3 {

std::string XtmlTag::attr(std::string_view key) const {
  for (const auto& [k, v] : attrs)
    if (k == key) return v;
  return "";
}

std::string xtml_unescape_attr(std::string_view value) {
  // &quot; first, then &amp; (so "&amp;quot;" becomes "&quot;", the inverse of the escape order).
  const auto replace_all = [](std::string_view s, std::string_view from, std::string_view to) {
    std::string out;
    size_t pos = 0, hit;
    while ((hit = s.find(from, pos)) != std::string_view::npos) {
      out.append(s.substr(pos, hit - pos));
      out.append(to);
      pos = hit + from.size();
    }
    out.append(s.substr(pos));
    return out;
  };
  return replace_all(replace_all(value, "&quot;", "\""), "&amp;", "&");
}

XtmlTag parse_xtml_tag(std::string_view header) {
  XtmlTag tag;
  size_t i = header.find(' ');
  tag.name = std::string(header.substr(0, i));
  while (i != std::string_view::npos && i < header.size()) {
    while (i < header.size() && header[i] == ' ') ++i;
    if (i >= header.size()) break;
    const size_t eq = header.find("=\"", i);
    if (eq == std::string_view::npos) {
      tag.clean = false;
      break;
    }
    const size_t close = header.find('"', eq + 2);
    if (close == std::string_view::npos) {
      tag.clean = false;
      break;
    }
    tag.attrs.emplace_back(std::string(header.substr(i, eq - i)), xtml_unescape_attr(header.substr(eq + 2, close - eq - 2)));
    i = close + 1;
    if (i < header.size() && header[i] != ' ') tag.clean = false;
  }
  return tag;
}

}  // namespace k3
