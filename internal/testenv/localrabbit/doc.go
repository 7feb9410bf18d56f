// Package localrabbit runs a private RabbitMQ node from the machine's
// binaries, for tests and the reliability harness that need to do to a
// broker what must never be done to the shared one: raise a memory alarm,
// stop it, kill it, close its connections.
//
// The node is private in every way that matters: its name, its ports, its
// data directory and its Erlang cookie are its own, so even a wrong node
// name in a rabbitmqctl call cannot authenticate to the shared broker.
// The Erlang VM is the direct child of the process that starts it and is
// killed by the kernel when that process dies (Pdeathsig), so a crashed
// test binary leaves no broker behind.
//
// What tests do to a node (alarms, users, settings) goes through [Node.Eval],
// one Erlang session per node that evaluates expressions over Erlang
// distribution, rather than a rabbitmqctl per change: each rabbitmqctl
// boots a VM, seconds of CPU on a loaded machine. The cluster's membership
// commands still use rabbitmqctl ([Node.Ctl]).
//
// [StartCluster] runs several such nodes joined into one RabbitMQ cluster
// (one cookie shared by its nodes and by nobody else), for the tests and
// tools that scale out over a cluster or kill the node that leads a
// quorum queue. scripts/cluster.sh starts the same kind of cluster from
// the shell, detached, for people and the benchmark.
//
// Only tests and developer tools import this package; runtime packages
// never do.
package localrabbit
