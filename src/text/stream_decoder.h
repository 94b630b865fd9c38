// Incremental detokenization for streamed output: feed ids one at a time, get back only text that
// is complete UTF-8.  Bytes of a character split across tokens are held back until the character
// is complete; an ill-formed sequence becomes U+FFFD as soon as it is known to be ill-formed; a
// truncated character left at the end becomes U+FFFD on flush().  The concatenation of everything
// returned equals Tokenizer::decode() of all ids.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace k3 {

class Tokenizer;

class StreamDecoder {
 public:
  // Without a tokenizer, only push_bytes() is available.
  StreamDecoder() = default;
  explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}

  // Text completed by this token (possibly empty).  Throws k3::Error for an unknown id.
  std::string push(int32_t id);
  // The same for raw bytes.
  std::string push_bytes(std::string_view bytes);
  // Whatever is still held back (a truncated character becomes U+FFFD); resets the decoder.
  std::string flush();
  // Bytes currently held back (0..3).
  size_t pending() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_ = nullptr;
  std::string pending_;
};

}  // namespace k3
