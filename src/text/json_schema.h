// JSON Schema for constrained decoding (response_format json_schema): a compiled subset, and an
// incremental recogniser that accepts exactly the JSON texts that both parse and satisfy it,
// byte by byte, like JsonValidator (a small copyable value; feed() false = not a valid prefix).
//
// Supported keywords (anything else, e.g. pattern, format, minimum, allOf, is refused by
// compile() with a k3::Error naming it, so a schema is never silently ignored):
//   type (a name or a list of names: object, array, string, number, integer, boolean, null),
//   properties, required, additionalProperties (false, true or a schema: only the listed
//   properties are ever produced, which every one of these allows), items, minItems, maxItems,
//   enum, const, $ref to "#/$defs/NAME" or "#/definitions/NAME" (recursion included), anyOf and
//   oneOf whose alternatives start differently (different JSON types: the first byte of a value
//   picks its alternative, as in Pydantic's Optional[X] = anyOf [X, null]; with disjoint
//   alternatives oneOf is anyOf), and the annotations title, description, default, examples,
//   $schema, $id, $comment, $defs, definitions.
// The document must be an object schema (as OpenAI requires).  Properties come in any order,
// each at most once, names written without escapes; '}' only once every required one is there.
// A schema without "type" (or {}) accepts any JSON value.  Objects have at most 64 properties;
// typed containers nest at most kMaxFrames deep (untyped values inside them may nest further),
// and no property, item or container is begun whose smallest value would not fit in the frames left.
// enum and const together, or beside "type", keep only the values all of them allow.  The schema
// itself may nest (subschemas and $ref hops together) and chain anyOf / oneOf alternatives at most
// CompiledSchema::kMaxDepth deep; a $ref cycle that never reaches a schema is refused.
// A validator may also start at any node as a lone value of any type (a tool-call argument,
// engine/tool_constraint.h); complete_at_end() then also accepts a number the end finishes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/json_validator.h"
#include "text/py_json.h"

namespace k3 {

class CompiledSchema {
 public:
  // compile() and resolve() recurse once per level of the schema (through $ref too): a chain of
  // 100,000 $defs, each referring to the next, would otherwise overflow the stack.
  static constexpr int kMaxDepth = 256;
  enum Type : uint8_t {
    kObject = 1,
    kArray = 2,
    kString = 4,
    kNumber = 8,
    kInteger = 16,
    kBoolean = 32,
    kNull = 64,
    kAny = 127,
  };
  struct Property {
    std::string name;  // raw bytes, no escaping needed
    int node = 0;
    bool required = false;
  };
  struct Node {
    uint8_t types = kAny;
    std::vector<Property> properties;  // kObject
    uint64_t all_mask = 0;             // a bit per property ...
    uint64_t required_mask = 0;        // ... and per required one
    int items = -1;                    // kArray: the items' node (-1: any_node())
    int64_t min_items = 0, max_items = INT64_MAX;
    std::vector<std::string> values;  // enum / const: compact JSON texts (types unused then)
    bool is_enum = false;
    std::vector<int> alternatives;  // anyOf / oneOf (checked through branch(), not types)
    uint8_t starts = 0;             // the start classes of this node's values (start_class)
    std::string where;              // anyOf / oneOf: the schema path, for errors
    // The fewest nested objects / arrays a value takes (kNoValue: no finite value): as an object
    // (itself plus its required properties' values), as an array (itself plus minItems > 0
    // items'), and of any kind (0: a scalar or an enum member).  The validator starts a value
    // only where it fits in the frames left, so a property or item that can no longer finish is
    // never begun.
    int object_frames = kNoValue, array_frames = kNoValue, min_frames = kNoValue;
  };
  static constexpr int kNoValue = 1 << 20;

  // Throws k3::Error naming an unsupported keyword or a malformed schema.
  static CompiledSchema compile(const ojson& schema);
  const Node& node(int i) const { return nodes_[static_cast<size_t>(i)]; }
  // A node that accepts any value (array items without a schema).
  int any_node() const { return any_; }
  // The class of values that start with byte c: kObject, kArray, kString, kNumber (integers
  // too), kBoolean or kNull; 0 if none does.
  static uint8_t start_class(uint8_t c);
  // The node a value of `node` starting with byte c is checked against: `node` itself, or for
  // anyOf / oneOf the alternative (recursively) whose values start so; -1 if none.
  int branch(int node, uint8_t c) const;

 private:
  int add(const ojson& schema, const ojson& root, const std::string& where, int depth);
  void count_frames();
  void resolve(int index, std::vector<uint8_t>& state, int depth);
  std::vector<Node> nodes_;
  std::vector<std::pair<std::string, int>> refs_;  // "$ref" -> node
  int any_ = 0;
};

class SchemaValidator {
 public:
  static constexpr int kMaxFrames = 16;

  // The document: an object of node 0 (response_format), or with root >= 0 one value of that
  // node, of whatever type it allows.
  explicit SchemaValidator(const CompiledSchema* schema, int root = -1) : schema_(schema), root_(root) {}
  bool feed(uint8_t c);
  bool feed(std::string_view bytes) { return feed_each(*this, bytes); }
  bool complete() const { return mode_ == Mode::kDone; }
  // complete(), or a top-level value that the end of the text would finish ("12", an enum
  // member that another member extends).
  bool complete_at_end() const;

 private:
  enum class Mode : uint8_t { kStart, kFrame, kKey, kDelegate, kEnum, kDone };
  enum class Phase : uint8_t { kFirst, kKey, kColon, kValue, kAfter };
  struct Frame {
    uint64_t seen = 0;  // object: properties already given
    int64_t count = 0;  // array: items so far
    int32_t node = 0;
    bool object = false;
    Phase phase = Phase::kFirst;
    int8_t key = -1;  // object: the property whose value comes next
  };

  bool start_value(int node, uint8_t c);
  bool value_done();
  bool frame_byte(uint8_t c);
  bool key_byte(uint8_t c);
  bool enum_byte(uint8_t c);

  const CompiledSchema* schema_;
  int root_ = -1;
  Mode mode_ = Mode::kStart;
  Frame frames_[kMaxFrames];
  int depth_ = 0;
  uint64_t key_mask_ = 0;  // kKey: properties whose name still matches
  uint32_t key_pos_ = 0;
  int32_t enum_node_ = 0;  // kEnum
  uint32_t enum_pos_ = 0;
  uint64_t enum_mask_ = 0;
  bool integer_ = false;   // kDelegate: a number that must stay an integer
  JsonValidator delegate_;
  uint8_t ws_run_ = 0;
};

}  // namespace k3
