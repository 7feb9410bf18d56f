// Package app is the producing side of the examples: a stand-in for the
// application that owns work items (Plane's issues). Every change it makes
// writes the work item and its Plane-shaped event in one transaction,
// through the outbox, which is the whole point of the pattern: the change
// and the event commit together or not at all.
//
// The automation example changes work items through the same functions,
// with initiator SYSTEM.AUTOMATION, so its follow-up events reach the other
// consumers exactly like a user's.
package app
