#include "text/chat_request.h"

#include "base/error.h"

namespace k3 {
namespace {

void check_tool_choice(const ojson& tc) {
  if (tc.is_null()) return;
  if (tc.is_string()) {
    const std::string& s = tc.get_ref<const std::string&>();
    K3_CHECK(s == "none" || s == "auto" || s == "required", "tool_choice '", s,
             "' is not supported (expected none, auto, required or a named function)");
    return;
  }
  K3_CHECK(tc.is_object() && tc.contains("type") && tc["type"] == "function" && tc.contains("function") &&
               tc["function"].is_object() && tc["function"].contains("name") && tc["function"]["name"].is_string(),
           "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
}

void check_response_format(const ojson& rf) {
  if (rf.is_null()) return;
  K3_CHECK(rf.is_object() && rf.contains("type") && rf["type"].is_string(), "response_format must be an object with a "
           "string \"type\"");
  const std::string& type = rf["type"].get_ref<const std::string&>();
  K3_CHECK(type == "text" || type == "json_object" || type == "json_schema", "response_format.type '", type,
           "' is not supported (expected text, json_object or json_schema)");
  if (type == "json_schema") {
    K3_CHECK(rf.contains("json_schema") && rf["json_schema"].is_object(),
             "response_format.json_schema must be an object");
    const ojson& js = rf["json_schema"];
    K3_CHECK(!js.contains("schema") || js["schema"].is_object() || js["schema"].is_boolean(),
             "response_format.json_schema.schema must be a JSON schema object");
  }
}

}  // namespace

ChatRequest parse_chat_request(const ojson& body) {
  K3_CHECK(body.is_object(), "the chat request must be a JSON object");
  ChatRequest r;
  K3_CHECK(body.contains("messages") && body["messages"].is_array(), "messages must be an array");
  r.messages = body["messages"];
  if (body.contains("tools") && !body["tools"].is_null()) {
    K3_CHECK(body["tools"].is_array(), "tools must be an array");
    r.tools = body["tools"];
  }
  ChatOptions& o = r.options;
  if (body.contains("reasoning_effort") && !body["reasoning_effort"].is_null()) {
    K3_CHECK(body["reasoning_effort"].is_string(), "reasoning_effort must be a string");
    o.thinking_effort = body["reasoning_effort"].get<std::string>();
  }
  if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
    const ojson& kw = body["chat_template_kwargs"];
    K3_CHECK(kw.is_object(), "chat_template_kwargs must be an object");
    if (kw.contains("thinking") && !kw["thinking"].is_null()) {
      K3_CHECK(kw["thinking"].is_boolean(), "chat_template_kwargs.thinking must be a boolean");
      o.thinking = kw["thinking"].get<bool>();
    }
    if (kw.contains("thinking_effort")) {
      const ojson& e = kw["thinking_effort"];
      K3_CHECK(e.is_null() || e.is_string(), "chat_template_kwargs.thinking_effort must be a string or null");
      o.thinking_effort = e.is_null() ? std::nullopt : std::optional<std::string>(e.get<std::string>());
    }
  }
  if (body.contains("tool_choice")) {
    check_tool_choice(body["tool_choice"]);
    o.tool_choice = body["tool_choice"];
  }
  if (body.contains("response_format")) {
    check_response_format(body["response_format"]);
    o.response_format = body["response_format"];
  }
  if (body.contains("add_generation_prompt") && !body["add_generation_prompt"].is_null()) {
    K3_CHECK(body["add_generation_prompt"].is_boolean(), "add_generation_prompt must be a boolean");
    o.add_generation_prompt = body["add_generation_prompt"].get<bool>();
  }
  return r;
}

}  // namespace k3
