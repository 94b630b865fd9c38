// Episodes (`k3 env run`): a model solves task folders (task.h) with the tools (tools.h) in
// sandboxes, through any OpenAI-compatible chat-completions endpoint (k3 serve, vLLM, ...).
//
// One episode: a new sandbox from the task's [environment] (environment/files copied in, the
// setup command run); then turns: POST {base}/v1/chat/completions with the tools, tool_choice
// ("auto" unless asked otherwise) and logprobs; each tool call of the reply runs in the sandbox and its result goes
// back as
// {"role": "tool", "tool_call_id": <the call's id exactly as the server sent it>, "content": ...}.
// The agent stops when a reply has no tool calls, after max_turns replies, or at the task's agent
// timeout.  Then the final sandbox is forked, the verifier runs in the fork, and both sandboxes are
// destroyed.  An endpoint failure (no connection, an HTTP error, a reply that is not a chat
// completion) or a sandbox failure ends the episode with the error recorded and reward 0; it never
// stops the other episodes.
//
// Each episode writes RUN_DIR/<task>/trajectory.json, schema "k3-trajectory-v1" (inspired by
// Harbor's ATIF-v1.4):
//   {schema_version, started_at, task {name, dir, instruction, metadata},
//    agent {name, model, base_url, temperature, max_tokens, max_turns, tool_choice,
//           tools (the definitions)},
//    steps [
//      {step_id, source: "system" | "user", message},
//      {step_id, source: "agent", message (content or ""), reasoning_content?, finish_reason,
//       tool_calls [{tool_call_id, function_name, arguments (the JSON text as sent)}],
//       observation {results [{source_call_id, content, is_error, seconds}]},
//       timing {started_s (since the episode began), request_s, tools_s},
//       metrics {prompt_tokens, completion_tokens, logprobs? [float], tokens? [string],
//                prompt_token_ids?, completion_token_ids? (when the server returns them)}}],
//    stop_reason ("done" | "max_turns" | "agent_timeout" | "error"), turns, error (null or text),
//    verifier {reward, reward_source, exit_code, timed_out, stdout, stderr, seconds, error} | null,
//    reward, final_metrics {total_prompt_tokens, total_completion_tokens, agent_seconds,
//                           total_seconds}}
// and the run writes RUN_DIR/summary.json: the options, one row per episode and the totals.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "agentenv/sandbox_manager.h"
#include "agentenv/task.h"
#include "agentenv/tools.h"

namespace k3::agentenv {

struct AgentOptions {
  std::string base_url;  // http[s]://HOST[:PORT][/PREFIX]; requests go to PREFIX/v1/...
  std::string api_key;   // sent as a Bearer token when not empty
  std::string model;     // run_episodes asks GET /v1/models for the first id when empty
  int max_turns = 30;    // model replies per episode
  double temperature = 0;
  int max_tokens = 1024;  // per reply
  // "auto": the model may answer without a tool call, which ends the episode.  "required" makes
  // every reply a tool call, so episodes run to max_turns (models that must act every turn).
  std::string tool_choice = "auto";
  ToolLimits tools;
};

struct EpisodeResult {
  std::string task;
  double reward = 0;
  int turns = 0;
  int64_t prompt_tokens = 0, completion_tokens = 0;  // summed over the turns
  double seconds = 0;
  std::string stop_reason;  // "done", "max_turns", "agent_timeout" or "error"
  std::string error;        // "" when none
  std::string trajectory;   // the trajectory file
};

// Runs `task` once in a sandbox of `manager` and writes out_dir/<task name>/trajectory.json.
// Throws only when `agent` itself is unusable (a bad base URL, no model); everything else that
// goes wrong is the result's error.
EpisodeResult run_episode(const Task& task, SandboxManager& manager, const AgentOptions& agent,
                          const std::string& out_dir);

struct RunOptions {
  std::string tasks_dir;  // a task, or a folder of tasks (load_tasks)
  std::string out_dir;    // RUN_DIR: must not hold an earlier run's summary.json
  AgentOptions agent;
  int parallel = 1;            // episodes at once, each in its own sandbox
  std::FILE* report = stdout;  // a line per finished episode and the summary table; null = none
};

struct RunSummary {
  std::string model;
  std::vector<EpisodeResult> episodes;  // in task order
  int passed = 0;                       // episodes with reward >= 1
  double pass_rate = 0;                 // passed / episodes
  double mean_reward = 0, mean_turns = 0;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int errors = 0;
  double wall_s = 0;
};

// Runs every task of options.tasks_dir once, `parallel` at a time, and writes RUN_DIR/summary.json
// (the sandboxes' state lives in RUN_DIR/sandboxes while it runs).  Throws k3::Error before any
// episode starts when the tasks, the URL, the model or RUN_DIR are unusable.
RunSummary run_episodes(const RunOptions& options);

// The summary as a table: one row per episode (task, reward, turns, tokens, seconds, error), then
// the pass rate, mean turns, total tokens and wall time.
std::string summary_table(const RunSummary& summary);

// The first model id that GET {base_url}/v1/models lists; throws k3::Error saying why there is none.
std::string first_model_id(const std::string& base_url, const std::string& api_key);

}  // namespace k3::agentenv
