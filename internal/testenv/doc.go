// Package testenv gives warren's integration tests the real services they
// run against and the hygiene that lets them run repeatedly on one machine:
// each test gets names no other run uses, and what it declares is deleted
// when it ends.
//
// A missing service fails the test loudly with the command that starts it;
// integration tests are never skipped, because a skipped test proves nothing.
package testenv
