// Episodes (src/agentenv/episode.h) driven by a scripted OpenAI-compatible endpoint in this
// process: the right tool calls solve the three sample tasks (reward 1), wrong ones score 0, a dead
// or broken endpoint is an episode's error and never a crash, tool_call ids come back exactly as
// sent, --parallel gives the same rewards, and trajectories are valid JSON.  One test runs an
// episode against a real `k3 serve` on the trained demo model.
#include "agentenv/episode.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agentenv/sandbox_test_util.h"
#include "server/server_process.h"

namespace k3::testing {
namespace {

using ojson = nlohmann::ordered_json;
using agentenv::EpisodeResult;
using agentenv::RunOptions;
using agentenv::RunSummary;

// What the scripted model does next: tool calls (name, arguments), or a final text; or an HTTP
// failure (status != 200 with raw_body).
struct Action {
  std::vector<std::pair<std::string, ojson>> calls;
  std::string text = "Done.";
  int status = 200;
  std::string raw_body;
};
// The next action for the conversation whose user message is `instruction`, after `turn` replies.
using Policy = std::function<Action(const std::string& instruction, int turn)>;

Action calls(std::vector<std::pair<std::string, ojson>> c) { return {std::move(c), "", 200, ""}; }
Action say(const std::string& text) { return {{}, text, 200, ""}; }

// The scripted endpoint: POST /v1/chat/completions answers by `policy` and checks each request
// (the fields k3 env run sends, and every tool message's tool_call_id against the ids it issued);
// GET /v1/models lists "fake-model".
class FakeEndpoint {
 public:
  explicit FakeEndpoint(Policy policy, std::string model = "fake-model") : policy_(std::move(policy)), model_(model) {
    server_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(ojson{{"object", "list"}, {"data", {{{"id", model_}, {"object", "model"}}}}}.dump(),
                      "application/json");
    });
    server_.Post("/v1/chat/completions",
                 [this](const httplib::Request& req, httplib::Response& res) { answer(req, res); });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeEndpoint() {
    server_.stop();
    thread_.join();
  }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<std::string> problems() const {
    std::lock_guard<std::mutex> lock(mu_);
    return problems_;
  }
  std::set<std::string> issued_ids() const {
    std::lock_guard<std::mutex> lock(mu_);
    return issued_;
  }
  int max_in_flight() const {
    std::lock_guard<std::mutex> lock(mu_);
    return max_in_flight_;
  }

 private:
  void problem(const std::string& p) {
    std::lock_guard<std::mutex> lock(mu_);
    problems_.push_back(p);
  }

