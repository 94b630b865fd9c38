// k3 detokenize: a JSON array of token ids on stdin -> the decoded text on stdout (exactly the text:
// no newline is added; invalid UTF-8 from partial characters becomes U+FFFD).
//   k3 detokenize --tiktoken FILE [--pattern k3|cl100k|o200k]     k3 detokenize --model DIR
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/commands.h"
#include "io/json_preview.h"
#include "text/py_json.h"
#include "text/tokenizer.h"

namespace k3::cli {

void add_detokenize_command(CLI::App& app, Runner& run) {
  auto a = std::make_shared<TokenizerArgs>();
  CLI::App* sub = app.add_subcommand("detokenize", "Decode a JSON array of token ids from stdin; print the text");
  add_tokenizer_options(sub, *a);
  sub->callback([a, &run] {
    run = [a]() {
      const Tokenizer tokenizer = load_tokenizer(*a);
      const std::string text = read_stdin();
      // nlohmann's parser ends the input at a NUL byte ("[1, 2]\0[3]" decoded 1 and 2 only), and
      // dump() of an entry nested 100,000 levels deep overflowed the stack.
      const size_t nul = text.find('\0');
      K3_CHECK(nul == std::string::npos, "stdin: contains a NUL byte at offset ", nul,
               "; expected a JSON array of token ids");
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
      write_stdout(tokenizer.decode(ids));
      return 0;
    };
  });
}

}  // namespace k3::cli
