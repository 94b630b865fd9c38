#include "server/prompt_builder.h"

#include <algorithm>

#include "server/api_error.h"
#include "text/base64.h"
#include "text/chat_request.h"
#include "text/xtml_renderer.h"
#include "text/xtml_writer.h"
#include "vision/image_decode.h"
#include "vision/preprocess.h"

namespace k3::server {
namespace {

// Decodes one image_url part's data: URL.
Image decode_data_url(const ojson& part, size_t n, const ImageLimits& limits) {
  const std::string where = cat("image_url ", n + 1);
  const ojson* url = nullptr;
  if (part.contains("image_url")) {
    const ojson& iu = part["image_url"];
    if (iu.is_string()) url = &iu;
    else if (iu.is_object() && iu.contains("url") && iu["url"].is_string()) url = &iu["url"];
  }
  if (!url) throw ApiError(400, cat(where, ": image_url must be {\"url\": \"data:...\"}"), "messages");
  const std::string& u = url->get_ref<const std::string&>();
  if (u.size() > limits.max_url_bytes)
    throw ApiError(413, cat(where, ": the data URL has ", u.size(), " bytes; the limit is ", limits.max_url_bytes),
                   "messages", "image_too_large");
  // k3 never fetches from the network (no option turns that on): the client sends the bytes.
  if (u.rfind("http://", 0) == 0 || u.rfind("https://", 0) == 0)
    throw ApiError(400, cat(where, ": k3 does not download images from http(s) URLs; send the image itself as a "
                                   "data: URL (data:image/png;base64,...)"),
                   "messages", "image_url_not_supported");
  if (u.rfind("data:", 0) != 0)
    throw ApiError(400, cat(where, ": the URL must be a data: URL (data:image/png;base64,...)"), "messages");
  const size_t comma = u.find(',');
  if (comma == std::string::npos || comma < 12 || u.compare(comma - 7, 7, ";base64") != 0)
    throw ApiError(400, cat(where, ": the data URL must be base64-encoded (data:image/png;base64,...)"), "messages");
  std::string payload;
  payload.reserve(u.size() - comma);
  for (size_t i = comma + 1; i < u.size(); ++i)
    if (u[i] != '\n' && u[i] != '\r' && u[i] != ' ') payload.push_back(u[i]);
  while (payload.size() % 4 != 0) payload.push_back('=');  // some clients drop the padding
  const std::optional<std::string> bytes = base64::decode(payload);
  if (!bytes) throw ApiError(400, cat(where, ": the data URL's payload is not valid base64"), "messages");
  DecodeOptions opt;
  opt.max_pixels = limits.max_pixels;
  try {
    return decode_image({reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()}, where, opt);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "messages", "invalid_image");
  }
}

std::vector<Image> collect_images(const ojson& messages, const ImageLimits& limits) {
  std::vector<Image> images;
  for (const ojson& m : messages) {
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
    for (const ojson& part : m["content"]) {
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) continue;
      const std::string& type = part["type"].get_ref<const std::string&>();
      if (type == "image")
        throw ApiError(400, "content parts of type 'image' are not accepted over HTTP; use image_url with a data: URL",
                       "messages");
      if (type != "image_url") continue;
      if (m.contains("role") && m["role"] == "tool")
        throw ApiError(400, "images are accepted in system and user messages, not in tool results", "messages");
      if (static_cast<int>(images.size()) >= limits.max_images)
        throw ApiError(400, cat("the request has more than ", limits.max_images, " images (the per-request limit)"),
                       "messages", "too_many_images");
      images.push_back(decode_data_url(part, images.size(), limits));
    }
  }
  return images;
}

}  // namespace

void check_prompt_fits(const EngineHost& host, const PreparedPrompt& p, const char* param) {
  const int64_t ctx = host.context_tokens();
  if (p.tokens.empty()) throw ApiError(400, "the prompt is empty", param);
  if (static_cast<int64_t>(p.tokens.size()) >= ctx)
    throw ApiError(400, cat("the prompt has ", p.tokens.size(), " tokens; this model's context is ", ctx,
                            " tokens (prompt + output)"),
                   param, "context_length_exceeded");
}

namespace {

// What the K3 encoder would render without complaint but an OpenAI client would not send: a
// user message without content, a text part without text, a role outside the chat format (400s).
// (`developer` messages were turned into system ones before: see prepare_chat.)
void check_messages(const ojson& messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const ojson& m = messages[i];
    const std::string where = cat("messages[", i, "]");
    if (!m.is_object()) throw ApiError(400, cat(where, " must be an object"), "messages");
    if (!m.contains("role") || !m["role"].is_string()) throw ApiError(400, cat(where, ".role must be a string"), "messages");
    const std::string& role = m["role"].get_ref<const std::string&>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      throw ApiError(400, cat(where, ".role '", role, "' is not one of system, user, assistant, tool"), "messages");
    const bool has = m.contains("content") && !m["content"].is_null();
    if (role == "user" && !has) throw ApiError(400, cat(where, ".content is missing (a user message needs it)"), "messages");
    if (has && m["content"].is_array()) {
      const ojson& parts = m["content"];
      for (size_t k = 0; k < parts.size(); ++k)
        if (parts[k].is_object() && parts[k].contains("type") && parts[k]["type"] == "text" &&
            !(parts[k].contains("text") && parts[k]["text"].is_string()))
          throw ApiError(400, cat(where, ".content[", k, "].text must be a string"), "messages");
    }
  }
}