  void answer(const httplib::Request& req, httplib::Response& res) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      max_in_flight_ = std::max(max_in_flight_, ++in_flight_);
    }
    const ojson body = ojson::parse(req.body, nullptr, false);
    std::string instruction;
    int turn = 0;
    if (body.is_discarded() || !body.is_object()) {
      problem("a request body is not a JSON object");
    } else {
      if (body.value("model", "") != model_) problem("model is " + body.value("model", ""));
      if (!body.contains("tools") || body["tools"].size() != 5) problem("tools are not the five tools");
      if (body.value("tool_choice", "") != "auto") problem("tool_choice is not auto");
      if (body.value("logprobs", false) != true) problem("logprobs is not true");
      if (!body.contains("temperature") || !body.contains("max_tokens")) problem("no temperature or max_tokens");
      const ojson& m = body["messages"];
      if (m.size() < 2 || m[0]["role"] != "system" || m[1]["role"] != "user") problem("no system and user message");
      instruction = m.size() > 1 ? m[1].value("content", "") : "";
      for (size_t i = 0; i < m.size(); ++i) {
        if (m[i]["role"] != "assistant") continue;
        ++turn;
        if (!m[i].contains("tool_calls")) continue;
        const ojson& tc = m[i]["tool_calls"];
        for (size_t k = 0; k < tc.size(); ++k) {
          const std::string id = tc[k]["id"].get<std::string>();
          if (!issued_ids().count(id)) problem("the assistant message echoes an id never issued: " + id);
          const size_t at = i + 1 + k;
          if (at >= m.size() || m[at]["role"] != "tool" || m[at]["tool_call_id"] != id)
            problem("no tool message with tool_call_id '" + id + "' after its call");
          else if (!m[at]["content"].is_string())
            problem("a tool message has no text content");
        }
      }
    }
    const Action a = policy_(instruction, turn);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --in_flight_;
    }
    if (a.status != 200 || !a.raw_body.empty()) {
      res.status = a.status;
      res.set_content(a.raw_body, "application/json");
      return;
    }
    ojson message = {{"role", "assistant"},
                     {"content", a.calls.empty() ? ojson(a.text) : ojson(nullptr)},
                     {"reasoning_content", "thinking about it"}};
    if (!a.calls.empty()) {
      ojson tc = ojson::array();
      for (const auto& [name, args] : a.calls) {
        std::lock_guard<std::mutex> lock(mu_);
        // K3's ids (functions.NAME:INDEX); every other one with characters an echo might mangle.
        std::string id = "functions." + name + ":" + std::to_string(issued_.size());
        if (issued_.size() % 2 == 1) id += " \xC3\xBC\"/\\";
        issued_.insert(id);
        tc.push_back({{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", args.dump()}}}});
      }
      message["tool_calls"] = tc;
    }
    const ojson reply = {
        {"id", "chatcmpl-fake"},
        {"object", "chat.completion"},
        {"model", model_},
        {"choices",
         {{{"index", 0},
           {"message", message},
           {"logprobs",
            {{"content", {{{"token", "a"}, {"logprob", -0.25}, {"bytes", {97}}, {"top_logprobs", ojson::array()}}}}}},
           {"token_ids", {1, 2, 3}},
           {"finish_reason", a.calls.empty() ? "stop" : "tool_calls"}}}},
        {"usage", {{"prompt_tokens", 100 + turn}, {"completion_tokens", 7}, {"total_tokens", 107 + turn}}}};
    res.set_content(reply.dump(), "application/json");
  }

  Policy policy_;
  std::string model_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  mutable std::mutex mu_;
  std::vector<std::string> problems_;
  std::set<std::string> issued_;
  int in_flight_ = 0, max_in_flight_ = 0;
};

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The tool calls that solve each sample task, in turns.
Action right_policy(const std::string& instruction, int turn) {
  if (has(instruction, "hello.txt")) {
    if (turn == 0) return calls({{"write_file", {{"path", "hello.txt"}, {"content", "hello world\n"}}}});
  } else if (has(instruction, "sum.sh")) {
    if (turn == 0) return calls({{"read_file", {{"path", "sum.sh"}}}});
    if (turn == 1)
      return calls(
          {{"str_replace", {{"path", "/workspace/sum.sh"}, {"old_str", "total - n"}, {"new_str", "total + n"}}}});
    if (turn == 2) return calls({{"bash", {{"command", "sh sum.sh 1 2 3"}}}});
  } else if (has(instruction, "app.log")) {
    if (turn == 0)
      return calls({{"list_dir", ojson::object()},
                    {"bash", {{"command", "grep -c ERROR app.log > answer.txt; cat answer.txt"}}}});
  }
  return say("Done.");
}

// Plausible but wrong: the wrong text, giving up, the wrong count.
Action wrong_policy(const std::string& instruction, int turn) {
  if (turn > 0) return say("Done.");
  if (has(instruction, "hello.txt")) return calls({{"write_file", {{"path", "hello.txt"}, {"content", "goodbye"}}}});
  if (has(instruction, "app.log")) return calls({{"bash", {{"command", "echo 7 > answer.txt"}}}});
  return say("I cannot do that.");
}

ojson read_json(const std::string& path) {
  const ojson j = ojson::parse(read_file(path), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << path << " is not JSON";
  return j;
}

// Checks the shape every trajectory has.
void expect_valid_trajectory(const ojson& t, const std::string& task) {
  EXPECT_EQ(t["schema_version"], "k3-trajectory-v1");
  EXPECT_EQ(t["task"]["name"], task);
  EXPECT_TRUE(t["task"]["instruction"].is_string());
  EXPECT_TRUE(t["agent"]["model"].is_string());
  EXPECT_EQ(t["agent"]["tools"].size(), 5u);
  ASSERT_TRUE(t["steps"].is_array());
  ASSERT_GE(t["steps"].size(), 2u);
  EXPECT_EQ(t["steps"][0]["source"], "system");
  EXPECT_EQ(t["steps"][1]["source"], "user");
  for (size_t i = 0; i < t["steps"].size(); ++i) {
    const ojson& s = t["steps"][i];
    EXPECT_EQ(s["step_id"], i + 1);
    EXPECT_TRUE(s["message"].is_string());
    if (i < 2) continue;
    EXPECT_EQ(s["source"], "agent");
    ASSERT_TRUE(s["tool_calls"].is_array());
    ASSERT_EQ(s["observation"]["results"].size(), s["tool_calls"].size());
    for (size_t k = 0; k < s["tool_calls"].size(); ++k) {
      EXPECT_EQ(s["observation"]["results"][k]["source_call_id"], s["tool_calls"][k]["tool_call_id"]);
      EXPECT_TRUE(s["tool_calls"][k]["arguments"].is_string());
      EXPECT_TRUE(s["observation"]["results"][k]["content"].is_string());
    }
    EXPECT_TRUE(s["timing"]["request_s"].is_number());
    EXPECT_TRUE(s["metrics"].is_object());
  }
  EXPECT_EQ(t["turns"], t["steps"].size() - 2);
  EXPECT_TRUE(t["reward"].is_number());
  EXPECT_TRUE(t["stop_reason"].is_string());
  EXPECT_TRUE(t["final_metrics"]["total_seconds"].is_number());
}

RunOptions options(const std::string& base_url, const TempDir& out, const std::string& tasks = "agentenv/tasks") {
  RunOptions o;
  o.tasks_dir = test_data_path(tasks);
  o.out_dir = out.file("run");
  o.agent.base_url = base_url;
  o.agent.model = "fake-model";
  o.report = nullptr;
  return o;
}

std::map<std::string, double> rewards(const RunSummary& s) {
  std::map<std::string, double> r;
  for (const EpisodeResult& e : s.episodes) r[e.task] = e.reward;
  return r;
}

TEST(Episode, RightToolCallsSolveEverySampleTask) {
  K3_REQUIRE_SANDBOXES();
  FakeEndpoint fake(right_policy);
  TempDir out;
  RunOptions o = options(fake.base_url(), out);
  o.agent.model = "";  // learnt from /v1/models
  std::FILE* report = std::tmpfile();
  o.report = report;
  const RunSummary s = agentenv::run_episodes(o);
  EXPECT_EQ(s.model, "fake-model");
  ASSERT_EQ(s.episodes.size(), 3u);
  for (const EpisodeResult& e : s.episodes) {
    EXPECT_EQ(e.reward, 1) << e.task << ": " << e.error;
    EXPECT_EQ(e.error, "") << e.task;
    EXPECT_EQ(e.stop_reason, "done") << e.task;
  }
  EXPECT_EQ(s.episodes[0].task, "count-errors");
  EXPECT_EQ(s.episodes[0].turns, 2);
  EXPECT_EQ(s.episodes[1].turns, 4);
  EXPECT_EQ(s.episodes[2].turns, 2);
  EXPECT_EQ(s.episodes[1].prompt_tokens, 100 + 101 + 102 + 103);
  EXPECT_EQ(s.episodes[1].completion_tokens, 28);
  EXPECT_EQ(s.passed, 3);
  EXPECT_EQ(s.pass_rate, 1);
  EXPECT_EQ(fake.problems(), std::vector<std::string>{});

  std::rewind(report);
  std::string printed;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, report)) > 0;) printed.append(buf, n);
  std::fclose(report);
  EXPECT_TRUE(has(printed, "] count-errors: reward 1, 2 turns")) << printed;
  EXPECT_TRUE(has(printed, "3 episodes: passed 3 (100.0%)")) << printed;
  EXPECT_TRUE(has(printed, "task          reward")) << printed;

  const ojson summary = read_json(o.out_dir + "/summary.json");
  EXPECT_EQ(summary["pass_rate"], 1.0);
  EXPECT_EQ(summary["model"], "fake-model");
  EXPECT_EQ(summary["episodes"][1]["trajectory"], "fix-sum/trajectory.json");
  EXPECT_EQ(summary["total_completion_tokens"], 7 * 8);
  EXPECT_FALSE(std::filesystem::exists(o.out_dir + "/sandboxes"));

  const ojson t = read_json(o.out_dir + "/fix-sum/trajectory.json");
  expect_valid_trajectory(t, "fix-sum");
  EXPECT_EQ(t["reward"], 1.0);
  EXPECT_EQ(t["stop_reason"], "done");
  EXPECT_TRUE(t["error"].is_null());
  EXPECT_EQ(t["task"]["metadata"]["difficulty"], "easy");
  EXPECT_EQ(t["verifier"]["reward_source"], "reward.txt");
  EXPECT_EQ(t["verifier"]["exit_code"], 0);
  const ojson& steps = t["steps"];
  ASSERT_EQ(steps.size(), 6u);
  EXPECT_TRUE(has(steps[2]["observation"]["results"][0]["content"].get<std::string>(), "total=$((total - n))"));
  EXPECT_EQ(steps[3]["observation"]["results"][0]["content"], "replaced 1 occurrence in /workspace/sum.sh (at line 5)");
  EXPECT_EQ(steps[4]["observation"]["results"][0]["content"], "exit code: 0\nstdout:\n6\n");
  EXPECT_EQ(steps[5]["message"], "Done.");
  EXPECT_EQ(steps[5]["tool_calls"].size(), 0u);
  EXPECT_EQ(steps[2]["reasoning_content"], "thinking about it");
  EXPECT_EQ(steps[2]["finish_reason"], "tool_calls");
  EXPECT_EQ(steps[2]["metrics"]["logprobs"], ojson::array({-0.25}));
  EXPECT_EQ(steps[2]["metrics"]["tokens"], ojson::array({"a"}));
  EXPECT_EQ(steps[2]["metrics"]["completion_token_ids"], ojson::array({1, 2, 3}));
  EXPECT_EQ(steps[2]["metrics"]["prompt_tokens"], 100);
  // Every id the endpoint issued is in a trajectory exactly as issued.
  std::set<std::string> recorded;
  for (const char* task : {"count-errors", "fix-sum", "hello-world"}) {
    const ojson tt = read_json(o.out_dir + "/" + task + "/trajectory.json");
    expect_valid_trajectory(tt, task);
    for (const ojson& st : tt["steps"])
      if (st.contains("tool_calls"))
        for (const ojson& c : st["tool_calls"]) recorded.insert(c["tool_call_id"].get<std::string>());
  }
  EXPECT_EQ(recorded, fake.issued_ids());
  EXPECT_EQ(recorded.size(), 6u);

  // A run folder holds one run.
  EXPECT_TRUE(has(error_of([&] { agentenv::run_episodes(o); }), "already holds a run (summary.json)"));
}

