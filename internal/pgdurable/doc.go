// Package pgdurable finds the tables PostgreSQL would not keep through a
// crash: UNLOGGED tables, which it empties when it recovers from a crash
// or an immediate shutdown, and temporary ones, which go with their
// session. Every table warren relies on to keep an event, a done-mark or
// a failure record is checked with it before warren writes to it.
package pgdurable
