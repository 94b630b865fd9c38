// Builds a K3 XTML prompt as a list of segments, each with its allow_special flag
// (encoding_k3.build_chat_segments' representation).  Only control tokens are allow_special; all
// text, tag names and attribute values are plain text, so a `<|open|>` typed by a user stays text.
//
//   open(tag, {{k, v}...})  <|open|> "tag" " k" "=\"" escape(v) "\"" ... <|sep|>
//   close(tag)              <|close|> "tag" <|sep|>
//   end_message()           close("message") <|end_of_msg|>
// Attribute values escape `&` -> `&amp;` then `"` -> `&quot;` (`<` and `>` are kept).  Empty text
// never produces a segment.  Segments are encoded one by one (BPE never crosses a boundary).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace k3 {

class Tokenizer;

inline constexpr std::string_view kXtmlOpen = "<|open|>";
inline constexpr std::string_view kXtmlClose = "<|close|>";
inline constexpr std::string_view kXtmlSep = "<|sep|>";
inline constexpr std::string_view kXtmlEndOfMsg = "<|end_of_msg|>";
// Stands for one image until the vision processor substitutes its media prompt; not a token.
inline constexpr std::string_view kImagePlaceholder = "<|kimi_image_placeholder|>";

struct ChatSegment {
  std::string text;
  bool allow_special = false;
  bool operator==(const ChatSegment&) const = default;
};

using XtmlAttrs = std::vector<std::pair<std::string_view, std::string>>;

class XtmlWriter {
 public:
  void special(std::string_view text);
  void text(std::string_view text);
  void open(std::string_view tag, const XtmlAttrs& attrs = {});
  void close(std::string_view tag);
  void end_message();

  const std::vector<ChatSegment>& segments() const { return segments_; }
  std::vector<ChatSegment> take() { return std::move(segments_); }

 private:
  std::vector<ChatSegment> segments_;
};

std::string xtml_escape_attr(std::string_view value);
// All segment texts concatenated (special tokens written literally).
std::string segments_text(const std::vector<ChatSegment>& segments);
// Token ids: allow_special segments with every special recognised, the others as plain text.
std::vector<int32_t> encode_segments(const Tokenizer& tokenizer, const std::vector<ChatSegment>& segments);

}  // namespace k3
