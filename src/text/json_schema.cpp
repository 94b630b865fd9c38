#include "text/json_schema.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace k3 {
namespace {

const char* const kAnnotations[] = {"title", "description", "default", "examples", "$schema",
                                    "$id",   "$comment",    "$defs",   "definitions"};
const char* const kKeywords[] = {"type",     "properties", "required", "additionalProperties", "items",
                                 "minItems", "maxItems",   "enum",     "const",                "$ref",
                                 "anyOf",    "oneOf"};

uint8_t type_bit(const std::string& name, const std::string& where) {
  if (name == "object") return CompiledSchema::kObject;
  if (name == "array") return CompiledSchema::kArray;
  if (name == "string") return CompiledSchema::kString;
  if (name == "number") return CompiledSchema::kNumber | CompiledSchema::kInteger;
  if (name == "integer") return CompiledSchema::kInteger;
  if (name == "boolean") return CompiledSchema::kBoolean;
  if (name == "null") return CompiledSchema::kNull;
  throw Error(cat("json_schema: unknown type '", name, "' at ", where));
}

// The Type bit of a JSON value (an integral float such as 1.0 is an integer, as JSON Schema says).
uint8_t value_type(const ojson& v) {
  if (v.is_object()) return CompiledSchema::kObject;
  if (v.is_array()) return CompiledSchema::kArray;
  if (v.is_string()) return CompiledSchema::kString;
  if (v.is_boolean()) return CompiledSchema::kBoolean;
  if (v.is_null()) return CompiledSchema::kNull;
  if (v.is_number_float()) {
    const double d = v.get<double>();
    return d == std::floor(d) ? CompiledSchema::kInteger : CompiledSchema::kNumber;
  }
  return CompiledSchema::kInteger;
}

int64_t count_field(const ojson& s, const char* f, const std::string& where) {
  const ojson& v = s[f];
  K3_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0, "json_schema: ", f, " at ", where,
           " must be a non-negative integer");
  return v.get<int64_t>();
}

}  // namespace

uint8_t CompiledSchema::start_class(uint8_t c) {
  if (c == '{') return kObject;
  if (c == '[') return kArray;
  if (c == '"') return kString;
  if (c == '-' || (c >= '0' && c <= '9')) return kNumber;
  if (c == 't' || c == 'f') return kBoolean;
  if (c == 'n') return kNull;
  return 0;
}

int CompiledSchema::branch(int node, uint8_t c) const {
  for (int hops = 0; hops <= static_cast<int>(nodes_.size()); ++hops) {
    const Node& n = nodes_[static_cast<size_t>(node)];
    if (n.alternatives.empty()) return node;
    const uint8_t k = start_class(c);
    int next = -1;
    for (int a : n.alternatives)
      if (nodes_[static_cast<size_t>(a)].starts & k) next = a;
    if (next < 0) return -1;
    node = next;
  }
  return -1;
}

// Fills `starts` (the start classes of a node's values), checking that the alternatives of an
// anyOf / oneOf node have disjoint classes.
void CompiledSchema::resolve(int index, std::vector<uint8_t>& state, int depth) {
  Node& n = nodes_[static_cast<size_t>(index)];
  if (state[static_cast<size_t>(index)] == 2) return;
  K3_CHECK(state[static_cast<size_t>(index)] == 0, "json_schema: anyOf / oneOf that contains itself");
  K3_CHECK(depth <= kMaxDepth, "json_schema: anyOf / oneOf at ", n.where, " chains alternatives (through $ref) more than ",
           kMaxDepth, " levels deep");
  state[static_cast<size_t>(index)] = 1;
  if (n.is_enum) {
    n.starts = 0;
    for (const std::string& v : n.values) n.starts |= start_class(static_cast<uint8_t>(v[0]));
  } else if (!n.alternatives.empty()) {
    uint8_t starts = 0;
    for (int a : n.alternatives) {
      resolve(a, state, depth + 1);
      const Node& alt = nodes_[static_cast<size_t>(a)];
      K3_CHECK(!(starts & alt.starts), "json_schema: the alternatives of anyOf / oneOf at ", n.where,
               " must be told apart by their first byte (different JSON types, such as a type or null); "
               "overlapping ones are not supported");
      starts |= alt.starts;
    }
    n.starts = starts;
  } else {
    n.starts = static_cast<uint8_t>((n.types & ~kInteger) | ((n.types & kInteger) ? kNumber : 0));
  }
  state[static_cast<size_t>(index)] = 2;
}

