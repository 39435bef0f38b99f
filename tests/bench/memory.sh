#!/bin/sh
#   The broker's memory under a subscriber that never reads while a peer
#   churns large tool entries, and under a storm of connections; by hand:
#       tests/bench/memory.sh BUILD_DIR [PORT] [BROKER FLAGS...]
#   BYTES sets the size of the churned entries (default 200000), LOG a file
#   for the broker's output.
#   Prints the broker's RSS (ps -o rss=, in kB) at each step.
set -e
build=${1:?usage: memory.sh BUILD_DIR [PORT] [BROKER FLAGS...]}
port=${2:-27970}
shift; [ $# -gt 0 ] && shift
front=tcp://127.0.0.1:$port
peer=$build/tests/bench/dsh-bench-memory
rss () { echo "$1: $(ps -o rss= -p $broker) kB"; }

$build/broker/dsh-broker -e $front "$@" >${LOG:-/dev/null} 2>&1 &
broker=$!
trap 'kill $broker 2>/dev/null' EXIT
sleep 1
rss "baseline"
$peer sleeper $front 26 >/dev/null &
sleeper=$!
sleep 1
$peer churn $front 22 ${BYTES:-200000}
rss "after 22 s of churn (${BYTES:-200000}-byte entries), subscriber still there"
wait $sleeper
sleep 2
rss "subscriber gone"
sleep 3
rss "subscriber gone, 5 s later"
storm_out=$(mktemp)
$peer storm $front 2000 >$storm_out &
storm=$!
until grep -q answered $storm_out || ! kill -0 $storm 2>/dev/null; do sleep 0.2; done
cat $storm_out
rss "2000 connections open"
wait $storm || true
rm -f $storm_out
sleep 2
rss "2000 connections closed"
sleep 3
rss "2000 connections closed, 5 s later"
