// Config parsing: the official layouts, the layer schedule, and refusals with clear messages.
#include <gtest/gtest.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "model/k3_config.h"
#include "support/test_support.h"

namespace k3 {
namespace {

using nlohmann::json;

json fixture_config() { return json::parse(testing::read_file(testing::fixture_dir("k3-tiny-a") + "/config.json")); }

std::string parse_error(const json& j) {
  try {
    parse_model_config(j.dump(), "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, ParsesTheFixture) {
  const ModelConfig mc = parse_model_config(fixture_config().dump(), "fixture");
  const TextConfig& c = mc.text;
  EXPECT_EQ(mc.model_type, "kimi_k3");
  EXPECT_EQ(mc.tensor_prefix, "language_model.");
  EXPECT_EQ(mc.schedule_string(), "KKKMKKKMKKKMM");
  EXPECT_EQ(c.hidden_size, 128);
  EXPECT_EQ(c.kda.num_heads, 4);
  EXPECT_EQ(c.kda.head_dim, 48);
  EXPECT_EQ(c.kda_width(), 192);
  ASSERT_TRUE(c.kda.gate_lower_bound.has_value());
  EXPECT_EQ(*c.kda.gate_lower_bound, -5.0f);
  EXPECT_TRUE(c.kda.full_rank_gate);
  EXPECT_EQ(c.q_lora_rank.value_or(0), 64);
  EXPECT_EQ(c.mla_cache_width(), 40);
  EXPECT_FLOAT_EQ(c.mla_norm_eps, 1e-6f);
  EXPECT_EQ(c.latent_size.value_or(0), 64);
  EXPECT_TRUE(c.latent_norm);
  EXPECT_EQ(c.attn_res_block_size.value_or(0), 4);
  EXPECT_EQ(c.act, Activation::kSitu);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_TRUE(c.quant.enabled);
  EXPECT_TRUE(c.quant.is_quantized("language_model.model.layers.1.block_sparse_moe.experts.0.w1"));
  EXPECT_FALSE(c.quant.is_quantized("language_model.model.layers.1.block_sparse_moe.shared_experts.gate_proj"));
  EXPECT_FALSE(c.quant.is_quantized("language_model.model.layers.1.self_attn.q_proj"));
  EXPECT_FALSE(c.quant.is_quantized("language_model.model.layers.0.mlp.gate_proj"));
  EXPECT_FALSE(c.quant.is_quantized("language_model.lm_head"));
  EXPECT_EQ(mc.stop_token_ids, std::vector<int>{258});
}

TEST(Config, ReleasedK3ScheduleComesFromTheOneBasedLists) {
  json j = fixture_config();
  json& t = j["text_config"];
  t["num_hidden_layers"] = 93;
  json full = json::array(), kda = json::array();
  for (int i = 4; i <= 92; i += 4) full.push_back(i);
  full.push_back(93);
  for (int i = 1; i <= 91; ++i)
    if (i % 4 != 0) kda.push_back(i);
  t["linear_attn_config"]["full_attn_layers"] = full;
  t["linear_attn_config"]["kda_layers"] = kda;
  const ModelConfig mc = parse_model_config(j.dump(), "k3");
  EXPECT_EQ(mc.text.num_kda_layers(), 69);
  EXPECT_EQ(mc.text.num_mla_layers(), 24);
  EXPECT_EQ(mc.schedule_string().substr(88), "KKKMM");  // layers 91 and 92 (0-based) are both MLA
  EXPECT_EQ(mc.text.layer_kinds[3], LayerKind::kMla);
  EXPECT_EQ(mc.text.layer_kinds[0], LayerKind::kKda);
}

TEST(Config, BareKimiLinearAndSoftplusGate) {
  json t = fixture_config()["text_config"];
  t["linear_attn_config"].erase("gate_lower_bound");
  t["linear_attn_config"]["use_full_rank_gate"] = false;
  const ModelConfig mc = parse_model_config(t.dump(), "bare");
  EXPECT_EQ(mc.model_type, "kimi_linear");
  EXPECT_EQ(mc.tensor_prefix, "");
  EXPECT_FALSE(mc.text.kda.gate_lower_bound.has_value());
  EXPECT_FALSE(mc.text.kda.full_rank_gate);
}

TEST(Config, QuantisationAtTopLevelIsAccepted) {
  json j = fixture_config();
  j["quantization_config"] = j["text_config"]["quantization_config"];
  j["text_config"].erase("quantization_config");
  EXPECT_TRUE(parse_model_config(j.dump(), "x").text.quant.enabled);
}

TEST(Config, RefusesWithClearMessages) {
  struct Case {
    const char* label;
    std::function<void(json&)> mutate;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"unknown model_type", [](json& j) { j["model_type"] = "llama"; }, "model_type: 'llama' is not supported"},
      {"missing text_config", [](json& j) { j.erase("text_config"); }, "text_config: missing"},
      {"rope MLA", [](json& j) { j["text_config"]["mla_use_nope"] = false; }, "mla_use_nope"},
      {"other quant", [](json& j) { j["text_config"]["quantization_config"]["quant_method"] = "gptq"; }, "'gptq' is not supported"},
      {"int4 weights", [](json& j) { j["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"]["type"] = "int"; },
       "'int' is not supported"},
      {"grouped routing", [](json& j) { j["text_config"]["num_expert_group"] = 8; }, "group-limited routing"},
      {"softmax router", [](json& j) { j["text_config"]["moe_router_activation_func"] = "softmax"; }, "'softmax' is not supported"},
      {"layer out of range", [](json& j) { j["text_config"]["linear_attn_config"]["kda_layers"].push_back(14); }, "layer 14 is outside 1..13"},
      {"layer in no list", [](json& j) { j["text_config"]["linear_attn_config"]["full_attn_layers"] = {4, 8, 12}; },
       "layer 13 (1-based) is in neither"},
      {"wrong type", [](json& j) { j["text_config"]["hidden_size"] = "128"; }, "hidden_size: expected an integer"},
      {"zero width", [](json& j) { j["text_config"]["hidden_size"] = 0; }, "hidden_size: value 0 is outside"},
      {"activation", [](json& j) { j["text_config"]["hidden_act"] = "gelu"; }, "'gelu' is not supported"},
      {"mtp", [](json& j) { j["text_config"]["num_nextn_predict_layers"] = 1; }, "multi-token-prediction"},
      // Integers are range-checked exactly: nlohmann keeps big non-negative values as uint64, which
      // get<int64_t>() shows wrapped (-1) and get<int>() truncates (4294967297 -> 1).
      {"uint64 max", [](json& j) { j["text_config"]["hidden_size"] = UINT64_MAX; },
       "hidden_size: value 18446744073709551615 is outside [1, 1073741824]"},
      {"layer id past int", [](json& j) { j["text_config"]["linear_attn_config"]["kda_layers"][0] = 4294967297ull; },
       "linear_attn_config.kda_layers[0]: value 4294967297 is outside"},
      {"layer id not an integer", [](json& j) { j["text_config"]["linear_attn_config"]["full_attn_layers"][1] = "8"; },
       "linear_attn_config.full_attn_layers[1]: expected an integer, got \"8\""},
      {"eos past int", [](json& j) { j["eos_token_id"] = 4294967554ull; },
       "eos_token_id: 4294967554 is outside the vocabulary [0, 511]"},
      {"eos as a string", [](json& j) { j["eos_token_id"] = "258"; }, "eos_token_id: expected an integer token id, got \"258\""},
      {"eos list with junk", [](json& j) { j["eos_token_id"] = json::array({258, "x", 1.5}); },
       "eos_token_id[2]: expected an integer token id, got 1.5"},
      {"eos empty list", [](json& j) { j["eos_token_id"] = json::array(); }, "eos_token_id: is an empty list"},
      {"bos outside vocab", [](json& j) { j["bos_token_id"] = 100000; }, "bos_token_id: value 100000 is outside [0, 511]"},
      {"pad outside vocab", [](json& j) { j["pad_token_id"] = 512; }, "pad_token_id: value 512 is outside [0, 511]"},
      {"media placeholder outside vocab", [](json& j) { j["media_placeholder_token_id"] = 999999; },
       "media_placeholder_token_id: value 999999 is outside [0, 511]"},
      // Floats must survive the cast to float: 1e300 would become inf, 1e-50 would flush to 0.
      {"eps overflows float", [](json& j) { j["text_config"]["rms_norm_eps"] = 1e300; }, "rms_norm_eps: value 1e+300 is outside"},
      {"eps underflows float", [](json& j) { j["text_config"]["rms_norm_eps"] = 1e-50; }, "rms_norm_eps: value 1e-50 is outside"},
      {"eps negative", [](json& j) { j["text_config"]["rms_norm_eps"] = -1e-6; }, "rms_norm_eps: value -1e-06 is outside"},
      {"gate bound overflows", [](json& j) { j["text_config"]["linear_attn_config"]["gate_lower_bound"] = -1e300; },
       "gate_lower_bound: value -1e+300 is outside"},
      {"gate bound positive", [](json& j) { j["text_config"]["linear_attn_config"]["gate_lower_bound"] = 5; },
       "gate_lower_bound: must be negative, got 5"},
      {"situ beta zero", [](json& j) { j["text_config"]["activation_situ_beta"] = 0; }, "activation_situ_beta: value 0 is outside"},
      {"situ linear beta huge", [](json& j) { j["text_config"]["activation_situ_linear_beta"] = 1e300; },
       "activation_situ_linear_beta: value 1e+300 is outside"},
      {"routed scale negative", [](json& j) { j["text_config"]["routed_scaling_factor"] = -1e300; },
       "routed_scaling_factor: value -1e+300 is outside"},
      {"routed scale huge", [](json& j) { j["text_config"]["routed_scaling_factor"] = 1e6; },
       "routed_scaling_factor: value 1000000.0 is outside"},
      // Derived widths are products and sums of fields allowed up to 2^30: no int overflow.
      {"kda width", [](json& j) {
         j["text_config"]["linear_attn_config"]["num_heads"] = 65536;
         j["text_config"]["linear_attn_config"]["head_dim"] = 65536;
       },
       "linear_attn_config.num_heads * linear_attn_config.head_dim (the KDA width) = 4294967296 exceeds"},
      {"mla cache width", [](json& j) {
         j["text_config"]["kv_lora_rank"] = 1 << 30;
         j["text_config"]["qk_rope_head_dim"] = 1 << 30;
       },
       "kv_lora_rank + qk_rope_head_dim (the MLA cache width) = 2147483648 exceeds"},
      {"mla head width", [](json& j) { j["text_config"]["qk_nope_head_dim"] = 1 << 30; },
       "qk_nope_head_dim + qk_rope_head_dim (the MLA q/k head width) = 1073741832 exceeds"},
      {"long ignore regex", [](json& j) {
         j["text_config"]["quantization_config"]["ignore"].push_back("re:" + std::string(1001, 'a'));
       },
       "quantization_config.ignore[6]: regular expression \"re:aaaa"},
      {"bad ignore regex", [](json& j) { j["text_config"]["quantization_config"]["ignore"].push_back("re:(a"); },
       "quantization_config.ignore[6]: invalid regular expression \"re:(a\""},
      {"ignore entry not a string", [](json& j) { j["text_config"]["quantization_config"]["ignore"][0] = json::array({1}); },
       "quantization_config.ignore[0]: expected a string, got an array of 1 entry"},
      {"quantization_config not an object", [](json& j) { j["text_config"]["quantization_config"] = "mxfp4"; },
       "text_config.quantization_config: expected an object, got \"mxfp4\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    json j = fixture_config();
    c.mutate(j);
    const std::string err = parse_error(j);
    EXPECT_NE(err.find(c.expect), std::string::npos) << err;
    EXPECT_NE(err.find("config.json"), std::string::npos) << err;
  }
}

TEST(Config, ReportsAllProblemsAtOnce) {
  json j = fixture_config();
  j["text_config"]["hidden_size"] = "x";
  j["text_config"]["hidden_act"] = "relu";
  j["text_config"].erase("kv_lora_rank");
  const std::string err = parse_error(j);
  EXPECT_NE(err.find("3 problems"), std::string::npos) << err;
  EXPECT_NE(err.find("hidden_size"), std::string::npos);
  EXPECT_NE(err.find("hidden_act"), std::string::npos);
  EXPECT_NE(err.find("kv_lora_rank: missing"), std::string::npos);
}

// A value nested 100,000 deep parses (nlohmann's parser is iterative) but must only be described
// in the error, never dumped: dump() recurses per level and would overflow the stack.
TEST(Config, DeeplyNestedValuesAreDescribedNotDumped) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string text = fixture_config().dump();
  struct Case {
    const char* field;
    const char* expect;
  };
  for (const Case& c : std::vector<Case>{
           {"\"hidden_size\":128", "hidden_size: expected an integer, got an array of 1 entry"},
           {"\"rms_norm_eps\":1e-05", "rms_norm_eps: expected a number, got an array of 1 entry"},
           {"\"tie_word_embeddings\":false", "tie_word_embeddings: expected true or false, got an array of 1 entry"},
           {"\"hidden_act\":\"situ\"", "hidden_act: expected a string, got an array of 1 entry"},
           {"\"kda_layers\":[1,2,3,5,6,7,9,10,11]", "kda_layers[0]: expected an integer, got an array of 1 entry"},
       }) {
    SCOPED_TRACE(c.field);
    const size_t at = text.find(c.field);
    ASSERT_NE(at, std::string::npos);
    const std::string key = std::string(c.field).substr(0, std::string(c.field).find(':') + 1);
    const std::string value = key == "\"kda_layers\":" ? "[" + deep + "]" : deep;
    std::string bad = text;
    bad.replace(at, std::strlen(c.field), key + value);
    std::string err;
    try {
      parse_model_config(bad, "config.json");
    } catch (const Error& e) {
      err = e.what();
    }
    EXPECT_NE(err.find(c.expect), std::string::npos) << err.substr(0, 500);
  }
}

// Ignore patterns up to the length limit compile, however deeply nested (no stack overflow).
TEST(Config, NestedIgnorePatternWithinTheLimitCompiles) {
  json j = fixture_config();
  const std::string pat = std::string(498, '(') + "zzz" + std::string(498, ')');
  j["text_config"]["quantization_config"]["ignore"].push_back("re:" + pat);
  const ModelConfig mc = parse_model_config(j.dump(), "config.json");
  EXPECT_FALSE(mc.text.quant.is_quantized("zzz"));
  EXPECT_TRUE(mc.text.quant.is_quantized("language_model.model.layers.1.block_sparse_moe.experts.0.w1"));
}

// nlohmann stops at a NUL byte; whatever follows must not be silently dropped.
TEST(Config, NulByteIsRejected) {
  const std::string text = fixture_config().dump();
  std::string err;
  try {
    parse_model_config(text + std::string(1, '\0') + "{\"junk\": 1}", "dir/config.json");
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find(cat("dir/config.json: contains a NUL byte at offset ", text.size())), std::string::npos) << err;
}

// Two equal keys: nlohmann kept the last, so a config written with hidden_size twice loaded as
// whichever came second, with no word.
TEST(Config, RepeatedKeyIsRejected) {
  std::string text = fixture_config().dump();
  const size_t tc = text.find("\"text_config\":{");
  ASSERT_NE(tc, std::string::npos);
  text.insert(tc + 15, "\"hidden_size\":64,");
  std::string err;
  try {
    parse_model_config(text, "dir/config.json");
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("dir/config.json: key 'text_config.hidden_size' appears twice"), std::string::npos) << err;
}

TEST(Config, LegalEdgeValuesStillParse) {
  json j = fixture_config();
  j["eos_token_id"] = json::array({258, 511});
  j["bos_token_id"] = 0;
  j["text_config"]["rms_norm_eps"] = 1e-30;
  j["text_config"]["routed_scaling_factor"] = 2.827;
  const ModelConfig mc = parse_model_config(j.dump(), "config.json");
  EXPECT_EQ(mc.stop_token_ids, (std::vector<int>{258, 511}));
  EXPECT_EQ(mc.bos_token_id, 0);
  EXPECT_FLOAT_EQ(mc.text.rms_norm_eps, 1e-30f);
  EXPECT_FLOAT_EQ(mc.text.routed_scaling_factor, 2.827f);
}

TEST(Config, InvalidJson) {
  EXPECT_THROW(parse_model_config("{", "c.json"), Error);
  EXPECT_THROW(parse_model_config("[]", "c.json"), Error);
}

}  // namespace
}  // namespace k3
