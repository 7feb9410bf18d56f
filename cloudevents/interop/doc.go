// Package interop holds the tests that run warren's CloudEvents codec
// (package github.com/warrenmq/warren/cloudevents) against the CloudEvents
// Go SDK through a real RabbitMQ: events warren writes, read with the
// SDK, and events the SDK writes, read with warren, in both content
// modes.
//
// It is a module of its own so that the SDK and what it requires (zap,
// json-iterator, testify, …) stay out of the library's go.mod, which every
// importer's module graph inherits: the SDK is a test dependency only.
// It has no code outside its tests.
package interop
