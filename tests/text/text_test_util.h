// Helpers for the text tests: JSON-lines fixtures and the fixture tokenizers (loaded once).
#pragma once

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "text/py_json.h"
#include "text/tokenizer.h"

namespace k3::testing {

inline std::vector<ojson> read_jsonl(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<ojson> rows;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(ojson::parse(line));
  return rows;
}

inline std::string tokenizer_fixture(const std::string& file) { return fixture_dir("tokenizer") + "/" + file; }
inline std::string chat_fixture(const std::string& file) { return fixture_dir("chat") + "/" + file; }

// "cl100k" / "o200k" with their fixture rank files; cached for the process.
inline const Tokenizer& fixture_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot)
    slot = std::make_unique<Tokenizer>(
        Tokenizer::from_tiktoken(tokenizer_fixture(name + "_base.tiktoken"), parse_tokenizer_preset(name)));
  return *slot;
}

// corpus.jsonl: id -> text
inline const std::map<std::string, std::string>& corpus() {
  static const std::map<std::string, std::string> texts = [] {
    std::map<std::string, std::string> m;
    for (const ojson& row : read_jsonl(tokenizer_fixture("corpus.jsonl")))
      m[row.at("id").get<std::string>()] = row.at("text").get<std::string>();
    return m;
  }();
  return texts;
}

}  // namespace k3::testing
