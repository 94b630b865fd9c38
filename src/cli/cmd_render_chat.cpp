// k3 render-chat: an OpenAI /v1/chat/completions request body -> the K3 XTML prompt.
//   k3 render-chat --request FILE.json                 the prompt text, special tokens written literally
//   k3 render-chat --request FILE.json --segments      [{"text", "allow_special"}, ...] as JSON
//   k3 render-chat --request FILE.json --ids (--tiktoken FILE [--pattern ...] | --model DIR)
// FILE "-" reads stdin.  The text is printed exactly (no newline added); JSON output ends in one.
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/commands.h"
#include "io/checkpoint.h"
#include "text/py_json.h"
#include "text/tokenizer.h"
#include "text/xtml_renderer.h"

namespace k3::cli {

void add_render_chat_command(CLI::App& app, Runner& run) {
  struct Args {
    TokenizerArgs tok;
    std::string request;
    bool ids = false, segments = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("render-chat", "Render a chat request into the K3 prompt (text, segments or ids)");
  sub->add_option("--request", a->request, "Request body (JSON file, - for stdin)")->required();
  sub->add_flag("--ids", a->ids, "Print token ids (JSON array) instead of text");
  sub->add_flag("--segments", a->segments, "Print the segments with their allow_special flags (JSON)");
  add_tokenizer_options(sub, a->tok);
  sub->callback([a, &run] {
    run = [a]() {
      K3_CHECK(!(a->ids && a->segments), "give --ids or --segments, not both");
      const std::string body_text = a->request == "-" ? read_stdin() : read_text_file(a->request);
      K3_CHECK(!json_nests_deeper_than(body_text), a->request, ": JSON nests arrays or objects more than ", kMaxJsonDepth,
               " levels deep");
      // (ojson::parse takes quadratic time in an object's keys and stops at a NUL byte, silently
      // ignoring the rest of the body.)
      ojson body;
      try {
        body = py_json_parse(body_text);
      } catch (const Error& e) {
        fail(a->request, ": invalid JSON (", e.what(), ")");
      }
      const std::vector<ChatSegment> segments = render_chat(parse_chat_request(body));
      if (a->ids) {
        const Tokenizer tokenizer = load_tokenizer(a->tok);
        write_stdout(nlohmann::json(encode_segments(tokenizer, segments)).dump() + "\n");
      } else if (a->segments) {
        ojson out = ojson::array();
        for (const ChatSegment& s : segments) out.push_back({{"text", s.text}, {"allow_special", s.allow_special}});
        write_stdout(out.dump() + "\n");
      } else {
        write_stdout(segments_text(segments));
      }
      return 0;
    };
  });
}

}  // namespace k3::cli
