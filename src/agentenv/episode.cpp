#include "agentenv/episode.h"

#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "base/error.h"

namespace k3::agentenv {
namespace {

namespace ep_fs = std::filesystem;
using ep_json = nlohmann::ordered_json;
using EpClock = std::chrono::steady_clock;

constexpr const char* kEpSystemPrompt =
    "You are an agent in a Linux sandbox. Use the tools to look at and change files and to run commands; "
    "the working directory is /workspace. Work step by step and check your results. When the task is done, "
    "reply with a short summary and no tool call.";

double ep_seconds_since(EpClock::time_point t) { return std::chrono::duration<double>(EpClock::now() - t).count(); }

// An endpoint URL taken apart: "http://host:port" for httplib, and the path prefix ("" or "/x").
struct EpEndpoint {
  std::string origin;
  std::string prefix;
};

EpEndpoint ep_parse_url(const std::string& url) {
  const auto bad = [&url](const std::string& why) {
    fail("the base URL '", url, "' is not valid: ", why, " (expected http[s]://HOST[:PORT][/PATH])");
  };
  const size_t sep = url.find("://");
  if (sep == std::string::npos) bad("it has no scheme");
  std::string scheme = url.substr(0, sep);
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme != "http" && scheme != "https") bad(cat("the scheme '", scheme, "' is not http or https"));
  std::string rest = url.substr(sep + 3);
  const size_t slash = rest.find('/');
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash);
  rest = rest.substr(0, slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (prefix.find_first_of("?#") != std::string::npos) bad("it has a query or fragment");
  if (rest.empty()) bad("the host is empty");
  if (rest.find('@') != std::string::npos) bad("user info (user@host) is not supported; use the API key");
  std::string host = rest, port;
  if (rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string::npos) bad("the IPv6 address has no closing ']'");
    host = rest.substr(0, close + 1);
    const std::string after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') bad(cat("unexpected '", after, "' after the IPv6 address"));
      port = after.substr(1);
      if (port.empty()) bad("the port is empty");
    }
  } else {
    const size_t colon = rest.find(':');
    if (colon != std::string::npos) {
      host = rest.substr(0, colon);
      port = rest.substr(colon + 1);
      if (port.empty()) bad("the port is empty");
    }
    if (host.empty()) bad("the host is empty");
    for (char c : host)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_')
        bad(cat("the host '", host, "' contains '", c, "'"));
  }
  if (!port.empty()) {
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) < 1 ||
        std::stoi(port) > 65535)
      bad(cat("the port '", port, "' is not a number from 1 to 65535"));
  }
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
  if (scheme == "https") bad("https is not supported by this build's HTTP library");
#endif
  return {scheme + "://" + host + (port.empty() ? "" : ":" + port), prefix};
}

httplib::Headers ep_headers(const std::string& api_key) {
  httplib::Headers h;
  if (!api_key.empty()) h.emplace("Authorization", "Bearer " + api_key);
  return h;
}

// "HTTP 404: <the OpenAI envelope's error.message, else the body's start>".
std::string ep_http_failure(int status, const std::string& body) {
  std::string detail;
  const ep_json j = ep_json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const ep_json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string())
      detail = e["message"].get<std::string>();
    else if (e.is_string())
      detail = e.get<std::string>();
  }
  if (detail.empty()) detail = body.substr(0, 200);
  for (char& c : detail)
    if (c == '\n' || c == '\r') c = ' ';
  detail = valid_utf8(detail);
  return detail.empty() ? cat("HTTP ", status) : cat("HTTP ", status, ": ", detail);
}

std::string ep_utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void ep_write_text(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    K3_CHECK(out.good(), "cannot write ", tmp);
    out << text;
    out.close();
    K3_CHECK(out.good(), "cannot write ", tmp);
  }
  std::error_code ec;
  ep_fs::rename(tmp, path, ec);
  K3_CHECK(!ec, "cannot rename ", tmp, " to ", path, ": ", ec.message());
}

std::string ep_dump(const ep_json& j) { return j.dump(2, ' ', false, ep_json::error_handler_t::replace) + "\n"; }

