// The HTTP API of `k3 env serve` (agentenv/env_server.h), in-process on a free loopback port:
// the sandbox life cycle, commands (whole and streamed), files, the API key, and the refusals of
// bad requests.  The tests of requests that never reach a sandbox run everywhere, over a server
// without a manager; the others need sandboxes (root).
#include "agentenv/env_server.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "agentenv/sandbox_test_util.h"

namespace k3::agentenv {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using k3::testing::ScratchManager;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// An EnvServer on a free loopback port, listening on its own thread until destroyed.
class TestServer {
 public:
  explicit TestServer(std::unique_ptr<SandboxManager> manager, EnvServerOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    server_ = std::make_unique<EnvServer>(std::move(manager), options);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->listen(); });
  }
  ~TestServer() {
    server_->stop();
    thread_.join();
  }
  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;

  httplib::Client client(const std::string& api_key = "") const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60);
    if (!api_key.empty()) c.set_default_headers({{"X-API-Key", api_key}});
    return c;
  }
  EnvServer& server() { return *server_; }

 private:
  std::unique_ptr<EnvServer> server_;
  int port_ = 0;
  std::thread thread_;
};

json parsed(const httplib::Result& r) {
  if (!r) return json();
  return json::parse(r->body, nullptr, /*allow_exceptions=*/false);
}

httplib::Result post(httplib::Client& c, const std::string& path, const json& body) {
  return c.Post(path, body.dump(), "application/json");
}

// A request refused with `status` and a message containing `needle`.
void expect_refused(const httplib::Result& r, int status, const std::string& needle) {
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, status) << r->body;
  const json j = parsed(r);
  ASSERT_TRUE(j.is_object() && j.contains("message")) << r->body;
  EXPECT_EQ(j["code"], status);
  EXPECT_NE(j["message"].get<std::string>().find(needle), std::string::npos) << j["message"];
}

// A streamed command's answer: its NDJSON lines as they arrived, each with its arrival time.
struct Streamed {
  int status = 0;
  std::string content_type;
  std::vector<json> lines;
  std::vector<double> at_s;  // seconds after the request was sent
};

// Posts a command with "stream": true; `stop_after` lines, then hangs up (0: reads it all).
Streamed stream_command(httplib::Client& c, const std::string& id, json body, size_t stop_after = 0) {
  body["stream"] = true;
  httplib::Request req;
  req.method = "POST";
  req.path = "/sandboxes/" + id + "/commands";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  Streamed out;
  std::string pending;
  const Clock::time_point t0 = Clock::now();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    pending.append(data, n);
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1)) {
      out.lines.push_back(json::parse(pending.substr(0, nl), nullptr, false));
      out.at_s.push_back(seconds_since(t0));
      if (stop_after > 0 && out.lines.size() >= stop_after) return false;
    }
    return true;
  };
  const httplib::Result r = c.send(req);
  if (r) {
    out.status = r->status;
    out.content_type = r->get_header_value("Content-Type");
  }
  return out;
}

json run(httplib::Client& c, const std::string& id, const json& body) {
  const httplib::Result r = post(c, "/sandboxes/" + id + "/commands", body);
  if (!r || r->status != 200) {
    ADD_FAILURE() << "command " << body.dump() << ": " << (r ? r->body : httplib::to_string(r.error()));
    return json::object();
  }
  return parsed(r);
}

std::string create_sandbox(httplib::Client& c, const json& body = json::object()) {
  const httplib::Result r = post(c, "/sandboxes", body);
  if (!r || r->status != 201) {
    ADD_FAILURE() << "create: " << (r ? r->body : httplib::to_string(r.error()));
    return "";
  }
  return parsed(r).value("sandboxID", "");
}

// The value of an unlabelled Prometheus sample, -1 when absent.
double sample(const std::string& metrics, const std::string& name) {
  const size_t at = metrics.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(metrics.substr(at + name.size() + 2));
}

// ---- requests that never reach a sandbox ----------------------------------------------------

TEST(EnvServerTest, HealthAndMetricsWithoutSandboxes) {
  TestServer s(nullptr);
  httplib::Client c = s.client();
  const httplib::Result health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(parsed(health)["status"], "ok");
  EXPECT_TRUE(parsed(health).contains("cgroups"));
  const httplib::Result metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(sample(metrics->body, "k3env_commands_total"), 0);
  // No manager: the sandbox routes say so.
  expect_refused(c.Get("/sandboxes"), 503, "no sandbox manager");
}