CompiledSchema CompiledSchema::compile(const ojson& schema) {
  K3_CHECK(schema.is_object(), "json_schema: the schema must be an object");
  CompiledSchema c;
  const int root = c.add(schema, schema, "#", 0);
  K3_CHECK(root == 0, "json_schema: internal node order");
  K3_CHECK(!c.nodes_[0].is_enum && (c.nodes_[0].types & kObject) && c.nodes_[0].types == kObject,
           "json_schema: the top-level schema must have type \"object\"");
  c.any_ = static_cast<int>(c.nodes_.size());
  c.nodes_.emplace_back();
  std::vector<uint8_t> state(c.nodes_.size(), 0);
  for (size_t i = 0; i < c.nodes_.size(); ++i) c.resolve(static_cast<int>(i), state, 0);
  for (Node& n : c.nodes_)
    for (size_t i = 0; i < n.properties.size(); ++i) {
      n.all_mask |= uint64_t{1} << i;
      if (n.properties[i].required) n.required_mask |= uint64_t{1} << i;
    }
  c.count_frames();
  return c;
}

// object_frames / array_frames / min_frames of every node, relaxed to a fixed point: recursive
// $refs make the node graph cyclic, and a value's size only shrinks as more nodes get one.
// (Subschemas come after their parent, so the passes go backwards.)
void CompiledSchema::count_frames() {
  const auto frames_of = [&](int i) { return nodes_[static_cast<size_t>(i)].min_frames; };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = nodes_.size(); i-- > 0;) {
      Node& n = nodes_[i];
      int object = kNoValue, array = kNoValue, any = kNoValue;
      if (n.is_enum) {
        any = 0;
      } else if (!n.alternatives.empty()) {
        for (int a : n.alternatives) any = std::min(any, frames_of(a));
      } else {
        if (n.types & kObject) {
          int inner = 0;
          for (const Property& p : n.properties)
            if (p.required) inner = std::max(inner, frames_of(p.node));
          object = std::min(kNoValue, 1 + inner);
        }
        if (n.types & kArray)
          array = std::min(kNoValue, 1 + (n.min_items > 0 ? frames_of(n.items >= 0 ? n.items : any_) : 0));
        any = (n.types & ~(kObject | kArray)) ? 0 : std::min(object, array);
      }
      if (object < n.object_frames || array < n.array_frames || any < n.min_frames) {
        n.object_frames = std::min(n.object_frames, object);
        n.array_frames = std::min(n.array_frames, array);
        n.min_frames = std::min(n.min_frames, any);
        changed = true;
      }
    }
  }
}

