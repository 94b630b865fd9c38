// Terminal input for `k3 chat`: line editing (arrows, Home/End, Ctrl-A/E/K/U/W, ...) and the
// session's history of entered lines (Up/Down), through libedit.  Reads stdin, writes the
// prompt and the echo to stdout; ~/.editrc applies, as in other libedit programs.
//
// A signal that interrupts the read (the chat's SIGINT handler is installed without SA_RESTART
// while reading) ends it with kInterrupted, so Ctrl-C at the prompt can leave the chat.
#pragma once

#include <string>

struct editline;
struct history;

namespace k3::cli {

class LineEditor {
 public:
  explicit LineEditor(const char* program);
  ~LineEditor();
  LineEditor(const LineEditor&) = delete;
  LineEditor& operator=(const LineEditor&) = delete;

  enum class Status { kLine, kEnd, kInterrupted };
  // One line without its newline (kLine); kEnd at end of input (Ctrl-D on an empty line);
  // kInterrupted when a signal ended the read.  Throws k3::Error when stdin cannot be read.
  Status read(const std::string& prompt, std::string* line);
  // Adds a line to the history that Up/Down walk (a repeat of the last entry is not added).
  void remember(const std::string& line);

 private:
  static char* prompt_of(struct editline* el);  // EL_PROMPT's callback

  struct editline* el_ = nullptr;
  struct history* hist_ = nullptr;
  std::string prompt_;
};

}  // namespace k3::cli
