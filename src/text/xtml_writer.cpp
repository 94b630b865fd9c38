#include "text/xtml_writer.h"

#include "text/tokenizer.h"

namespace k3 {

void XtmlWriter::special(std::string_view text) {
  if (!text.empty()) segments_.push_back({std::string(text), true});
}

void XtmlWriter::text(std::string_view text) {
  if (!text.empty()) segments_.push_back({std::string(text), false});
}

void XtmlWriter::open(std::string_view tag, const XtmlAttrs& attrs) {
  special(kXtmlOpen);
  text(tag);
  for (const auto& [key, value] : attrs) {
    std::string spaced_key = " ";
    spaced_key += key;
    text(spaced_key);
    text("=\"");
    text(xtml_escape_attr(value));
    text("\"");
  }
  special(kXtmlSep);
}

void XtmlWriter::close(std::string_view tag) {
  special(kXtmlClose);
  text(tag);
  special(kXtmlSep);
}

void XtmlWriter::end_message() {
  close("message");
  special(kXtmlEndOfMsg);
}

std::string xtml_escape_attr(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '&') {
      out += "&amp;";
    } else if (c == '"') {
      out += "&quot;";
    } else {
      out += c;
    }
  }
  return out;
}

std::string segments_text(const std::vector<ChatSegment>& segments) {
  std::string out;
  for (const ChatSegment& s : segments) out += s.text;
  return out;
}

std::vector<int32_t> encode_segments(const Tokenizer& tokenizer, const std::vector<ChatSegment>& segments) {
  std::vector<int32_t> ids;
  for (const ChatSegment& s : segments) tokenizer.encode_append(s.text, s.allow_special, ids);
  return ids;
}

}  // namespace k3
