#include "server/soak.h"

#include <httplib.h>
#include <png.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.h"
#include "server/load_test.h"
#include "text/base64.h"
#include "text/py_json.h"

namespace k3::server {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// splitmix64: the per-request generator.  Written out rather than std:: distributions, whose
// results differ between standard libraries: the same seed must give the same mix everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int uniform(int lo, int hi) { return lo + static_cast<int>(next() % static_cast<uint64_t>(hi - lo + 1)); }
  bool coin() { return (next() & 1) != 0; }

 private:
  uint64_t s_;
};

// ---- A small PNG ----

// An RGB w x h PNG of a pattern that depends on `seed` (libpng's simplified writer).
std::string make_png(int w, int h, int seed) {
  std::vector<unsigned char> rgb;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      rgb.push_back(static_cast<unsigned char>((x * 7 + seed * 31) & 255));
      rgb.push_back(static_cast<unsigned char>((y * 5 + seed * 17) & 255));
      rgb.push_back(static_cast<unsigned char>(((x ^ y) * (seed + 3)) & 255));
    }
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(w);
  image.height = static_cast<png_uint_32>(h);
  image.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  K3_CHECK(png_image_write_to_memory(&image, nullptr, &size, 0, rgb.data(), 0, nullptr), "PNG size: ",
           image.message);
  std::string png(size, '\0');
  K3_CHECK(png_image_write_to_memory(&image, png.data(), &size, 0, rgb.data(), 0, nullptr), "PNG: ", image.message);
  png.resize(size);
  return png;
}

// ---- What one request is ----

struct ServerFacts {
  std::string model;        // the id requests send
  int64_t context = 0;      // max_model_len
};

// One request, drawn from (seed, index).
struct Plan {
  SoakKind kind = SoakKind::kChat;
  std::string path = "/v1/chat/completions";
  std::string body;
  bool stream = false;
  int n = 1;
  int expect = 200;            // the status that makes it ok (200) or rejected (>= 400)
  bool image = false;          // 400 images_not_supported is also expected
  bool tool_required = false;  // every choice must carry tool calls unless cut by max_tokens
  bool json_schema = false;    // a choice that stopped must be a JSON object
  bool include_usage = false;  // the stream must carry a usage chunk
  int drop_after_events = -1;  // >= 0: the client drops the stream after that many events
  int give_up_ms = 0;          // > 0: the client's read timeout (it leaves before the headers)
};

// Kind weights, in percent: mostly valid requests, some of everything else.
constexpr std::array<int, kSoakKinds> kWeights = {14, 16, 10, 10, 6, 8, 8, 6, 4, 4, 4, 2, 4, 4};
static_assert([] {
  int sum = 0;
  for (int w : kWeights) sum += w;
  return sum == 100;
}());

const char* const kPrompts[] = {
    "Say hello.",
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three prime numbers.",
    "Explain what a lighthouse does.",
    "Translate 'good morning' into German.",
    "Give me a word that rhymes with cat.",
    "What colour is the sky at noon?",
    "Count from one to five.",
    "Name a fruit that is yellow.",
    "Describe a cup of tea in one sentence.",
    "What is two plus two?",
    "Tell me a fact about owls.",
    "Suggest a name for a cat.",
    "Why do leaves fall in autumn?",
    "Write one line of a song about trains.",
};
constexpr int kPromptCount = static_cast<int>(sizeof kPrompts / sizeof kPrompts[0]);

ojson user_message(const std::string& text) { return {{"role", "user"}, {"content", text}}; }

ojson weather_tool() {
  return {{"type", "function"},
          {"function",
           {{"name", "get_weather"},
            {"description", "The weather in a city"},
            {"parameters",
             {{"type", "object"},
              {"properties", {{"city", {{"type", "string"}}}}},
              {"required", ojson::array({"city"})}}}}}};
}

ojson answer_schema() {
  return {{"type", "json_schema"},
          {"json_schema",
           {{"name", "answer"},
            {"schema",
             {{"type", "object"},
              {"properties", {{"answer", {{"type", "string"}}}, {"score", {{"type", "integer"}}}}},
              {"required", ojson::array({"answer", "score"})},
              {"additionalProperties", false}}}}}};
}

SoakKind draw_kind(Rng& rng) {
  int r = rng.uniform(0, 99);
  for (int k = 0; k < kSoakKinds; ++k) {
    if (r < kWeights[k]) return static_cast<SoakKind>(k);
    r -= kWeights[k];
  }
  return SoakKind::kChat;
}

// The PNGs of the image kind: a fixed pool (built once), so the server's prefix cache sees a
// bounded set of prompts.
const std::vector<std::string>& png_urls() {
  static const std::vector<std::string> urls = [] {
    std::vector<std::string> v;
    const int sizes[][2] = {{32, 32}, {48, 32}, {64, 64}, {40, 56}};
    for (int i = 0; i < 4; ++i)
      v.push_back("data:image/png;base64," + base64::encode(make_png(sizes[i][0], sizes[i][1], i + 1)));
    return v;
  }();
  return urls;
}

