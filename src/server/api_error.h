// Failures the HTTP API reports, as OpenAI's error envelope
//   {"error": {"message": ..., "type": ..., "param": ... | null, "code": ... | null}}
// with the status that goes with them (docs/api.md "Errors"): 400 bad input, 401 API key, 404
// unknown path, 405 wrong method, 413 oversize body, 429 queue full, 503 loading / shutting down,
// 500 only for real faults.  Request parsing throws ApiError; a plain k3::Error from the text or
// engine libraries (which name the field) becomes a 400.
#pragma once

#include <string>
#include <string_view>

#include "base/error.h"
#include "text/py_json.h"

namespace k3::server {

class ApiError : public Error {
 public:
  ApiError(int status, const std::string& message, std::string param = "", std::string code = "")
      : Error(message), status(status), param(std::move(param)), code(std::move(code)) {}
  int status;
  std::string param;  // the offending request field ("" = null)
  std::string code;   // a machine-readable code ("" = null)
};

// "invalid_request_error", "authentication_error", ... for a status.
const char* error_type(int status);
ojson error_envelope(int status, const std::string& message, const std::string& param = "",
                     const std::string& code = "");

// An API request's body as a JSON object, whatever the Content-Type says (curl's default is
// form-urlencoded); ApiError 400 "invalid_json" when it is empty, nests deeper than
// kMaxJsonDepth, is not JSON or is not an object.
ojson parse_request_body(std::string_view text);

}  // namespace k3::server
