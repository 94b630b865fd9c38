// The built-in training text of the synthetic tokenizer: English prose, source code, numbers,
// and Chinese / Japanese / Korean sentences, written for k3 (no third-party text).
#pragma once

#include <string_view>

namespace k3 {

std::string_view synth_sample_text();

}  // namespace k3
