#include "text/chat_output_parser.h"

#include <cstdio>
#include <utility>

#include "base/error.h"
#include "text/chat_request.h"
#include "text/special_tokens.h"
#include "text/tokenizer.h"
#include "text/utf8.h"
#include "text/xtml_tag.h"
#include "text/xtml_writer.h"

namespace k3 {

// The grammar as a state machine; see the header for the policy on malformed output.
class ChatOutputParser::Machine {
 public:
  explicit Machine(const ChatParserOptions& o) : opt_(o), rng_(o.id_seed != 0 ? o.id_seed : std::random_device{}()) {
    state_ = o.thinking ? State::kThink : State::kResponse;
    response_seen_ = !o.thinking;
  }

  void special(std::string_view tok) {
    // A special token ends the run of text before it (see route(), kTools).
    stray_blank_.clear();
    stray_run_ = false;
    if (stopped_) {
      degraded_ = true;
      return;
    }
    if (tok == kXtmlOpen || tok == kXtmlClose) {
      if (pending_ != Pending::kNone) broken_pending();
      pending_ = tok == kXtmlOpen ? Pending::kOpen : Pending::kClose;
      header_.clear();
    } else if (tok == kXtmlSep) {
      if (pending_ == Pending::kNone) {
        unexpected(std::string(tok));
        return;
      }
      const bool open = pending_ == Pending::kOpen;
      pending_ = Pending::kNone;
      open ? on_open(header_) : on_close(header_);
    } else if (tok == kXtmlEndOfMsg) {
      if (pending_ != Pending::kNone) broken_pending();
      if (state_ != State::kDone) degraded_ = true;
      stopped_ = true;
    } else {
      if (pending_ != Pending::kNone) broken_pending();
      unexpected(std::string(tok));
    }
  }

  void text(std::string_view t) {
    if (t.empty()) return;
    if (stopped_) {
      degraded_ = true;
    } else if (pending_ != Pending::kNone) {
      header_ += t;
    } else {
      route(t, false);
    }
  }

  ParsedChatMessage finish() {
    // A tag whose header the end of the output cut off (max_tokens inside "<|open|>call tool=")
    // is markup, not text of the channel it would have left: it is dropped, not kept as literal
    // text, so a cut tool call never shows up in the content.  (Its header never streamed.)
    if (pending_ != Pending::kNone) {
      pending_ = Pending::kNone;
      degraded_ = true;
    }
    if (!stopped_) degraded_ = true;
    ParsedChatMessage m;
    switch (state_) {
      case State::kThink:  // the output stopped inside the think channel: its text stays reasoning
        degraded_ = true;
        break;
      case State::kCall: case State::kArg: case State::kJson:  // unterminated call: dropped
        degraded_ = true;
        break;
      default: break;
    }
    flush_between();
    if (!held_.empty() && calls_.empty()) delta_.content += held_;
    held_.clear();
    if (!reasoning_.empty()) m.reasoning_content = reasoning_;
    if (!content_.empty() && !(calls_.size() > 0 && utf8::is_blank(content_))) m.content = content_;
    m.tool_calls = calls_;
    m.stopped = stopped_;
    m.degraded = degraded_;
    return m;
  }

  ChatDelta take_delta() { return std::exchange(delta_, ChatDelta{}); }

 private:
  enum class State { kThink, kResponse, kBetween, kTools, kCall, kArg, kJson, kSkipTools, kDone };
  enum class Pending { kNone, kOpen, kClose };
  struct Call {
    std::string name, raw;
    ojson args = ojson::object();
    bool json_block = false;
  };

  void add_reasoning(std::string_view t) {
    reasoning_ += t;
    delta_.reasoning += t;
  }

  // Content streams at once, except a whitespace-only beginning, which is held back until it is
  // known not to be dropped (it is when tool calls follow).
  void add_content(std::string_view t) {
    content_ += t;
    if (content_nonblank_) {
      delta_.content += t;
      return;
    }
    held_ += t;
    if (!utf8::is_blank(held_)) {
      delta_.content += held_;
      held_.clear();
      content_nonblank_ = true;
    }
  }

  // Text outside any channel before a response channel: content unless a response channel follows.
  void flush_between() {
    if (between_.empty()) return;
    const std::string t = std::exchange(between_, "");
    add_content(t);
  }

  void route(std::string_view t, bool markup) {
    switch (state_) {
      case State::kThink: add_reasoning(t); return;
      case State::kResponse: add_content(t); return;
      case State::kBetween:
        degraded_ = true;
        if (!response_seen_) between_ += t;  // after a response channel, vLLM keeps only its body
        return;
      case State::kTools: case State::kCall:
        // Whitespace between tags is layout and dropped; a run of text between two special
        // tokens that is not all whitespace is stray text, kept whole as content.  The run may
        // arrive in pieces (token by token), so its blank beginning waits until the run shows
        // which it is: streamed or not, the message is the same.
        if (!markup && !stray_run_) {
          stray_blank_ += t;
          if (utf8::is_blank(stray_blank_)) return;
          stray_run_ = true;
          degraded_ = true;
          add_content(std::exchange(stray_blank_, ""));
          return;
        }
        degraded_ = true;
        add_content(t);
        return;
      case State::kArg: arg_value_ += t; call_.raw += t; return;
      case State::kJson: call_.raw += t; return;
      case State::kSkipTools: return;
      case State::kDone: degraded_ = true; add_content(t); return;
    }
  }

