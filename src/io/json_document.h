// Parsing the JSON files of a checkpoint (config.json, the shard index, tokenizer and vision
// configs, safetensors headers) strictly.  nlohmann::json::parse alone silently keeps the last of
// two equal keys ({"hidden_size": 7168, "hidden_size": 64} is a 64-wide model) and stops at a NUL
// byte, ignoring the rest; here both are errors that name the file and the key.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace k3 {

// The first key that repeats within one object: its dotted path ("text_config.hidden_size"; array
// entries add no segment) and the depth of its object (1: the top level; 0: no repeated key).
struct DuplicateKey {
  std::string path;
  int depth = 0;
};

// Parses [begin, end) like nlohmann::json::parse (bad syntax throws nlohmann's exceptions) and
// fills `*duplicate` with the first repeated key.
nlohmann::json parse_json_noting_duplicates(const char* begin, const char* end, DuplicateKey* duplicate);

// A whole JSON document's text.  Throws k3::Error naming `source` on a NUL byte ("contains a NUL
// byte at offset N"), bad syntax ("not valid JSON: ...") or a repeated key ("key 'a.b' appears
// twice").
nlohmann::json parse_json_document(const std::string& text, const std::string& source);

}  // namespace k3
