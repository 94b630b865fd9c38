// Parsing the JSON files of a checkpoint (config.json, the shard index, tokenizer and vision
// configs, safetensors headers) strictly.  nlohmann::json::parse alone silently keeps the last of
// two equal keys ({"hidden_size": 7168, "hidden_size": 64} is a 64-wide model) and stops at a NUL
// byte, ignoring the rest; here both are errors that name the file and the key.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace k3 {

// Parses [begin, end) like nlohmann::json::parse (bad syntax throws nlohmann's exceptions) and
// sets `*duplicate` to the dotted path of the first key that repeats within one object
// ("text_config.hidden_size"; array entries add no segment), or leaves it empty.
nlohmann::json parse_json_noting_duplicates(const char* begin, const char* end, std::string* duplicate);

// A whole JSON document's text.  Throws k3::Error naming `source` on a NUL byte ("contains a NUL
// byte at offset N"), bad syntax ("not valid JSON: ...") or a repeated key ("key 'a.b' appears
// twice").
nlohmann::json parse_json_document(const std::string& text, const std::string& source);

}  // namespace k3
