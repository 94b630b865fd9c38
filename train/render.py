"""K3's XTML chat format for training data, as k3's renderer writes it (spec k3-model.md section 8).

A conversation becomes a prompt (system effort message, the turns so far, then the generation prompt that opens
the assistant's think channel) and a completion (the reasoning, the response channel, the closing tags and
<|end_of_msg|>), the part the model learns to write.
"""

EFFORT_TEXT = ("`thinking_effort` guides on how much to think in your thinking channel (not including the response "
               "channel), supported values include `low`, `medium`, `high`, and `max`.\n"
               "Now the system is invoked with `thinking_effort={}`.")


def _attr(value):
    return value.replace("&", "&amp;").replace('"', "&quot;")


def _open(tag, **attrs):
    return "<|open|>" + tag + "".join(f' {k}="{_attr(v)}"' for k, v in attrs.items()) + "<|sep|>"


def _close(tag):
    return "<|close|>" + tag + "<|sep|>"


def _assistant_body(message):
    reasoning = message.get("reasoning_content", "")
    return ((reasoning if reasoning.strip() else "") + _close("think") + _open("response") + message["content"] +
            _close("response") + _close("message") + "<|end_of_msg|>")


def render_prompt(messages, effort="max"):
    """What k3 (and the trainer) feed the model for a conversation whose last message is the user's: the
    turns so far, then the generation prompt."""
    out = _open("message", role="system", type="thinking-effort") + EFFORT_TEXT.format(effort) + _close(
        "message") + "<|end_of_msg|>"
    for m in messages:
        if m["role"] == "assistant":
            out += _open("message", role="assistant") + _open("think") + _assistant_body(m)
        else:
            out += _open("message", role=m["role"]) + m["content"] + _close("message") + "<|end_of_msg|>"
    return out + _open("message", role="assistant") + _open("think")


def render(messages, effort="max"):
    """(prompt, completion) for a conversation whose last message is the assistant's."""
    assert messages and messages[-1]["role"] == "assistant"
    return render_prompt(messages[:-1], effort), _assistant_body(messages[-1])