TEST(EnvServerTest, ApiKeyIsRequiredWhenSet) {
  EnvServerOptions o;
  o.api_key = "s3cret-key";
  TestServer s(nullptr, o);
  httplib::Client anonymous = s.client();
  expect_refused(anonymous.Get("/metrics"), 401, "missing API key");
  expect_refused(anonymous.Get("/no/such/route"), 401, "missing API key");
  // A refused body is not read: the next request on the same client still works.
  expect_refused(post(anonymous, "/sandboxes", {{"timeout", 10}}), 401, "missing API key");
  httplib::Client wrong = s.client("s3cret-kez");
  expect_refused(wrong.Get("/metrics"), 401, "invalid API key");
  httplib::Client shorter = s.client("s3cret");
  expect_refused(shorter.Get("/metrics"), 401, "invalid API key");
  httplib::Client right = s.client("s3cret-key");
  const httplib::Result ok = right.Get("/metrics");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  expect_refused(right.Get("/no/such/route"), 404, "no route for GET /no/such/route");
  // /health is open, for load balancers.
  const httplib::Result health = anonymous.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST(EnvServerTest, BadRequestsAreRefusedNamingTheProblem) {
  EnvServerOptions o;
  o.max_body_bytes = 4096;
  TestServer s(nullptr, o);
  httplib::Client c = s.client();
  // Bodies that are not a JSON object.
  expect_refused(c.Post("/sandboxes", "{\"timeout\": 10,", "application/json"), 400, "not valid JSON");
  expect_refused(c.Post("/sandboxes", "{\"timeout\": x}", "application/json"), 400, "column 13");
  expect_refused(c.Post("/sandboxes", "[1, 2]", "application/json"), 400, "must be a JSON object");
  expect_refused(c.Post("/sandboxes", std::string(40, '[') + std::string(40, ']'), "application/json"), 400,
                 "levels deep");
  expect_refused(c.Post("/sandboxes", std::string(5000, ' '), "application/json"), 413, "limit of 4096 bytes");
  // Fields of the wrong type, out of range, or unknown.
  expect_refused(post(c, "/sandboxes", {{"timeout", "10"}}), 400, "timeout: must be a number of seconds");
  expect_refused(post(c, "/sandboxes", {{"timeout", -5}}), 400, "timeout: must be more than 0");
  expect_refused(post(c, "/sandboxes", {{"autoPause", 1}}), 400, "autoPause: must be true or false");
  expect_refused(post(c, "/sandboxes", {{"network", "internet"}}), 400, "network: must be \"none\" or \"loopback\"");
  expect_refused(post(c, "/sandboxes", {{"memoryMB", 1.5}}), 400, "memoryMB: must be an integer");
  expect_refused(post(c, "/sandboxes", {{"memoryMB", 1}}), 400, "memoryMB: must be between 16 and");
  expect_refused(post(c, "/sandboxes", {{"pids", 18446744073709551615ull}}), 400, "pids: must be between");
  expect_refused(post(c, "/sandboxes", {{"cpuWeight", 0}}), 400, "cpuWeight: must be between 1 and 10000");
  expect_refused(post(c, "/sandboxes", {{"cpus", -1}}), 400, "cpus: must be between 0 and 4096");
  expect_refused(post(c, "/sandboxes", {{"envVars", {{"A", 1}}}}), 400, "envVars.A: must be a string");
  expect_refused(post(c, "/sandboxes", {{"envVars", {{"A=B", "c"}}}}), 400, "envVars: variable names");
  expect_refused(post(c, "/sandboxes", {{"metadata", {{"k", {1, 2}}}}}), 400, "metadata.k: must be a string");
  expect_refused(post(c, "/sandboxes", {{"template", 7}}), 400, "template: must be a string");
  expect_refused(post(c, "/sandboxes", {{"timeout", 10}, {"bogus", true}}), 400, "unknown field \"bogus\"");
  expect_refused(post(c, "/sandboxes/sb-x/fork", {{"count", 17}}), 400, "count: must be between 1 and 16");
  expect_refused(post(c, "/sandboxes/sb-x/fork", {{"count", 0}}), 400, "count: must be between 1 and 16");
  expect_refused(post(c, "/sandboxes/sb-x/fork", {{"count", "2"}}), 400, "count: must be an integer");
  expect_refused(post(c, "/sandboxes/sb-x/timeout", json::object()), 400, "timeout: required");
  expect_refused(post(c, "/sandboxes/sb-x/pause", {{"now", true}}), 400, "takes no fields");
  expect_refused(post(c, "/sandboxes/sb-x/commands", json::object()), 400, "cmd: required");
  expect_refused(post(c, "/sandboxes/sb-x/commands", {{"cmd", {"ls"}}}), 400, "cmd: must be a string");
  expect_refused(post(c, "/sandboxes/sb-x/commands", {{"cmd", "true"}, {"timeout", 0}}), 400, "timeout: must be");
  expect_refused(post(c, "/sandboxes/sb-x/commands", {{"cmd", "true"}, {"outputCap", -1}}), 400, "outputCap");
  expect_refused(post(c, "/sandboxes/sb-x/commands", {{"cmd", "true"}, {"args", {"-l"}}}), 400,
                 "unknown field \"args\"");
  // Files: the path is required.
  expect_refused(c.Get("/sandboxes/sb-x/files"), 400, "path: the query parameter path is required");
  expect_refused(c.Put("/sandboxes/sb-x/files", "data", "application/octet-stream"), 400, "path:");
  expect_refused(c.Get("/sandboxes/sb-x/files/stat?path="), 400, "path: must not be empty");
  expect_refused(c.Put("/sandboxes/sb-x/files?path=/a&append=maybe", "x", "text/plain"), 400, "append: must be");
  // Routes that do not exist.
  expect_refused(c.Get("/nope"), 404, "no route for GET /nope");
  expect_refused(c.Post("/nope", "{}", "application/json"), 404, "no route for POST /nope");
  expect_refused(c.Delete("/sandboxes"), 404, "no route for DELETE /sandboxes");
  expect_refused(c.Get("/sandboxes/sb-x/pause"), 404, "no route for GET");
  const httplib::Result metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_GE(sample(metrics->body, "k3env_http_errors_total{class=\"4xx\"}"), 30);
}

// ---- sandboxes -------------------------------------------------------------------------------

TEST(EnvServerTest, SandboxLifeCycleCommandsAndFiles) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager scratch;
  TestServer s(std::move(scratch.manager));
  httplib::Client c = s.client();

  const httplib::Result created = post(c, "/sandboxes", {{"timeout", 600}, {"metadata", {{"task", "t1"}}},
                                                         {"envVars", {{"GREETING", "hi"}}}});
  ASSERT_TRUE(created);
  ASSERT_EQ(created->status, 201) << created->body;
  const json info = parsed(created);
  const std::string id = info["sandboxID"];
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(info["state"], "running");
  EXPECT_EQ(info["metadata"]["task"], "t1");

  // Commands: exit code, output, stdin, environment, working folder.
  json r = run(c, id, {{"cmd", "echo hello; echo oops >&2; exit 3"}});
  EXPECT_EQ(r["exit_code"], 3);
  EXPECT_EQ(r["stdout"], "hello\n");
  EXPECT_EQ(r["stderr"], "oops\n");
  r = run(c, id, {{"cmd", "cat; echo $GREETING $FOO; pwd"}, {"stdin", "in\n"}, {"envs", {{"FOO", "bar"}}},
                  {"cwd", "/tmp"}});
  EXPECT_EQ(r["exit_code"], 0);
  EXPECT_EQ(r["stdout"], "in\nhi bar\n/tmp\n");
  r = run(c, id, {{"cmd", "sleep 10"}, {"timeout", 0.5}});
  EXPECT_EQ(r["timed_out"], true);

  // Files: upload, append, download, list, stat; the sandbox's commands see them.
  const std::string files = "/sandboxes/" + id + "/files";
  httplib::Result up = c.Put(files + "?path=/workspace/a.txt", "abc", "application/octet-stream");
  ASSERT_TRUE(up);
  ASSERT_EQ(up->status, 200) << up->body;
  EXPECT_EQ(parsed(up)["size"], 3);
  up = c.Post(files + "?path=/workspace/a.txt&append=1", "def", "application/x-www-form-urlencoded");
  ASSERT_TRUE(up);
  ASSERT_EQ(up->status, 200) << up->body;
  EXPECT_EQ(parsed(up)["size"], 6);
  const httplib::Result down = c.Get(files + "?path=/workspace/a.txt");
  ASSERT_TRUE(down);
  EXPECT_EQ(down->status, 200);
  EXPECT_EQ(down->body, "abcdef");
  EXPECT_EQ(down->get_header_value("Content-Type"), "application/octet-stream");
  EXPECT_EQ(run(c, id, {{"cmd", "cat /workspace/a.txt"}})["stdout"], "abcdef");
  const std::string binary("\0\xff\x01zz", 5);
  up = c.Put(files + "?path=sub/dir/bin", binary, "application/octet-stream");
  ASSERT_TRUE(up);
  EXPECT_EQ(up->status, 200) << up->body;
  EXPECT_EQ(c.Get(files + "?path=/workspace/sub/dir/bin")->body, binary);
  const httplib::Result list = c.Get(files + "/list?path=/workspace");
  ASSERT_TRUE(list);
  ASSERT_EQ(list->status, 200) << list->body;
  std::vector<std::string> names;
  const json listed = parsed(list);
  for (const json& e : listed["entries"]) names.push_back(e["name"]);
  EXPECT_NE(std::find(names.begin(), names.end(), "a.txt"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "sub"), names.end());
  const json stat = parsed(c.Get(files + "/stat?path=/workspace/a.txt"));
  EXPECT_EQ(stat["type"], "file");
  EXPECT_EQ(stat["size"], 6);
  expect_refused(c.Get(files + "?path=/workspace/missing.txt"), 404, "missing.txt");
  expect_refused(c.Get(files + "/stat?path=/workspace/missing.txt"), 404, "missing.txt");
  expect_refused(c.Get(files + "?path=/workspace/sub"), 400, "");

  // Listing and looking up.
  const json all = parsed(c.Get("/sandboxes"));
  ASSERT_EQ(all["sandboxes"].size(), 1u);
  EXPECT_EQ(all["sandboxes"][0]["sandboxID"], id);
  EXPECT_EQ(parsed(c.Get("/sandboxes/" + id))["sandboxID"], id);

  // Pause: commands are refused, whole or streamed; resume: they run, over the same files.
  httplib::Result paused = post(c, "/sandboxes/" + id + "/pause", json::object());
  ASSERT_TRUE(paused);
  ASSERT_EQ(paused->status, 200) << paused->body;
  EXPECT_EQ(parsed(paused)["state"], "paused");
  expect_refused(post(c, "/sandboxes/" + id + "/commands", {{"cmd", "true"}}), 409, "paused");
  const Streamed refused = stream_command(c, id, {{"cmd", "true"}});
  EXPECT_EQ(refused.status, 409);
  const httplib::Result resumed = c.Post("/sandboxes/" + id + "/resume");
  ASSERT_TRUE(resumed);
  ASSERT_EQ(resumed->status, 200) << resumed->body;
  EXPECT_EQ(parsed(resumed)["state"], "running");
  EXPECT_EQ(run(c, id, {{"cmd", "cat /workspace/a.txt"}})["stdout"], "abcdef");

  // Fork: the children start from the parent's files; their writes stay their own.
  const httplib::Result forked = post(c, "/sandboxes/" + id + "/fork", {{"count", 2}});
  ASSERT_TRUE(forked);
  ASSERT_EQ(forked->status, 201) << forked->body;
  const json children = parsed(forked)["sandboxes"];
  ASSERT_EQ(children.size(), 2u);
  const std::string a = children[0]["sandboxID"], b = children[1]["sandboxID"];
  EXPECT_NE(a, b);
  EXPECT_NE(a, id);
  EXPECT_EQ(run(c, a, {{"cmd", "cat /workspace/a.txt"}})["stdout"], "abcdef");
  EXPECT_EQ(run(c, b, {{"cmd", "cat /workspace/a.txt"}})["stdout"], "abcdef");
  EXPECT_EQ(run(c, a, {{"cmd", "echo child > /workspace/b.txt && cat /workspace/b.txt"}})["stdout"], "child\n");
  expect_refused(c.Get("/sandboxes/" + b + "/files?path=/workspace/b.txt"), 404, "b.txt");
  expect_refused(c.Get("/sandboxes/" + id + "/files?path=/workspace/b.txt"), 404, "b.txt");
  EXPECT_EQ(run(c, id, {{"cmd", "test -e /workspace/b.txt"}})["exit_code"], 1);

  // The time to live, from now.
  const httplib::Result ttl = post(c, "/sandboxes/" + id + "/timeout", {{"timeout", 1000}});
  ASSERT_TRUE(ttl);
  ASSERT_EQ(ttl->status, 200) << ttl->body;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_NEAR(parsed(ttl)["expiresAt"].get<double>() - now, 1000, 10);

  // Delete: gone for every route.
  for (const std::string& gone : {a, b, id}) {
    const httplib::Result del = c.Delete("/sandboxes/" + gone);
    ASSERT_TRUE(del);
    EXPECT_EQ(del->status, 204) << del->body;
  }
  expect_refused(c.Get("/sandboxes/" + id), 404, id);
  expect_refused(post(c, "/sandboxes/" + id + "/commands", {{"cmd", "true"}}), 404, id);
  expect_refused(c.Get("/sandboxes/" + id + "/files?path=/workspace/a.txt"), 404, id);
  expect_refused(c.Delete("/sandboxes/" + id), 404, id);
  EXPECT_EQ(parsed(c.Get("/sandboxes"))["sandboxes"].size(), 0u);

  const std::string metrics = c.Get("/metrics")->body;
  // Nine commands ran (the paused sandbox refused two); exit 3, the timeout and `test -e` failed.
  EXPECT_EQ(sample(metrics, "k3env_commands_total"), 9);
  EXPECT_EQ(sample(metrics, "k3env_command_failures_total"), 3);
  EXPECT_EQ(sample(metrics, "k3env_command_timeouts_total"), 1);
}

