// Helpers for the server tests: the synthetic model directories (written once per process), HTTP
// calls that return parsed JSON, SSE parsing, reading one value out of /metrics, PNG data URLs.
#pragma once

#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "server_process.h"

namespace k3::testing {

using ojson = nlohmann::ordered_json;

// Tiny synthetic K3 with a tiny vision tower / without one.  Both are served as "m".
const std::string& vision_model_dir();
const std::string& plain_model_dir();

struct Reply {
  int status = 0;  // 0: no HTTP answer
  std::string raw;
  ojson body;  // null when raw is not JSON
  // body[key], or null when the body has no such key (or is not an object).
  const ojson& operator[](const char* key) const {
    static const ojson null;
    return body.is_object() && body.contains(key) ? body[key] : null;
  }
};

httplib::Client client(const ServerProcess& s);
// An httplib result as a Reply (status 0 when there was no answer).
Reply to_reply(const httplib::Result& r);
Reply get(httplib::Client& cli, const std::string& path, const httplib::Headers& headers = {});
Reply post(httplib::Client& cli, const std::string& path, const ojson& body, const httplib::Headers& headers = {});
Reply post_raw(httplib::Client& cli, const std::string& path, const std::string& body, const std::string& type);

struct Sse {
  int status = 0;
  std::string raw;
  std::vector<ojson> events;  // the data: payloads before [DONE]
  bool done = false;          // ended with data: [DONE]
};
Sse post_sse(httplib::Client& cli, const std::string& path, const ojson& body);

// The body of GET path; throws std::runtime_error (a test failure, not a crash) when no response
// came, e.g. because the server died.
std::string get_body(httplib::Client& cli, const std::string& path);

// The value of the sample line that starts with `name ` in Prometheus text (-1 when absent).
double metric(const std::string& text, const std::string& name);

// data:image/png;base64,... of a smooth w x h RGB pattern that depends on seed.
std::string png_data_url(int width, int height, int seed);
// The same PNG's bytes written to a file.
void write_png(const std::string& path, int width, int height, int seed);

}  // namespace k3::testing
