#!/bin/bash
# Reward 1 when answer.txt holds the number of ERROR lines of the log the setup wrote, else 0.
want=$(sh /tests/make_log.sh | grep -c ERROR)
got=$(tr -d ' \n' < /workspace/answer.txt 2>/dev/null)
if [ "$got" = "$want" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "answer.txt holds '$got', expected '$want'"
  echo 0 > /logs/verifier/reward.txt
fi
