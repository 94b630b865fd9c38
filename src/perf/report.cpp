#include "perf/report.h"

#include <cstdio>

namespace k3 {
namespace {

std::string fmt(const char* f, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}

nlohmann::json profile_json(const PhaseTimes& p) {
  nlohmann::json j = nlohmann::json::object();
  const double total = p.total();
  for (int i = 0; i < static_cast<int>(Phase::kCount); ++i)
    j[phase_name(static_cast<Phase>(i))] = {{"seconds", p.seconds[i]}, {"share", total > 0 ? p.seconds[i] / total : 0.0}};
  return j;
}

std::string profile_line(const PhaseTimes& p) {
  const double total = p.total();
  std::string s;
  for (int i = 0; i < static_cast<int>(Phase::kCount); ++i) {
    if (p.seconds[i] <= 0.0) continue;
    s += std::string(" ") + phase_name(static_cast<Phase>(i)) + " " + fmt("%.0f%%", 100.0 * p.seconds[i] / total);
  }
  return s;
}

}  // namespace

std::string format_table(const BenchReport& r) {
  const MachineLimits& m = r.machine;
  std::string out;
  char line[1024];
  std::snprintf(line, sizeof line,
                "machine: %s, %d threads, %s kernels, LLC %llu MiB\n"
                "  read bandwidth %.1f GB/s (min %.1f, max %.1f)   fp32 FMA peak %.1f GFLOP/s   bf16 dot peak %.1f GFLOP/s"
                "   AMX bf16 peak %.0f GFLOP/s\n",
                m.cpu.c_str(), m.threads, m.isa.c_str(), static_cast<unsigned long long>(m.llc_bytes >> 20), m.read_gbps,
                m.read_gbps_min, m.read_gbps_max, m.fp32_gflops, m.bf16_gflops, m.amx_bf16_gflops);
  out += line;
  if (m.read_gbps_best > 0 || m.fp32_gflops_best > 0) {
    std::snprintf(line, sizeof line,
                  "  ratios below use the fastest probes of the whole run: %.1f GB/s read, %.1f GFLOP/s fp32\n",
                  m.read_gbps_best, m.fp32_gflops_best);
    out += line;
  }
  out += "\n";
  if (!r.kernels.empty()) {
    std::snprintf(line, sizeof line, "%-30s %10s %-8s %7s  %-21s %s\n", "kernel", "median", "unit", "ratio", "min .. max", "limit / note");
    out += line;
    for (const BenchResult& k : r.kernels) {
      std::snprintf(line, sizeof line, "%-30s %10.1f %-8s %6.1f%%  %8.1f .. %-9.1f %s%s%s\n", k.name.c_str(), k.value,
                    k.unit.c_str(), 100.0 * k.ratio_to_limit, k.min, k.max, k.limit.c_str(), k.note.empty() ? "" : "; ",
                    k.note.c_str());
      out += line;
    }
  }
  if (r.model) {
    const ModelBenchResult& b = *r.model;
    const std::string huge_share =
        b.weights_huge_page_fraction >= 0 ? fmt("%.0f%%", 100.0 * b.weights_huge_page_fraction) : std::string("unknown");
    std::snprintf(line, sizeof line,
                  "\nmodel: %s (%d threads)\n"
                  "  decode   %.2f tokens/s (min %.2f, max %.2f) after a %d-token prompt; roofline %.2f tokens/s at %.1f GB/s for %.2f GB/token -> %.1f%%\n",
                  b.model.c_str(), b.threads, b.decode_tokens_per_s, b.decode_min, b.decode_max, b.prompt_tokens,
                  b.decode_roofline_tokens_per_s, b.read_gbps_during, b.decode_bytes_per_token / 1e9,
                  100.0 * b.decode_roofline_ratio);
    out += line;
    for (const PrefillFigure& f : b.prefills) {
      // The reference path (K3_ISA=ref) has no fp32 peak probe, so no compute roofline.
      const std::string ratio =
          b.prefill_peak_gflops > 0 ? fmt("%.1f%%", 100.0 * f.roofline_ratio) : std::string("n/a (no fp32 peak probe on this path)");
      std::snprintf(line, sizeof line,
                    "  prefill  %d tokens in chunks of %d: %.2f tokens/s (min %.2f, max %.2f); roofline %.2f tokens/s "
                    "(%.2f GFLOP/token: 2 x %.2fB active params + %.2f attention, at %.0f GFLOP/s fp32 peak) -> %s; "
                    "peak RSS %.2f GiB%s (state %.2f GiB)\n",
                    f.prompt_tokens, f.chunk, f.tokens_per_s, f.min, f.max, f.roofline_tokens_per_s,
                    (f.weight_flops_per_token + f.attention_flops_per_token) / 1e9, b.active_params_per_token / 1e9,
                    f.attention_flops_per_token / 1e9, b.prefill_peak_gflops, ratio.c_str(),
                    static_cast<double>(f.peak_rss_bytes) / (1u << 30),
                    b.prefill_rss_per_length ? "" : " (the process's so far: no VmHWM reset here)",
                    static_cast<double>(f.state_bytes) / (1u << 30));
      out += line;
    }
    std::snprintf(line, sizeof line,
                  "  peak RSS %.2f GiB; streaming read of one decoded token's weights %.1f GB/s (fastest of its probes)\n"
                  "  weights: --weights %s; %s of a decoded token's weight bytes in 2 MiB pages\n",
                  static_cast<double>(b.peak_rss_bytes) / (1u << 30), b.weights_read_gbps, b.weights_residency.c_str(),
                  huge_share.c_str());
    out += line;
    if (b.ranks > 1) {
      std::snprintf(line, sizeof line,
                    "  over %d ranks: the figures are rank 0's share; per decoded token it sent %.2f MB in %.0f "
                    "exchanges\n",
                    b.ranks, b.sent_per_token / 1e6, b.exchanges_per_token);
      out += line;
    }
    if (b.batch > 1) {
      std::snprintf(line, sizeof line,
                    "  decode, %d sequences batched: %.2f tokens/s summed (min %.2f, max %.2f), %.2fx one sequence\n",
                    b.batch, b.batch_decode_tokens_per_s, b.batch_decode_min, b.batch_decode_max,
                    b.decode_tokens_per_s > 0 ? b.batch_decode_tokens_per_s / b.decode_tokens_per_s : 0.0);
      out += line;
    }
    if (b.streamed) {
      std::snprintf(line, sizeof line,
                    "  streamed weights (budget %.2f GB): decode read %.2f GB/token at %.2f GB/s = %.1f%% of the %.2f "
                    "GB/s direct-read probe of the same bytes; expert hit rate %.1f%%; %.0f%% of decode waited for reads\n",
                    b.stream_budget_bytes / 1e9, b.stream_bytes_per_token / 1e9, b.stream_gbps,
                    b.stream_probe_gbps > 0 ? 100.0 * b.stream_gbps / b.stream_probe_gbps : 0.0, b.stream_probe_gbps,
                    100.0 * b.stream_hit_rate, 100.0 * b.stream_wait_fraction);
      out += line;
      if (b.stream_guesses_per_token > 0) {
        std::snprintf(line, sizeof line, "  next-layer guesses: %.1f expert reads/token, %.1f%% then chosen\n",
                      b.stream_guesses_per_token, 100.0 * b.stream_guess_accuracy);
        out += line;
      }
    }
    out += "  decode profile: " + profile_line(b.decode_profile) + "\n";
    for (const PrefillFigure& f : b.prefills)
      out += "  prefill profile, " + std::to_string(f.prompt_tokens) + " tokens:" + profile_line(f.profile) + "\n";
  }
  return out;
}

void apply_best_limits(BenchReport& r) {
  MachineLimits& m = r.machine;
  double bw = std::max(m.read_gbps, m.read_gbps_max), fp = m.fp32_gflops;
  for (const BenchResult& k : r.kernels) {
    if (k.limit_kind == BenchResult::Limit::kRead) bw = std::max(bw, k.limit_value);
    if (k.limit_kind == BenchResult::Limit::kFp32) fp = std::max(fp, k.limit_value);
  }
  if (r.model) {
    bw = std::max(bw, r.model->read_gbps_during);
    fp = std::max(fp, r.model->prefill_peak_gflops);
  }
  m.read_gbps_best = bw;
  m.fp32_gflops_best = fp;
  for (BenchResult& k : r.kernels) {
    if (k.limit_kind == BenchResult::Limit::kRead && bw > 0) {
      k.limit_value = bw;
      k.ratio_to_limit = k.value / bw;
      k.limit = "read bandwidth " + fmt("%.0f", bw) + " GB/s (the fastest probe of the run)";
    } else if (k.limit_kind == BenchResult::Limit::kFp32 && fp > 0) {
      k.limit_value = fp;
      k.ratio_to_limit = k.value / fp;
      k.limit = "fp32 FMA peak " + fmt("%.0f", fp) + " GFLOP/s (the fastest probe of the run)";
    } else {
      continue;
    }
    if (!k.limit_detail.empty()) k.limit += "; " + k.limit_detail;
  }
  if (r.model) {
    ModelBenchResult& b = *r.model;
    b.read_gbps_during = bw;
    if (b.decode_bytes_per_token > 0) b.decode_roofline_tokens_per_s = bw * 1e9 / b.decode_bytes_per_token;
    if (b.decode_roofline_tokens_per_s > 0) b.decode_roofline_ratio = b.decode_tokens_per_s / b.decode_roofline_tokens_per_s;
    b.prefill_peak_gflops = fp;
    for (PrefillFigure& f : b.prefills) apply_prefill_roofline(f, fp);
  }
}

nlohmann::json to_json(const BenchReport& r) {
  const MachineLimits& m = r.machine;
  nlohmann::json j;
  j["machine"] = {{"cpu", m.cpu},
                  {"threads", m.threads},
                  {"isa", m.isa},
                  {"llc_bytes", m.llc_bytes},
                  {"read_gbps", m.read_gbps},
                  {"read_gbps_min", m.read_gbps_min},
                  {"read_gbps_max", m.read_gbps_max},
                  {"peak_gflops", m.fp32_gflops},
                  {"read_gbps_best", m.read_gbps_best},
                  {"peak_gflops_best", m.fp32_gflops_best},
                  {"peak_bf16_gflops", m.bf16_gflops},
                  {"peak_amx_bf16_gflops", m.amx_bf16_gflops}};
  j["kernels"] = nlohmann::json::array();
  for (const BenchResult& k : r.kernels) {
    nlohmann::json e = {{"name", k.name},           {"value", k.value}, {"min", k.min},
                        {"max", k.max},             {"unit", k.unit},   {"ratio_to_limit", k.ratio_to_limit},
                        {"limit", k.limit},         {"note", k.note}};
    if (k.own_read_gbps > 0) e["own_read_gbps"] = k.own_read_gbps;
    j["kernels"].push_back(std::move(e));
  }
  if (r.model) {
    const ModelBenchResult& b = *r.model;
    nlohmann::json prefills = nlohmann::json::array();
    for (const PrefillFigure& f : b.prefills)
      prefills.push_back({{"prompt_tokens", f.prompt_tokens},
                          {"chunk", f.chunk},
                          {"tokens_per_s", f.tokens_per_s},
                          {"tokens_per_s_min", f.min},
                          {"tokens_per_s_max", f.max},
                          {"weight_flops_per_token", f.weight_flops_per_token},
                          {"attention_flops_per_token", f.attention_flops_per_token},
                          {"roofline_tokens_per_s", f.roofline_tokens_per_s},
                          {"roofline_ratio", f.roofline_ratio},
                          {"peak_rss_bytes", f.peak_rss_bytes},
                          {"peak_rss_is_own", b.prefill_rss_per_length},
                          {"state_bytes", f.state_bytes},
                          {"profile", profile_json(f.profile)}});
    j["model"] = {{"checkpoint", b.model},
                  {"threads", b.threads},
                  {"decode_tokens_per_s", b.decode_tokens_per_s},
                  {"decode_tokens_per_s_min", b.decode_min},
                  {"decode_tokens_per_s_max", b.decode_max},
                  {"decode_bytes_per_token", b.decode_bytes_per_token},
                  {"decode_roofline_tokens_per_s", b.decode_roofline_tokens_per_s},
                  {"decode_roofline_ratio", b.decode_roofline_ratio},
                  {"read_gbps_during_decode", b.read_gbps_during},
                  {"weights_read_gbps", b.weights_read_gbps},
                  {"weights_residency", b.weights_residency},
                  {"weights_huge_page_fraction",
                   b.weights_huge_page_fraction >= 0 ? nlohmann::json(b.weights_huge_page_fraction) : nlohmann::json(nullptr)},
                  {"decode_prompt_tokens", b.prompt_tokens},
                  {"active_params_per_token", b.active_params_per_token},
                  {"prefill_peak_gflops", b.prefill_peak_gflops},
                  {"peak_rss_bytes", b.peak_rss_bytes},
                  {"ranks", b.ranks},
                  {"sent_per_token", b.sent_per_token},
                  {"exchanges_per_token", b.exchanges_per_token},
                  {"decode_profile", profile_json(b.decode_profile)},
                  {"streamed", b.streamed},
                  {"stream_budget_bytes", b.stream_budget_bytes},
                  {"stream_bytes_per_token", b.stream_bytes_per_token},
                  {"stream_gbps", b.stream_gbps},
                  {"stream_probe_gbps", b.stream_probe_gbps},
                  {"stream_hit_rate", b.stream_hit_rate},
                  {"stream_wait_fraction", b.stream_wait_fraction},
                  {"stream_guesses_per_token", b.stream_guesses_per_token},
                  {"stream_guess_accuracy", b.stream_guess_accuracy},
                  {"prefill", prefills}};
    // The first length's figures also at the top level, under the names they always had.
    if (!b.prefills.empty()) {
      const PrefillFigure& f = b.prefills.front();
      j["model"]["prefill_tokens_per_s"] = f.tokens_per_s;
      j["model"]["prefill_tokens_per_s_min"] = f.min;
      j["model"]["prefill_tokens_per_s_max"] = f.max;
      j["model"]["prefill_roofline_tokens_per_s"] = f.roofline_tokens_per_s;
      j["model"]["prefill_roofline_ratio"] = f.roofline_ratio;
      j["model"]["prefill_prompt_tokens"] = f.prompt_tokens;
      j["model"]["prefill_profile"] = profile_json(f.profile);
    }
    if (b.batch > 1) {  // --batch 1: no batched figure
      j["model"]["batch_decode_sequences"] = b.batch;
      j["model"]["batch_decode_tokens_per_s"] = b.batch_decode_tokens_per_s;
      j["model"]["batch_decode_tokens_per_s_min"] = b.batch_decode_min;
      j["model"]["batch_decode_tokens_per_s_max"] = b.batch_decode_max;
    }
  }
  return j;
}

std::string render_svg(const BenchReport& r) {
  std::vector<std::pair<std::string, double>> bars;
  for (const BenchResult& k : r.kernels) bars.emplace_back(k.name, k.ratio_to_limit);
  if (r.model) {
    bars.emplace_back("model decode (roofline)", r.model->decode_roofline_ratio);
    for (const PrefillFigure& f : r.model->prefills)
      bars.emplace_back("model prefill " + std::to_string(f.prompt_tokens) + " (compute roofline)", f.roofline_ratio);
  }
  const int row = 26, left = 280, width = 420, top = 40;
  const int height = top + row * static_cast<int>(bars.size()) + 40;
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(left + width + 80) + "\" height=\"" +
                  std::to_string(height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"10\" y=\"22\" font-size=\"15\">k3 bench: ratio to the measured limit (" + r.machine.isa + ", " +
       std::to_string(r.machine.threads) + " threads, " + fmt("%.1f", r.machine.read_gbps) + " GB/s, " +
       fmt("%.0f", r.machine.fp32_gflops) + " GFLOP/s)</text>\n";
  for (size_t i = 0; i < bars.size(); ++i) {
    const int y = top + row * static_cast<int>(i);
    const double v = std::max(0.0, bars[i].second);
    const int w = static_cast<int>(std::min(1.2, v) / 1.2 * width);
    const char* color = v >= 0.85 ? "#2e7d32" : v >= 0.5 ? "#f9a825" : "#c62828";
    s += "<text x=\"" + std::to_string(left - 8) + "\" y=\"" + std::to_string(y + 16) + "\" text-anchor=\"end\">" +
         bars[i].first + "</text>\n";
    s += "<rect x=\"" + std::to_string(left) + "\" y=\"" + std::to_string(y + 4) + "\" width=\"" + std::to_string(w) +
         "\" height=\"16\" fill=\"" + color + "\"/>\n";
    s += "<text x=\"" + std::to_string(left + w + 6) + "\" y=\"" + std::to_string(y + 16) + "\">" +
         fmt("%.0f%%", 100.0 * v) + "</text>\n";
  }
  const int x100 = left + static_cast<int>(1.0 / 1.2 * width);
  s += "<line x1=\"" + std::to_string(x100) + "\" y1=\"" + std::to_string(top) + "\" x2=\"" + std::to_string(x100) +
       "\" y2=\"" + std::to_string(height - 30) + "\" stroke=\"black\" stroke-dasharray=\"4 3\"/>\n";
  s += "<text x=\"" + std::to_string(x100) + "\" y=\"" + std::to_string(height - 14) +
       "\" text-anchor=\"middle\">100% of the limit</text>\n</svg>\n";
  return s;
}

}  // namespace k3
