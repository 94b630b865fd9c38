// KDA: the kernel's recurrence against a plain fp64 transcription of the closed form
// S_t = (I - b k k^T) diag(a) S_{t-1} + b k v^T, o_t = S_t^T q (K x V state, key-major), and the
// chunked form against the recurrence over many shapes, chunk sizes and gate ranges.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/activation.h"
#include "kernels/kda.h"
#include "kernels/kernel_test_util.h"

namespace k3 {
namespace {

struct KdaInputs {
  int64_t T;
  int K, V;
  std::vector<float> q, k, v, g, beta;
};

KdaInputs make_inputs(Rng& rng, int64_t T, int K, int V, double g_min) {
  KdaInputs in{T, K, V, {}, {}, {}, {}, {}};
  in.q = testing::random_vec(rng, T * K);
  in.k = testing::random_vec(rng, T * K);
  in.v = testing::random_vec(rng, T * V);
  for (int64_t t = 0; t < T; ++t) {  // q, k L2-normalised like the layer does; q scaled
    double sq = 0, sk = 0;
    for (int d = 0; d < K; ++d) {
      sq += in.q[t * K + d] * in.q[t * K + d];
      sk += in.k[t * K + d] * in.k[t * K + d];
    }
    for (int d = 0; d < K; ++d) {
      in.q[t * K + d] = static_cast<float>(in.q[t * K + d] / std::sqrt(sq) / std::sqrt(static_cast<double>(K)));
      in.k[t * K + d] = static_cast<float>(in.k[t * K + d] / std::sqrt(sk));
    }
  }
  in.g.resize(T * K);
  for (auto& x : in.g) x = static_cast<float>(rng.uniform(g_min, 0.0));
  in.beta.resize(T);
  for (auto& b : in.beta) b = static_cast<float>(rng.uniform(0.02, 0.98));
  return in;
}

KdaHeadIO io_for(const KdaInputs& in, std::vector<float>& o) {
  KdaHeadIO io;
  io.q = in.q.data();
  io.k = in.k.data();
  io.v = in.v.data();
  io.g = in.g.data();
  io.beta = in.beta.data();
  io.o = o.data();
  io.stride_qk = io.stride_g = in.K;
  io.stride_v = io.stride_o = in.V;
  io.stride_beta = 1;
  return io;
}

// Plain fp64 reference; state S[k][v] (key-major), updated in place.
void reference(const KdaInputs& in, std::vector<double>& S, std::vector<double>& o) {
  const int K = in.K, V = in.V;
  o.assign(in.T * V, 0.0);
  for (int64_t t = 0; t < in.T; ++t) {
    for (int a = 0; a < K; ++a)
      for (int b = 0; b < V; ++b) S[a * V + b] *= std::exp(static_cast<double>(in.g[t * K + a]));
    for (int b = 0; b < V; ++b) {
      double pred = 0;
      for (int a = 0; a < K; ++a) pred += S[a * V + b] * in.k[t * K + a];
      const double u = in.beta[t] * (in.v[t * V + b] - pred);
      for (int a = 0; a < K; ++a) S[a * V + b] += in.k[t * K + a] * u;
    }
    for (int b = 0; b < V; ++b) {
      double acc = 0;
      for (int a = 0; a < K; ++a) acc += S[a * V + b] * in.q[t * K + a];
      o[t * V + b] = acc;
    }
  }
}

// The kernels keep the same key-major layout as the reference: S[k][v].
std::vector<float> to_float(const std::vector<double>& S) { return std::vector<float>(S.begin(), S.end()); }

TEST(Kda, RecurrentMatchesClosedForm) {
  Rng rng(21);
  // V a multiple of the vector width runs the fused step, other widths the plain loop.
  for (auto [T, K, V] : std::vector<std::tuple<int64_t, int, int>>{
           {1, 4, 4}, {9, 8, 5}, {40, 48, 48}, {7, 33, 17}, {5, 128, 128}, {6, 33, 160}, {3, 7, 8}}) {
    KdaInputs in = make_inputs(rng, T, K, V, -5.0);
    std::vector<double> S(K * V);
    for (auto& s : S) s = 0.1 * rng.normal();
    const std::vector<float> state0 = to_float(S);
    std::vector<double> want;
    reference(in, S, want);
    const std::vector<float> want_state = to_float(S);
    testing::for_each_isa([&](Isa) {
      std::vector<float> state = state0, o(T * V);
      kda_recurrent(io_for(in, o), T, K, V, state.data());
      for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << i;
      for (size_t i = 0; i < state.size(); ++i) ASSERT_NEAR(state[i], want_state[i], 1e-4) << i;
    });
  }
}

TEST(Kda, ChunkedMatchesRecurrent) {
  Rng rng(22);
  int cases = 0;
  for (int K : {4, 16, 33, 64}) {
    for (int64_t T : {1, 5, 16, 17, 33, 70, 130}) {
      for (int chunk : {1, 16, 32, 64}) {
        for (double g_min : {-0.05, -5.0, -60.0}) {  // near-identity decay ... far below fp32's exp range per chunk
          SCOPED_TRACE(::testing::Message() << "K=" << K << " T=" << T << " chunk=" << chunk << " gmin=" << g_min);
          const int V = K == 16 ? 24 : K == 33 ? 19 : K;  // also K != V, odd widths
          KdaInputs in = make_inputs(rng, T, K, V, g_min);
          std::vector<float> s0 = testing::random_vec(rng, K * V, 0.2);
          std::vector<float> s_rec = s0, o_rec(T * V);
          portable::kda_recurrent(io_for(in, o_rec), T, K, V, s_rec.data());
          testing::for_each_isa([&](Isa) {  // ref: pairwise form; vector ISAs: factorised form
            std::vector<float> s_chk = s0, o_chk(T * V);
            kda_chunked(io_for(in, o_chk), T, K, V, chunk, s_chk.data());
            for (float x : o_chk) ASSERT_TRUE(std::isfinite(x));
            EXPECT_LT(testing::max_rel_diff(o_chk, o_rec, 1e-3), 5e-5);
            EXPECT_LT(testing::max_rel_diff(s_chk, s_rec, 1e-3), 5e-5);
          });
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 4 * 7 * 4 * 3);
}

// K3's bounded gate at its floor: g = -5 on every step of some channels, so a 64-token chunk
// decays those channels by e^-320 (far below fp32) and a 16-token sub-block by e^-80; other
// channels near 0 and in between.  Also a gate far steeper than K3's (-40 per step), which sends
// the fast form's diagonal sub-blocks to their pairwise path.
TEST(Kda, ChunkedAtExtremeDecays) {
  Rng rng(25);
  for (float floor_g : {-5.0f, -40.0f}) {
    const int64_t T = 150;
    KdaInputs in = make_inputs(rng, T, 128, 128, -1.0);
    for (int64_t t = 0; t < T; ++t)
      for (int d = 0; d < 128; ++d) {
        if (d % 3 == 0) in.g[t * 128 + d] = floor_g;
        if (d % 3 == 1) in.g[t * 128 + d] = -1e-4f;
      }
    std::vector<float> s0 = testing::random_vec(rng, 128 * 128, 0.2), s_rec = s0, o_rec(T * 128);
    portable::kda_recurrent(io_for(in, o_rec), T, 128, 128, s_rec.data());
    testing::for_each_isa([&](Isa) {
      for (int chunk : {16, kKdaChunk}) {
        std::vector<float> s_chk = s0, o_chk(T * 128);
        kda_chunked(io_for(in, o_chk), T, 128, 128, chunk, s_chk.data());
        for (float x : o_chk) ASSERT_TRUE(std::isfinite(x));
        EXPECT_LT(testing::max_rel_diff(o_chk, o_rec, 1e-3), 5e-5) << floor_g << " " << chunk;
        EXPECT_LT(testing::max_rel_diff(s_chk, s_rec, 1e-3), 5e-5) << floor_g << " " << chunk;
      }
    });
  }
}

TEST(Kda, SplitCallsContinueTheState) {
  Rng rng(23);
  KdaInputs in = make_inputs(rng, 50, 32, 32, -3.0);
  std::vector<float> s_all(32 * 32, 0.0f), s_split(32 * 32, 0.0f), o_all(50 * 32), o_split(50 * 32);
  kda_chunked(io_for(in, o_all), 50, 32, 32, 16, s_all.data());
  KdaHeadIO io = io_for(in, o_split);
  kda_chunked(io, 21, 32, 32, 16, s_split.data());
  io.q += 21 * 32;
  io.k += 21 * 32;
  io.v += 21 * 32;
  io.g += 21 * 32;
  io.beta += 21;
  io.o += 21 * 32;
  kda_recurrent(io, 1, 32, 32, s_split.data());
  io.q += 32;
  io.k += 32;
  io.v += 32;
  io.g += 32;
  io.beta += 1;
  io.o += 32;
  kda_chunked(io, 28, 32, 32, 16, s_split.data());
  EXPECT_LT(testing::max_rel_diff(o_split, o_all), 1e-5);
  EXPECT_LT(testing::max_rel_diff(s_split, s_all), 1e-5);
}

TEST(ShortConv, CausalTapsAndHistory) {
  Rng rng(24);
  for (int W : {2, 4}) {
    const int64_t C = 19, T = 11;
    auto x = testing::random_vec(rng, T * C), w = testing::random_vec(rng, C * W);
    // One call over all T versus 3 calls (5, 1, 5 tokens) carrying the history.
    std::vector<float> hist_a((W - 1) * C, 0.0f), hist_b((W - 1) * C, 0.0f), ya(T * C), yb(T * C);
    short_conv_silu(x.data(), T, C, W, w.data(), hist_a.data(), ya.data());
    short_conv_silu(x.data(), 5, C, W, w.data(), hist_b.data(), yb.data());
    short_conv_silu(x.data() + 5 * C, 1, C, W, w.data(), hist_b.data(), yb.data() + 5 * C);
    short_conv_silu(x.data() + 6 * C, 5, C, W, w.data(), hist_b.data(), yb.data() + 6 * C);
    EXPECT_EQ(ya, yb);
    EXPECT_EQ(hist_a, hist_b);
    // Channel ranges (7 + 12 channels) into a range-major buffer: the same values and history.
    std::vector<float> hist_c((W - 1) * C, 0.0f), yc(T * C);
    for (auto [c0, n] : {std::pair<int64_t, int64_t>{0, 7}, {7, 12}})
      short_conv_silu_channels(x.data(), T, C, W, w.data(), hist_c.data(), c0, n, yc.data() + c0 * T, n);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t c0 = c < 7 ? 0 : 7, n = c < 7 ? 7 : 12;
        ASSERT_EQ(yc[c0 * T + t * n + (c - c0)], ya[t * C + c]) << "t " << t << " channel " << c;
      }
    EXPECT_EQ(hist_c, hist_a);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double acc = 0;
        for (int j = 0; j < W; ++j) {  // tap W-1 is the current token, tap 0 the oldest
          const int64_t src = t - (W - 1) + j;
          if (src >= 0) acc += static_cast<double>(w[c * W + j]) * x[src * C + c];
        }
        EXPECT_NEAR(ya[t * C + c], acc / (1.0 + std::exp(-acc)), 1e-5);
      }
    // The history holds the newest W-1 raw inputs, oldest first.
    for (int j = 0; j < W - 1; ++j)
      for (int64_t c = 0; c < C; ++c) EXPECT_EQ(hist_a[j * C + c], x[(T - (W - 1) + j) * C + c]);
  }
}

}  // namespace
}  // namespace k3