// One model reply, as read from a chat completion.
struct EpReply {
  ep_json message;     // the assistant message to send back: role, content, tool_calls, reasoning_content
  ep_json tool_calls;  // [{id, name, arguments (text)}]
  std::string content, reasoning, finish_reason;
  ep_json metrics = ep_json::object();
};

// Takes a chat completion body apart; throws k3::Error naming what is missing.
EpReply ep_read_reply(const std::string& body) {
  const ep_json j = ep_json::parse(body, nullptr, false);
  K3_CHECK(!j.is_discarded(), "the reply is not JSON: ", valid_utf8(body.substr(0, 200)));
  K3_CHECK(j.is_object() && j.contains("choices") && j["choices"].is_array() && !j["choices"].empty(),
           "the reply has no choices: ", valid_utf8(body.substr(0, 200)));
  const ep_json& choice = j["choices"][0];
  K3_CHECK(choice.is_object() && choice.contains("message") && choice["message"].is_object(),
           "the reply's choices[0] has no message");
  const ep_json& m = choice["message"];
  EpReply r;
  if (m.contains("content") && m["content"].is_string()) r.content = m["content"].get<std::string>();
  if (m.contains("reasoning_content") && m["reasoning_content"].is_string())
    r.reasoning = m["reasoning_content"].get<std::string>();
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string())
    r.finish_reason = choice["finish_reason"].get<std::string>();
  r.tool_calls = ep_json::array();
  ep_json sent_calls = ep_json::array();
  if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
    K3_CHECK(m["tool_calls"].is_array(), "the reply's message.tool_calls is not a list");
    for (size_t i = 0; i < m["tool_calls"].size(); ++i) {
      const ep_json& c = m["tool_calls"][i];
      K3_CHECK(c.is_object() && c.contains("function") && c["function"].is_object(), "the reply's tool_calls[", i,
               "] has no function");
      const ep_json& f = c["function"];
      K3_CHECK(f.contains("name") && f["name"].is_string(), "the reply's tool_calls[", i, "] has no function name");
      K3_CHECK(c.contains("id") && c["id"].is_string(), "the reply's tool_calls[", i, "] has no id");
      // Arguments are JSON text; a server that sends an object gets it back as text.
      std::string args;
      if (f.contains("arguments") && f["arguments"].is_string())
        args = f["arguments"].get<std::string>();
      else if (f.contains("arguments") && !f["arguments"].is_null())
        args = f["arguments"].dump();
      r.tool_calls.push_back({{"id", c["id"]}, {"name", f["name"]}, {"arguments", args}});
      sent_calls.push_back(
          {{"id", c["id"]}, {"type", "function"}, {"function", {{"name", f["name"]}, {"arguments", args}}}});
    }
  }
  r.message = {{"role", "assistant"},
               {"content", r.content.empty() && !sent_calls.empty() ? ep_json(nullptr) : ep_json(r.content)}};
  if (!r.reasoning.empty()) r.message["reasoning_content"] = r.reasoning;
  if (!sent_calls.empty()) r.message["tool_calls"] = sent_calls;

  if (j.contains("usage") && j["usage"].is_object()) {
    for (const char* k : {"prompt_tokens", "completion_tokens"})
      if (j["usage"].contains(k) && j["usage"][k].is_number_integer()) r.metrics[k] = j["usage"][k];
  }
  if (choice.contains("logprobs") && choice["logprobs"].is_object() && choice["logprobs"].contains("content") &&
      choice["logprobs"]["content"].is_array()) {
    ep_json lps = ep_json::array(), tokens = ep_json::array();
    for (const ep_json& t : choice["logprobs"]["content"]) {
      if (!t.is_object()) continue;
      lps.push_back(t.contains("logprob") ? t["logprob"] : ep_json(nullptr));
      tokens.push_back(t.contains("token") ? t["token"] : ep_json(nullptr));
    }
    r.metrics["logprobs"] = std::move(lps);
    r.metrics["tokens"] = std::move(tokens);
  }
  for (const ep_json* where : {&j, &choice})
    if (where->contains("prompt_token_ids") && (*where)["prompt_token_ids"].is_array())
      r.metrics["prompt_token_ids"] = (*where)["prompt_token_ids"];
  for (const ep_json* where : {&choice, &m})
    if (where->contains("token_ids") && (*where)["token_ids"].is_array())
      r.metrics["completion_token_ids"] = (*where)["token_ids"];
  return r;
}