TEST(EnvServerTest, StreamedOutputArrivesAsNdjsonLines) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager scratch;
  TestServer s(std::move(scratch.manager));
  httplib::Client c = s.client();
  const std::string id = create_sandbox(c);
  ASSERT_FALSE(id.empty());
  const Streamed out = stream_command(c, id, {{"cmd", "echo one; sleep 1; echo two >&2; printf 'caf\\303\\251\\n'"}});
  EXPECT_EQ(out.status, 200);
  EXPECT_EQ(out.content_type, "application/x-ndjson");
  ASSERT_GE(out.lines.size(), 3u);
  std::string stdout_text, stderr_text;
  for (size_t i = 0; i + 1 < out.lines.size(); ++i) {
    const json& line = out.lines[i];
    ASSERT_TRUE(line.is_object() && line.size() == 1) << line;
    if (line.contains("stdout")) stdout_text += line["stdout"].get<std::string>();
    if (line.contains("stderr")) stderr_text += line["stderr"].get<std::string>();
  }
  EXPECT_EQ(stdout_text, "one\ncafé\n");
  EXPECT_EQ(stderr_text, "two\n");
  // The first line came while the command still ran.
  EXPECT_EQ(out.lines.front()["stdout"], "one\n");
  EXPECT_LT(out.at_s.front() + 0.5, out.at_s.back());
  const json& end = out.lines.back();
  ASSERT_TRUE(end.contains("end")) << end;
  EXPECT_EQ(end["end"]["exit_code"], 0);
  EXPECT_EQ(end["end"]["stdout"], "one\ncafé\n");
}