  void unexpected(const std::string& literal) {
    degraded_ = true;
    route(literal, true);
  }

  void broken_pending() {
    const std::string literal = std::string(pending_ == Pending::kOpen ? kXtmlOpen : kXtmlClose) + header_;
    pending_ = Pending::kNone;
    unexpected(literal);
  }

  static std::string open_literal(std::string_view header) {
    return std::string(kXtmlOpen) + std::string(header) + std::string(kXtmlSep);
  }

  void enter_tools() {
    if (!response_seen_) degraded_ = true;
    flush_between();
    state_ = opt_.parse_tools ? State::kTools : State::kSkipTools;
  }

  // A call that cannot complete: its raw text becomes content.
  void abort_call() {
    degraded_ = true;
    add_content(call_.raw);
    call_ = Call{};
    state_ = State::kTools;
  }

  void start_call(const XtmlTag& tag, std::string_view header) {
    call_ = Call{};
    call_.name = tag.attr("tool");
    call_.raw = open_literal(header);
    if (!tag.clean) degraded_ = true;
    state_ = State::kCall;
  }

  void on_open(const std::string& header) {
    const XtmlTag tag = parse_xtml_tag(header);
    switch (state_) {
      case State::kThink:
        if (tag.name == "think" && reasoning_.empty() && !think_reopened_) {  // the prompt already opened it
          think_reopened_ = true;
          degraded_ = true;
          return;
        }
        if (tag.name == "response" || tag.name == "tools") {  // the think channel was never closed
          degraded_ = true;
          state_ = State::kBetween;
          return on_open(header);
        }
        break;
      case State::kBetween:
        if (tag.name == "response" && !response_seen_) {
          response_seen_ = true;
          between_.clear();
          state_ = State::kResponse;
          return;
        }
        if (tag.name == "tools" && !tools_seen_) {
          tools_seen_ = true;
          enter_tools();
          return;
        }
        break;
      case State::kTools: case State::kCall: case State::kArg: case State::kJson:
        if (state_ == State::kTools && tag.name == "call") return start_call(tag, header);
        if (state_ == State::kCall && tag.name == "argument") {
          arg_key_ = tag.attr("key");
          arg_type_ = tag.attr("type");
          arg_value_.clear();
          call_.raw += open_literal(header);
          state_ = State::kArg;
          return;
        }
        if (state_ == State::kCall && tag.name == "json") {
          call_.json_block = true;
          call_.raw += open_literal(header);
          state_ = State::kJson;
          return;
        }
        if (state_ != State::kTools) abort_call();
        degraded_ = true;
        if (tag.name == "call") return start_call(tag, header);
        add_content(open_literal(header));
        return;
      case State::kSkipTools: return;
      default: break;
    }
    unexpected(open_literal(header));
  }

  void on_close(const std::string& name) {
    const std::string literal = std::string(kXtmlClose) + name + std::string(kXtmlSep);
    switch (state_) {
      case State::kThink:
        if (name == "think") {
          state_ = State::kBetween;
          return;
        }
        if (name == "message") {  // the message ends inside the think channel: its text stays reasoning
          degraded_ = true;
          state_ = State::kDone;
          return;
        }
        break;
      case State::kResponse:
        if (close_channel(name, "response")) return;
        break;
      case State::kBetween:
        if (name == "message") {
          if (!response_seen_) degraded_ = true;
          flush_between();
          state_ = State::kDone;
          return;
        }
        break;
      case State::kSkipTools:
        if (name == "tools") state_ = State::kBetween;
        return;
      case State::kArg:
        if (name == "argument") return finish_argument(literal);
        abort_call();
        return on_close(name);
      case State::kJson:
        if (name == "json") {
          call_.raw += literal;
          state_ = State::kCall;
          return;
        }
        abort_call();
        return on_close(name);
      case State::kCall:
        if (name == "call") return complete_call(literal);
        abort_call();
        return on_close(name);
      case State::kTools:
        if (close_channel(name, "tools")) return;
        break;
      case State::kDone: break;
    }
    unexpected(literal);
  }

  // Closes `channel`, or (malformed) the whole message from inside it.
  bool close_channel(const std::string& name, std::string_view channel) {
    if (name != channel && name != "message") return false;
    if (name == "message") degraded_ = true;
    state_ = name == channel ? State::kBetween : State::kDone;
    return true;
  }