Plan make_plan(const SoakOptions& o, const ServerFacts& f, uint64_t seed, uint64_t index) {
  Rng rng(seed ^ (index * 0xD1B54A32D192ED03ull));
  Plan p;
  // The first requests take each kind once, so even a short soak on a slow server covers them all.
  p.kind = index < kSoakKinds ? static_cast<SoakKind>(index) : draw_kind(rng);
  ojson body = ojson::object();
  if (!f.model.empty()) body["model"] = f.model;
  body["messages"] = ojson::array({user_message(kPrompts[rng.uniform(0, kPromptCount - 1)])});
  body["max_tokens"] = rng.uniform(1, o.max_tokens);
  body["temperature"] = rng.uniform(0, 10) / 10.0;
  body["seed"] = rng.uniform(0, 1 << 20);
  const auto set_stream = [&](bool stream) {
    p.stream = stream;
    if (!stream) return;
    body["stream"] = true;
    p.include_usage = rng.coin();
    if (p.include_usage) body["stream_options"] = {{"include_usage", true}};
  };
  switch (p.kind) {
    case SoakKind::kChat: set_stream(false); break;
    case SoakKind::kChatStream: set_stream(true); break;
    case SoakKind::kTools:
      body["tools"] = ojson::array({weather_tool()});
      p.tool_required = rng.coin();
      body["tool_choice"] = p.tool_required ? "required" : "auto";
      // Room to close a forced call: its markup alone takes tens of tokens (a budget too small for
      // it ends with finish_reason "length", docs/api.md).
      body["max_tokens"] = std::max(rng.uniform(48, 128), o.max_tokens);
      set_stream(rng.coin());
      break;
    case SoakKind::kChoices:
      p.n = rng.uniform(2, 3);
      body["n"] = p.n;
      set_stream(rng.coin());
      break;
    case SoakKind::kImage: {
      const std::vector<std::string>& urls = png_urls();
      body["messages"] = ojson::array(
          {{{"role", "user"},
            {"content", ojson::array({{{"type", "text"}, {"text", "What is in this picture?"}},
                                      {{"type", "image_url"},
                                       {"image_url", {{"url", urls[rng.uniform(0, static_cast<int>(urls.size()) - 1)]}}}}})}}});
      p.image = true;
      set_stream(rng.coin());
      break;
    }
    case SoakKind::kJsonSchema:
      body["response_format"] = answer_schema();
      body["max_tokens"] = std::max(48, o.max_tokens);
      p.json_schema = true;
      set_stream(rng.coin());
      break;
    case SoakKind::kDisconnectStream:
      p.n = rng.uniform(1, 2);
      if (p.n > 1) body["n"] = p.n;
      body["max_tokens"] = std::max(32, o.max_tokens);
      set_stream(true);
      p.drop_after_events = rng.uniform(0, 6);
      break;
    case SoakKind::kDisconnectEarly:
      body["max_tokens"] = std::max(32, o.max_tokens);
      set_stream(false);
      p.give_up_ms = rng.uniform(5, 300);
      break;
    case SoakKind::kMalformedJson: {
      p.expect = 400;
      const std::string full = body.dump();
      switch (rng.uniform(0, 3)) {
        case 0: p.body = full.substr(0, static_cast<size_t>(rng.uniform(1, static_cast<int>(full.size()) - 1))); break;
        case 1: p.body = "this is not JSON"; break;
        case 2: p.body = "[" + full + "]"; break;
        default: p.body = ""; break;
      }
      return p;
    }
    case SoakKind::kWrongType:
      p.expect = 400;
      switch (rng.uniform(0, 3)) {
        case 0: body["messages"] = "hello"; break;
        case 1: body["max_tokens"] = "ten"; break;
        case 2: body["temperature"] = "warm"; break;
        default: body["tools"] = weather_tool(); break;  // an object, not a list
      }
      break;
    case SoakKind::kUnknownModel:
      p.expect = 404;
      body["model"] = cat("no-such-model-", rng.uniform(0, 999));
      break;
    case SoakKind::kOversizedBody:
      p.expect = 413;
      // A valid request padded past the limit with spaces inside the JSON: only the size is wrong.
      p.body = body.dump();
      p.body.insert(1, std::string(static_cast<size_t>(o.max_body_bytes) + (64u << 10), ' '));
      return p;
    case SoakKind::kLongPrompt:
      p.expect = 400;
      if (rng.coin()) {
        // Token ids: exactly the context, which leaves no room for output.
        p.path = "/v1/completions";
        body.erase("messages");
        body["prompt"] = ojson::array();
        for (int64_t i = 0; i < f.context; ++i) body["prompt"].push_back(static_cast<int>(7 + i % 50));
      } else {
        // Chat text of as many words as the context: at least a token each, with the template's.
        std::string text;
        text.reserve(static_cast<size_t>(f.context) * 3);
        for (int64_t i = 0; i < f.context; ++i) text += i % 2 ? " a" : " b";
        body["messages"] = ojson::array({user_message(text)});
      }
      break;
    case SoakKind::kHugeMaxTokens:
      p.expect = 400;
      if (rng.coin())
        body["max_tokens"] = 1e19;
      else
        body["max_tokens"] = UINT64_MAX;
      break;
    case SoakKind::kCount: break;
  }
  p.body = body.dump();
  return p;
}

// ---- Checking an answer ----

std::string first_line(std::string s, size_t max = 160) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  if (s.size() > max) s = s.substr(0, max) + "...";
  return s;
}

bool is_finish_reason(const ojson& v) {
  return v.is_string() && (v == "stop" || v == "length" || v == "tool_calls");
}

// A tool call as the API gives it: type function, a name, arguments that are JSON text.
std::string check_tool_calls(const ojson& calls) {
  if (!calls.is_array() || calls.empty()) return "the choice has no tool_calls";
  for (const ojson& c : calls) {
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object()) return "a tool call has no function";
    const ojson& fn = c["function"];
    if (!fn.contains("name") || fn["name"] != "get_weather") return "a tool call names no known function";
    if (!fn.contains("arguments") || !fn["arguments"].is_string()) return "a tool call's arguments are not a string";
    if (!ojson::accept(fn["arguments"].get<std::string>()))
      return cat("a tool call's arguments are not JSON: ", first_line(fn["arguments"].get<std::string>()));
  }
  return "";
}

