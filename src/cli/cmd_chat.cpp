// k3 chat: an interactive terminal chat with streamed replies; the think channel is shown apart
// from the answer.  Commands: /effort low|high|max, /think on|off, /image PATH, /reset, /help,
// /quit.  /image (models with a vision tower) encodes a PNG/JPEG at once and attaches it to the
// next message.
//
// On a terminal (stdin a tty) the prompt has line editing and history (line_editor.h), Ctrl-C
// stops the reply being written and returns to the prompt with the conversation as it was before
// that message, and Ctrl-C or Ctrl-D at the prompt leaves.  Piped input is read line by line as
// it comes, and Ctrl-C keeps its default meaning.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <clocale>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <span>
#include <string>

#include "base/error.h"
#include "cli/commands.h"
#include "model/state_mirror.h"
#include "cli/line_editor.h"
#include "engine/chat_session.h"
#include "engine/multimodal.h"
#include "model/k3_model.h"
#include "text/tokenizer.h"

namespace k3::cli {
namespace {

const char* kHelp =
    "commands: /image PATH (attach to the next message)   /effort low|high|max   /think on|off   /reset   /help   "
    "/quit\n"
    "the model's reasoning is shown dimmed (or after 'thinking:' when not on a terminal)\n";
const char* kKeysHelp = "Ctrl-C stops a reply; Ctrl-C or Ctrl-D at the prompt leaves\n";

// Set by SIGINT (Ctrl-C) in an interactive chat; read by the reply's per-token hook and after an
// interrupted read of the prompt.
volatile std::sig_atomic_t g_interrupted = 0;

void on_sigint(int) { g_interrupted = 1; }

// While a reply is written the handler restarts interrupted system calls, so a write to the
// terminal never fails with EINTR; while the prompt is read it does not, so Ctrl-C ends the read.
void handle_sigint(bool restart) {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = restart ? SA_RESTART : 0;
  sigaction(SIGINT, &sa, nullptr);
}

// Thrown by the per-token hook to stop a reply (not a k3::Error, so nothing on the way reports
// it as a failure); ChatSession::send leaves the conversation as it was before the message.
struct ReplyInterrupted {};

struct Printer {
  bool tty = isatty(STDOUT_FILENO) != 0;
  bool in_reasoning = false;
  bool any_content = false;
  void delta(const ChatDelta& d) {
    if (!d.reasoning.empty()) {
      if (!in_reasoning) {
        std::fputs(tty ? "\x1b[2m" : "thinking: ", stdout);
        in_reasoning = true;
      }
      std::fputs(d.reasoning.c_str(), stdout);
    }
    if (!d.content.empty() || !d.tool_calls.empty()) end_reasoning();
    if (!d.content.empty()) {
      std::fputs(d.content.c_str(), stdout);
      any_content = true;
    }
    for (const ParsedToolCall& c : d.tool_calls) std::printf("\n[tool call %s(%s)]", c.name.c_str(), c.arguments.c_str());
    std::fflush(stdout);
  }
  void end_reasoning() {
    if (!in_reasoning) return;
    std::fputs(tty ? "\x1b[0m\n" : "\n", stdout);
    in_reasoning = false;
  }
};

int chat(const std::string& dir, ChatSessionOptions opt) {
  const bool tty_in = isatty(STDIN_FILENO) != 0;
  if (tty_in) {
    // Every sampled token passes here first: a Ctrl-C stops the reply at the next token (after
    // the prefill when it comes during one).
    opt.on_logits = [](std::span<const float>) {
      if (g_interrupted != 0) throw ReplyInterrupted{};
    };
  }
  auto model = Model::load(dir);
  model->check_context(opt.context);
  const Tokenizer tokenizer = Tokenizer::from_model_dir(dir);
  check_tokenizer_against_config(tokenizer, model->config());
  std::unique_ptr<VisionModel> vision;
  if (model->config().has_vision) vision = load_vision_for(*model, dir);
  ChatSession session(*model, tokenizer, opt, vision.get());
  std::unique_ptr<LineEditor> editor;
  if (tty_in) {
    std::setlocale(LC_CTYPE, "");  // the terminal's character set, for editing non-ASCII text
    editor = std::make_unique<LineEditor>("k3");
    handle_sigint(true);
    std::printf("k3 chat with %s (%s). %s%s", dir.c_str(), model->config().model_type.c_str(), kHelp, kKeysHelp);
  }
  std::string line;
  for (;;) {
    if (editor) {
      std::fflush(stdout);
      g_interrupted = 0;
      handle_sigint(false);
      const LineEditor::Status status = editor->read("> ", &line);
      handle_sigint(true);
      if (status != LineEditor::Status::kLine) {
        std::fputs("\n", stdout);  // leave on a line of its own, not after the prompt
        break;
      }
      if (line.find_first_not_of(" \t\r") != std::string::npos) editor->remember(line);
    } else if (!std::getline(std::cin, line)) {
      // std::cin reads through stdio: a failed read(2) (stdin a directory, an I/O error) ends
      // getline like end of input does, and only ferror tells them apart.
      if (std::ferror(stdin) != 0) fail("could not read the chat input from stdin: ", std::strerror(errno));
      break;
    }
    // A blank line is not a message (it would also use up any attached images).
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (line[0] == '/') {
      if (line == "/quit" || line == "/exit") break;
      if (line == "/help") {
        std::fputs(kHelp, stdout);
        if (editor) std::fputs(kKeysHelp, stdout);
      } else if (line == "/image" || line.rfind("/image ", 0) == 0) {
        const size_t b = line.find_first_not_of(' ', 6);
        const std::string path = b == std::string::npos ? std::string() : line.substr(b);
        try {
          K3_CHECK(!path.empty(), "usage: /image PATH");
          K3_CHECK(vision != nullptr, dir, " has no vision tower, so this chat cannot take images");
          const PromptImage& im = session.attach_image(encode_image_file(*vision, path));
          std::printf("(attached %s: %dx%d, %lld image tokens; it goes with your next message)\n", path.c_str(),
                      im.width, im.height, static_cast<long long>(im.prompt.num_pads));
        } catch (const Error& e) {
          std::printf("(error: %s)\n", e.what());
        }
      } else if (line == "/reset") {
        session.reset();
        std::puts("(conversation cleared)");
      } else if (line == "/think on" || line == "/think off") {
        session.options().thinking = line == "/think on";
        std::printf("(thinking %s)\n", session.options().thinking ? "on" : "off");
      } else if (line.rfind("/effort ", 0) == 0) {
        const std::string e = line.substr(8);
        if (e != "low" && e != "high" && e != "max") {
          std::puts("(effort must be low, high or max)");
        } else {
          session.options().effort = e;
          std::printf("(effort %s)\n", e.c_str());
        }
      } else {
        std::printf("(unknown command %s) %s", line.c_str(), kHelp);
      }
      continue;
    }
    Printer printer;
    g_interrupted = 0;
    try {
      ChatReply r = session.send(line, [&](const ChatDelta& d) { printer.delta(d); });
      printer.end_reasoning();
      std::printf("\n");
      if (r.message.degraded) std::puts("(the reply did not follow the chat format; shown as text)");
      if (r.finish_reason == "length")
        std::puts(r.context_full ? "(reply cut: the context is full; /reset or a larger --ctx)"
                                 : "(reply cut at --max-tokens)");
    } catch (const ReplyInterrupted&) {
      printer.end_reasoning();
      std::printf("\n(stopped; the conversation is as it was before this message)\n");
    } catch (const Error& e) {
      printer.end_reasoning();
      std::printf("\n(error: %s)\n", e.what());
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

void add_chat_command(CLI::App& app, Runner& run) {
  struct Args {
    std::string model, effort = "max";
    bool no_think = false;
    int max_tokens = 1024;
    float temperature = 0.0f, top_p = 1.0f;
    int top_k = 0;
    uint64_t seed = 0;
    int64_t ctx = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("chat", "Chat in the terminal (streamed, think channel shown apart)");
  sub->add_option("--model", a->model, "Checkpoint directory (default: the built-in tiny model)")
      ->check(kNonEmpty);
  sub->add_option("--effort", a->effort, "Thinking effort: low, high or max")->check(CLI::IsMember({"low", "high", "max"}));
  sub->add_flag("--no-think", a->no_think, "Answer without the think channel");
  sub->add_option("--max-tokens", a->max_tokens, "Tokens per reply")->check(kPositive);
  sub->add_option("--temperature", a->temperature, "Sampling temperature (0: greedy)");
  sub->add_option("--top-p", a->top_p, "Nucleus sampling mass");
  sub->add_option("--top-k", a->top_k, "Sample among the k most likely tokens");
  sub->add_option("--seed", a->seed, "Sampling seed")->check(kUnsigned64);
  sub->add_option("--ctx", a->ctx, "Context limit in tokens, prompt + output (0 or absent: the model's)")
      ->check(kNonNegative);
  sub->callback([a, &run] {
    run = [a]() {
      const std::string dir = resolve_model_dir(a->model);
      if (follow_rank_zero(dir)) return 0;  // ranks 1..R-1: rank 0 chats
      const mirror::StopOnExit stop_followers;
      ChatSessionOptions o;
      o.sampling = {a->temperature, a->top_k, a->top_p, a->seed};
      o.max_reply_tokens = a->max_tokens;
      o.context = a->ctx;
      o.thinking = !a->no_think;
      o.effort = a->effort;
      return chat(dir, o);
    };
  });
}

}  // namespace k3::cli