TEST(Episode, WrongToolCallsScoreZero) {
  K3_REQUIRE_SANDBOXES();
  FakeEndpoint fake(wrong_policy);
  TempDir out;
  const RunSummary s = agentenv::run_episodes(options(fake.base_url(), out));
  for (const EpisodeResult& e : s.episodes) {
    EXPECT_EQ(e.reward, 0) << e.task;
    EXPECT_EQ(e.error, "") << e.task;
    EXPECT_EQ(e.stop_reason, "done") << e.task;
  }
  EXPECT_EQ(s.episodes[1].turns, 1);  // fix-sum: replied without a tool call
  EXPECT_EQ(s.passed, 0);
  const ojson t = read_json(out.file("run/hello-world/trajectory.json"));
  expect_valid_trajectory(t, "hello-world");
  EXPECT_TRUE(has(t["verifier"]["stdout"].get<std::string>(), "goodbye")) << t["verifier"];
}

TEST(Episode, ParallelGivesTheSameRewards) {
  K3_REQUIRE_SANDBOXES();
  FakeEndpoint fake(right_policy);
  TempDir out1, out3;
  const RunSummary one = agentenv::run_episodes(options(fake.base_url(), out1));
  RunOptions o = options(fake.base_url(), out3);
  o.parallel = 3;
  const RunSummary three = agentenv::run_episodes(o);
  EXPECT_EQ(rewards(one), rewards(three));
  EXPECT_EQ(rewards(three), (std::map<std::string, double>{{"count-errors", 1}, {"fix-sum", 1}, {"hello-world", 1}}));
  EXPECT_EQ(fake.problems(), std::vector<std::string>{});
}