std::string check_json_content(const ojson& content) {
  if (!content.is_string()) return "a json_schema choice that stopped has no content";
  const ojson j = ojson::parse(content.get<std::string>(), nullptr, false);
  if (!j.is_object() || !j.contains("answer")) return cat("a json_schema answer is not the object asked for: ",
                                                           first_line(content.get<std::string>()));
  return "";
}

// "" when a non-streamed chat.completion is what `p` asked for; else what is wrong.
std::string check_json_reply(const Plan& p, const std::string& text) {
  const ojson j = ojson::parse(text, nullptr, false);
  if (!j.is_object()) return cat("the answer is not a JSON object: ", first_line(text));
  if (j.value("object", "") != "chat.completion") return "object is not chat.completion";
  if (!j.contains("choices") || !j["choices"].is_array() || static_cast<int>(j["choices"].size()) != p.n)
    return cat("expected ", p.n, " choices");
  std::vector<bool> seen(static_cast<size_t>(p.n), false);
  for (const ojson& c : j["choices"]) {
    if (!c.is_object() || !c.contains("index") || !c["index"].is_number_integer()) return "a choice has no index";
    const int64_t i = c["index"].get<int64_t>();
    if (i < 0 || i >= p.n || seen[static_cast<size_t>(i)]) return cat("choice index ", i, " is out of place");
    seen[static_cast<size_t>(i)] = true;
    if (!c.contains("message") || !c["message"].is_object() || c["message"].value("role", "") != "assistant")
      return "a choice has no assistant message";
    if (!c.contains("finish_reason") || !is_finish_reason(c["finish_reason"])) return "a choice has no finish_reason";
    const ojson& m = c["message"];
    // tool_choice required: calls, unless max_tokens left no room for one (finish_reason length);
    // finish_reason tool_calls: calls, whatever tool_choice said.
    if ((p.tool_required && c["finish_reason"] != "length") || c["finish_reason"] == "tool_calls") {
      const std::string bad = check_tool_calls(m.contains("tool_calls") ? m["tool_calls"] : ojson());
      if (!bad.empty()) return cat(bad, " (finish_reason ", c["finish_reason"].get<std::string>(), ")");
    }
    if (p.json_schema && c["finish_reason"] == "stop") {
      const std::string bad = check_json_content(m.contains("content") ? m["content"] : ojson());
      if (!bad.empty()) return bad;
    }
  }
  if (!j.contains("usage") || !j["usage"].is_object() || !j["usage"].contains("completion_tokens") ||
      !j["usage"]["completion_tokens"].is_number_integer())
    return "usage.completion_tokens is missing";
  return "";
}

// "" when a whole event stream is what `p` asked for; else what is wrong.
std::string check_stream(const Plan& p, const std::string& text) {
  struct Choice {
    bool finished = false;
    bool calls = false;
    std::string content;
    std::string reason;
  };
  std::vector<Choice> choices(static_cast<size_t>(p.n));
  bool done = false, usage = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find("\n\n", pos);
    if (end == std::string::npos) return cat("the stream ends inside an event: ", first_line(text.substr(pos)));
    const std::string ev = text.substr(pos, end - pos);
    pos = end + 2;
    if (ev.rfind(':', 0) == 0) continue;  // a comment (": waiting")
    if (ev.rfind("data: ", 0) != 0) return cat("an event is not data: ", first_line(ev));
    if (done) return "an event after data: [DONE]";
    const std::string data = ev.substr(6);
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    const ojson j = ojson::parse(data, nullptr, false);
    if (!j.is_object()) return cat("an event is not a JSON object: ", first_line(data));
    if (j.contains("error")) return cat("the stream carries an error: ", first_line(data));
    if (!j.contains("choices") || !j["choices"].is_array()) return "an event has no choices";
    if (j["choices"].empty()) {
      if (!j.contains("usage") || !j["usage"].is_object() || !j["usage"].contains("completion_tokens"))
        return "an event without choices has no usage";
      usage = true;
      continue;
    }
    for (const ojson& c : j["choices"]) {
      if (!c.is_object() || !c.contains("index") || !c["index"].is_number_integer()) return "a chunk has no index";
      const int64_t i = c["index"].get<int64_t>();
      if (i < 0 || i >= p.n) return cat("chunk index ", i, " is out of range");
      Choice& ch = choices[static_cast<size_t>(i)];
      if (ch.finished) return cat("choice ", i, " has a chunk after its finish_reason");
      if (!c.contains("delta") || !c["delta"].is_object()) return "a chunk has no delta";
      const ojson& d = c["delta"];
      if (d.contains("content") && d["content"].is_string()) ch.content += d["content"].get<std::string>();
      if (d.contains("tool_calls")) {
        if (!d["tool_calls"].is_array()) return "delta.tool_calls is not a list";
        ch.calls = true;
      }
      if (c.contains("finish_reason") && !c["finish_reason"].is_null()) {
        if (!is_finish_reason(c["finish_reason"])) return "a finish_reason is not stop, length or tool_calls";
        ch.finished = true;
        ch.reason = c["finish_reason"].get<std::string>();
      }
    }
  }
  if (!done) return "the stream did not end with data: [DONE]";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (!choices[i].finished) return cat("choice ", i, " has no finish_reason");
    if (((p.tool_required && choices[i].reason != "length") || choices[i].reason == "tool_calls") && !choices[i].calls)
      return cat("choice ", i, " streamed no tool_calls (tool_choice ", p.tool_required ? "required" : "auto",
                 ", finish_reason ", choices[i].reason, ")");
    if (p.json_schema && choices[i].reason == "stop") {
      const std::string bad = check_json_content(choices[i].content);
      if (!bad.empty()) return bad;
    }
  }
  if (p.include_usage && !usage) return "include_usage but no usage chunk";
  return "";
}

