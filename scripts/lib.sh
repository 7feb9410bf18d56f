# Shared by scripts/services.sh and scripts/cluster.sh; sourced, not run.
# The sourcing script sets LIB_NAME, the prefix of what say and die print.

say() { printf '%s: %s\n' "$LIB_NAME" "$*"; }
die() { printf '%s: error: %s\n' "$LIB_NAME" "$*" >&2; exit 1; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || die "not root and no sudo: run as root to install or start services"
	SUDO="sudo"
fi

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for() { # name seconds command...
	local name=$1 seconds=$2
	shift 2
	for _ in $(seq $((seconds * 4))); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.25
	done
	die "$name did not answer within ${seconds}s"
}

APT_UPDATED=""
apt_install() {
	command -v apt-get >/dev/null || die "$1 is missing and apt-get is not available: install $1 by hand"
	if [ -z "$APT_UPDATED" ]; then
		say "apt-get update"
		$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
		APT_UPDATED=1
	fi
	say "installing $*"
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# install_rabbitmq installs Debian's RabbitMQ server if rabbitmq-server is
# missing.
install_rabbitmq() {
	command -v rabbitmq-server >/dev/null || apt_install rabbitmq-server
}
