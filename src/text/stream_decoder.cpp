#include "text/stream_decoder.h"

#include "base/error.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace k3 {

std::string StreamDecoder::push(int32_t id) {
  K3_CHECK(tokenizer_ != nullptr, "StreamDecoder::push(id) needs a tokenizer");
  return push_bytes(tokenizer_->token_bytes(id));
}

std::string StreamDecoder::push_bytes(std::string_view bytes) {
  pending_.append(bytes);
  const size_t keep = utf8::truncated_tail(pending_);
  std::string_view ready = std::string_view(pending_).substr(0, pending_.size() - keep);
  std::string out = utf8::is_valid(ready) ? std::string(ready) : utf8::sanitize(ready);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8::sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace k3
