#include "server/engine_host.h"

#include <cstdio>

#include "base/log.h"
#include "dist/world.h"

namespace k3::server {

EngineHost::~EngineHost() { shutdown(); }

void EngineHost::load() {
  try {
    auto model = Model::load(options_.model_dir);
    model->check_context(options_.scheduler.max_context);
    auto tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_model_dir(options_.model_dir));
    check_tokenizer_against_config(*tokenizer, model->config());
    std::unique_ptr<VisionModel> vision;
    if (model->config().has_vision) {
      vision = VisionModel::load(options_.model_dir);
      K3_CHECK(model->config().media_placeholder_token_id >= 0,
               "config.json has a vision tower but no media_placeholder_token_id");
    }
    auto scheduler = std::make_shared<Scheduler>(*model, options_.scheduler);
    {
      std::lock_guard<std::mutex> lock(mu_);
      model_ = std::move(model);
      tokenizer_ = std::move(tokenizer);
      vision_ = std::move(vision);
      scheduler_ = std::move(scheduler);
    }
    State expected = State::kLoading;
    if (!state_.compare_exchange_strong(expected, State::kReady, std::memory_order_acq_rel)) shutdown();
  } catch (const std::exception& e) {
    if (dist::size() > 1) {  // the other ranks wait in the load's exchanges: end the job
      std::fprintf(stderr, "k3: error: rank 0 of %d: cannot load %s: %s\n", dist::size(), options_.model_dir.c_str(),
                   e.what());
      std::fflush(stderr);
      dist::abort_all(1);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      load_error_ = e.what();
    }
    state_.store(State::kFailed, std::memory_order_release);
    throw;
  }
}

void EngineHost::shutdown() {
  std::shared_ptr<Scheduler> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_.load() != State::kFailed) state_.store(State::kStopping, std::memory_order_release);
    s = scheduler_;
  }
  if (s) s->shutdown();
}

EncodedImages EngineHost::encode_images(std::span<const Image> images) const {
  K3_CHECK(vision_ != nullptr, "this model has no vision tower");
  return vision_worker_.call([&] { return vision_->encode_images(images); });
}

std::string EngineHost::load_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return load_error_;
}

std::shared_ptr<Scheduler> EngineHost::scheduler() const {
  std::lock_guard<std::mutex> lock(mu_);
  return scheduler_;
}

int64_t EngineHost::context_tokens() const {
  const int64_t ctx = options_.scheduler.max_context;
  return ctx > 0 ? ctx : model_->text().max_position_embeddings;
}

std::shared_ptr<const VocabIndex> EngineHost::vocab_index() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!vocab_index_) vocab_index_ = std::make_shared<const VocabIndex>(*tokenizer_);
  return vocab_index_;
}

}  // namespace k3::server
