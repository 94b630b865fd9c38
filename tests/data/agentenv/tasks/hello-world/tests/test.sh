#!/bin/bash
# Reward 1 when /workspace/hello.txt holds "hello world" (a final newline allowed), else 0.
if [ "$(cat /workspace/hello.txt 2>/dev/null)" = "hello world" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "hello.txt holds: $(head -c 200 /workspace/hello.txt 2>&1)"
  echo 0 > /logs/verifier/reward.txt
fi
