// What the server runs requests on: the model, its tokenizer, the optional vision tower and the
// continuous-batching scheduler, loaded on a background thread while the HTTP socket already
// answers (/health says 503 until ready()).  Handlers take a shared_ptr to the scheduler, so
// shutdown() can stop the engine loop (every outstanding request finishes as cancelled) while
// handlers still hold it.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "base/serial_worker.h"
#include "engine/json_constraint.h"
#include "engine/scheduler.h"
#include "model/k3_model.h"
#include "server/metrics.h"
#include "text/tokenizer.h"
#include "vision/vision_model.h"

namespace k3::server {

struct EngineOptions {
  std::string model_dir;
  std::string served_name;  // the `model` id clients use
  SchedulerOptions scheduler;
};

class EngineHost {
 public:
  enum class State { kLoading, kReady, kFailed, kStopping };

  explicit EngineHost(EngineOptions options) : options_(std::move(options)) {}
  ~EngineHost();

  // Loads everything and starts the engine loop (the loader thread).  Throws k3::Error; the
  // state then is kFailed and load_error() says why.
  void load();
  // Stops the engine loop: every waiting or running request finishes as cancelled.
  void shutdown();

  State state() const { return state_.load(std::memory_order_acquire); }
  bool ready() const { return state() == State::kReady; }
  std::string load_error() const;

  // Valid once ready().
  const Model& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const VisionModel* vision() const { return vision_.get(); }
  // Encodes images with the vision tower (vision() != nullptr) on the host's one encoder thread,
  // not on the calling HTTP worker: the kernels' per-thread scratch then exists once, not once
  // per HTTP thread that ever took an image (base/serial_worker.h).
  EncodedImages encode_images(std::span<const Image> images) const;
  std::shared_ptr<Scheduler> scheduler() const;
  // Tokens one request's context holds (prompt + output).
  int64_t context_tokens() const;
  // The tokenizer's VocabIndex for constrained decoding, built on first use (ready() only).
  std::shared_ptr<const VocabIndex> vocab_index() const;

  const EngineOptions& options() const { return options_; }
  ServerMetrics& metrics() { return metrics_; }

 private:
  EngineOptions options_;
  std::atomic<State> state_{State::kLoading};
  mutable std::mutex mu_;
  std::string load_error_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<VisionModel> vision_;
  std::shared_ptr<Scheduler> scheduler_;
  mutable std::shared_ptr<const VocabIndex> vocab_index_;  // under mu_
  mutable SerialWorker vision_worker_;
  ServerMetrics metrics_;
};

}  // namespace k3::server