int64_t ep_metric(const ep_json& metrics, const char* key) {
  return metrics.contains(key) ? metrics[key].get<int64_t>() : 0;
}

// Destroys a sandbox, if any, without throwing (an episode's cleanup).
void ep_destroy(SandboxManager& manager, std::string& id) {
  if (id.empty()) return;
  try {
    manager.destroy(id);
  } catch (const std::exception&) {
  }
  id.clear();
}

// The endpoint of `agent` after checking its options; throws k3::Error naming the bad one.
EpEndpoint ep_check_agent(const AgentOptions& agent) {
  const EpEndpoint ep = ep_parse_url(agent.base_url);
  K3_CHECK(agent.max_turns >= 1, "max_turns must be at least 1 (got ", agent.max_turns, ")");
  K3_CHECK(agent.max_tokens >= 1, "max_tokens must be at least 1 (got ", agent.max_tokens, ")");
  K3_CHECK(agent.temperature >= 0 && agent.temperature <= 2, "temperature must be from 0 to 2 (got ", agent.temperature,
           ")");
  K3_CHECK(agent.tool_choice == "auto" || agent.tool_choice == "required",
           "tool_choice must be auto or required (got '", agent.tool_choice, "')");
  return ep;
}

ep_json ep_summary_json(const RunOptions& o, const RunSummary& s) {
  ep_json rows = ep_json::array();
  for (const EpisodeResult& e : s.episodes)
    rows.push_back(
        {{"task", e.task},
         {"reward", e.reward},
         {"turns", e.turns},
         {"prompt_tokens", e.prompt_tokens},
         {"completion_tokens", e.completion_tokens},
         {"seconds", e.seconds},
         {"stop_reason", e.stop_reason},
         {"error", e.error.empty() ? ep_json(nullptr) : ep_json(e.error)},
         {"trajectory", e.trajectory.empty()
                            ? ep_json(nullptr)
                            : ep_json(ep_fs::path(e.trajectory).lexically_relative(o.out_dir).generic_string())}});
  return {{"schema_version", "k3-run-summary-v1"},
          {"tasks_dir", o.tasks_dir},
          {"base_url", o.agent.base_url},
          {"model", s.model},
          {"parallel", o.parallel},
          {"max_turns", o.agent.max_turns},
          {"temperature", o.agent.temperature},
          {"max_tokens", o.agent.max_tokens},
          {"episodes", rows},
          {"passed", s.passed},
          {"pass_rate", s.pass_rate},
          {"mean_reward", s.mean_reward},
          {"mean_turns", s.mean_turns},
          {"total_prompt_tokens", s.prompt_tokens},
          {"total_completion_tokens", s.completion_tokens},
          {"errors", s.errors},
          {"wall_s", s.wall_s}};
}

}  // namespace

std::string first_model_id(const std::string& base_url, const std::string& api_key) {
  const EpEndpoint ep = ep_parse_url(base_url);
  httplib::Client cli(ep.origin);
  cli.set_connection_timeout(10);
  cli.set_read_timeout(30);
  const httplib::Result res = cli.Get((ep.prefix + "/v1/models").c_str(), ep_headers(api_key));
  const std::string where = cat("cannot learn the model's name from ", base_url, "/v1/models");
  K3_CHECK(res, where, ": no answer (", httplib::to_string(res.error()), "); give the model's name");
  K3_CHECK(res->status == 200, where, ": ", ep_http_failure(res->status, res->body));
  const ep_json j = ep_json::parse(res->body, nullptr, false);
  K3_CHECK(j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
               j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string(),
           where, ": the reply lists no model (expected {\"data\": [{\"id\": ...}]}); give the model's name");
  return j["data"][0]["id"].get<std::string>();
}

