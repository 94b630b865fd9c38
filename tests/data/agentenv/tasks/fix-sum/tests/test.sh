#!/bin/bash
# Reward 1 when sum.sh sums correctly on a few inputs, else 0.
ok=1
check() {
  local want=$1; shift
  local got
  got=$(sh /workspace/sum.sh "$@" 2>&1)
  if [ "$got" != "$want" ]; then
    echo "sum.sh $* printed '$got', expected '$want'"
    ok=0
  fi
}
check 6 1 2 3
check 6 10 -4
check 0
check 42 42
echo $ok > /logs/verifier/reward.txt