int CompiledSchema::add(const ojson& s, const ojson& root, const std::string& where, int depth) {
  K3_CHECK(depth <= kMaxDepth, "json_schema: the schema at ", where, " nests more than ", kMaxDepth,
           " levels deep (subschemas and $ref hops together)");
  const int index = static_cast<int>(nodes_.size());
  nodes_.emplace_back();
  if (s.is_boolean()) {
    K3_CHECK(s.get<bool>(), "json_schema: the schema false (at ", where, ") accepts nothing");
    return index;
  }
  K3_CHECK(s.is_object(), "json_schema: the schema at ", where, " must be an object");
  for (const auto& [key, value] : s.items()) {
    const bool known = std::find(std::begin(kKeywords), std::end(kKeywords), key) != std::end(kKeywords) ||
                       std::find(std::begin(kAnnotations), std::end(kAnnotations), key) != std::end(kAnnotations);
    K3_CHECK(known, "json_schema: the keyword '", key, "' (at ", where, ") is not supported");
  }
  if (s.contains("$ref")) {
    K3_CHECK(s["$ref"].is_string(), "json_schema: $ref at ", where, " must be a string");
    const std::string ref = s["$ref"];
    for (const char* k : kKeywords)
      K3_CHECK(std::string(k) == "$ref" || !s.contains(k), "json_schema: $ref at ", where, " with '", k,
               "' beside it is not supported");
    nodes_.pop_back();
    for (const auto& [r, n] : refs_) {
      if (r != ref) continue;
      // A target still without a node is a chain of $refs that came back to itself ({"a": {"$ref":
      // "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}): there is no schema to return, and the index
      // handed out would lie past the end of nodes_.
      K3_CHECK(n < static_cast<int>(nodes_.size()), "json_schema: $ref '", ref, "' (at ", where,
               ") is a cycle of $refs that never reaches a schema");
      return n;
    }
    std::string name;
    const ojson* defs = nullptr;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      if (ref.rfind(prefix, 0) == 0) {
        name = ref.substr(std::string(prefix).size());
        const char* key = prefix[2] == '$' ? "$defs" : "definitions";
        if (root.contains(key) && root[key].is_object()) defs = &root[key];
      }
    }
    K3_CHECK(!name.empty(), "json_schema: only $ref to #/$defs/NAME or #/definitions/NAME is supported (got '", ref,
             "')");
    K3_CHECK(defs && defs->contains(name), "json_schema: $ref '", ref, "' names no definition");
    // Reserve the node first, so a recursive reference finds it.
    const int target = static_cast<int>(nodes_.size());
    refs_.emplace_back(ref, target);
    const int got = add((*defs)[name], root, ref, depth + 1);
    K3_CHECK(got == target, "json_schema: internal ref order");
    return target;
  }
  for (const char* k : {"anyOf", "oneOf"}) {
    if (!s.contains(k)) continue;
    const ojson& alts = s[k];
    K3_CHECK(alts.is_array() && !alts.empty(), "json_schema: ", k, " at ", where, " must be a non-empty list");
    for (const char* other : kKeywords)
      K3_CHECK(std::string(other) == k || !s.contains(other), "json_schema: ", k, " at ", where, " with '", other,
               "' beside it is not supported");
    std::vector<int> nodes;
    for (size_t i = 0; i < alts.size(); ++i) nodes.push_back(add(alts[i], root, cat(where, "/", k, "/", i), depth + 1));
    // A oneOf whose alternatives start differently is an anyOf: at most one can match.
    nodes_[static_cast<size_t>(index)].alternatives = std::move(nodes);
    nodes_[static_cast<size_t>(index)].where = where;
    return index;
  }
  uint8_t types = kAny;
  if (s.contains("type")) {
    types = 0;
    const ojson& t = s["type"];
    if (t.is_string()) {
      types = type_bit(t, where);
    } else {
      K3_CHECK(t.is_array() && !t.empty(), "json_schema: type at ", where, " must be a name or a list of names");
      for (const ojson& x : t) {
        K3_CHECK(x.is_string(), "json_schema: type at ", where, " must list names");
        types |= type_bit(x, where);
      }
    }
  } else if (s.contains("enum") || s.contains("const")) {
    // the values are checked against "type" alone (properties and items constrain only objects
    // and arrays, and an enum value beside them is taken as it is)
  } else if (s.contains("properties") || s.contains("required")) {
    types = kObject;  // only objects are produced: each satisfies the schema
  } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
    types = kArray;
  }
  if (s.contains("enum") || s.contains("const")) {
    // A value must satisfy every keyword: enum and const together keep the const value only if
    // enum lists it, and "type" beside them keeps only the values of those types (both were
    // ignored: {"const": "a", "enum": ["b"]} allowed "a" and "b", {"type": "string", "enum":
    // ["a", 1]} allowed 1).
    std::vector<ojson> vals;
    if (s.contains("enum")) {
      K3_CHECK(s["enum"].is_array() && !s["enum"].empty(), "json_schema: enum at ", where, " must be a non-empty list");
      for (const ojson& v : s["enum"]) vals.push_back(v);
    }
    if (s.contains("const")) {
      const ojson& c = s["const"];
      const bool listed = !s.contains("enum") || std::find(vals.begin(), vals.end(), c) != vals.end();
      K3_CHECK(listed, "json_schema: const at ", where, " is not one of the values enum lists, so nothing matches");
      vals.assign(1, c);
    }
    std::erase_if(vals, [&](const ojson& v) { return !(value_type(v) & types); });
    K3_CHECK(!vals.empty(), "json_schema: no enum / const value at ", where, " has the type \"type\" asks for, so "
             "nothing matches");
    K3_CHECK(vals.size() <= 64, "json_schema: enum at ", where, " has ", vals.size(), " values; at most 64");
    Node& n = nodes_[static_cast<size_t>(index)];
    n.is_enum = true;
    for (const ojson& v : vals) n.values.push_back(v.dump());
    return index;
  }
  nodes_[static_cast<size_t>(index)].types = types;
  if (s.contains("properties")) {
    const ojson& props = s["properties"];
    K3_CHECK(props.is_object(), "json_schema: properties at ", where, " must be an object");
    K3_CHECK(props.size() <= 64, "json_schema: ", props.size(), " properties at ", where, "; at most 64");
    for (const auto& [name, sub] : props.items()) {
      for (unsigned char ch : name)
        K3_CHECK(ch >= 0x20 && ch != '"' && ch != '\\', "json_schema: the property name '", name, "' at ", where,
                 " needs escaping, which is not supported");
      const int child = add(sub, root, where + "/properties/" + name, depth + 1);
      nodes_[static_cast<size_t>(index)].properties.push_back({name, child, false});
    }
  }
  if (s.contains("required")) {
    K3_CHECK(s["required"].is_array(), "json_schema: required at ", where, " must be a list");
    for (const ojson& r : s["required"]) {
      K3_CHECK(r.is_string(), "json_schema: required at ", where, " must list names");
      auto& props = nodes_[static_cast<size_t>(index)].properties;
      auto it = std::find_if(props.begin(), props.end(), [&](const Property& p) { return p.name == r.get<std::string>(); });
      K3_CHECK(it != props.end(), "json_schema: required property '", r.get<std::string>(), "' at ", where,
               " is not in properties");
      it->required = true;
    }
  }
  if (s.contains("items")) {
    K3_CHECK(s["items"].is_object() || s["items"].is_boolean(), "json_schema: items at ", where,
             " must be one schema (tuple forms are not supported)");
    const int child = add(s["items"], root, where + "/items", depth + 1);
    nodes_[static_cast<size_t>(index)].items = child;
  }
  if (s.contains("minItems")) nodes_[static_cast<size_t>(index)].min_items = count_field(s, "minItems", where);
  if (s.contains("maxItems")) nodes_[static_cast<size_t>(index)].max_items = count_field(s, "maxItems", where);
  const Node& n = nodes_[static_cast<size_t>(index)];
  K3_CHECK(n.min_items <= n.max_items, "json_schema: minItems > maxItems at ", where);
  return index;
}