EpisodeResult run_episode(const Task& task, SandboxManager& manager, const AgentOptions& agent,
                          const std::string& out_dir) {
  const EpEndpoint ep = ep_check_agent(agent);
  K3_CHECK(!agent.model.empty(), "no model name to send to ", agent.base_url);
  const auto t0 = EpClock::now();
  const std::string started_at = ep_utc_now();
  EpisodeResult res;
  res.task = task.name;
  ToolSet tools(nullptr, agent.tools);
  const ep_json definitions = tools.definitions();
  ep_json steps = ep_json::array();
  steps.push_back({{"step_id", 1}, {"source", "system"}, {"message", kEpSystemPrompt}});
  steps.push_back({{"step_id", 2}, {"source", "user"}, {"message", task.instruction}});
  ep_json verifier_json = nullptr;
  double agent_seconds = 0;
  std::string sandbox_id, fork_id;

  try {
    CreateOptions co;
    co.spec = task.spec;
    co.ttl_s = task.agent_timeout_s + task.verifier_timeout_s + 600;
    co.auto_pause = false;
    co.metadata = {{"task", task.name}, {"by", "k3 env run"}};
    const std::shared_ptr<Sandbox> sandbox = manager.create(co);
    sandbox_id = sandbox->id();
    const auto deadline =
        t0 + std::chrono::duration_cast<EpClock::duration>(std::chrono::duration<double>(task.agent_timeout_s));
    prepare_task_sandbox(task, *sandbox);
    tools = ToolSet(sandbox.get(), agent.tools);
    tools.set_deadline(deadline);

    ep_json messages = ep_json::array(
        {{{"role", "system"}, {"content", kEpSystemPrompt}}, {{"role", "user"}, {"content", task.instruction}}});
    httplib::Client cli(ep.origin);
    cli.set_connection_timeout(10);
    cli.set_write_timeout(60);
    const std::string path = ep.prefix + "/v1/chat/completions";
    while (true) {
      if (res.turns >= agent.max_turns) {
        res.stop_reason = "max_turns";
        break;
      }
      const double left = std::chrono::duration<double>(deadline - EpClock::now()).count();
      if (left <= 0) {
        res.stop_reason = "agent_timeout";
        break;
      }
      const ep_json body = {{"model", agent.model},
                            {"messages", messages},
                            {"tools", definitions},
                            {"tool_choice", agent.tool_choice},
                            {"temperature", agent.temperature},
                            {"max_tokens", agent.max_tokens},
                            {"logprobs", true}};
      const double started_s = ep_seconds_since(t0);
      const auto sent = EpClock::now();
      cli.set_read_timeout(static_cast<time_t>(left) + 1);
      const httplib::Result http =
          cli.Post(path.c_str(), ep_headers(agent.api_key),
                   body.dump(-1, ' ', false, ep_json::error_handler_t::replace), "application/json");
      const double request_s = ep_seconds_since(sent);
      EpReply reply;
      try {
        K3_CHECK(http, "no answer (", httplib::to_string(http.error()), ")");
        K3_CHECK(http->status == 200, ep_http_failure(http->status, http->body));
        reply = ep_read_reply(http->body);
      } catch (const Error& e) {
        if (EpClock::now() >= deadline) {
          res.stop_reason = "agent_timeout";
        } else {
          res.stop_reason = "error";
          res.error = cat("the model endpoint ", agent.base_url, path, ": ", e.what());
        }
        break;
      }
      ++res.turns;
      res.prompt_tokens += ep_metric(reply.metrics, "prompt_tokens");
      res.completion_tokens += ep_metric(reply.metrics, "completion_tokens");
      messages.push_back(reply.message);

      ep_json step = {{"step_id", steps.size() + 1},
                      {"source", "agent"},
                      {"message", reply.content},
                      {"finish_reason", reply.finish_reason}};
      if (!reply.reasoning.empty()) step["reasoning_content"] = reply.reasoning;
      ep_json calls = ep_json::array(), results = ep_json::array();
      const auto tools_start = EpClock::now();
      for (const ep_json& c : reply.tool_calls) {
        const std::string id = c["id"].get<std::string>();
        calls.push_back({{"tool_call_id", id}, {"function_name", c["name"]}, {"arguments", c["arguments"]}});
        const auto call_start = EpClock::now();
        const ToolResult r = tools.call(c["name"].get<std::string>(), c["arguments"].get<std::string>());
        results.push_back({{"source_call_id", id},
                           {"content", r.content},
                           {"is_error", r.is_error},
                           {"seconds", ep_seconds_since(call_start)}});
        messages.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", r.content}});
      }
      step["tool_calls"] = calls;
      step["observation"] = {{"results", results}};
      step["timing"] = {{"started_s", started_s}, {"request_s", request_s}, {"tools_s", ep_seconds_since(tools_start)}};
      step["metrics"] = reply.metrics;
      steps.push_back(std::move(step));
      if (reply.tool_calls.empty()) {
        res.stop_reason = "done";
        break;
      }
    }
    agent_seconds = ep_seconds_since(t0);
    tools = ToolSet(nullptr, agent.tools);

    if (res.error.empty()) {
      // The verifier judges a copy of the final state, so it cannot change what the agent left.
      const std::vector<std::shared_ptr<Sandbox>> forks = manager.fork(sandbox_id, 1, task.verifier_timeout_s + 600);
      K3_CHECK(forks.size() == 1, "forking the final sandbox gave ", forks.size(), " sandboxes, not 1");
      fork_id = forks[0]->id();
      ep_destroy(manager, sandbox_id);
      const VerifierResult v = run_verifier(task, *forks[0]);
      verifier_json = to_json(v);
      res.reward = v.reward;
      if (!v.error.empty()) res.error = "the verifier: " + v.error;
    }
  } catch (const std::exception& e) {
    res.error = e.what();
    if (res.stop_reason.empty()) res.stop_reason = "error";
    res.reward = 0;
  }
  if (agent_seconds == 0) agent_seconds = ep_seconds_since(t0);
  ep_destroy(manager, sandbox_id);
  ep_destroy(manager, fork_id);
  res.seconds = ep_seconds_since(t0);

  const ep_json trajectory = {
      {"schema_version", "k3-trajectory-v1"},
      {"started_at", started_at},
      {"task",
       {{"name", task.name}, {"dir", task.dir}, {"instruction", task.instruction}, {"metadata", task.metadata}}},
      {"agent",
       {{"name", "k3 env run"},
        {"model", agent.model},
        {"base_url", agent.base_url},
        {"temperature", agent.temperature},
        {"max_tokens", agent.max_tokens},
        {"max_turns", agent.max_turns},
        {"tool_choice", agent.tool_choice},
        {"tools", definitions}}},
      {"steps", steps},
      {"stop_reason", res.stop_reason},
      {"turns", res.turns},
      {"error", res.error.empty() ? ep_json(nullptr) : ep_json(valid_utf8(res.error))},
      {"verifier", verifier_json},
      {"reward", res.reward},
      {"final_metrics",
       {{"total_prompt_tokens", res.prompt_tokens},
        {"total_completion_tokens", res.completion_tokens},
        {"agent_seconds", agent_seconds},
        {"total_seconds", res.seconds}}}};
  try {
    const ep_fs::path dir = ep_fs::path(out_dir) / task.name;
    ep_fs::create_directories(dir);
    res.trajectory = (dir / "trajectory.json").string();
    ep_write_text(res.trajectory, ep_dump(trajectory));
  } catch (const std::exception& e) {
    res.error += cat(res.error.empty() ? "" : "; ", "cannot write the trajectory: ", e.what());
    res.trajectory.clear();
  }
  return res;
}

