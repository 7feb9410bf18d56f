#!/usr/bin/env bash
# A local three-node RabbitMQ cluster, for trying warren's scale-out and
# for the benchmark:
#
#   scripts/cluster.sh up       start what is not running, join, wait; says what it did
#   scripts/cluster.sh status   each node's state and the cluster's running members
#                               (exit status 3 unless all three run in one cluster)
#   scripts/cluster.sh urls     the AMQP_URL value naming all three nodes
#   scripts/cluster.sh down     stop the nodes and delete the cluster's directory
#
# Nodes warren_cluster_1..3@localhost of the installed RabbitMQ, AMQP on
# 127.0.0.1:5701-5703 (guest/guest), Erlang distribution on 25701-25703,
# the consistent-hash exchange plugin enabled. Data, logs and the
# cluster's Erlang cookie (generated once) live in one directory.
#
# Environment:
#   WARREN_CLUSTER_DIR        the directory (default /var/lib/warren-cluster)
#   WARREN_CLUSTER_PORT_BASE  AMQP ports are base+1..base+3 (default 5700);
#                             distribution ports are those plus 20000
#   WARREN_CLUSTER_NAME       nodes are warren_<name>_1..3 (default cluster)
#
# The nodes are private: their own names, ports and cookie, so neither they
# nor this script's rabbitmqctl calls can reach another broker on the
# machine (such as rabbit@localhost on 5672). It runs RabbitMQ's own scripts
# from /usr/lib/rabbitmq/bin, not Debian's /usr/sbin wrappers, which switch
# to the rabbitmq user and the shared node's cookie. Works without systemd;
# the nodes keep running after the script exits.
set -euo pipefail

LIB_NAME=cluster
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

N=3
DIR=${WARREN_CLUSTER_DIR:-/var/lib/warren-cluster}
BASE=${WARREN_CLUSTER_PORT_BASE:-5700}
NAME=${WARREN_CLUSTER_NAME:-cluster}
BIN=/usr/lib/rabbitmq/bin
# Marks a directory this script made, so down never deletes another one.
MARKER=warren-cluster
# A node's data directory with this in it has booted once: it rejoins its
# cluster by itself and ignores peer discovery.
PLUGINS=rabbitmq_consistent_hash_exchange

[[ $BASE =~ ^[0-9]+$ ]] && [ $((BASE + N + 20000)) -le 65535 ] ||
	die "WARREN_CLUSTER_PORT_BASE=$BASE: need a number with base+$N+20000 <= 65535"
[[ $NAME =~ ^[A-Za-z0-9_]+$ ]] || die "WARREN_CLUSTER_NAME=$NAME: letters, digits and _ only"

node() { echo "warren_${NAME}_$1@localhost"; }
port() { echo $((BASE + $1)); }
ndir() { echo "$DIR/$1"; }

# node_env i runs the rest of the command line with node i's environment
# and nothing else from the caller's (no RABBITMQ_* or ERL_* that could
# name the shared node). HOME holds the cookie: rabbitmqctl reads it there.
node_env() {
	local i=$1 d
	shift
	d=$(ndir "$i")
	env -i PATH="$PATH" LANG=C.UTF-8 LC_ALL=C.UTF-8 HOME="$DIR" \
		RABBITMQ_NODENAME="$(node "$i")" \
		RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
		RABBITMQ_NODE_PORT="$(port "$i")" \
		RABBITMQ_DIST_PORT=$(($(port "$i") + 20000)) \
		RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS='-kernel inet_dist_use_interface {127,0,0,1}' \
		RABBITMQ_CONF_ENV_FILE="$d/env.conf" \
		RABBITMQ_CONFIG_FILE="$d/rabbitmq.conf" \
		RABBITMQ_ADVANCED_CONFIG_FILE="$d/advanced.config" \
		RABBITMQ_ENABLED_PLUGINS_FILE="$d/plugins" \
		RABBITMQ_MNESIA_BASE="$d/mnesia" \
		RABBITMQ_LOG_BASE="$d/log" \
		RABBITMQ_PID_FILE="$d/rabbitmq.pid" \
		ERL_EPMD_ADDRESS=127.0.0.1 \
		"$@"
}

# ctl i args...: rabbitmqctl against node i only. HOME holds the
# cluster's cookie, which no other node accepts.
ctl() {
	local i=$1
	shift
	env -i PATH="$PATH" LANG=C.UTF-8 LC_ALL=C.UTF-8 HOME="$DIR" ERL_EPMD_ADDRESS=127.0.0.1 \
		"$BIN/rabbitmqctl" -n "$(node "$i")" -q "$@"
}

# vm_pid i: the pid of node i's VM, from its pid file, if that process is
# an Erlang VM started for node i (3.10 names the node in the VM's
# environment, not on its command line), so a recycled pid is not taken
# for it.
vm_pid() {
	local pid
	pid=$(cat "$(ndir "$1")/rabbitmq.pid" 2>/dev/null) || return 0
	[[ $pid =~ ^[0-9]+$ ]] || return 0
	[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = beam.smp ] || return 0
	tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | grep -qx "RABBITMQ_NODENAME=$(node "$1")" && echo "$pid"
	return 0
}

