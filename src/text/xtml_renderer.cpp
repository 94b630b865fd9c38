#include "text/xtml_renderer.h"

#include <algorithm>

#include "base/error.h"
#include "text/utf8.h"

namespace k3 {
namespace {

constexpr std::string_view kToolDeclareHead = "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n";
constexpr std::string_view kDynamicToolsHead =
    "## New Tools Available\nThe system dynamically extends the toolset via lazy-loading.\n"
    "You have access to all existing and extended tools.\nHere are the specs for the extended tools.\n\n```json\n";
constexpr std::string_view kEffortText =
    "`thinking_effort` guides on how much to think in your thinking channel (not including the response channel), "
    "supported values include `low`, `medium`, `high`, and `max`.\nNow the system is invoked with `thinking_effort=";
constexpr std::string_view kRawJsonText =
    "Your response must be raw JSON data without markdown code blocks (```json) or any additional formatting.";

// A string field that may be absent or null ("" then).
std::string opt_string(const ojson& obj, const char* key, const std::string& where) {
  if (!obj.contains(key) || obj[key].is_null()) return "";
  K3_CHECK(obj[key].is_string(), where, ".", key, " must be a string");
  return obj[key].get<std::string>();
}

const char* json_type_name(const ojson& v) {
  if (v.is_string()) return "string";
  if (v.is_boolean()) return "boolean";
  if (v.is_number()) return "number";
  if (v.is_null()) return "null";
  if (v.is_object()) return "object";
  return "array";
}

struct ToolCall {
  std::string id, name;
};

class Renderer {
 public:
  explicit Renderer(const ChatOptions& o) : opt_(o) {}

  std::vector<ChatSegment> run(const ojson& messages, const ojson& tools) {
    K3_CHECK(messages.is_array(), "messages must be an array");
    K3_CHECK(tools.is_null() || tools.is_array(), "tools must be an array");
    const bool effort_message = opt_.thinking && opt_.thinking_effort.has_value();
    if (effort_message) {
      const std::string& e = *opt_.thinking_effort;
      K3_CHECK(e == "low" || e == "high" || e == "max", "thinking_effort (reasoning_effort) '", e,
               "' is not supported; supported values are low, high and max");
    }
    if (tools.is_array() && !tools.empty())
      system_message("tool-declare", std::string(kToolDeclareHead) + py_json_dumps(tools, kPyJsonCompactSorted) + "\n```");
    if (effort_message) system_message("thinking-effort", std::string(kEffortText) + *opt_.thinking_effort + "`.");
    for (size_t i = 0; i < messages.size();) i = message(messages, i);
    tool_choice_message();
    response_format_message();
    if (opt_.add_generation_prompt) {
      w_.open("message", {{"role", "assistant"}});
      w_.open(opt_.thinking ? "think" : "response");
    }
    std::vector<ChatSegment> segments = w_.take();
    if (opt_.image_prompts) substitute_images(segments, *opt_.image_prompts);
    return segments;
  }

 private:
  void system_message(const char* type, const std::string& body) {
    w_.open("message", {{"role", "system"}, {"type", type}});
    w_.text(body);
    w_.end_message();
  }

  void content(const ojson& msg, const std::string& where) {
    if (!msg.contains("content") || msg["content"].is_null()) return;
    const ojson& c = msg["content"];
    if (c.is_string()) {
      w_.text(c.get_ref<const std::string&>());
      return;
    }
    K3_CHECK(c.is_array(), where, ".content must be a string or an array of parts");
    for (size_t j = 0; j < c.size(); ++j) {
      const std::string part = where + ".content[" + std::to_string(j) + "]";
      K3_CHECK(c[j].is_object() && c[j].contains("type") && c[j]["type"].is_string(), part,
               " must be an object with a string \"type\"");
      const std::string& type = c[j]["type"].get_ref<const std::string&>();
      if (type == "text") {
        w_.text(opt_string(c[j], "text", part));
      } else if (type == "image_url" || type == "image") {
        w_.special(kImagePlaceholder);
      } else {
        fail(part, ".type '", type, "' is not supported (expected text, image_url or image)");
      }
    }
  }

  XtmlAttrs role_attrs(const char* role, const ojson& msg, const std::string& where) {
    XtmlAttrs attrs{{"role", role}};
    const std::string name = opt_string(msg, "name", where);
    if (!name.empty()) attrs.emplace_back("name", name);
    return attrs;
  }

