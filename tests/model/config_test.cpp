// Config parsing: the official layouts, the layer schedule, and refusals with clear messages.
#include <gtest/gtest.h>

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

TEST(Config, InvalidJson) {
  EXPECT_THROW(parse_model_config("{", "c.json"), Error);
  EXPECT_THROW(parse_model_config("[]", "c.json"), Error);
}

}  // namespace
}  // namespace k3