TEST(Episode, DeadEndpointIsAnErrorNotACrash) {
  K3_REQUIRE_SANDBOXES();
  // A port that was free a moment ago and has no listener now.
  int port = 0;
  {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port = ntohs(addr.sin_port);
    close(fd);
  }
  TempDir out;
  const RunSummary s = agentenv::run_episodes(options("http://127.0.0.1:" + std::to_string(port), out));
  ASSERT_EQ(s.episodes.size(), 3u);
  EXPECT_EQ(s.errors, 3);
  for (const EpisodeResult& e : s.episodes) {
    EXPECT_EQ(e.reward, 0);
    EXPECT_EQ(e.stop_reason, "error");
    EXPECT_TRUE(has(e.error, "/v1/chat/completions: no answer (")) << e.error;
    const ojson t = read_json(e.trajectory);
    expect_valid_trajectory(t, e.task);
    EXPECT_EQ(t["error"], e.error);
    EXPECT_TRUE(t["verifier"].is_null());
    EXPECT_EQ(t["turns"], 0);
  }
  EXPECT_TRUE(std::filesystem::exists(out.file("run/summary.json")));
}

TEST(Episode, BrokenRepliesAreErrors) {
  K3_REQUIRE_SANDBOXES();
  const std::vector<std::pair<Action, std::string>> cases = {
      {{{}, "", 500, R"({"error": {"message": "boom", "type": "server_error"}})"}, "HTTP 500: boom"},
      {{{}, "", 200, "this is not json"}, "the reply is not JSON: this is not json"},
      {{{}, "", 200, R"({"choices": []})"}, "the reply has no choices"},
      {{{}, "", 200, R"({"choices": [{"message": {"tool_calls": [{"function": {"name": "bash"}}]}}]})"},
       "the reply's tool_calls[0] has no id"},
  };
  for (const auto& [action, expected] : cases) {
    FakeEndpoint fake([a = action](const std::string&, int turn) {
      return turn == 0 ? calls({{"bash", {{"command", "true"}}}}) : a;
    });
    TempDir out;
    const RunSummary s = agentenv::run_episodes(options(fake.base_url(), out, "agentenv/tasks/hello-world"));
    ASSERT_EQ(s.episodes.size(), 1u);
    const EpisodeResult& e = s.episodes[0];
    EXPECT_EQ(e.reward, 0);
    EXPECT_EQ(e.stop_reason, "error");
    EXPECT_EQ(e.turns, 1);  // the first reply worked, the second did not
    EXPECT_TRUE(has(e.error, expected)) << e.error;
    expect_valid_trajectory(read_json(e.trajectory), "hello-world");
  }
}

