// Encode throughput of k3's tokenizer on a large mixed text: every string of the tokenizer fixture
// corpus (prose in many scripts, code, CJK, emoji, numbers, whitespace runs, long words),
// concatenated and repeated to 8 MiB.  Counters: MB_per_core (10^6 bytes of UTF-8 input per CPU
// second, single thread) and tokens_per_core.  "k3" is the K3 regex and chunking over the cl100k
// ranks (the real K3 vocabulary is not in the tree).
//   ./tokenizer_bench [--benchmark_filter=Encode]
#include <benchmark/benchmark.h>

#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"

namespace {

const std::string kDir = K3_TOKENIZER_FIXTURES;

const std::string& mixed_text() {
  static const std::string text = [] {
    std::ifstream in(kDir + "/corpus.jsonl");
    if (!in) throw std::runtime_error("cannot open " + kDir + "/corpus.jsonl");
    std::string corpus, line;
    while (std::getline(in, line))
      if (!line.empty()) corpus += nlohmann::json::parse(line).at("text").get<std::string>() + "\n";
    std::string out;
    while (out.size() < (8u << 20)) out += corpus;
    return out;
  }();
  return text;
}

// name: cl100k, o200k, or k3 (the K3 pattern and chunking over the cl100k ranks).
const k3::Tokenizer& tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<k3::Tokenizer>> cache;
  auto& t = cache[name];
  if (!t) {
    const std::string ranks = name == "o200k" ? "o200k_base.tiktoken" : "cl100k_base.tiktoken";
    t = std::make_unique<k3::Tokenizer>(k3::Tokenizer::from_tiktoken(kDir + "/" + ranks, k3::parse_tokenizer_preset(name)));
  }
  return *t;
}

// Rates are per CPU second of the (single) benchmark thread, i.e. per core, which also keeps them
// meaningful on a busy machine.
void report(benchmark::State& state, size_t bytes, size_t tokens) {
  using benchmark::Counter;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["MB_per_core"] = Counter(static_cast<double>(state.iterations() * bytes) / 1e6, Counter::kIsRate);
  state.counters["tokens_per_core"] = Counter(static_cast<double>(state.iterations() * tokens), Counter::kIsRate);
}

void BM_Encode(benchmark::State& state, const std::string& name) {
  const k3::Tokenizer& tok = tokenizer(name);
  const std::string& text = mixed_text();
  size_t tokens = 0;
  for (auto _ : state) {
    std::vector<int32_t> ids = tok.encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  report(state, text.size(), tokens);
}

void BM_Pretokenize(benchmark::State& state, const std::string& name) {
  const k3::Tokenizer& tok = tokenizer(name);
  const std::string& text = mixed_text();
  size_t pieces = 0;
  for (auto _ : state) {
    pieces = 0;
    tok.pretokenizer().for_each_piece(text, [&](std::string_view) { ++pieces; });
    benchmark::DoNotOptimize(pieces);
  }
  report(state, text.size(), pieces);
}

void BM_Decode(benchmark::State& state, const std::string& name) {
  const k3::Tokenizer& tok = tokenizer(name);
  const std::vector<int32_t> ids = tok.encode(mixed_text());
  for (auto _ : state) {
    std::string text = tok.decode(ids);
    benchmark::DoNotOptimize(text.data());
  }
  report(state, mixed_text().size(), ids.size());
}

BENCHMARK_CAPTURE(BM_Encode, k3, std::string("k3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, cl100k, std::string("cl100k"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, o200k, std::string("o200k"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Pretokenize, k3, std::string("k3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Decode, k3, std::string("k3"))->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