// Every tool is {"type": "function", "function": {"name": string, "parameters"?: object, ...}},
// and a tool_choice that requires a call has tools to call (rather than skipping a malformed tool
// and ignoring "required" without tools, both silently).
void check_tools(const ojson& tools, const ojson& tool_choice) {
  const size_t n = tools.is_array() ? tools.size() : 0;
  for (size_t i = 0; i < n; ++i) {
    const ojson& t = tools[i];
    const std::string where = cat("tools[", i, "]");
    if (!t.is_object()) throw ApiError(400, cat(where, " must be an object"), "tools");
    if (!t.contains("type") || t["type"] != "function")
      throw ApiError(400, cat(where, ".type must be \"function\""), "tools");
    if (!t.contains("function") || !t["function"].is_object())
      throw ApiError(400, cat(where, ".function must be an object"), "tools");
    const ojson& fn = t["function"];
    if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get_ref<const std::string&>().empty())
      throw ApiError(400, cat(where, ".function.name must be a non-empty string"), "tools");
    if (fn.contains("parameters") && !fn["parameters"].is_null() && !fn["parameters"].is_object())
      throw ApiError(400, cat(where, ".function.parameters must be a JSON schema object"), "tools");
    // A call names its tool: two tools of one name could not be told apart.
    for (size_t j = 0; j < i; ++j)
      if (tools[j]["function"]["name"] == fn["name"])
        throw ApiError(400, cat(where, ".function.name '", fn["name"].get_ref<const std::string&>(),
                                "' is already declared by tools[", j, "]"),
                       "tools");
  }
  const bool required = (tool_choice.is_string() && tool_choice == "required") || tool_choice.is_object();
  if (required && n == 0)
    throw ApiError(400, "tool_choice asks for a tool call but the request has no tools", "tool_choice");
}

}  // namespace

