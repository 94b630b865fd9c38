#!/bin/sh
# Writes a small application log: every third request fails with ERROR.
awk 'BEGIN {
  for (i = 1; i <= 40; i++) {
    if (i % 3 == 0) print "2024-05-01 12:00:" sprintf("%02d", i) " ERROR request " i " failed";
    else print "2024-05-01 12:00:" sprintf("%02d", i) " INFO request " i " ok";
  }
}'
