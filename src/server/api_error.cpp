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

}  // namespace k3::server
