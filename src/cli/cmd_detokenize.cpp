// k3 detokenize: token ids on stdin -> the decoded text on stdout (exactly the text: no newline is
// added; invalid UTF-8 from partial characters becomes U+FFFD).  The ids are a JSON array (what
// `k3 tokenize` prints) or a list separated by spaces and/or commas (what `k3 generate` prints).
//   k3 detokenize --tiktoken FILE [--pattern k3|cl100k|o200k]     k3 detokenize --model DIR
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/commands.h"
#include "io/json_preview.h"
#include "text/py_json.h"
#include "text/tokenizer.h"

namespace k3::cli {

namespace {

// A JSON array of non-negative integers, e.g. "[1, 2, 3]" (k3 tokenize's output).
std::vector<int32_t> parse_json_ids(const std::string& text) {
  K3_CHECK(!json_nests_deeper_than(text), "stdin: expected a JSON array of token ids (it nests arrays or objects ",
           "more than ", kMaxJsonDepth, " levels deep)");
  nlohmann::json input;
  try {
    input = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("stdin: expected a JSON array of token ids (", e.what(), ")");
  }
  K3_CHECK(input.is_array(), "stdin: expected a JSON array of token ids, got ", json_preview(input));
  std::vector<int32_t> ids;
  for (size_t i = 0; i < input.size(); ++i) {
    const nlohmann::json& v = input[i];
    K3_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX, "stdin: entry ", i,
             " (", json_preview(v), ") is not a token id");
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

// Ids separated by whitespace and/or single commas, e.g. "1 2 3\n" (k3 generate's output) or
// "1,2,3" (a --prompt-ids value).  Blank input is no ids, as `generate --max-tokens 0` prints.
std::vector<int32_t> parse_plain_ids(std::string text) {
  for (char& c : text)
    if (c == '\r') c = ' ';  // CRLF line ends (a file saved on Windows)
  try {
    return parse_token_ids(text);
  } catch (const Error& e) {
    fail("stdin: ", e.what(), "; expected a JSON array of token ids or ids separated by spaces");
  }
}

}  // namespace

void add_detokenize_command(CLI::App& app, Runner& run) {
  auto a = std::make_shared<TokenizerArgs>();
  CLI::App* sub = app.add_subcommand("detokenize", "Decode token ids from stdin (a JSON array, or ids separated by spaces or commas as "
                                      "`k3 generate` prints them); print the text");
  add_tokenizer_options(sub, *a);
  sub->callback([a, &run] {
    run = [a]() {
      const Tokenizer tokenizer = load_tokenizer(*a);
      const std::string text = read_stdin();
      // nlohmann's parser ends the input at a NUL byte ("[1, 2]\0[3]" decoded 1 and 2 only), and
      // dump() of an entry nested 100,000 levels deep overflowed the stack.
      const size_t nul = text.find('\0');
      K3_CHECK(nul == std::string::npos, "stdin: contains a NUL byte at offset ", nul,
               "; expected a JSON array of token ids or ids separated by spaces");
      const size_t first = text.find_first_not_of(" \t\r\n");
      const std::vector<int32_t> ids =
          first != std::string::npos && text[first] == '[' ? parse_json_ids(text) : parse_plain_ids(text);
      write_stdout(tokenizer.decode(ids));
      return 0;
    };
  });
}

}  // namespace k3::cli