std::string summary_table(const RunSummary& s) {
  size_t width = 4;
  for (const EpisodeResult& e : s.episodes) width = std::max(width, e.task.size());
  const int w = static_cast<int>(width);
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-*s %7s %6s %13s %17s %8s  %s\n", w, "task", "reward", "turns", "prompt_tokens",
                "completion_tokens", "seconds", "stop");
  out += line;
  for (const EpisodeResult& e : s.episodes) {
    std::snprintf(line, sizeof line, "%-*s %7.3g %6d %13lld %17lld %8.1f  %s", w, e.task.c_str(), e.reward, e.turns,
                  static_cast<long long>(e.prompt_tokens), static_cast<long long>(e.completion_tokens), e.seconds,
                  e.stop_reason.c_str());
    out += line;
    if (!e.error.empty()) out += ": " + e.error;
    out += "\n";
  }
  const size_t n = s.episodes.size();
  std::snprintf(line, sizeof line,
                "%zu episodes: passed %lld (%.1f%%), mean reward %.3f, mean turns %.1f, tokens %lld prompt + %lld "
                "completion, %d errors, wall %.1f s\n",
                n, static_cast<long long>(s.passed), 100 * s.pass_rate, s.mean_reward, s.mean_turns,
                static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.completion_tokens), s.errors,
                s.wall_s);
  out += line;
  return out;
}