# vm_alive i: node i's Erlang VM runs (it may be booting, or its
# application stopped): its distribution port, which only it listens on,
# is open, or its pid file names it.
vm_alive() { port_open $(($(port "$1") + 20000)) || [ -n "$(vm_pid "$1")" ]; }

# state i: running (accepts AMQP), app-stopped (VM up, application
# stopped), booting, or stopped.
state() {
	local i=$1
	if port_open "$(port "$i")"; then
		echo running
	elif ! vm_alive "$i"; then
		echo stopped
	elif [ "$(ctl "$i" eval 'rabbit:is_booting().' 2>/dev/null)" = false ]; then
		echo app-stopped
	else
		echo booting
	fi
}

# members i: the nodes node i reports running, one line each; nothing if
# it does not answer.
members() {
	{ ctl "$1" cluster_status --formatter json 2>/dev/null |
		grep -o '"running_nodes":\[[^]]*\]' | grep -o '"[^"]*@[^"]*"' | tr -d '"' | sort; } || true
}

all_nodes() { for i in $(seq "$N"); do node "$i"; done | sort; }

# write_files i: node i's configuration (rewritten every time, so a changed
# port base takes effect on the next start).
write_files() {
	local i=$1 d conf
	d=$(ndir "$i")
	mkdir -p "$d"
	conf="listeners.tcp.local = 127.0.0.1:$(port "$i")
loopback_users = none"
	if [ "$i" -gt 1 ]; then
		# A fresh node joins node 1 as it boots (peer discovery), retrying
		# for two minutes while node 1 boots too. Node 1 has no seed, so
		# nodes started together can only form one cluster. A node with
		# data ignores this and rejoins the cluster it belongs to.
		conf="$conf
cluster_formation.peer_discovery_backend = classic_config
cluster_formation.classic_config.nodes.1 = $(node 1)
cluster_formation.discovery_retry_limit = 600
cluster_formation.discovery_retry_interval = 200"
	fi
	printf '%s\n' "$conf" >"$d/rabbitmq.conf"
	: >"$d/env.conf" # instead of /etc/rabbitmq/rabbitmq-env.conf, which names the shared node
	printf '[%s].\n' "$PLUGINS" >"$d/plugins"
	# A quorum queue's at-least-once dead-lettering (warren's quorum retry
	# tiers) resends what its target did not confirm only after this, 3
	# minutes by default: a retried event whose queue's leader node died
	# as it came back would wait that long (docs/scaling.md). No
	# rabbitmq.conf key for it in 3.10.
	printf '%s\n' '[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, 10000}]}].' >"$d/advanced.config"
}

# start i: boots node i in the background, in a session of its own, so it
# outlives this script and the terminal.
start() {
	local i=$1 d
	d=$(ndir "$i")
	node_env "$i" setsid "$BIN/rabbitmq-server" >>"$d/rabbitmq.out" 2>&1 </dev/null &
	STARTED[i]=$!
}

# STARTED[i] is the pid of node i's rabbitmq-server if this run started
# it: until the node writes its pid file, that says whether it lives.
STARTED=()
# FRESH[i] is set if this run started node i with no data: it is joining
# the cluster for the first time.
FRESH=()

make_dir() {
	if [ -d "$DIR" ] && [ ! -e "$DIR/$MARKER" ] && [ -n "$(ls -A "$DIR")" ]; then
		die "$DIR exists and is not a warren cluster's directory; set WARREN_CLUSTER_DIR"
	fi
	mkdir -p "$DIR"
	touch "$DIR/$MARKER"
	if [ ! -s "$DIR/.erlang.cookie" ]; then
		say "generating the cluster's Erlang cookie in $DIR/.erlang.cookie"
		head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F >"$DIR/.erlang.cookie"
		chmod 400 "$DIR/.erlang.cookie"
	fi
}

# wait_running i: until node i accepts AMQP connections, for at most three
# minutes; its log tail if not.
wait_running() {
	local i=$1
	for _ in $(seq 720); do
		port_open "$(port "$i")" && return 0
		vm_alive "$i" || { [ -n "${STARTED[i]:-}" ] && kill -0 "${STARTED[i]}" 2>/dev/null; } || {
			if rejoin_fresh "$i"; then continue; fi
			tail -n 20 "$(ndir "$i")/rabbitmq.out" >&2
			die "$(node "$i") exited while starting (log: $(ndir "$i")/log)"
		}
		sleep 0.25
	done
	tail -n 20 "$(ndir "$i")/rabbitmq.out" >&2
	die "$(node "$i") did not accept connections within 3 minutes (log: $(ndir "$i")/log)"
}

