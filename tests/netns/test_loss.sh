#!/usr/bin/env bash
#  Scenario (g): 50 ms delay and 5 %, then 20 % loss, each way, on the
#  links of the agent host (the caller) and the tool host (the component).
#  At each level: echo calls one at a time for 6 s at 5 %, 12 s at 20 % (60 s with
#  DSH_NETNS_LONG=1) from one long-lived client (dsh-bench --drive), and 8
#  (100) calls each from a fresh `dsh` process (connect, HELLO, CALL).
#  Prints the error rates, p50/p99 latencies, and how often the component's
#  tools flapped (were unregistered). Asserted: at 5 %, no errors and no
#  flaps (as measured on main, issue 12); at 20 %, only that most calls
#  succeed: the figures are for the note.
source "$(dirname "$0")/scenario.sh"
BED_IMPAIR_HOSTS="agent tool"
SC_BENCH_BIN=$SC_BUILD/tests/bench/dsh-bench
#  At 20 % a call takes about a second: 6 s would give too few samples
declare -A drive_seconds=([5]=6 [20]=12)
cli_calls=8
if [ "${DSH_NETNS_LONG:-0}" = 1 ]; then
    drive_seconds=([5]=60 [20]=60)
    cli_calls=100
fi
sc_start
broker=$(sc_endpoint broker)
sc_broker broker
sc_demo tool demoT "$broker"
sc_wait_serves agent "$broker" echo demoT 15 || sc_abort "demoT never registered"
watch_out="$BED_DIR/watch.out"
bed_spawn broker "$watch_out" "$SC_DSH_BIN" --broker "$broker" watch

for loss in 5 20; do
    bed_impair agent 50 "$loss"
    bed_impair tool 50 "$loss"
    flaps_before=$(grep -c '"kind":"tool.unregistered"' "$watch_out" || true)
    drive=$(bed_run agent timeout $((drive_seconds[$loss] + 60)) "$SC_BENCH_BIN" --drive "$broker" --inflight 1 \
        --seconds "${drive_seconds[$loss]}" 2>&1 || true)
    drive_errors=$(echo "$drive" | grep -o '[0-9]* errors' | head -n 1 | cut -d' ' -f1)
    echo "FIGURE: ${loss}% loss, 50 ms delay each way on caller and component links, one client: $(echo "$drive" | grep '^drive:' | tr '\n' ' ')"
    latencies="$BED_DIR/latency-$loss.txt"
    : > "$latencies"
    errors=0
    for i in $(seq "$cli_calls"); do
        start=$(bed_now_ms)
        #  A failed call is counted, not fatal (errexit)
        out=$(sc_dsh agent --broker "$broker" --timeout-ms 10000 call echo "{\"message\":\"m$i\"}" 2>&1) || true
        if grep -q "\"m$i\"" <<< "$out"; then
            echo $(( $(bed_now_ms) - start )) >> "$latencies"
        else
            errors=$((errors + 1))
            echo "FIGURE: ${loss}% loss, CLI call $i failed after $(( $(bed_now_ms) - start )) ms: $(echo "$out" | tr '\n' ' ' | cut -c1-400)"
        fi
    done
    flaps=$(( $(grep -c '"kind":"tool.unregistered"' "$watch_out" || true) - flaps_before ))
    echo "FIGURE: ${loss}% loss, 50 ms delay each way, a fresh dsh process per call: $errors errors in $cli_calls calls, p50 $(sc_percentile 50 "$latencies") ms, p99 $(sc_percentile 99 "$latencies") ms"
    echo "FIGURE: ${loss}% loss: the component's tools were unregistered $flaps times"
    [ -n "$drive_errors" ] || sc_fail "${loss}% loss: dsh-bench --drive printed no figures: $drive"
    if [ "$loss" = 5 ]; then
        [ "${drive_errors:-1}" = 0 ] || sc_fail "5% loss: $drive_errors errors on the long-lived client"
        [ "$errors" = 0 ] || sc_fail "5% loss: $errors of $cli_calls CLI calls failed"
        [ "$flaps" = 0 ] || sc_fail "5% loss: the component's tools were unregistered $flaps times"
    else
        [ $((errors * 2)) -lt "$cli_calls" ] || sc_fail "20% loss: $errors of $cli_calls CLI calls failed"
    fi
done
sc_finish
