// Stop strings on streamed text (the OpenAI `stop` field).  push() returns the text that is safe
// to emit now: whatever can no longer be the start of a stop string.  A possible partial match at
// the end is held back until the next push decides it.  On a match, the stop string and all
// that follows are dropped and matched() turns true.  Text is valid UTF-8 in, valid UTF-8 out (a
// held suffix always starts a character, because every stop string does).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace k3::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops = {}) : stops_(std::move(stops)) {}

  std::string push(std::string_view text);
  // What is still held back (the stream ended without a match).
  std::string flush();
  bool matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
};

}  // namespace k3::server
