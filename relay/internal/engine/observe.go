package engine

// blockObserver is relay.BlockObserver's method set (package relay
// imports this one, so it cannot be named here).
type blockObserver interface {
	Blocked(outbox, reason string)
	Unblocked(outbox string)
}

// ObserveBlocked tells observer (a relay.Observer, nil allowed) that the
// broker blocked (blocked, with its reason) or unblocked the relay's
// connection to table's events, if it implements relay.BlockObserver.
func ObserveBlocked(observer any, table string, blocked bool, reason string) {
	o, ok := observer.(blockObserver)
	switch {
	case !ok:
	case blocked:
		o.Blocked(table, reason)
	default:
		o.Unblocked(table)
	}
}