// An error answer: an OpenAI envelope whose error.message is a string.
bool is_envelope(const std::string& text, std::string* code) {
  const ojson j = ojson::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("error") || !j["error"].is_object()) return false;
  const ojson& e = j["error"];
  if (!e.contains("message") || !e["message"].is_string()) return false;
  if (code && e.contains("code") && e["code"].is_string()) *code = e["code"].get<std::string>();
  return true;
}

// ---- Running one request ----

enum class Outcome { kOk, kDisconnected, kRejected, kUnexpected };

struct Done {
  Outcome outcome = Outcome::kUnexpected;
  int status = 0;
  std::string what;  // why unexpected
};

Done run_one(const SoakOptions& o, const LoadTarget& target, const Plan& p) {
  const std::unique_ptr<httplib::ClientImpl> cli = make_load_client(target);
  cli->set_connection_timeout(30);
  cli->set_write_timeout(120);
  if (p.give_up_ms > 0)
    cli->set_read_timeout(p.give_up_ms / 1000, (p.give_up_ms % 1000) * 1000);
  else
    cli->set_read_timeout(600);
  httplib::Request req;
  req.method = "POST";
  req.path = p.path;
  req.body = p.body;
  req.headers = bearer_auth(o.api_key);
  req.set_header("Content-Type", "application/json");
  int status = 0;
  std::string content_type;
  std::string body;
  int events = 0;
  bool dropped = false;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    content_type = res.get_header_value("Content-Type");
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (body.size() < (64u << 20)) body.append(data, n);
    if (p.drop_after_events >= 0 && status == 200) {
      events = 0;
      for (size_t at = body.find("\n\n"); at != std::string::npos; at = body.find("\n\n", at + 2)) ++events;
      if (events >= p.drop_after_events) {
        dropped = true;
        return false;  // httplib closes the connection: the server sees the client leave
      }
    }
    return true;
  };
  const httplib::Result res = cli->send(req);
  Done d;
  if (!res) {
    if (dropped || (p.give_up_ms > 0 && res.error() == httplib::Error::Read)) {
      d.outcome = Outcome::kDisconnected;
      return d;
    }
    d.what = cat("transport error: ", httplib::to_string(res.error()), status ? cat(" after HTTP ", status) : "");
    return d;
  }
  d.status = res->status;
  if (d.status == 200) {
    if (p.expect != 200) {
      d.what = cat("HTTP 200 where ", p.expect, " was expected");
      return d;
    }
    std::string bad;
    if (p.stream) {
      if (content_type.rfind("text/event-stream", 0) != 0) bad = cat("a stream with Content-Type '", content_type, "'");
      if (bad.empty()) bad = check_stream(p, body);
    } else {
      bad = check_json_reply(p, body);
    }
    if (!bad.empty()) {
      d.what = bad;
      return d;
    }
    d.outcome = Outcome::kOk;
    return d;
  }
  std::string code;
  const bool envelope = is_envelope(body, &code);
  const bool expected = d.status == p.expect || (p.image && d.status == 400 && code == "images_not_supported");
  if (!expected) {
    d.what = describe_http_failure(d.status, body);
    if (d.status == 429) d.what += " (start k3 serve with a larger --max-queue: up to 3 choices per client)";
    return d;
  }
  if (!envelope) {
    d.what = cat("HTTP ", d.status, " without an error envelope: ", first_line(body));
    return d;
  }
  d.outcome = Outcome::kRejected;
  return d;
}

Done guarded_run_one(const SoakOptions& o, const LoadTarget& target, const Plan& p) {
  try {
    return run_one(o, target, p);
  } catch (const std::exception& e) {
    Done d;
    d.what = cat("client error: ", e.what());
    return d;
  }
}

// ---- The server's /metrics ----

using Samples = std::map<std::string, double>;

// "name{labels} value" lines into {"name{labels}": value}; comments skipped.
Samples parse_metrics(const std::string& text) {
  Samples out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    try {
      out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
    } catch (const std::exception&) {
    }
  }
  return out;
}

struct Ledger {
  bool present = false;  // the server exports the ledger
  uint64_t received = 0, completed = 0, cancelled = 0;
  std::map<int, uint64_t> rejected;
  double running = 0, waiting = 0;
  uint64_t rss = 0, prefix_cache = 0;
  bool rss_present = false;
};

uint64_t u64(const Samples& s, const std::string& key) {
  auto it = s.find(key);
  return it == s.end() || it->second < 0 ? 0 : static_cast<uint64_t>(std::llround(it->second));
}

// A client for the soak's own calls to the server (/metrics, /health, /v1/models).
std::unique_ptr<httplib::ClientImpl> control_client(const LoadTarget& target, int read_timeout_s) {
  std::unique_ptr<httplib::ClientImpl> cli = make_load_client(target);
  cli->set_connection_timeout(10);
  cli->set_read_timeout(read_timeout_s);
  return cli;
}