TEST(Episode, TurnAndTimeLimits) {
  K3_REQUIRE_SANDBOXES();
  FakeEndpoint busy([](const std::string&, int) { return calls({{"bash", {{"command", "true"}}}}); });
  TempDir out;
  RunOptions o = options(busy.base_url(), out, "agentenv/tasks/hello-world");
  o.agent.max_turns = 3;
  RunSummary s = agentenv::run_episodes(o);
  EXPECT_EQ(s.episodes[0].stop_reason, "max_turns");
  EXPECT_EQ(s.episodes[0].turns, 3);
  EXPECT_EQ(s.episodes[0].error, "");
  EXPECT_EQ(s.episodes[0].reward, 0);  // the verifier ran: no hello.txt

  // A task with a 3 s agent timeout and a model that sleeps in bash.
  TempDir tasks;
  copy_dir(test_data_path("agentenv/tasks/hello-world"), tasks.file("slow"));
  write_file(tasks.file("slow/task.toml"), "[agent]\ntimeout_sec = 3\n");
  FakeEndpoint sleepy([](const std::string&, int) { return calls({{"bash", {{"command", "sleep 60"}}}}); });
  TempDir out2;
  o = options(sleepy.base_url(), out2);
  o.tasks_dir = tasks.file("slow");
  const auto start = std::chrono::steady_clock::now();
  s = agentenv::run_episodes(o);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_EQ(s.episodes[0].stop_reason, "agent_timeout");
  EXPECT_EQ(s.episodes[0].error, "");
  const ojson t = read_json(s.episodes[0].trajectory);
  EXPECT_TRUE(has(t["steps"][2]["observation"]["results"][0]["content"].get<std::string>(),
                  "(the agent's time limit): the command was killed"))
      << t["steps"][2];
}