RunSummary run_episodes(const RunOptions& options) {
  K3_CHECK(options.parallel >= 1, "parallel must be at least 1 (got ", options.parallel, ")");
  K3_CHECK(!options.out_dir.empty(), "no run folder given");
  const std::vector<Task> tasks = load_tasks(options.tasks_dir);
  ep_check_agent(options.agent);
  AgentOptions agent = options.agent;
  if (agent.model.empty()) agent.model = first_model_id(agent.base_url, agent.api_key);
  std::error_code ec;
  K3_CHECK(!ep_fs::exists(ep_fs::path(options.out_dir) / "summary.json", ec), "the run folder ", options.out_dir,
           " already holds a run (summary.json); give a new folder");
  ep_fs::create_directories(options.out_dir, ec);
  K3_CHECK(!ec, "cannot create the run folder ", options.out_dir, ": ", ec.message());

  const auto t0 = EpClock::now();
  const int workers = std::min<int>(options.parallel, static_cast<int>(tasks.size()));
  RunSummary summary;
  summary.model = agent.model;
  summary.episodes.resize(tasks.size());
  const std::string state_dir = (ep_fs::path(options.out_dir) / "sandboxes").string();
  {
    ManagerOptions mo;
    mo.state_dir = state_dir;
    mo.cgroup_name = cat("k3env-run-", getpid());
    mo.max_sandboxes = std::max(mo.max_sandboxes, 2 * workers + 1);
    SandboxManager manager(mo);
    std::atomic<size_t> next{0};
    std::mutex report_mu;
    size_t finished = 0;
    const auto work = [&]() {
      for (size_t i = next++; i < tasks.size(); i = next++) {
        EpisodeResult r;
        try {
          r = run_episode(tasks[i], manager, agent, options.out_dir);
        } catch (const std::exception& e) {
          r.task = tasks[i].name;
          r.stop_reason = "error";
          r.error = e.what();
        }
        std::lock_guard<std::mutex> lock(report_mu);
        summary.episodes[i] = r;
        ++finished;
        if (options.report != nullptr) {
          std::fprintf(options.report, "[%zu/%zu] %s: reward %g, %d turns, %.1f s, %s%s%s\n", finished, tasks.size(),
                       r.task.c_str(), r.reward, r.turns, r.seconds, r.stop_reason.c_str(), r.error.empty() ? "" : ": ",
                       r.error.c_str());
          std::fflush(options.report);
        }
      }
    };
    std::vector<std::thread> threads;
    for (int i = 1; i < workers; ++i) threads.emplace_back(work);
    work();
    for (std::thread& t : threads) t.join();
  }
  ep_fs::remove_all(state_dir, ec);  // every sandbox was destroyed; this drops the empty folders

  summary.wall_s = ep_seconds_since(t0);
  double rewards = 0, turns = 0;
  for (const EpisodeResult& e : summary.episodes) {
    rewards += e.reward;
    turns += e.turns;
    summary.passed += e.reward >= 1 ? 1 : 0;
    summary.prompt_tokens += e.prompt_tokens;
    summary.completion_tokens += e.completion_tokens;
    summary.errors += e.error.empty() ? 0 : 1;
  }
  const double n = static_cast<double>(summary.episodes.size());
  summary.pass_rate = summary.passed / n;
  summary.mean_reward = rewards / n;
  summary.mean_turns = turns / n;
  ep_write_text((ep_fs::path(options.out_dir) / "summary.json").string(), ep_dump(ep_summary_json(options, summary)));
  if (options.report != nullptr) {
    std::fputs(summary_table(summary).c_str(), options.report);
    std::fflush(options.report);
  }
  return summary;
}

}  // namespace k3::agentenv