TEST(EnvServerTest, ClientLeavingAStreamEndsTheCommand) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager scratch;
  TestServer s(std::move(scratch.manager));
  httplib::Client c = s.client();
  const std::string id = create_sandbox(c);
  ASSERT_FALSE(id.empty());
  const Clock::time_point t0 = Clock::now();
  const Streamed first = stream_command(c, id, {{"cmd", "echo start; sleep 30; echo end"}, {"timeout", 20}}, 1);
  ASSERT_EQ(first.lines.size(), 1u);
  EXPECT_EQ(first.lines[0]["stdout"], "start\n");
  // The server notices the client has gone and kills the command long before its timeout; at
  // the latest the timeout would.  No `sleep` is left either way.
  std::string left = "sleep";
  while (seconds_since(t0) < 25 && left.find("sleep") != std::string::npos) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    left = run(c, id, {{"cmd", "for p in /proc/[0-9]*; do cat $p/comm; done 2>/dev/null"}})["stdout"];
  }
  EXPECT_EQ(left.find("sleep"), std::string::npos) << left;
  EXPECT_LT(seconds_since(t0), 22);
}

TEST(EnvServerTest, TemplatesAreNamesInTheServersTemplateFolder) {
  K3_REQUIRE_SANDBOXES();
  {
    ScratchManager scratch;
    TestServer s(std::move(scratch.manager));
    httplib::Client c = s.client();
    // Without --templates a client cannot point a sandbox at a host folder.
    expect_refused(c.Post("/sandboxes", json{{"template", "/"}}.dump(), "application/json"), 400,
                   "offers no templates");
  }
  k3::testing::TempDir templates;
  ASSERT_EQ(std::system(("t=" + templates.path() + "/mini && mkdir -p $t/bin $t/proc $t/dev $t/workspace && "
                         "cp -L /bin/sh $t/bin/sh && for f in $(ldd /bin/sh | grep -o '/[^ ]*'); do "
                         "mkdir -p $t$(dirname $f) && cp -L $f $t$f; done && echo mini > $t/name").c_str()), 0);
  ScratchManager scratch;
  EnvServerOptions options;
  options.templates_dir = templates.path();
  TestServer s(std::move(scratch.manager), options);
  httplib::Client c = s.client();
  for (const char* bad : {"../mini", "/", "..", "a/b"})
    expect_refused(c.Post("/sandboxes", json{{"template", bad}}.dump(), "application/json"), 400,
                   "a folder name in the server's template folder");
  auto created = c.Post("/sandboxes", json{{"template", "mini"}}.dump(), "application/json");
  ASSERT_TRUE(created && created->status == 201) << (created ? created->body : "no reply");
  const std::string id = json::parse(created->body).at("sandboxID");
  EXPECT_EQ(run(c, id, {{"cmd", "read n < /name; echo $n"}})["stdout"], "mini\n");
}