TEST(Episode, OptionErrors) {
  TempDir out;
  RunOptions o = options("http://127.0.0.1:1", out);
  for (const auto& [url, expected] : std::vector<std::pair<std::string, std::string>>{
           {"localhost:8000", "the base URL 'localhost:8000' is not valid: it has no scheme"},
           {"ftp://host", "the scheme 'ftp' is not http or https"},
           {"http://host:99999", "the port '99999' is not a number from 1 to 65535"},
           {"http://host:", "the port is empty"},
           {"http://", "the host is empty"},
           {"http://ho st", "the host 'ho st' contains ' '"}}) {
    o.agent.base_url = url;
    EXPECT_TRUE(has(error_of([&] { agentenv::run_episodes(o); }), expected)) << url;
  }
  o.agent.base_url = "http://127.0.0.1:1";
  o.parallel = 0;
  EXPECT_EQ(error_of([&] { agentenv::run_episodes(o); }), "parallel must be at least 1 (got 0)");
  o.parallel = 1;
  o.agent.tool_choice = "none";
  EXPECT_EQ(error_of([&] { agentenv::run_episodes(o); }), "tool_choice must be auto or required (got 'none')");
  o.agent.tool_choice = "auto";
  o.tasks_dir = out.file("none");
  EXPECT_TRUE(has(error_of([&] { agentenv::run_episodes(o); }), "does not exist"));
  o.tasks_dir = test_data_path("agentenv/tasks");
  o.agent.model = "";
  EXPECT_TRUE(has(error_of([&] { agentenv::run_episodes(o); }),
                  "cannot learn the model's name from http://127.0.0.1:1/v1/models: no answer"));
  std::filesystem::create_directories(o.out_dir);
  write_file(o.out_dir + "/summary.json", "{}");
  o.agent.model = "m";
  EXPECT_TRUE(
      has(error_of([&] { agentenv::run_episodes(o); }), "already holds a run (summary.json); give a new folder"));

  FakeEndpoint fake(right_policy, "served-name");
  EXPECT_EQ(agentenv::first_model_id(fake.base_url() + "/", ""), "served-name");
}

TEST(EpisodeWithK3Serve, DemoModelGivesValidTrajectories) {
  K3_REQUIRE_SANDBOXES();
  ServerProcess server({"--model", demo_model_dir(), "--ctx", "4096", "--served-model-name", "demo"});
  TempDir out;
  RunOptions o = options(server.base_url(), out, "agentenv/tasks/hello-world");
  o.agent.model = "";
  o.agent.max_turns = 2;
  o.agent.max_tokens = 160;
  // The demo model rarely calls a tool by itself: "required" makes it, so the second request
  // replays a real call and its result to the server.
  o.agent.tool_choice = "required";
  const auto start = std::chrono::steady_clock::now();
  const RunSummary s = agentenv::run_episodes(o);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  EXPECT_EQ(s.model, "demo");
  ASSERT_EQ(s.episodes.size(), 1u);
  const EpisodeResult& e = s.episodes[0];
  EXPECT_EQ(e.error, "");
  EXPECT_EQ(e.turns, 2);
  EXPECT_EQ(e.stop_reason, "max_turns");
  EXPECT_GT(e.prompt_tokens, 0);
  EXPECT_GT(e.completion_tokens, 0);
  const ojson t = read_json(e.trajectory);
  expect_valid_trajectory(t, "hello-world");
  EXPECT_EQ(t["agent"]["model"], "demo");
  const ojson& first = t["steps"][2];
  EXPECT_FALSE(first["metrics"]["logprobs"].empty()) << first;
  EXPECT_FALSE(first["tool_calls"].empty()) << first;
  EXPECT_TRUE(t["verifier"].is_object()) << t;
}

}  // namespace
}  // namespace k3::testing
