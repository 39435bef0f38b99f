#!/usr/bin/env bash
#  netbed.sh: a multi-host test bed made of network namespaces, for the
#  scenario tests of tests/netns/ (source it; it needs root).
#
#  bed_up builds a "switch" namespace holding a bridge, and one namespace per
#  host (broker, tool, agent, standby, plus any named in BED_HOSTS), each with
#  a veth to the bridge and an address 10.77.0.N/24 that exists only inside
#  it. Names carry this shell's pid, so parallel runs never collide and
#  bed_sweep can tell a crashed run's namespaces from a live one's; bed_down
#  runs from an EXIT trap.
#
#    bed_run HOST CMD...           run CMD inside HOST (foreground)
#    bed_spawn HOST LOG CMD...     start CMD inside HOST in the background;
#                                  sets BED_PID (killed by bed_down)
#    bed_cut HOST / bed_heal HOST  pull / plug HOST's cable: its bridge port
#                                  is disabled, so frames are dropped both
#                                  ways, silently (no RST, no carrier change)
#    bed_impair HOST DELAY_MS LOSS_PCT
#                                  delay and loss on HOST's link, each way:
#                                  sch_netem where the kernel has it, else
#                                  the dsh-netem relay (HOST must be listed
#                                  in BED_IMPAIR_HOSTS before bed_up)
#    bed_float_add HOST / bed_float_move FROM TO
#                                  the floating address BED_FLOAT
#    bed_addr HOST                 HOST's address
#
#  Variables read by bed_up: BED_HOSTS (extra host names), BED_IMPAIR_HOSTS
#  (hosts that bed_impair may touch), BED_FORCE_RELAY=1 (use the relay even
#  where sch_netem exists), DSH_NETEM (the relay's path; default from
#  DSH_BUILD_DIR).

BED_PREFIX=dshbed
BED_ID=$$
BED_SUBNET=10.77.0
BED_FLOAT=$BED_SUBNET.100
BED_BASE_HOSTS=(broker tool agent standby)
BED_UP=0
BED_DIR=""
BED_PID=""
BED_NETEM_MODE=""
declare -a BED_PIDS=()
declare -a BED_ALL_HOSTS=()
declare -A BED_ADDRS=()
declare -A BED_RELAY_PIDS=()

bed_log () { echo "netbed: $*" >&2; }

bed_ns () { echo "$BED_PREFIX-$BED_ID-$1"; }

bed_addr () { echo "${BED_ADDRS[$1]}"; }

#  Exits 77 (meson's skip) when this machine cannot build a bed: not root,
#  no ip, no namespaces, no bridge.
bed_require () {
    if [ "$(id -u)" -ne 0 ]; then
        echo "SKIP: the netns bed needs root" >&2
        exit 77
    fi
    if ! command -v ip >/dev/null || ! command -v bridge >/dev/null; then
        echo "SKIP: iproute2 (ip, bridge) is not installed" >&2
        exit 77
    fi
    local probe="$BED_PREFIX-$BED_ID-probe"
    if ! ip netns add "$probe" 2>/dev/null; then
        echo "SKIP: cannot create network namespaces here" >&2
        exit 77
    fi
    if ! ip -n "$probe" link add probe0 type bridge 2>/dev/null; then
        ip netns del "$probe"
        echo "SKIP: the kernel has no bridge support" >&2
        exit 77
    fi
    ip netns del "$probe"
}