PreparedChat prepare_chat(const EngineHost& host, const ojson& body, const ImageLimits& limits, bool check_fit) {
  if (!body.contains("messages") || body["messages"].is_null())
    throw ApiError(400, "messages is required (a list of chat messages)", "messages");
  ChatRequest req;
  try {
    req = parse_chat_request(body);
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    // parse_chat_request's messages begin with the field they are about ("tools must be an
    // array", "chat_template_kwargs.thinking must be a boolean"): that field is the param.
    const std::string what = e.what();
    const std::string field = what.substr(0, what.find_first_of(" .'["));
    throw ApiError(400, what, body.contains(field) ? field : "");
  }
  if (req.messages.empty()) throw ApiError(400, "messages must not be empty", "messages");
  // OpenAI's `developer` role (its newer name for system instructions) is rendered as the system
  // turn, as OpenAI-compatible servers do.  Moonshot's encoder would skip the message, silently
  // dropping the client's instructions.
  for (ojson& m : req.messages)
    if (m.is_object() && m.contains("role") && m["role"] == "developer") m["role"] = "system";
  check_messages(req.messages);
  check_tools(req.tools, req.options.tool_choice);
  // Checked here whether or not thinking is on (the renderer only reads it when it is), and
  // reported under its own name.  "medium" (OpenAI's default effort) is not one of K3's; it is
  // taken as "high", the next one up, so a client asking for it never gets less thinking than it
  // asked for.  The chat format's own field, chat_template_kwargs.thinking_effort, wins over it
  // and is passed as given.
  if (body.contains("reasoning_effort") && body["reasoning_effort"].is_string()) {
    const std::string& e = body["reasoning_effort"].get_ref<const std::string&>();
    if (e != "low" && e != "medium" && e != "high" && e != "max")
      throw ApiError(400, cat("reasoning_effort '", e, "' is not supported (expected low, medium, high or max)"),
                     "reasoning_effort");
    const bool native = body.contains("chat_template_kwargs") && body["chat_template_kwargs"].is_object() &&
                        body["chat_template_kwargs"].contains("thinking_effort");
    if (e == "medium" && !native) req.options.thinking_effort = "high";
  }
  PreparedChat out;
  const std::vector<Image> images = collect_images(req.messages, limits);
  EncodedImages encoded;
  if (!images.empty()) {
    if (!host.vision())
      throw ApiError(400, cat("the model '", host.options().served_name,
                              "' has no vision tower; image_url content parts are not supported"),
                     "messages", "images_not_supported");
    if (check_fit) {
      // The images' token counts follow from their sizes alone: refuse before the tower runs (a
      // 4095 x 4095 upload would spend over a minute encoding only to fail the context check).
      int64_t image_tokens = 0;
      for (const Image& im : images)
        image_tokens += navit_resize_geometry(im.width, im.height, host.vision()->media_config()).num_tokens;
      const int64_t ctx = host.context_tokens();
      if (image_tokens >= ctx)
        throw ApiError(400, cat("the images alone take ", image_tokens, " tokens; this model's context is ", ctx,
                                " tokens (prompt + output); send smaller or fewer images"),
                       "messages", "context_length_exceeded");
    }
    encoded = host.encode_images(images);
    std::vector<std::string> texts;
    for (const MediaPrompt& m : encoded.prompts) texts.push_back(m.text);
    req.options.image_prompts = std::move(texts);
  }
  try {
    out.prompt.tokens = encode_segments(host.tokenizer(), render_chat(req));
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "messages");
  }
  if (!images.empty()) {
    const int32_t pad = host.model().config().media_placeholder_token_id;
    for (size_t i = 0; i < out.prompt.tokens.size(); ++i)
      if (out.prompt.tokens[i] == pad) out.prompt.media_positions.push_back(static_cast<int64_t>(i));
    const size_t hidden = static_cast<size_t>(host.model().text().hidden_size);
    if (out.prompt.media_positions.size() * hidden != encoded.rows.size())
      throw ApiError(500, cat("the prompt has ", out.prompt.media_positions.size(), " image pads but the vision tower "
                              "returned ", encoded.rows.size() / hidden, " rows"));
    out.prompt.media_rows = std::move(encoded.rows);
    out.prompt.images = static_cast<int>(images.size());
  }
  out.parser = chat_parser_options(req);
  const ojson& tc = req.options.tool_choice;
  if (out.parser.parse_tools && req.tools.is_array()) {
    // Each tool with its compiled parameters: a forced call's arguments then satisfy them.  A
    // schema outside the supported subset leaves that tool's arguments free, unless the tool
    // asks for "strict" (then the request is refused, naming the keyword).
    std::vector<ForcedTool> tools;
    for (size_t i = 0; i < req.tools.size(); ++i) {
      const ojson& fn = req.tools[i]["function"];  // (check_tools: an object with a string name)
      std::shared_ptr<const CompiledSchema> params;
      if (fn.contains("parameters") && fn["parameters"].is_object()) {
        try {
          params = compile_decodable_schema(fn["parameters"]);  // (forced arguments would otherwise dead-end: a 500)
        } catch (const Error& e) {
          if (fn.contains("strict") && fn["strict"].is_boolean() && fn["strict"].get<bool>())
            throw ApiError(400, cat("tools[", i, "].function.parameters: ", e.what()), "tools", "unsupported_schema");
        }
      }
      tools.emplace_back(fn["name"].get<std::string>(), std::move(params));
    }
    if (tc.is_string() && tc == "required") {
      out.forced_tools = std::move(tools);
    } else if (tc.is_object()) {
      const std::string name = tc["function"]["name"];
      auto it = std::find_if(tools.begin(), tools.end(), [&](const ForcedTool& t) { return t.name == name; });
      if (it == tools.end())
        throw ApiError(400, cat("tool_choice names the function '", name, "', which is not among the tools"),
                       "tool_choice");
      out.forced_tools = {*it};
      out.single_call = true;
    }
  }
  if (check_fit) check_prompt_fits(host, out.prompt, "messages");
  return out;
}

PreparedPrompt prepare_completion(const EngineHost& host, const ojson& body, bool check_fit) {
  if (!body.contains("prompt") || body["prompt"].is_null()) throw ApiError(400, "prompt is required", "prompt");
  const ojson* p = &body["prompt"];
  // A list holding one prompt (a string or a list of ids) is that prompt.
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  PreparedPrompt out;
  if (p->is_string()) {
    out.tokens = host.tokenizer().encode(p->get_ref<const std::string&>(), /*allow_special=*/true);
  } else if (p->is_array()) {
    const int64_t vocab = host.model().text().vocab_size;
    for (const ojson& t : *p) {
      if (t.is_string() || t.is_array())
        throw ApiError(400, "prompt: several prompts in one request are not supported; send one prompt", "prompt",
                       "unsupported_field");
      if (!t.is_number_integer())
        throw ApiError(400, "prompt must be a string or a list of token ids (integers)", "prompt");
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id >= vocab)
        throw ApiError(400, cat("prompt: token id ", id, " is outside the vocabulary [0, ", vocab, ")"), "prompt");
      out.tokens.push_back(static_cast<int32_t>(id));
    }
  } else {
    throw ApiError(400, "prompt must be a string or a list of token ids", "prompt");
  }
  if (check_fit) check_prompt_fits(host, out, "prompt");
  return out;
}

}  // namespace k3::server