  void finish_argument(const std::string& literal) {
    ojson value = arg_value_;
    if (arg_type_ != "string") {
      std::optional<ojson> parsed = py_json_loads(arg_value_);
      if (parsed) value = std::move(*parsed);
    }
    call_.args[arg_key_] = std::move(value);
    call_.raw += literal;
    state_ = State::kCall;
  }

  void complete_call(const std::string& literal) {
    call_.raw += literal;
    if (call_.name.empty()) {
      abort_call();
      return;
    }
    ParsedToolCall c;
    c.index = static_cast<int>(calls_.size());
    c.id = new_id();
    c.name = call_.name;
    c.arguments = call_.json_block ? "{}" : py_json_dumps(call_.args);
    calls_.push_back(c);
    delta_.tool_calls.push_back(std::move(c));
    call_ = Call{};
    state_ = State::kTools;
  }

  std::string new_id() {
    while (true) {
      char buf[40];
      std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(rng_()),
                    static_cast<unsigned long long>(rng_()));
      std::string id = std::string("chatcmpl-tool-") + buf;
      bool unique = true;
      for (const ParsedToolCall& c : calls_) unique &= c.id != id;
      if (unique) return id;
    }
  }

  ChatParserOptions opt_;
  std::mt19937_64 rng_;
  State state_;
  Pending pending_ = Pending::kNone;
  std::string header_;
  bool stopped_ = false, degraded_ = false;
  bool response_seen_ = false, tools_seen_ = false, think_reopened_ = false;
  std::string reasoning_, content_, held_, between_;
  bool content_nonblank_ = false;
  // The run of text since the last special token, in the tools channel or a call: its blank
  // beginning (stray_blank_) until a non-blank piece makes it stray text (stray_run_).
  std::string stray_blank_;
  bool stray_run_ = false;
  Call call_;
  std::string arg_key_, arg_type_, arg_value_;
  std::vector<ParsedToolCall> calls_;
  ChatDelta delta_;
};

ChatParserOptions chat_parser_options(const ChatRequest& request) {
  ChatParserOptions o;
  o.thinking = request.options.thinking;
  const ojson& tc = request.options.tool_choice;
  o.parse_tools = request.tools.is_array() && !request.tools.empty() && !(tc.is_string() && tc == "none");
  return o;
}

ChatOutputParser::ChatOutputParser(const ChatParserOptions& options, const Tokenizer* tokenizer)
    : machine_(std::make_unique<Machine>(options)), tokenizer_(tokenizer) {}

ChatOutputParser::~ChatOutputParser() = default;

ChatDelta ChatOutputParser::feed_token(int32_t id) {
  K3_CHECK(tokenizer_ != nullptr, "ChatOutputParser::feed_token needs a tokenizer");
  if (tokenizer_->is_special(id)) return feed_special(tokenizer_->token_bytes(id));
  return feed_text(tokenizer_->token_bytes(id));
}

ChatDelta ChatOutputParser::feed_stop_token(int32_t id) {
  (void)id;  // whichever stop token it was, the message ends as <|end_of_msg|> ends it
  return feed_special(kXtmlEndOfMsg);
}

ChatDelta ChatOutputParser::feed_special(std::string_view token) {
  machine_->text(decoder_.flush());
  machine_->special(token);
  return machine_->take_delta();
}

ChatDelta ChatOutputParser::feed_text(std::string_view text) {
  machine_->text(decoder_.push_bytes(text));
  return machine_->take_delta();
}

ChatDelta ChatOutputParser::feed_with_specials(std::string_view text, const SpecialTokens& specials) {
  ChatDelta all;
  const auto add = [&all](ChatDelta d) {
    all.reasoning += d.reasoning;
    all.content += d.content;
    for (ParsedToolCall& c : d.tool_calls) all.tool_calls.push_back(std::move(c));
  };
  size_t pos = 0;
  while (pos < text.size()) {
    const std::optional<SpecialMatch> m = specials.find(text, pos);
    const size_t end = m ? m->pos : text.size();
    add(feed_text(text.substr(pos, end - pos)));
    if (!m) break;
    add(feed_special(text.substr(m->pos, m->len)));
    pos = m->pos + m->len;
  }
  return all;
}

ParsedChatMessage ChatOutputParser::finish(ChatDelta* last_delta) {
  machine_->text(decoder_.flush());
  ParsedChatMessage m = machine_->finish();
  ChatDelta d = machine_->take_delta();
  if (last_delta != nullptr) *last_delta = std::move(d);
  return m;
}

ojson ParsedChatMessage::to_openai() const {
  ojson m = ojson::object();
  m["role"] = "assistant";
  m["content"] = content ? ojson(*content) : ojson(nullptr);
  m["reasoning_content"] = reasoning_content ? ojson(*reasoning_content) : ojson(nullptr);
  if (!tool_calls.empty()) {
    ojson calls = ojson::array();
    for (const ParsedToolCall& c : tool_calls)
      calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    m["tool_calls"] = std::move(calls);
  }
  return m;
}

}  // namespace k3