#  Deletes the namespaces of runs whose shell is gone (a crashed or killed
#  run), after killing whatever still runs inside them.
bed_sweep () {
    local ns pid
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$BED_PREFIX-[0-9]*-" || true); do
        pid=${ns#"$BED_PREFIX"-}
        pid=${pid%%-*}
        if [ "$pid" != "$BED_ID" ] && ! kill -0 "$pid" 2>/dev/null; then
            bed_log "sweeping stale namespace $ns"
            for inside in $(ip netns pids "$ns" 2>/dev/null); do
                kill -9 "$inside" 2>/dev/null || true
            done
            ip netns del "$ns" 2>/dev/null || true
        fi
    done
}

#  True when this kernel has sch_netem (tried on a scratch namespace's lo).
bed_has_netem () {
    local probe="$BED_PREFIX-$BED_ID-netem"
    ip netns add "$probe" 2>/dev/null || return 1
    local status=1
    ip -n "$probe" link set lo up
    tc -n "$probe" qdisc add dev lo root netem delay 1ms 2>/dev/null && status=0
    ip netns del "$probe"
    return $status
}

bed_netem_program () {
    if [ -n "${DSH_NETEM:-}" ]; then
        echo "$DSH_NETEM"
    else
        echo "${DSH_BUILD_DIR:-build}/tests/netns/dsh-netem"
    fi
}

bed_up () {
    bed_sweep
    BED_DIR=$(mktemp -d "/tmp/$BED_PREFIX-$BED_ID.XXXXXX")
    trap bed_down EXIT
    trap 'exit 130' INT TERM
    BED_UP=1
    BED_ALL_HOSTS=("${BED_BASE_HOSTS[@]}" ${BED_HOSTS:-})
    if [ -n "${BED_IMPAIR_HOSTS:-}" ]; then
        if [ "${BED_FORCE_RELAY:-0}" != 1 ] && bed_has_netem; then
            BED_NETEM_MODE=netem
        else
            BED_NETEM_MODE=relay
            if [ ! -x "$(bed_netem_program)" ]; then
                bed_log "no sch_netem and no relay at $(bed_netem_program)"
                return 1
            fi
        fi
        bed_log "delay and loss by $BED_NETEM_MODE"
    fi
    local switch
    switch=$(bed_ns switch)
    ip netns add "$switch"
    ip -n "$switch" link set lo up
    #  No STP: a port comes back forwarding at once when a cable is plugged
    ip -n "$switch" link add br0 type bridge stp_state 0 forward_delay 0
    ip -n "$switch" link set br0 up
    local index=1 host
    for host in "${BED_ALL_HOSTS[@]}"; do
        BED_ADDRS[$host]=$BED_SUBNET.$index
        index=$((index + 1))
        bed_add_host "$host" || return 1
    done
}

#  One host: a namespace, a veth to the bridge, its address (on the veth, or
#  on a TAP device behind the relay when the host may be impaired and the
#  kernel has no sch_netem).
bed_add_host () {
    local host=$1 ns switch relayed=0
    ns=$(bed_ns "$host")
    switch=$(bed_ns switch)
    [ "$BED_NETEM_MODE" = relay ] && [[ " ${BED_IMPAIR_HOSTS:-} " == *" $host "* ]] && relayed=1
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    local wire=eth0
    [ $relayed = 1 ] && wire=veth0
    ip link add "$wire" netns "$ns" type veth peer name "p-$host" netns "$switch"
    ip -n "$switch" link set "p-$host" master br0 up
    ip -n "$ns" link set "$wire" up
    if [ $relayed = 1 ]; then
        #  The relay drops (loss) per frame: frames of one MTU, not 64 KiB
        #  superframes, make the loss rate mean what it says
        ip -n "$ns" tuntap add dev eth0 mode tap vnet_hdr
        ip -n "$ns" link set eth0 up
        local control="$BED_DIR/netem-$host.ctl"
        : > "$control"
        bed_spawn "$host" "$BED_DIR/netem-$host.log" "$(bed_netem_program)" eth0 veth0 "$control"
        BED_RELAY_PIDS[$host]=$BED_PID
    fi
    ip -n "$ns" addr add "${BED_ADDRS[$host]}/24" dev eth0
}

#  After all hosts exist: limits every host's segments to one MTU when a
#  relay applies loss (see bed_add_host). Call before traffic starts.
bed_ready () {
    local host deadline
    if [ "$BED_NETEM_MODE" = relay ]; then
        for host in "${BED_ALL_HOSTS[@]}"; do
            ip -n "$(bed_ns "$host")" link set dev eth0 gso_max_segs 1 2>/dev/null || true
        done
    fi
    #  Every address answers ARP before the first test step
    deadline=$((SECONDS + 10))
    for host in "${BED_ALL_HOSTS[@]}"; do
        while ! ip -n "$(bed_ns "$host")" -4 addr show dev eth0 | grep -q "${BED_ADDRS[$host]}/"; do
            [ $SECONDS -lt $deadline ] || { bed_log "$host has no address"; return 1; }
            sleep 0.1
        done
    done
}

bed_down () {
    [ "$BED_UP" = 1 ] || return 0
    BED_UP=0
    local pid host ns
    for pid in "${BED_PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    sleep 0.3
    for pid in "${BED_PIDS[@]}"; do
        kill -KILL "$pid" 2>/dev/null || true
    done
    for host in "${BED_ALL_HOSTS[@]}" switch; do
        ns=$(bed_ns "$host")
        for pid in $(ip netns pids "$ns" 2>/dev/null); do
            kill -KILL "$pid" 2>/dev/null || true
        done
        ip netns del "$ns" 2>/dev/null || true
    done
    if [ -n "$BED_DIR" ] && [ "${BED_KEEP_LOGS:-0}" != 1 ]; then
        rm -rf "$BED_DIR"
    elif [ -n "$BED_DIR" ]; then
        bed_log "logs kept in $BED_DIR"
    fi
}

bed_run () {
    local host=$1; shift
    ip netns exec "$(bed_ns "$host")" "$@"
}

bed_spawn () {
    local host=$1 log=$2; shift 2
    ip netns exec "$(bed_ns "$host")" "$@" >"$log" 2>&1 &
    BED_PID=$!
    BED_PIDS+=("$BED_PID")
    #  Killing it is the test's business: no "Killed" notice from bash
    disown "$BED_PID"
}

bed_cut () {
    bridge -n "$(bed_ns switch)" link set dev "p-$1" state 0
}

bed_heal () {
    bridge -n "$(bed_ns switch)" link set dev "p-$1" state 3
}

bed_impair () {
    local host=$1 delay_ms=$2 loss_pct=$3
    case "$BED_NETEM_MODE" in
        netem)
            #  Both ways: the host's egress, and the switch port's egress
            #  toward the host
            tc -n "$(bed_ns "$host")" qdisc replace dev eth0 root netem delay "${delay_ms}ms" loss "${loss_pct}%"
            tc -n "$(bed_ns switch)" qdisc replace dev "p-$host" root netem delay "${delay_ms}ms" loss "${loss_pct}%"
            ;;
        relay)
            local pid=${BED_RELAY_PIDS[$host]:-}
            if [ -z "$pid" ]; then
                bed_log "bed_impair: $host is not in BED_IMPAIR_HOSTS"
                return 1
            fi
            printf 'delay_ms %s\nloss_pct %s\n' "$delay_ms" "$loss_pct" > "$BED_DIR/netem-$host.ctl"
            kill -HUP "$pid"
            ;;
        *)
            bed_log "bed_impair: set BED_IMPAIR_HOSTS before bed_up"
            return 1
            ;;
    esac
}

bed_float_add () {
    ip -n "$(bed_ns "$1")" addr add "$BED_FLOAT/24" dev eth0
}

#  Moves the floating address. The hosts' ARP entries for it are flushed,
#  which is what the gratuitous ARP of a real failover (keepalived, arping
#  -U) achieves; this bed has no arping.
bed_float_move () {
    local from=$1 to=$2 host
    ip -n "$(bed_ns "$from")" addr del "$BED_FLOAT/24" dev eth0 2>/dev/null || true
    ip -n "$(bed_ns "$to")" addr add "$BED_FLOAT/24" dev eth0
    for host in "${BED_ALL_HOSTS[@]}"; do
        ip -n "$(bed_ns "$host")" neigh flush to "$BED_FLOAT" 2>/dev/null || true
    done
}

#  Milliseconds since the epoch.
bed_now_ms () {
    local now
    now=$(date +%s%N)
    echo $((now / 1000000))
}
