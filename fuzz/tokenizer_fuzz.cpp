// Encoding arbitrary bytes and decoding arbitrary ids (text/tokenizer.h, text/stream_decoder.h)
// with the synthetic Kimi-style tokenizer (fuzz_support.h).  The first byte picks the mode:
//   even: the rest is text, encoded with allow_special = (byte & 2);
//   odd:  the rest is token ids, two little-endian bytes each, taken modulo vocab_size + 16 so
//         that unknown ids come up too.
// Properties: encode never throws and decode(encode(bytes)) is the bytes with invalid UTF-8
// replaced as Python does (utf8::sanitize), with no special ids unless allowed; decode returns
// valid UTF-8 or throws k3::Error for an unknown id; the streaming decoder, fed id by id, gives
// exactly decode()'s text; and text that decode produced encodes (specials allowed) back to ids
// that decode to the same text.
#include <string>
#include <vector>

#include "base/error.h"
#include "fuzz_support.h"
#include "text/stream_decoder.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

using namespace k3;

namespace {

std::string streamed(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  StreamDecoder stream(tok);
  std::string out;
  for (int32_t id : ids) out += stream.push(id);
  return out + stream.flush();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Tokenizer& tok = fuzz::synth_tokenizer();
  const uint8_t mode = data[0];
  const std::string_view rest = fuzz::as_text(data + 1, size - 1);
  if ((mode & 1) == 0) {
    const bool allow_special = (mode & 2) != 0;
    const std::vector<int32_t> ids = tok.encode(rest, allow_special);
    for (int32_t id : ids) {
      K3_FUZZ_ASSERT(id >= 0 && id < tok.vocab_size(), "encode produced id ", id);
      K3_FUZZ_ASSERT(allow_special || !tok.is_special(id), "encode produced special id ", id, " without allow_special");
    }
    const std::string text = tok.decode(ids);
    K3_FUZZ_ASSERT(text == utf8::sanitize(rest), "decode(encode(x)) is '", text, "'");
    K3_FUZZ_ASSERT(tok.decode_bytes(ids) == text, "decode_bytes differs from decode for valid UTF-8");
    K3_FUZZ_ASSERT(streamed(tok, ids) == text, "the streaming decoder differs from decode");
    return 0;
  }
  std::vector<int32_t> ids;
  const int32_t range = tok.vocab_size() + 16;
  for (size_t i = 0; i + 1 < rest.size(); i += 2)
    ids.push_back((static_cast<uint8_t>(rest[i]) | static_cast<uint8_t>(rest[i + 1]) << 8) % range);
  std::string text;
  try {
    text = tok.decode(ids);
  } catch (const Error&) {
    bool unknown = false;
    for (int32_t id : ids) unknown |= id >= tok.vocab_size();
    K3_FUZZ_ASSERT(unknown, "decode refused ids that are all in the vocabulary");
    return 0;
  }
  K3_FUZZ_ASSERT(utf8::is_valid(text), "decode returned invalid UTF-8");
  K3_FUZZ_ASSERT(streamed(tok, ids) == text, "the streaming decoder differs from decode");
  K3_FUZZ_ASSERT(tok.decode(tok.encode(text, true)) == text, "decoded text does not survive encode + decode");
  return 0;
}