// nullopt when /metrics does not answer 200.
std::optional<Ledger> read_ledger(const SoakOptions& o, const LoadTarget& target) {
  const std::unique_ptr<httplib::ClientImpl> cli = control_client(target, 30);
  const httplib::Result r = cli->Get("/metrics", bearer_auth(o.api_key));
  if (!r || r->status != 200) return std::nullopt;
  const Samples s = parse_metrics(r->body);
  Ledger l;
  l.present = s.count("k3_api_requests_total") && s.count("k3_api_requests_completed_total") &&
              s.count("k3_api_requests_cancelled_total");
  l.received = u64(s, "k3_api_requests_total");
  l.completed = u64(s, "k3_api_requests_completed_total");
  l.cancelled = u64(s, "k3_api_requests_cancelled_total");
  const std::string prefix = "k3_requests_rejected_total{status=\"";
  for (const auto& [key, v] : s)
    if (key.rfind(prefix, 0) == 0) l.rejected[std::atoi(key.c_str() + prefix.size())] = u64(s, key);
  l.running = s.count("k3_requests_running") ? s.at("k3_requests_running") : 0;
  l.waiting = s.count("k3_requests_waiting") ? s.at("k3_requests_waiting") : 0;
  l.rss_present = s.count("k3_process_resident_memory_bytes") > 0;
  l.rss = u64(s, "k3_process_resident_memory_bytes");
  l.prefix_cache = u64(s, "k3_prefix_cache_bytes");
  return l;
}

uint64_t sum(const std::map<int, uint64_t>& m) {
  uint64_t t = 0;
  for (const auto& [k, v] : m) t += v;
  return t;
}

std::map<int, uint64_t> minus(const std::map<int, uint64_t>& end, const std::map<int, uint64_t>& start) {
  std::map<int, uint64_t> out;
  for (const auto& [k, v] : end) {
    auto it = start.find(k);
    const uint64_t before = it == start.end() ? 0 : it->second;
    if (v > before) out[k] = v - before;
  }
  return out;
}

std::string by_status(const std::map<int, uint64_t>& m) {
  std::string s;
  for (const auto& [status, n] : m) s += cat(s.empty() ? "" : ", ", status, ": ", n);
  return s.empty() ? "none" : s;
}

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

void validate(const SoakOptions& o) {
  K3_CHECK(std::isfinite(o.duration_s) && o.duration_s > 0, "the soak duration must be positive (got ", o.duration_s,
           " s)");
  K3_CHECK(o.concurrency >= 1 && o.concurrency <= kMaxLoadTestConcurrency, "concurrency ", o.concurrency,
           " is out of range (1 to ", kMaxLoadTestConcurrency, ")");
  K3_CHECK(o.max_tokens >= 1, "max_tokens must be >= 1 (got ", o.max_tokens, ")");
  K3_CHECK(o.warmup_fraction >= 0 && o.warmup_fraction < 1, "the warm-up share must be in [0, 1) (got ",
           o.warmup_fraction, ")");
  K3_CHECK(o.max_body_bytes >= 1, "the server's body limit must be >= 1 byte");
  K3_CHECK(o.max_body_bytes <= (1ull << 30), "a body limit over 1 GiB would make the oversized requests ",
           "(the limit + 64 KiB each, from every client) too large to send");
  K3_CHECK(o.drain_timeout_s > 0, "the drain timeout must be positive (got ", o.drain_timeout_s, ")");
}

// The model id and context from /v1/models; k3::Error when the server does not answer them.
ServerFacts server_facts(const SoakOptions& o, const LoadTarget& target) {
  const std::unique_ptr<httplib::ClientImpl> cli = control_client(target, 60);
  const httplib::Headers h = bearer_auth(o.api_key);
  const httplib::Result health = cli->Get("/health", h);
  K3_CHECK(health, "cannot reach the server at ", o.url, ": no answer (httplib error: ",
           httplib::to_string(health.error()), ")");
  K3_CHECK(health->status == 200, "the server at ", o.url, " is not healthy: ",
           describe_http_failure(health->status, health->body));
  const httplib::Result models = cli->Get("/v1/models", h);
  K3_CHECK(models, "the server at ", o.url, " does not answer /v1/models");
  K3_CHECK(models->status == 200, "/v1/models: ", describe_http_failure(models->status, models->body));
  const ojson j = ojson::parse(models->body, nullptr, false);
  K3_CHECK(j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
               j["data"][0].is_object() && j["data"][0].contains("max_model_len") &&
               j["data"][0]["max_model_len"].is_number_integer(),
           "/v1/models does not list a model with max_model_len: ", first_line(models->body));
  ServerFacts f;
  f.model = o.model.empty() ? j["data"][0].value("id", "") : o.model;
  f.context = j["data"][0]["max_model_len"].get<int64_t>();
  K3_CHECK(f.context >= 1 && f.context <= (1 << 24), "/v1/models reports max_model_len ", f.context,
           ", outside [1, 2^24]");
  return f;
}

}  // namespace

const char* soak_kind_name(SoakKind kind) {
  switch (kind) {
    case SoakKind::kChat: return "chat";
    case SoakKind::kChatStream: return "chat_stream";
    case SoakKind::kTools: return "tools";
    case SoakKind::kChoices: return "n_choices";
    case SoakKind::kImage: return "image";
    case SoakKind::kJsonSchema: return "json_schema";
    case SoakKind::kDisconnectStream: return "drop_stream";
    case SoakKind::kDisconnectEarly: return "drop_early";
    case SoakKind::kMalformedJson: return "bad_json";
    case SoakKind::kWrongType: return "wrong_type";
    case SoakKind::kUnknownModel: return "unknown_model";
    case SoakKind::kOversizedBody: return "oversized_body";
    case SoakKind::kLongPrompt: return "long_prompt";
    case SoakKind::kHugeMaxTokens: return "huge_max_tokens";
    case SoakKind::kCount: break;
  }
  return "?";
}

