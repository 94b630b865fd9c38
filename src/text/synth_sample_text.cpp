#include "text/synth_sample_text.h"

#include <string>

namespace k3 {
namespace {

constexpr std::string_view kEnglish = R"txt(The quick brown fox jumps over the lazy dog. A small model can still learn a lot from a little text.
When the engine starts, it reads the configuration, maps the weights into memory and checks every tensor.
Each layer of the network mixes information across the sequence and then transforms every position.
Tokens are the units the model reads and writes; a tokenizer turns text into tokens and back again.
The user asks a question, the assistant thinks about it, and then it writes an answer in the response channel.
If a tool is needed, the assistant calls it with arguments, waits for the result, and continues the conversation.
Good software is tested: every function has a test, every test compares against known results, and failures are clear.
It is important that the output is exact. There is no room for silent errors, so the program checks its inputs.
What is the capital of France? The capital of France is Paris. What is the weather like in Beijing today?
I think that the answer is correct, but let me check it once more before I write it down.
We're going to read the file, parse each line, and store the values in a table. They'll be sorted later.
You can't run the model without weights, and it won't start if the configuration is missing or broken.
Numbers appear everywhere: 0, 1, 2, 3, 10, 42, 100, 256, 1024, 2048, 65536, 3.14159, 2.71828, 1e-5, 2025.
The meeting is on Monday at 10:30, and the report is due on Friday, March 14th. Please bring the slides.
Hello, world! How are you today? I'm fine, thank you. Let's get started with the first example.
Memory, speed and accuracy are the three things that matter most when a language model runs on a single machine.
The cache stores the keys and values of earlier positions, so the next token only needs one more step of work.
Streaming output sends each new piece of text to the user as soon as it is ready, which feels much faster.
An error message should name the file, the field and the value that was wrong, so that the user can fix it.
)txt";

constexpr std::string_view kCode = R"txt(#include <cstdint>
#include <string>
#include <vector>

namespace demo {

// Returns the sum of all values in the vector.
int64_t sum(const std::vector<int64_t>& values) {
  int64_t total = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    total += values[i];
  }
  return total;
}

class Counter {
 public:
  explicit Counter(int start) : value_(start) {}
  void increment() { ++value_; }
  int value() const { return value_; }

 private:
  int value_ = 0;
};

}  // namespace demo

def fibonacci(n: int) -> list[int]:
    """Return the first n Fibonacci numbers."""
    result = [0, 1]
    while len(result) < n:
        result.append(result[-1] + result[-2])
    return result[:n]

if __name__ == "__main__":
    for i, value in enumerate(fibonacci(10)):
        print(f"{i}: {value}")

function greet(name) {
  const message = `Hello, ${name}!`;
  console.log(message);
  return message;
}

SELECT id, name, created_at FROM users WHERE active = 1 ORDER BY created_at DESC LIMIT 10;

{"model": "k3", "messages": [{"role": "user", "content": "Hello!"}], "stream": true, "max_tokens": 256}
{"name": "get_weather", "arguments": {"city": "Beijing", "unit": "celsius"}, "type": "function"}
$ cmake -S . -B build -G Ninja && ninja -C build && ctest --test-dir build --output-on-failure
fn main() { let v: Vec<u32> = (1..=10).collect(); println!("{:?}", v.iter().sum::<u32>()); }
)txt";

constexpr std::string_view kCjk = R"txt(你好，世界！今天天气很好，我们一起去公园散步吧。
人工智能是计算机科学的一个重要分支，它研究如何让机器像人一样思考和学习。
这个模型可以理解中文和英文，也可以写代码、回答问题、翻译文章。
北京是中国的首都，上海是中国最大的城市之一。请问明天北京的天气怎么样？
我认为这个答案是正确的，但是我们还需要再检查一遍。谢谢你的帮助！
学习一门新的语言需要时间和耐心，每天练习一点点，就会不断进步。
こんにちは、世界！今日はいい天気ですね。一緒に散歩しましょう。
日本語のテキストも少し含めます。東京は日本の首都です。ありがとうございます。
このモデルは質問に答えたり、文章を書いたりすることができます。
안녕하세요, 세계! 오늘 날씨가 정말 좋네요. 한국어 문장도 조금 넣었습니다.
서울은 한국의 수도입니다. 감사합니다. 다음에 또 만나요.
)txt";

constexpr std::string_view kMixed = R"txt(Kimi 是一个助手。The answer is 42。数学：1 + 1 = 2，2 × 3 = 6。
Emoji and symbols: 🙂 👍 ✨ → ← ✓ © ° € £ ¥ — “quotes” ‘single’ … and café, naïve, über, straße, São Paulo.
Ελληνικά: Γεια σου κόσμε. Русский: Привет, мир! العربية: مرحبا بالعالم. हिन्दी: नमस्ते दुनिया।
)txt";

const std::string kAll = std::string(kEnglish) + std::string(kCode) + std::string(kCjk) + std::string(kMixed);

}  // namespace

std::string_view synth_sample_text() { return kAll; }

}  // namespace k3