// ---- recogniser ----

bool SchemaValidator::value_done() {
  if (depth_ == 0) {
    mode_ = Mode::kDone;
  } else {
    mode_ = Mode::kFrame;
    frames_[depth_ - 1].phase = Phase::kAfter;
  }
  return true;
}

bool SchemaValidator::start_value(int node, uint8_t c) {
  node = schema_->branch(node, c);  // anyOf / oneOf: the alternative this byte starts
  if (node < 0) return false;
  const CompiledSchema::Node& n = schema_->node(node);
  if (n.is_enum) {
    uint64_t mask = 0;
    for (size_t i = 0; i < n.values.size(); ++i)
      if (static_cast<uint8_t>(n.values[i][0]) == c) mask |= uint64_t{1} << i;
    if (!mask) return false;
    mode_ = Mode::kEnum;
    enum_node_ = node;
    enum_pos_ = 1;
    enum_mask_ = mask;
    return true;
  }
  const bool structured = n.types != CompiledSchema::kAny || !n.properties.empty() || n.items >= 0;
  if (structured && (c == '{' || c == '[')) {
    const bool object = c == '{';
    if (!(n.types & (object ? CompiledSchema::kObject : CompiledSchema::kArray))) return false;
    // Only if the smallest such value (its required properties / minItems items included) fits
    // in the frames left: begun deeper, it could never be finished.
    if (depth_ + (object ? n.object_frames : n.array_frames) > kMaxFrames) return false;
    Frame& f = frames_[depth_++];
    f = Frame{};
    f.node = node;
    f.object = object;
    mode_ = Mode::kFrame;
    return true;
  }
  uint8_t need = 0;
  if (c == '{') need = CompiledSchema::kObject;
  else if (c == '[') need = CompiledSchema::kArray;
  else if (c == '"') need = CompiledSchema::kString;
  else if (c == '-' || (c >= '0' && c <= '9')) need = CompiledSchema::kInteger;  // kNumber includes kInteger
  else if (c == 't' || c == 'f') need = CompiledSchema::kBoolean;
  else if (c == 'n') need = CompiledSchema::kNull;
  if (!(n.types & need)) return false;
  integer_ = need == CompiledSchema::kInteger && !(n.types & CompiledSchema::kNumber);
  delegate_ = JsonValidator(false);
  if (!delegate_.feed(c)) return false;
  mode_ = Mode::kDelegate;
  return true;
}

bool SchemaValidator::key_byte(uint8_t c) {
  Frame& f = frames_[depth_ - 1];
  const auto& props = schema_->node(f.node).properties;
  if (c == '"') {
    for (size_t i = 0; i < props.size(); ++i) {
      if ((key_mask_ >> i & 1) && props[i].name.size() == key_pos_) {
        f.seen |= uint64_t{1} << i;
        f.key = static_cast<int8_t>(i);
        f.phase = Phase::kColon;
        mode_ = Mode::kFrame;
        return true;
      }
    }
    return false;
  }
  uint64_t mask = 0;
  for (size_t i = 0; i < props.size(); ++i)
    if ((key_mask_ >> i & 1) && props[i].name.size() > key_pos_ && static_cast<uint8_t>(props[i].name[key_pos_]) == c)
      mask |= uint64_t{1} << i;
  if (!mask) return false;
  key_mask_ = mask;
  ++key_pos_;
  return true;
}