uint64_t SoakKindStats::rejected_total() const { return sum(rejected); }

SoakKindStats SoakResult::total() const {
  SoakKindStats t;
  for (const SoakKindStats& k : kinds) {
    t.sent += k.sent;
    t.ok += k.ok;
    t.disconnected += k.disconnected;
    t.unexpected += k.unexpected;
    for (const auto& [status, n] : k.rejected) t.rejected[status] += n;
  }
  return t;
}

uint64_t SoakResult::server_rejected_total() const { return sum(server_rejected); }

double parse_soak_duration(const std::string& text) {
  const auto bad = [&text] {
    fail("the soak duration '", text, "' is not valid (expected a number with an optional unit s, m or h, e.g. 90s, ",
         "30m, 1.5h)");
  };
  if (text.empty()) bad();
  double scale = 1;
  std::string num = text;
  switch (text.back()) {
    case 's': num.pop_back(); break;
    case 'm': scale = 60; num.pop_back(); break;
    case 'h': scale = 3600; num.pop_back(); break;
    default: break;
  }
  if (num.empty() || num.find_first_not_of("0123456789.") != std::string::npos ||
      std::count(num.begin(), num.end(), '.') > 1 || num == ".")
    bad();
  const double v = std::stod(num) * scale;
  if (!(v > 0) || !std::isfinite(v)) fail("the soak duration '", text, "' must be positive");
  return v;
}

