// A synthetic K3 tokenizer (2048 ids) and its VocabIndex, written once per test binary, for the
// constrained-decoding tests.
#pragma once

#include <memory>

#include "engine/json_constraint.h"
#include "support/test_support.h"
#include "text/synth_tokenizer.h"
#include "text/tokenizer.h"

namespace k3::testing {

struct SynthVocab {
  static const SynthVocab& get() {
    static const SynthVocab v;
    return v;
  }
  TempDir dir;
  Tokenizer tok;
  std::shared_ptr<const VocabIndex> index;

 private:
  SynthVocab()
      : tok((write_synth_tokenizer(dir.path(), 2048), Tokenizer::from_model_dir(dir.path()))),
        index(std::make_shared<const VocabIndex>(tok)) {}
};

}  // namespace k3::testing
