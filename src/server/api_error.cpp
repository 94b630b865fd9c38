#include "server/api_error.h"

namespace k3::server {

const char* error_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

ojson error_envelope(int status, const std::string& message, const std::string& param, const std::string& code) {
  ojson e = ojson::object();
  e["message"] = message;
  e["type"] = error_type(status);
  e["param"] = param.empty() ? ojson() : ojson(param);
  e["code"] = code.empty() ? ojson() : ojson(code);
  return ojson{{"error", std::move(e)}};
}

ojson parse_request_body(std::string_view text) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos)
    throw ApiError(400, "the request body is empty: send a JSON object", "", "invalid_json");
  if (json_nests_deeper_than(text))
    throw ApiError(400, cat("the request body nests arrays or objects more than ", kMaxJsonDepth, " levels deep"), "",
                   "invalid_json");
  // py_json_parse, not ojson::parse: that one searches an object's keys linearly for each new
  // key (a body of tens of thousands of keys holds a worker for seconds) and stops at a NUL
  // byte, silently dropping the rest of the body.
  ojson body;
  try {
    body = py_json_parse(text);
  } catch (const Error& e) {
    throw ApiError(400, cat("the request body is not valid JSON: ", e.what()), "", "invalid_json");
  }
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object", "", "invalid_json");
  return body;
}

}  // namespace k3::server