  // Renders messages[i] (a run of tool results at once); returns the next index.
  size_t message(const ojson& messages, size_t i) {
    const ojson& msg = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    K3_CHECK(msg.is_object(), where, " must be an object");
    const std::string role = opt_string(msg, "role", where);
    K3_CHECK(!role.empty(), where, ".role is missing");
    if (role == "system" || role == "user") {
      calls_.clear();
      if (role == "system" && msg.contains("tools") && !msg["tools"].is_null()) {
        K3_CHECK(msg["tools"].is_array(), where, ".tools must be an array");
        system_message("tool-declare",
                       std::string(kDynamicToolsHead) + py_json_dumps(msg["tools"], kPyJsonCompactSorted) + "\n```");
        if (has_no_content(msg)) return i + 1;
      }
      w_.open("message", role_attrs(role.c_str(), msg, where));
      content(msg, where);
      w_.end_message();
    } else if (role == "assistant") {
      assistant(msg, where);
    } else if (role == "tool") {
      size_t end = i;
      while (end < messages.size() && messages[end].is_object() && messages[end].contains("role") &&
             messages[end]["role"] == "tool")
        ++end;
      tool_results(messages, i, end);
      return end;
    }
    return i + 1;
  }

  static bool has_no_content(const ojson& msg) {
    if (!msg.contains("content") || msg["content"].is_null()) return true;
    const ojson& c = msg["content"];
    return (c.is_string() && c.get_ref<const std::string&>().empty()) || (c.is_array() && c.empty());
  }

  void assistant(const ojson& msg, const std::string& where) {
    w_.open("message", role_attrs("assistant", msg, where));
    if (opt_.thinking) {
      std::string reasoning = opt_string(msg, "reasoning_content", where);
      if (reasoning.empty()) reasoning = opt_string(msg, "reasoning", where);
      w_.open("think");
      if (!utf8::is_blank(reasoning)) w_.text(reasoning);
      w_.close("think");
    }
    w_.open("response");
    content(msg, where);
    w_.close("response");
    calls_.clear();
    if (msg.contains("tool_calls") && !msg["tool_calls"].is_null()) {
      const ojson& calls = msg["tool_calls"];
      K3_CHECK(calls.is_array(), where, ".tool_calls must be an array");
      if (!calls.empty()) {
        w_.open("tools");
        for (size_t k = 0; k < calls.size(); ++k) tool_call(calls[k], k, where + ".tool_calls[" + std::to_string(k) + "]");
        w_.close("tools");
      }
    }
    w_.end_message();
  }

  void tool_call(const ojson& call, size_t k, const std::string& where) {
    K3_CHECK(call.is_object() && call.contains("function") && call["function"].is_object(), where,
             ".function must be an object");
    const ojson& fn = call["function"];
    const std::string name = opt_string(fn, "name", where + ".function");
    K3_CHECK(!name.empty(), where, ".function.name is missing");
    calls_.push_back({opt_string(call, "id", where), name});
    w_.open("call", {{"tool", name}, {"index", std::to_string(k + 1)}});
    const ojson* args = nullptr;
    std::optional<ojson> parsed;
    if (fn.contains("arguments") && !fn["arguments"].is_null()) {
      const ojson& a = fn["arguments"];
      if (a.is_string()) {
        const std::string& s = a.get_ref<const std::string&>();
        if (!utf8::is_blank(s)) {
          parsed = py_json_loads(s);
          if (!parsed) {
            w_.open("json", {{"type", "object"}});
            w_.text(s);
            w_.close("json");
          } else {
            args = &*parsed;
          }
        }
      } else {
        args = &a;
      }
    }
    if (args != nullptr) {
      K3_CHECK(args->is_object(), where, ".function.arguments: Kimi K3 tool call arguments must be a JSON object");
      for (auto it = args->begin(); it != args->end(); ++it) {
        const ojson& v = it.value();
        w_.open("argument", {{"key", it.key()}, {"type", json_type_name(v)}});
        w_.text(v.is_string() ? v.get_ref<const std::string&>() : py_json_dumps(v));
        w_.close("argument");
      }
    }
    w_.close("call");
  }

