#include "cli/line_editor.h"

#include <histedit.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/error.h"

namespace k3::cli {

LineEditor::LineEditor(const char* program) {
  hist_ = history_init();
  K3_CHECK(hist_ != nullptr, "cannot set up the line editor's history (out of memory)");
  HistEvent ev;
  history(hist_, &ev, H_SETSIZE, 1000);
  history(hist_, &ev, H_SETUNIQUE, 1);
  el_ = el_init(program, stdin, stdout, stderr);
  if (el_ == nullptr) {
    history_end(hist_);
    fail("cannot set up the line editor on this terminal");
  }
  el_set(el_, EL_CLIENTDATA, this);
  el_set(el_, EL_PROMPT, &LineEditor::prompt_of);
  el_set(el_, EL_EDITOR, "emacs");
  el_set(el_, EL_HIST, history, hist_);
  el_source(el_, nullptr);  // ~/.editrc, if any
}

LineEditor::~LineEditor() {
  el_end(el_);
  history_end(hist_);
}

char* LineEditor::prompt_of(EditLine* el) {
  void* self = nullptr;
  el_get(el, EL_CLIENTDATA, &self);
  return static_cast<LineEditor*>(self)->prompt_.data();
}

LineEditor::Status LineEditor::read(const std::string& prompt, std::string* line) {
  prompt_ = prompt;
  int count = 0;
  errno = 0;
  const char* text = el_gets(el_, &count);
  if (text == nullptr || count <= 0) {
    const int err = errno;
    if (err == EINTR) return Status::kInterrupted;
    // el_gets gives no text both at end of input and on a read error.  errno is only a hint (the
    // library's own terminal calls may leave one behind), so only read(2)'s own failures count.
    if (err == EIO || err == EBADF || err == EISDIR)
      fail("could not read the chat input from stdin: ", std::strerror(err));
    return Status::kEnd;
  }
  line->assign(text, static_cast<size_t>(count));
  while (!line->empty() && (line->back() == '\n' || line->back() == '\r')) line->pop_back();
  return Status::kLine;
}

void LineEditor::remember(const std::string& line) {
  HistEvent ev;
  history(hist_, &ev, H_ENTER, line.c_str());
}

}  // namespace k3::cli
