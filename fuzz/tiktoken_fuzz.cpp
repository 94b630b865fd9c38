// Loading a checkpoint's tokenizer (Tokenizer::from_model_dir, text/tokenizer.h): the input is
// tiktoken.model, optionally followed by a line "--- tokenizer_config.json ---" and that file
// (without it the directory has no tokenizer_config.json and K3's special names apply).
// Properties: loading returns or throws k3::Error; the rank file of a loaded tokenizer writes
// back (BpeRanks::to_tiktoken) as a file that parses to the same ranks; encoding a fixed text
// with the loaded tokenizer either throws k3::Error (a byte without a token) or decodes back to
// that text, and the streaming decoder gives the same text token by token.
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "fuzz_support.h"
#include "text/bpe_ranks.h"
#include "text/stream_decoder.h"
#include "text/tokenizer.h"

using namespace k3;

namespace {

constexpr std::string_view kConfigMarker = "--- tokenizer_config.json ---\n";
constexpr std::string_view kSample =
    "Hello, world!  It's 2026: \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x99\x82\n\t<|open|>message<|sep|>x = [1, 22, 333];";

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = fuzz::as_text(data, size);
  const std::string dir = fuzz::scratch_dir() + "/tokenizer";
  std::filesystem::create_directories(dir);
  const size_t marker = input.find(kConfigMarker);
  fuzz::write_file(dir + "/tiktoken.model", input.substr(0, marker));
  const std::string config_path = dir + "/tokenizer_config.json";
  if (marker != std::string_view::npos)
    fuzz::write_file(config_path, input.substr(marker + kConfigMarker.size()));
  else
    std::remove(config_path.c_str());

  std::optional<Tokenizer> tok;
  try {
    tok.emplace(Tokenizer::from_model_dir(dir));
  } catch (const Error&) {
    return 0;
  }

  const std::string written = tok->ranks().to_tiktoken();
  const BpeRanks again = BpeRanks::parse_tiktoken(written, "the rewritten tiktoken.model");
  K3_FUZZ_ASSERT(again.to_tiktoken() == written, "the rank file does not survive a write and a read");
  K3_FUZZ_ASSERT(again.size() == tok->ranks().size() && again.end_rank() == tok->ranks().end_rank(),
                 "the rewritten rank file has other ranks");

  for (const bool allow_special : {false, true}) {
    std::vector<int32_t> ids;
    try {
      ids = tok->encode(kSample, allow_special);
    } catch (const Error&) {
      continue;  // the vocabulary lacks a byte of the sample
    }
    const std::string text = tok->decode(ids);
    K3_FUZZ_ASSERT(text == kSample, "encode then decode gave '", text, "'");
    StreamDecoder stream(*tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    K3_FUZZ_ASSERT(streamed == text, "the streaming decoder gave '", streamed, "'");
  }
  return 0;
}
