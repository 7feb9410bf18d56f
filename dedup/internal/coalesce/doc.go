// Package coalesce groups the calls that concurrent goroutines make to a
// store into batches, so that the store can answer many of them in one
// round trip: group commit, as databases do it for their log.
//
// There is no timer. A call that finds fewer batches in flight than the
// batcher allows starts one at once — alone, when nobody else is calling,
// so an idle store answers about as fast as it would unbatched — and every
// call that arrives while the batches in flight are busy waits in a queue
// that the next free batch slot takes whole (up to its size limit). Before
// taking a batch, a slot yields to the scheduler once, so that callers the
// last batch just woke can queue first.
//
// Each batch slot that has work is a goroutine, started by the call that
// found the slot free and ending as soon as the queue is empty. It never
// outlives the calls it serves by more than a cancelled round trip: a
// batch's context ends when every one of its callers has given up.
package coalesce