  void tool_results(const ojson& messages, size_t begin, size_t end) {
    struct Result {
      const ojson* msg;
      std::string where, name;
      size_t index;
    };
    std::vector<Result> run;
    bool all_matched = !calls_.empty();
    for (size_t i = begin; i < end; ++i) {
      const std::string where = "messages[" + std::to_string(i) + "]";
      const ojson& msg = messages[i];
      const std::string id = opt_string(msg, "tool_call_id", where);
      auto call = std::find_if(calls_.begin(), calls_.end(), [&](const ToolCall& c) { return !id.empty() && c.id == id; });
      if (call == calls_.end()) {
        all_matched = false;
        run.push_back({&msg, where, "", i - begin});
      } else {
        run.push_back({&msg, where, call->name, static_cast<size_t>(call - calls_.begin())});
      }
    }
    if (all_matched) {
      std::stable_sort(run.begin(), run.end(), [](const Result& a, const Result& b) { return a.index < b.index; });
    } else {
      for (size_t p = 0; p < run.size(); ++p) {
        Result& r = run[p];
        r.index = p;
        r.name = opt_string(*r.msg, "tool", r.where);
        if (r.name.empty()) r.name = opt_string(*r.msg, "name", r.where);
        if (r.name.empty() && p < calls_.size()) r.name = calls_[p].name;
        K3_CHECK(!r.name.empty(), r.where, ": Kimi K3 tool messages need a resolvable tool name: carry `tool`/`name`, "
                 "or match a preceding assistant tool_call by order");
      }
    }
    for (const Result& r : run) {
      w_.open("message", {{"role", "tool"}, {"tool", r.name}, {"index", std::to_string(r.index + 1)}});
      content(*r.msg, r.where);
      w_.end_message();
    }
  }

  void tool_choice_message() {
    const ojson& tc = opt_.tool_choice;
    if (!tc.is_string()) return;
    const std::string& s = tc.get_ref<const std::string&>();
    if (s == "required") {
      system_message("tool-choice", "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message.");
    } else if (s == "none") {
      system_message("tool-choice", "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message.");
    }
  }

  void response_format_message() {
    const ojson& rf = opt_.response_format;
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string()) return;
    const std::string& type = rf["type"].get_ref<const std::string&>();
    if (type != "json_object" && type != "json_schema") return;
    std::string body = "The system is invoked with `response_format=" + type + "`.\n" + std::string(kRawJsonText);
    if (type == "json_schema" && rf.contains("json_schema") && rf["json_schema"].is_object() &&
        rf["json_schema"].contains("schema"))
      body += "\nThe JSON data must match the following schema:\n```json\n" +
              py_json_dumps(rf["json_schema"]["schema"], kPyJsonCompactSorted) + "\n```";
    system_message("response-format", body);
  }

  static void substitute_images(std::vector<ChatSegment>& segments, const std::vector<std::string>& prompts) {
    std::vector<ChatSegment> out;
    size_t used = 0;
    const auto next_prompt = [&]() {
      K3_CHECK(used < prompts.size(), "the conversation has more images than image_prompts (", prompts.size(), ")");
      out.push_back({prompts[used++], true});
    };
    for (ChatSegment& s : segments) {
      if (s.allow_special && s.text == kImagePlaceholder) {
        next_prompt();
        continue;
      }
      if (s.allow_special || s.text.find(kImagePlaceholder) == std::string::npos) {
        out.push_back(std::move(s));
        continue;
      }
      size_t pos = 0, hit;
      while ((hit = s.text.find(kImagePlaceholder, pos)) != std::string::npos) {
        if (hit > pos) out.push_back({s.text.substr(pos, hit - pos), false});
        next_prompt();
        pos = hit + kImagePlaceholder.size();
      }
      if (pos < s.text.size()) out.push_back({s.text.substr(pos), false});
    }
    K3_CHECK(used == prompts.size(), "image_prompts has ", prompts.size(), " entries but the conversation has ", used,
             " images");
    segments = std::move(out);
  }

  const ChatOptions& opt_;
  XtmlWriter w_;
  std::vector<ToolCall> calls_;  // the calls of the latest assistant message
};

}  // namespace

std::vector<ChatSegment> render_chat(const ojson& messages, const ojson& tools, const ChatOptions& options) {
  return Renderer(options).run(messages, tools);
}

std::vector<ChatSegment> render_chat(const ChatRequest& request) {
  return render_chat(request.messages, request.tools, request.options);
}

}  // namespace k3