bool SchemaValidator::enum_byte(uint8_t c) {
  const auto& values = schema_->node(enum_node_).values;
  uint64_t mask = 0;
  bool ended = false;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!(enum_mask_ >> i & 1)) continue;
    if (values[i].size() > enum_pos_ && static_cast<uint8_t>(values[i][enum_pos_]) == c) mask |= uint64_t{1} << i;
    if (values[i].size() == enum_pos_) ended = true;
  }
  if (mask) {
    enum_mask_ = mask;
    ++enum_pos_;
    return true;
  }
  if (!ended) return false;
  value_done();
  return frame_byte(c);
}

bool SchemaValidator::frame_byte(uint8_t c) {
  if (JsonValidator::is_ws(c)) return ++ws_run_ <= JsonValidator::kMaxWhitespaceRun;
  ws_run_ = 0;
  if (mode_ == Mode::kDone) return false;
  if (mode_ == Mode::kStart) return root_ < 0 ? c == '{' && start_value(0, c) : start_value(root_, c);
  Frame& f = frames_[depth_ - 1];
  const CompiledSchema::Node& n = schema_->node(f.node);
  if (f.object) {
    // The properties not yet given whose value can still start here (the required ones always
    // can: the object was only begun with room for them).  Only a '"' or ',' asks.
    const auto open_properties = [&] {
      uint64_t open = 0;
      for (size_t i = 0; i < n.properties.size(); ++i)
        if (!(f.seen >> i & 1) && depth_ + schema_->node(n.properties[i].node).min_frames <= kMaxFrames)
          open |= uint64_t{1} << i;
      return open;
    };
    const uint64_t required = n.required_mask;
    const auto close = [&] {
      if ((f.seen & required) != required) return false;
      --depth_;
      return value_done();
    };
    const auto key = [&] {
      const uint64_t open = open_properties();
      if (!open) return false;
      mode_ = Mode::kKey;
      key_mask_ = open;
      key_pos_ = 0;
      return true;
    };
    switch (f.phase) {
      case Phase::kFirst:
        if (c == '"') return key();
        return c == '}' && close();
      case Phase::kKey:
        return c == '"' && key();
      case Phase::kColon:
        if (c != ':') return false;
        f.phase = Phase::kValue;
        return true;
      case Phase::kValue:
        return start_value(n.properties[static_cast<size_t>(f.key)].node, c);
      case Phase::kAfter:
        if (c == ',') {
          if (!open_properties()) return false;
          f.phase = Phase::kKey;
          return true;
        }
        return c == '}' && close();
    }
    return false;
  }
  const auto item = [&] {
    if (f.count >= n.max_items) return false;
    ++f.count;
    f.phase = Phase::kValue;
    return start_value(n.items >= 0 ? n.items : schema_->any_node(), c);
  };
  const auto close = [&] {
    if (f.count < n.min_items) return false;
    --depth_;
    return value_done();
  };
  switch (f.phase) {
    case Phase::kFirst:
      if (c == ']') return close();
      return item();
    case Phase::kValue:
      return item();
    case Phase::kAfter:
      if (c == ',') {
        const int items = n.items >= 0 ? n.items : schema_->any_node();
        if (f.count >= n.max_items || depth_ + schema_->node(items).min_frames > kMaxFrames) return false;
        f.phase = Phase::kValue;
        return true;
      }
      return c == ']' && close();
    default:
      return false;
  }
}

bool SchemaValidator::complete_at_end() const {
  if (complete()) return true;
  if (depth_ != 0) return false;
  if (mode_ == Mode::kDelegate) return delegate_.complete_at_end();
  if (mode_ == Mode::kEnum) {
    const auto& values = schema_->node(enum_node_).values;
    for (size_t i = 0; i < values.size(); ++i)
      if ((enum_mask_ >> i & 1) && values[i].size() == enum_pos_) return true;
  }
  return false;
}

bool SchemaValidator::feed(uint8_t c) {
  switch (mode_) {
    case Mode::kDelegate: {
      if (!(integer_ && (c == '.' || c == 'e' || c == 'E'))) {
        JsonValidator d = delegate_;
        if (d.feed(c)) {
          delegate_ = d;
          return true;
        }
      }
      if (!delegate_.complete_at_end()) return false;
      value_done();
      return frame_byte(c);
    }
    case Mode::kEnum:
      return enum_byte(c);
    case Mode::kKey:
      return key_byte(c);
    default:
      return frame_byte(c);
  }
}

}  // namespace k3
