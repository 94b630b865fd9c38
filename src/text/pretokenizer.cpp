#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/pretokenizer.h"

#include <pcre2.h>

#include "base/error.h"
#include "text/regex_translate.h"
#include "text/utf8.h"

namespace k3 {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// Per-thread scratch shared by every pattern: one ovector pair and a JIT stack that can grow to
// 256 MiB (reserved lazily), enough for backtracking over the longest pieces.
struct MatchScratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchScratch() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 256 * 1024 * 1024, nullptr);
    if (data == nullptr || context == nullptr) throw std::bad_alloc();
    if (stack != nullptr) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

}  // namespace

Pretokenizer::Pretokenizer(const std::string& pattern) : pattern_(pattern) {
  pcre2_pattern_ = tiktoken_regex_to_pcre2(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre2_pattern_.data()), pcre2_pattern_.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  K3_CHECK(code != nullptr, "pre-tokenization regex does not compile (", pcre2_message(err), " at offset ",
           offset, " of the PCRE2 form '", pcre2_pattern_, "')");
  code_.reset(code, pcre2_code_free);
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

bool Pretokenizer::next_match(std::string_view text, size_t from, size_t& begin, size_t& end) const {
  MatchScratch& s = scratch();
  const int rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), from,
                             PCRE2_NO_UTF_CHECK, s.data, s.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  K3_CHECK(rc > 0, "pre-tokenization regex failed at byte ", from, ": ", pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
  begin = ov[0];
  end = ov[1];
  return true;
}

std::vector<std::string> Pretokenizer::split(std::string_view text) const {
  K3_CHECK(utf8::is_valid(text), "pre-tokenization needs valid UTF-8 text");
  std::vector<std::string> pieces;
  for_each_piece(text, [&](std::string_view p) { pieces.emplace_back(p); });
  return pieces;
}

}  // namespace k3