TEST(EnvServerTest, ServesManyLongCommandsAtOnce) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager scratch;
  TestServer s(std::move(scratch.manager));
  httplib::Client c = s.client();
  const std::string id = create_sandbox(c);
  ASSERT_FALSE(id.empty());
  constexpr int kCommands = 16;
  std::atomic<int> ok{0};
  std::mutex mu;
  std::string failures;
  std::vector<std::thread> threads;
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < kCommands; ++i)
    threads.emplace_back([&, i] {
      httplib::Client mine = s.client();
      const httplib::Result r = post(mine, "/sandboxes/" + id + "/commands", {{"cmd", "sleep 2; echo " + std::to_string(i)}});
      if (r && r->status == 200 && parsed(r)["stdout"] == std::to_string(i) + "\n") {
        ++ok;
      } else {
        std::lock_guard<std::mutex> lock(mu);
        failures += (r ? std::to_string(r->status) + " " + r->body : httplib::to_string(r.error())) + "\n";
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), kCommands) << failures;
  EXPECT_LT(seconds_since(t0), 2.0 * kCommands / 2);  // together, not one after another
}

TEST(EnvServerTest, StopEndsRequestsWaitingOnCommands) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager scratch;
  TestServer s(std::move(scratch.manager));
  httplib::Client c = s.client();
  const std::string id = create_sandbox(c);
  ASSERT_FALSE(id.empty());
  std::atomic<bool> answered{false};
  std::thread waiting([&] {
    httplib::Client mine = s.client();
    (void)post(mine, "/sandboxes/" + id + "/commands", {{"cmd", "sleep 60"}, {"timeout", 120}});
    answered = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const Clock::time_point t0 = Clock::now();
  s.server().stop();
  waiting.join();
  EXPECT_TRUE(answered.load());
  EXPECT_LT(seconds_since(t0), 10);
}

}  // namespace
}  // namespace k3::agentenv