SoakResult run_soak(const SoakOptions& o) {
  const LoadTarget target = parse_load_target(o.url);
  validate(o);
  const ServerFacts facts = server_facts(o, target);
  SoakResult r;
  r.seed = o.seed ? o.seed : (static_cast<uint64_t>(std::random_device{}()) << 32 | std::random_device{}()) | 1;
  r.concurrency = o.concurrency;
  r.duration_s = o.duration_s;
  r.rss_growth_bound = o.rss_growth_bound_bytes;
  const std::optional<Ledger> start = read_ledger(o, target);
  if (!start) {
    r.failures.push_back("cannot read /metrics before the soak");
  } else {
    if (!start->present)
      r.failures.push_back("the server does not export k3_api_requests_total / _completed_total / _cancelled_total");
    if (!start->rss_present) r.failures.push_back("the server does not export k3_process_resident_memory_bytes");
    r.rss_start = start->rss;
    r.rss_max = start->rss;
  }

  // The clients.  Each keeps its own stats; they are added up after the join.
  std::vector<std::array<SoakKindStats, kSoakKinds>> per_client(static_cast<size_t>(o.concurrency));
  std::mutex examples_mu;
  std::atomic<uint64_t> next{0};
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.duration_s));
  enum : int { kWait = 0, kGo = 1, kAbort = 2 };
  std::atomic<int> gate{kWait};
  const auto client = [&](size_t me) {
    gate.wait(kWait);
    if (gate.load() != kGo) return;
    while (Clock::now() < deadline) {
      const uint64_t i = next++;
      const Plan p = make_plan(o, facts, r.seed, i);
      SoakKindStats& st = per_client[me][static_cast<int>(p.kind)];
      ++st.sent;
      const Done d = guarded_run_one(o, target, p);
      switch (d.outcome) {
        case Outcome::kOk: ++st.ok; break;
        case Outcome::kDisconnected: ++st.disconnected; break;
        case Outcome::kRejected: ++st.rejected[d.status]; break;
        case Outcome::kUnexpected: {
          ++st.unexpected;
          std::lock_guard<std::mutex> lock(examples_mu);
          if (r.unexpected_examples.size() < 20)
            r.unexpected_examples.push_back(cat(soak_kind_name(p.kind), " #", i, ": ", d.what));
          break;
        }
      }
    }
  };

  // The memory monitor: a sample a second; the warm-up one once warmup_fraction has passed.
  std::mutex mon_mu;
  std::condition_variable mon_cv;
  bool mon_stop = false;
  bool warm_taken = false;
  std::thread monitor;
  const auto watch = [&] {
    const double warm_at = o.duration_s * o.warmup_fraction;
    const double series_step = std::max(1.0, o.duration_s / 20);
    std::unique_lock<std::mutex> lock(mon_mu);
    while (!mon_stop) {
      lock.unlock();
      const std::optional<Ledger> l = read_ledger(o, target);
      lock.lock();
      if (l && l->rss_present) {
        r.rss_max = std::max(r.rss_max, l->rss);
        const double t = seconds_since(t0);
        if (r.rss_series.empty() || t >= r.rss_series.back().first + series_step) r.rss_series.emplace_back(t, l->rss);
        if (!warm_taken && seconds_since(t0) >= warm_at) {
          warm_taken = true;
          r.rss_warmup = l->rss;
          r.prefix_cache_warmup = l->prefix_cache;
        }
      }
      mon_cv.wait_for(lock, std::chrono::seconds(1), [&] { return mon_stop; });
    }
  };

  std::vector<std::thread> clients;
  try {
    clients.reserve(static_cast<size_t>(o.concurrency));
    for (int i = 0; i < o.concurrency; ++i) clients.emplace_back(client, static_cast<size_t>(i));
    monitor = std::thread(watch);
  } catch (const std::exception& e) {
    gate.store(kAbort);
    gate.notify_all();
    for (std::thread& t : clients) t.join();
    fail("cannot start ", o.concurrency, " client threads: ", e.what());
  }
  gate.store(kGo);
  gate.notify_all();
  for (std::thread& t : clients) t.join();
  r.wall_s = seconds_since(t0);
  {
    std::lock_guard<std::mutex> lock(mon_mu);
    mon_stop = true;
  }
  mon_cv.notify_all();
  monitor.join();
  for (const auto& c : per_client)
    for (int k = 0; k < kSoakKinds; ++k) {
      SoakKindStats& t = r.kinds[static_cast<size_t>(k)];
      t.sent += c[static_cast<size_t>(k)].sent;
      t.ok += c[static_cast<size_t>(k)].ok;
      t.disconnected += c[static_cast<size_t>(k)].disconnected;
      t.unexpected += c[static_cast<size_t>(k)].unexpected;
      for (const auto& [status, n] : c[static_cast<size_t>(k)].rejected) t.rejected[status] += n;
    }
  const SoakKindStats total = r.total();

  // The drain: the server idle and its ledger settled (a stream is settled when its response is
  // destroyed, a moment after the client read [DONE]), or the timeout.
  // A server that is idle and balanced but never received some request (the mismatch is then
  // reported below) is taken as settled once it stayed so for 3 s.
  const Clock::time_point drain0 = Clock::now();
  std::optional<Ledger> end;
  bool settled = false;
  bool was_balanced = false;
  Clock::time_point balanced_since{};
  while (start && start->present) {
    end = read_ledger(o, target);
    if (end) {
      const uint64_t settled_n = (end->completed - start->completed) + (end->cancelled - start->cancelled) +
                                 (sum(end->rejected) - sum(start->rejected));
      const bool balanced = end->running == 0 && end->waiting == 0 && end->received - start->received == settled_n;
      if (balanced && !was_balanced) balanced_since = Clock::now();
      was_balanced = balanced;
      settled = balanced && (settled_n == total.sent || seconds_since(balanced_since) >= 3);
      if (settled) break;
    }
    if (seconds_since(drain0) > o.drain_timeout_s) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  r.drain_s = seconds_since(drain0);
  if (!end) end = read_ledger(o, target);

  // The checks.
  if (total.unexpected > 0)
    r.failures.push_back(cat(total.unexpected, " unexpected results (examples below)"));
  {
    const httplib::Result h = control_client(target, 60)->Get("/health");
    if (!h || h->status != 200)
      r.failures.push_back(cat("the server is not healthy after the soak: ",
                               h ? describe_http_failure(h->status, h->body)
                                 : cat("no answer (", httplib::to_string(h.error()), ")")));
  }
  if (!end) {
    r.failures.push_back("cannot read /metrics after the soak");
  } else if (start && start->present) {
    r.ledger_read = true;
    r.received = end->received - start->received;
    r.completed = end->completed - start->completed;
    r.cancelled = end->cancelled - start->cancelled;
    r.server_rejected = minus(end->rejected, start->rejected);
    if (!settled)
      r.failures.push_back(cat("the server did not settle within ", o.drain_timeout_s, " s (running ", end->running,
                               ", waiting ", end->waiting, ")"));
    if (r.received != total.sent)
      r.failures.push_back(cat("the server received ", r.received, " API requests; ", total.sent, " were sent"));
    const uint64_t settled_n = r.completed + r.cancelled + r.server_rejected_total();
    if (settled_n != r.received)
      r.failures.push_back(cat("received ", r.received, " != completed ", r.completed, " + cancelled ", r.cancelled,
                               " + rejected ", r.server_rejected_total(), " (", settled_n, ")"));
    // With unexpected results the client's side has requests of unknown fate: the comparisons
    // below would only repeat that failure.
    if (total.unexpected == 0 && r.server_rejected != total.rejected)
      r.failures.push_back(cat("the server rejected (", by_status(r.server_rejected), ") where the client saw (",
                               by_status(total.rejected), ")"));
    if (total.unexpected == 0 && r.completed + r.cancelled != total.ok + total.disconnected)
      r.failures.push_back(cat("completed + cancelled = ", r.completed + r.cancelled, " but the client had ok ",
                               total.ok, " + dropped ", total.disconnected));
    if (r.completed < total.ok)
      r.failures.push_back(cat("the server completed ", r.completed, " requests but the client got ", total.ok,
                               " whole answers"));
  }
  if (end && end->rss_present) {
    r.rss_end = end->rss;
    r.rss_series.emplace_back(seconds_since(t0), end->rss);
    r.rss_max = std::max(r.rss_max, end->rss);
    r.prefix_cache_end = end->prefix_cache;
    if (!warm_taken) {
      r.failures.push_back("no memory sample was taken after the warm-up");
    } else if (r.rss_end > r.rss_warmup && r.rss_end - r.rss_warmup > o.rss_growth_bound_bytes) {
      r.failures.push_back(cat("resident memory grew by ", mib(r.rss_end - r.rss_warmup), " after the warm-up (",
                               mib(r.rss_warmup), " -> ", mib(r.rss_end), "), over the bound of ",
                               mib(o.rss_growth_bound_bytes)));
    }
  }
  if (total.sent == 0) r.failures.push_back("no request was sent");
  return r;
}