# rejoin_fresh i: in 3.10 a node joining while another joins too can take
# the cluster's feature flags for disabled and fail its schema check on
# the tables it copied (schema_integrity_check_failed). If node i was
# fresh this run and failed so, node 1 forgets it (it may already count
# it a member) and it boots again, alone, from an empty data directory;
# once. Fails, doing nothing, otherwise.
rejoin_fresh() {
	local i=$1
	[ "$i" -gt 1 ] && [ -n "${FRESH[i]:-}" ] || return 1
	tail -n 40 "$(ndir "$i")/rabbitmq.out" | grep -q schema_integrity_check_failed || return 1
	FRESH[i]=""
	say "$(node "$i") failed its schema check while joining; booting it again from an empty directory"
	ctl 1 forget_cluster_node "$(node "$i")" >/dev/null 2>&1 || true
	rm -rf "$(ndir "$i")/mnesia"
	start "$i"
}

urls() {
	local i out=""
	for i in $(seq "$N"); do out="$out${out:+,}amqp://guest:guest@127.0.0.1:$(port "$i")/"; done
	echo "$out"
}

up() {
	[ -x "$BIN/rabbitmq-server" ] || install_rabbitmq
	[ -x "$BIN/rabbitmq-server" ] || die "$BIN/rabbitmq-server not found after installing RabbitMQ"
	make_dir
	local i s changed="" pending=()
	for i in $(seq "$N"); do
		s=$(state "$i")
		case $s in
		running) say "$(node "$i") already running on port $(port "$i")" ;;
		booting)
			say "$(node "$i") is booting; waiting for it"
			pending+=("$i")
			;;
		app-stopped)
			say "starting the application of $(node "$i")"
			ctl "$i" start_app
			changed=1
			pending+=("$i")
			;;
		stopped)
			for p in $(port "$i") $(($(port "$i") + 20000)); do
				port_open "$p" && die "port $p is taken by another process; set WARREN_CLUSTER_PORT_BASE"
			done
			write_files "$i"
			[ -d "$(ndir "$i")/mnesia" ] || FRESH[i]=1
			say "starting $(node "$i") on port $(port "$i")"
			start "$i"
			changed=1
			pending+=("$i")
			;;
		esac
		# Node 1 boots alone: a fresh 3.10 node enables every feature
		# flag as it boots, and a node joining it meanwhile can fail
		# either boot (the joiner's schema check, or node 1's own
		# "replicas not active yet"). The others then boot together.
		if [ "$i" -eq 1 ] && [ ${#pending[@]} -gt 0 ]; then wait_running 1; fi
	done
	for i in "${pending[@]}"; do wait_running "$i"; done
	# Every node's application runs; wait until node 1 sees all of them as
	# members (a restarted node rejoins within seconds).
	local got want
	want=$(all_nodes)
	for _ in $(seq 360); do
		got=$(members 1)
		[ "$got" = "$want" ] && break
		sleep 0.5
	done
	[ "$got" = "$want" ] || die "the nodes did not form one cluster within 3 minutes: $(node 1) sees running: $(echo $got)"
	if [ -n "$changed" ]; then
		say "cluster of $N nodes running in $DIR"
	else
		say "cluster already up: nothing to do"
	fi
	say "AMQP_URL=$(urls)"
}

status() {
	local i s up=0 first=""
	for i in $(seq "$N"); do
		s=$(state "$i")
		printf '%s\t127.0.0.1:%s\t%s\n' "$(node "$i")" "$(port "$i")" "$s"
		if [ "$s" = running ]; then
			up=$((up + 1))
			[ -n "$first" ] || first=$i
		fi
	done
	if [ -z "$first" ]; then
		echo "cluster: no node running"
		return 3
	fi
	local got
	got=$(members "$first")
	echo "cluster: $(echo "$got" | grep -c .) of $N nodes running, as $(node "$first") sees it: $(echo $got)"
	[ "$up" -eq "$N" ] && [ "$got" = "$(all_nodes)" ] || return 3
}

down() {
	if [ ! -d "$DIR" ]; then
		say "no cluster in $DIR: nothing to stop"
		return
	fi
	[ -e "$DIR/$MARKER" ] || die "$DIR is not a warren cluster's directory; not deleting it"
	local i pids=()
	for i in $(seq "$N"); do
		vm_alive "$i" || continue
		say "stopping $(node "$i")"
		(ctl "$i" shutdown >/dev/null 2>&1 || kill -9 $(vm_pid "$i") 2>/dev/null || true) &
		pids+=($!)
	done
	[ ${#pids[@]} -eq 0 ] || wait "${pids[@]}"
	for i in $(seq "$N"); do
		! vm_alive "$i" || die "$(node "$i") is still running"
	done
	rm -rf "$DIR"
	say "deleted $DIR"
}

case ${1:-} in
up) up ;;
down) down ;;
status) status ;;
urls) urls ;;
*)
	echo "usage: $0 up|down|status|urls" >&2
	exit 2
	;;
esac
