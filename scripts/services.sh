#!/usr/bin/env bash
# Make PostgreSQL, Redis and RabbitMQ answer on 127.0.0.1, the way warren's
# examples and tests expect them:
#   PostgreSQL 127.0.0.1:5432, user postgres without a password, database "test"
#   Redis      127.0.0.1:6379
#   RabbitMQ   127.0.0.1:5672, guest/guest
#
# Enables RabbitMQ's consistent-hash exchange plugin, which partitioned
# consumption (consumer.Config.Partitions) declares its exchange with, and
# its management plugin (HTTP API on 127.0.0.1:15672), which `warren
# console` and `warren dlq stats` read the broker's queues from.
#
# Also installs Debian's python3-pika, the RabbitMQ client Plane's services
# use, for the tests that read warren's messages the way they do, and
# Debian's Chromium, for the console's browser tests.
#
# Installs what is missing (apt-get), starts what is stopped, waits until
# each answers, and says what it did. Running it again changes nothing.
# Works without systemd (containers, CI): services are started directly.
set -euo pipefail

LIB_NAME=services
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

pg_version() { ls /etc/postgresql 2>/dev/null | sort -V | tail -n1; }

postgres() {
	if ! command -v pg_ctlcluster >/dev/null || [ -z "$(pg_version)" ]; then
		apt_install postgresql postgresql-client
	fi
	local v
	v=$(pg_version)
	if port_open 5432; then
		say "PostgreSQL $v already running"
	else
		say "starting PostgreSQL $v"
		$SUDO pg_ctlcluster --skip-systemctl-redirect "$v" main start
	fi
	wait_for PostgreSQL 60 pg_isready -q -h 127.0.0.1 -p 5432
	if ! psql -h 127.0.0.1 -U postgres -d postgres -Atqc 'select 1' >/dev/null 2>&1; then
		# A fresh Debian cluster asks for a password on TCP; warren's local
		# default URL has none. Trust local TCP connections, as CI does.
		local hba="/etc/postgresql/$v/main/pg_hba.conf"
		say "allowing passwordless TCP connections from 127.0.0.1 in $hba"
		$SUDO sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
		$SUDO pg_ctlcluster --skip-systemctl-redirect "$v" main reload
		wait_for "PostgreSQL (trust auth)" 30 psql -h 127.0.0.1 -U postgres -d postgres -Atqc 'select 1'
	fi
	if [ "$(psql -h 127.0.0.1 -U postgres -d postgres -Atqc "select 1 from pg_database where datname='test'")" != 1 ]; then
		say "creating database test"
		psql -h 127.0.0.1 -U postgres -d postgres -qc 'create database test'
	fi
	logical_replication "$v"
	say "PostgreSQL ready at 127.0.0.1:5432 (database test)"
}

# The CDC relay (relay/cdc) streams the outbox from the write-ahead log,
# which needs wal_level = logical; that takes a restart, done only when the
# setting is not in force yet. max_replication_slots leaves room for the
# tests' slots beside a user's. max_slot_wal_keep_size bounds the WAL a
# forgotten slot keeps on this machine's disk (a reload, no restart).
logical_replication() {
	local v=$1 sql="psql -h 127.0.0.1 -U postgres -d postgres -Atqc"
	if [ "$($sql 'show max_slot_wal_keep_size')" != "2GB" ]; then
		say "setting max_slot_wal_keep_size = 2GB"
		$sql "alter system set max_slot_wal_keep_size = '2GB'" >/dev/null
		$sql 'select pg_reload_conf()' >/dev/null
	fi
	if [ "$($sql 'show wal_level')" = logical ] && [ "$($sql 'show max_replication_slots')" -ge 32 ]; then
		say "PostgreSQL wal_level = logical already"
		return
	fi
	say "setting wal_level = logical and max_replication_slots = 32, restarting PostgreSQL $v"
	$sql "alter system set wal_level = 'logical'" >/dev/null
	$sql "alter system set max_replication_slots = 32" >/dev/null
	$sql "alter system set max_wal_senders = 32" >/dev/null
	$SUDO pg_ctlcluster --skip-systemctl-redirect "$v" main restart
	wait_for PostgreSQL 60 pg_isready -q -h 127.0.0.1 -p 5432
	wait_for "PostgreSQL (wal_level)" 30 sh -c "[ \"\$($sql 'show wal_level')\" = logical ]"
}

redis() {
	command -v redis-server >/dev/null || apt_install redis-server redis-tools
	if redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; then
		say "Redis already running"
	else
		say "starting Redis"
		$SUDO mkdir -p /var/lib/redis /var/log/redis
		$SUDO redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 \
			--save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
	fi
	wait_for Redis 30 sh -c 'redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG'
	say "Redis ready at 127.0.0.1:6379"
}

rabbitmq() {
	install_rabbitmq
	if port_open 5672; then
		say "RabbitMQ already running"
	else
		# A broker whose node runs but whose application was stopped
		# (rabbitmqctl stop_app) needs start_app, not a second server.
		if $SUDO rabbitmqctl -q ping >/dev/null 2>&1; then
			say "starting the RabbitMQ application"
			$SUDO rabbitmqctl -q start_app
		else
			say "starting RabbitMQ"
			$SUDO rabbitmq-server -detached
		fi
	fi
	wait_for RabbitMQ 120 port_open 5672
	plugins
	say "RabbitMQ ready at 127.0.0.1:5672 (management API at 127.0.0.1:15672)"
}

# Partitioned consumption (consumer.Config.Partitions) declares an
# x-consistent-hash exchange, which the rabbitmq_consistent_hash_exchange
# plugin provides; `warren console` and `warren dlq stats` without --queue
# find warren's queues through the management plugin's HTTP API
# (127.0.0.1:15672). Enabling a plugin works on a running node (no
# restart); `rabbitmq-plugins list -e` lists the enabled ones.
plugins() {
	local plugin
	for plugin in rabbitmq_consistent_hash_exchange rabbitmq_management; do
		if $SUDO rabbitmq-plugins -q list -e "^${plugin}\$" 2>/dev/null | grep -q "$plugin"; then
			say "RabbitMQ plugin $plugin already enabled"
		else
			say "enabling RabbitMQ plugin $plugin"
			$SUDO rabbitmq-plugins -q enable "$plugin" >/dev/null
		fi
	done
	wait_for "RabbitMQ's management API" 60 port_open 15672
}

# pika is imported by /usr/bin/python3 (Debian's), not by whatever python3
# is first on PATH, so the check names that interpreter.
pika() {
	if /usr/bin/python3 -c 'import pika' 2>/dev/null; then
		say "python3-pika already installed"
	else
		apt_install python3-pika
	fi
	say "python3-pika $(/usr/bin/python3 -c 'import pika; print(pika.__version__)') ready"
}

# The console's browser tests (cmd/warren/internal/console) drive Debian's Chromium
# headless; nothing else needs it.
chromium() {
	if [ -x /usr/bin/chromium ]; then
		say "Chromium already installed"
	else
		apt_install chromium
	fi
	say "$(/usr/bin/chromium --version 2>/dev/null || echo 'Chromium: version unknown') ready"
}

postgres
redis
rabbitmq
pika
chromium
