#include "text/tokenizer.h"

#include <algorithm>

#include "base/error.h"
#include "base/log.h"
#include "io/checkpoint.h"
#include "io/json_document.h"
#include "model/k3_config.h"
#include "text/bpe.h"
#include "text/utf8.h"

namespace k3 {
namespace {

constexpr size_t kKimiWindowChars = 400000;
constexpr size_t kKimiMaxRunChars = 25000;

// tokenization_kimi.py: 400,000-character windows, each cut so that no run of consecutive
// whitespace / non-whitespace characters (str.isspace) exceeds 25,000 characters.
template <typename F>
void for_each_kimi_chunk(std::string_view text, F&& f) {
  size_t window_start = 0;
  while (window_start < text.size()) {
    size_t i = window_start, chars = 0;
    size_t slice_start = window_start, run = 0;
    bool run_is_space = false;
    while (i < text.size() && chars < kKimiWindowChars) {
      size_t next = i;
      const bool space = utf8::is_python_space(utf8::next(text, next));
      if (chars == 0) run_is_space = space;
      if (space != run_is_space) {
        run = 1;
        run_is_space = space;
      } else if (++run > kKimiMaxRunChars) {
        f(text.substr(slice_start, i - slice_start));
        slice_start = i;
        run = 1;
      }
      i = next;
      ++chars;
    }
    f(text.substr(slice_start, i - slice_start));
    window_start = i;
  }
}

}  // namespace

Tokenizer::Tokenizer(BpeRanks ranks, SpecialTokens specials, const std::string& pattern, bool kimi_chunking)
    : ranks_(std::move(ranks)), specials_(std::move(specials)), pretokenizer_(pattern), kimi_chunking_(kimi_chunking) {
  vocab_size_ = ranks_.end_rank();
  for (const SpecialToken& s : specials_.tokens()) {
    K3_CHECK(!ranks_.has_rank(s.id), "special token '", s.text, "' (id ", s.id, ") collides with an ordinary token");
    vocab_size_ = std::max(vocab_size_, s.id + 1);
  }
}

Tokenizer Tokenizer::from_tiktoken(const std::string& path, TokenizerPreset preset) {
  BpeRanks ranks = BpeRanks::load_tiktoken(path);
  SpecialTokens specials = preset_specials(preset, ranks.end_rank());
  return Tokenizer(std::move(ranks), std::move(specials), preset_pattern(preset), preset_uses_kimi_chunking(preset));
}

Tokenizer Tokenizer::from_model_dir(const std::string& dir) {
  const std::string model = dir + "/tiktoken.model";
  K3_CHECK(file_exists(model), "no tokenizer in ", dir, " (", model, " is missing)");
  BpeRanks ranks = BpeRanks::load_tiktoken(model);
  const std::string config_path = dir + "/tokenizer_config.json";
  SpecialTokens specials;
  if (file_exists(config_path)) {
    const nlohmann::json config = parse_json_document(read_text_file(config_path), config_path);
    K3_CHECK(config.is_object(), config_path, ": must hold a JSON object");
    specials = SpecialTokens::from_kimi_config(config, ranks.end_rank(), config_path);
    Tokenizer t(std::move(ranks), std::move(specials), preset_pattern(TokenizerPreset::kK3), true);
    t.model_dir_ = dir;
    // bos_token etc.: a string, or an AddedToken object whose "content" is the text.
    auto role = [&](const char* key) -> std::optional<Role> {
      if (!config.contains(key) || config[key].is_null()) return std::nullopt;
      const nlohmann::json& v = config[key];
      const nlohmann::json* text = &v;
      if (v.is_object() && v.contains("content")) text = &v["content"];
      K3_CHECK(text->is_string(), config_path, ": ", key, " must be a string or an object with a string \"content\"");
      const std::string s = text->get<std::string>();
      return Role{s, t.special_id(s)};
    };
    t.bos_ = role("bos_token");
    t.eos_ = role("eos_token");
    t.pad_ = role("pad_token");
    return t;
  }
  log_warn(config_path, " is missing; using K3's special token names");
  specials = SpecialTokens::k3_defaults(ranks.end_rank());
  Tokenizer t(std::move(ranks), std::move(specials), preset_pattern(TokenizerPreset::kK3), true);
  t.model_dir_ = dir;
  return t;
}

void check_tokenizer_against_config(const Tokenizer& tok, const ModelConfig& mc) {
  const std::string dir = tok.model_dir().empty() ? std::string(".") : tok.model_dir();
  const std::string cfg = dir + "/config.json", ranks = dir + "/tiktoken.model",
                    tcfg = dir + "/tokenizer_config.json";
  std::vector<std::string> problems;
  const int vocab = mc.text.vocab_size;
  const int32_t n_ranks = tok.ranks().end_rank();
  const size_t n_specials = tok.specials().tokens().size();
  if (vocab > 0 && tok.vocab_size() > vocab)
    problems.push_back(cat(ranks, " (", n_ranks, " ranks) and ", tcfg, " (", n_specials,
                           " special tokens) use ids up to ", tok.vocab_size() - 1, ", beyond ", cfg,
                           "'s vocab_size ", vocab, " (the embedding table has no row for them)"));
  // What an id is to this tokenizer, for the messages.
  auto describe = [&](int32_t id) -> std::string {
    if (const std::string* text = tok.specials().text(id)) return cat("the special token '", *text, "'");
    if (tok.ranks().has_rank(id)) return cat("an ordinary token of ", ranks, ", not a special token");
    return cat("no token of the tokenizer (", ranks, " has ", n_ranks, " ranks, ", tcfg, " ", n_specials,
               " special tokens)");
  };
  auto must_be_special = [&](const char* field, int id) {
    if (id >= 0 && !tok.is_special(id)) problems.push_back(cat(cfg, ": ", field, " ", id, " is ", describe(id)));
  };
  // bos/pad: a special token, and the one tokenizer_config.json names for the role.
  auto role = [&](const char* field, int id, const std::optional<Tokenizer::Role>& r, const char* key) {
    if (r && !r->id)
      problems.push_back(cat(tcfg, ": ", key, " '", r->text, "' is not one of its special tokens"));
    if (id < 0) return;
    if (!tok.is_special(id))
      must_be_special(field, id);
    else if (r && r->id && *r->id != id)
      problems.push_back(cat(cfg, ": ", field, " ", id, " is ", describe(id), ", but ", tcfg, " names ", key, " '",
                             r->text, "' (id ", *r->id, ")"));
  };
  role("bos_token_id", mc.bos_token_id, tok.bos(), "bos_token");
  role("pad_token_id", mc.pad_token_id, tok.pad(), "pad_token");
  // Generation stops on the config's eos ids and on the tokenizer's eos_token (K3: 163586
  // <|end_of_msg|> and 163585 [EOS]); each must be a special token.
  for (int id : mc.stop_token_ids) must_be_special("eos_token_id", id);
  if (tok.eos() && !tok.eos()->id)
    problems.push_back(cat(tcfg, ": eos_token '", tok.eos()->text, "' is not one of its special tokens"));
  must_be_special("media_placeholder_token_id", mc.media_placeholder_token_id);
  if (problems.empty()) return;
  std::string msg = cat("the tokenizer in ", dir, " does not match its model config (", problems.size(), " problem",
                        problems.size() == 1 ? "" : "s", "):");
  for (const std::string& p : problems) msg += "\n  " + p;
  throw Error(msg);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> out;
  encode_append(text, allow_special, out);
  return out;
}

void Tokenizer::encode_append(std::string_view text, bool allow_special, std::vector<int32_t>& out) const {
  std::string sanitized;
  if (!utf8::is_valid(text)) {
    sanitized = utf8::sanitize(text);
    text = sanitized;
  }
  auto ordinary = [&](std::string_view t) {
    if (kimi_chunking_)
      for_each_kimi_chunk(t, [&](std::string_view chunk) { encode_ordinary(chunk, out); });
    else
      encode_ordinary(t, out);
  };
  if (!allow_special || specials_.empty()) {
    ordinary(text);
    return;
  }
  // Special tokens first, then the chunking of the text between them: chunking first cut a long
  // run of specials (an image's 2,000 "<|media_pad|>", 26,000 characters without a space) inside
  // one of them, which then came out as ordinary tokens.
  size_t pos = 0;
  while (pos < text.size()) {
    const std::optional<SpecialMatch> m = specials_.find(text, pos);
    if (!m) break;
    ordinary(text.substr(pos, m->pos - pos));
    out.push_back(m->id);
    pos = m->pos + m->len;
  }
  ordinary(text.substr(pos));
}

void Tokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
  pretokenizer_.for_each_piece(text, [&](std::string_view piece) { bpe_encode_piece(piece, ranks_, out); });
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (ranks_.has_rank(id)) return ranks_.bytes(id);
  if (const std::string* s = specials_.text(id)) return *s;
  fail("token id ", id, " is not in the vocabulary (size ", vocab_size_, ")");
}

std::string Tokenizer::decode_bytes(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out.append(token_bytes(id));
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes = decode_bytes(ids);
  return utf8::is_valid(bytes) ? bytes : utf8::sanitize(bytes);
}

int32_t Tokenizer::require_special(std::string_view text) const {
  const std::optional<int32_t> id = specials_.id(text);
  K3_CHECK(id.has_value(), "the tokenizer has no special token '", text, "'");
  return *id;
}

}  // namespace k3