std::string soak_report(const SoakResult& r) {
  std::string out;
  const SoakKindStats t = r.total();
  char line[512];
  std::snprintf(line, sizeof line, "soak: %d clients, %.1f s (asked %.1f s), seed %llu, %llu requests, %.1f requests/s\n",
                r.concurrency, r.wall_s, r.duration_s, static_cast<unsigned long long>(r.seed),
                static_cast<unsigned long long>(t.sent), r.wall_s > 0 ? static_cast<double>(t.sent) / r.wall_s : 0.0);
  out += line;
  std::snprintf(line, sizeof line, "%-16s %9s %9s %9s %9s %10s  %s\n", "kind", "sent", "ok", "dropped", "rejected",
                "unexpected", "rejected by status");
  out += line;
  const auto row = [&](const char* name, const SoakKindStats& k) {
    std::snprintf(line, sizeof line, "%-16s %9llu %9llu %9llu %9llu %10llu  %s\n", name,
                  static_cast<unsigned long long>(k.sent), static_cast<unsigned long long>(k.ok),
                  static_cast<unsigned long long>(k.disconnected), static_cast<unsigned long long>(k.rejected_total()),
                  static_cast<unsigned long long>(k.unexpected), k.rejected.empty() ? "" : by_status(k.rejected).c_str());
    out += line;
  };
  for (int k = 0; k < kSoakKinds; ++k) row(soak_kind_name(static_cast<SoakKind>(k)), r.kinds[static_cast<size_t>(k)]);
  row("total", t);
  if (r.ledger_read) {
    out += cat("server ledger over the soak: received ", r.received, " = completed ", r.completed, " + cancelled ",
               r.cancelled, " + rejected ", r.server_rejected_total(), " (", by_status(r.server_rejected), ")",
               r.received == r.completed + r.cancelled + r.server_rejected_total() ? "  [holds]" : "  [DOES NOT HOLD]",
               "\n");
    out += cat("client vs server: sent ", t.sent, ", received ", r.received, "; ok ", t.ok, " + dropped ",
               t.disconnected, " = ", t.ok + t.disconnected, ", completed + cancelled = ", r.completed + r.cancelled,
               "; settled ", cat(static_cast<long long>(r.drain_s * 1000)), " ms after the load\n");
  }
  out += cat("server RSS: start ", mib(r.rss_start), ", after warm-up ", mib(r.rss_warmup), ", end ", mib(r.rss_end),
             ", max ", mib(r.rss_max), "; growth after warm-up ",
             r.rss_end >= r.rss_warmup ? "+" + mib(r.rss_end - r.rss_warmup) : "-" + mib(r.rss_warmup - r.rss_end),
             " (bound ", mib(r.rss_growth_bound), "); prefix cache ", mib(r.prefix_cache_warmup), " -> ",
             mib(r.prefix_cache_end), "\n");
  if (!r.rss_series.empty()) {
    out += "server RSS over time (s: MiB):";
    for (const auto& [t, bytes] : r.rss_series)
      out += cat(" ", static_cast<long long>(t), ":", static_cast<long long>(static_cast<double>(bytes) / (1 << 20)));
    out += "\n";
  }
  for (const std::string& e : r.unexpected_examples) out += cat("unexpected: ", e, "\n");
  if (r.passed()) {
    out += "PASSED\n";
  } else {
    out += "FAILED:\n";
    for (const std::string& f : r.failures) out += cat("  ", f, "\n");
  }
  return out;
}

std::string soak_json(const SoakResult& r) {
  const auto statuses = [](const std::map<int, uint64_t>& m) {
    ojson j = ojson::object();
    for (const auto& [status, n] : m) j[std::to_string(status)] = n;
    return j;
  };
  const auto kind = [&](const SoakKindStats& k) {
    return ojson{{"sent", k.sent},
                 {"ok", k.ok},
                 {"disconnected", k.disconnected},
                 {"rejected", statuses(k.rejected)},
                 {"unexpected", k.unexpected}};
  };
  ojson j = ojson::object();
  j["passed"] = r.passed();
  j["failures"] = r.failures;
  j["seed"] = r.seed;
  j["concurrency"] = r.concurrency;
  j["duration_s"] = r.duration_s;
  j["wall_s"] = r.wall_s;
  const SoakKindStats t = r.total();
  j["requests_per_s"] = r.wall_s > 0 ? static_cast<double>(t.sent) / r.wall_s : 0.0;
  ojson kinds = ojson::object();
  for (int k = 0; k < kSoakKinds; ++k) kinds[soak_kind_name(static_cast<SoakKind>(k))] = kind(r.kinds[static_cast<size_t>(k)]);
  j["kinds"] = kinds;
  j["total"] = kind(t);
  j["unexpected_examples"] = r.unexpected_examples;
  if (r.ledger_read)
    j["server"] = {{"received", r.received},
                   {"completed", r.completed},
                   {"cancelled", r.cancelled},
                   {"rejected", statuses(r.server_rejected)},
                   {"drain_s", r.drain_s}};
  j["rss_bytes"] = {{"start", r.rss_start},
                    {"warmup", r.rss_warmup},
                    {"end", r.rss_end},
                    {"max", r.rss_max},
                    {"growth_bound", r.rss_growth_bound}};
  j["prefix_cache_bytes"] = {{"warmup", r.prefix_cache_warmup}, {"end", r.prefix_cache_end}};
  ojson series = ojson::array();
  for (const auto& [t, bytes] : r.rss_series) series.push_back({{"s", t}, {"bytes", bytes}});
  j["rss_series"] = series;
  return j.dump(2);
}

}  // namespace k3::server
